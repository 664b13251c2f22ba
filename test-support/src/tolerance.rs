//! Comparisons against CPU references and goldens. Each failure names what
//! was compared, where and by how much; each pass prints the worst error
//! (visible with `--nocapture`), so tolerances can be judged from the logs.

/// Largest magnitude of `v` (0 when empty).
pub fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| m.max(x.abs()))
}

/// Asserts `|got − want| ≤ atol + rtol·|want|` elementwise.
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f32);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= atol + rtol * w.abs(),
            "{what}: element {i}: got {g}, want {w} (|diff| {err} > {atol} + {rtol}·|want|)"
        );
        if err > worst.1 {
            worst = (i, err);
        }
    }
    eprintln!("{what}: max |diff| {:.3e} at {}", worst.1, worst.0);
}

/// Asserts `max |got − want| ≤ rel · max|want|` and that every value of
/// `got` is finite (a NaN never hides in the maximum).
#[track_caller]
pub fn assert_close_rel(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values, expected {}",
        got.len(),
        want.len()
    );
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let tol = rel * max_abs(want);
    assert!(
        err <= tol && got.iter().all(|v| v.is_finite()),
        "{what}: max abs error {err:.3e} > {tol:.3e} ({rel} × max|ref| {:.3e}), or not finite",
        max_abs(want)
    );
    eprintln!("{what}: max abs error {err:.3e} (tolerance {tol:.3e})");
}

/// Cosine similarity of two vectors (in f64).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

#[cfg(test)]
mod tests {
    use super::{assert_close, assert_close_rel, cosine};

    #[test]
    fn close_values_pass() {
        assert_close("a", &[1.0, -2.0], &[1.0 + 1e-7, -2.0], 1e-6, 0.0);
        assert_close_rel("b", &[10.0, 0.5], &[10.0, 0.501], 1e-3);
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-12);
    }

    #[test]
    #[should_panic(expected = "element 1")]
    fn a_far_value_fails() {
        assert_close("a", &[1.0, 3.0], &[1.0, 2.0], 1e-3, 1e-3);
    }

    #[test]
    #[should_panic(expected = "not finite")]
    fn a_nan_fails_the_relative_check() {
        assert_close_rel("b", &[f32::NAN, 1.0], &[0.0, 1.0], 1e-3);
    }

    #[test]
    #[should_panic(expected = "values, expected")]
    fn a_length_mismatch_fails() {
        assert_close_rel("c", &[1.0], &[1.0, 2.0], 1.0);
    }
}
