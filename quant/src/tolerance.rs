//! The two-tier conformance tolerance of `conformance/README.md` §7, shared by the
//! tests here and the `dynvram conformance` runner.

use serde::Serialize;

/// Tier 1: float rounding, relative to `max|expected|`.
pub const TIER1_REL: f32 = 1e-5;

/// A flipped activation code may move an element by up to `2 · Q · s_x[m] · s_w[n]`.
#[derive(Debug, Clone, Copy)]
pub struct FlipAllowance<'a> {
    /// Your per-row activation scales `[M]`.
    pub act_scales: &'a [f32],
    /// Weight scales: one element (scalar) or `[N]`.
    pub weight_scales: &'a [f32],
    /// Largest weight code: 7 (convrot_w4a4) or 127 (int8_tensorwise).
    pub q: f32,
}

/// The outcome of comparing one output with its target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// `max |y - e|`.
    pub max_abs: f32,
    /// `max |y - e| / max |e|`.
    pub max_rel_to_max: f32,
    /// Rows that needed the flip allowance (tier 2).
    pub tier2_rows: usize,
    /// Rows allowed to need it: `max(1, M/16)`.
    pub tier2_rows_allowed: usize,
    /// Elements outside every allowance.
    pub failures: usize,
    /// The verdict.
    pub pass: bool,
}

/// Compares `y` with `e` (`[M, N]`): every element within tier 1, or within tier 1
/// plus the flip allowance in at most `max(1, M/16)` rows. Without an allowance
/// (float paths) tier 1 alone decides. NaN in either fails.
pub fn compare(y: &[f32], e: &[f32], n: usize, allow: Option<FlipAllowance<'_>>) -> Comparison {
    let scale = e.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let tier1 = TIER1_REL * scale;
    let m = e.len() / n.max(1);
    let mut max_abs = 0.0f32;
    let mut failures = usize::from(y.len() != e.len()) * e.len().max(1);
    let mut tier2_rows = 0;
    for (row, (yr, er)) in y.chunks(n.max(1)).zip(e.chunks(n.max(1))).enumerate() {
        let mut needed = false;
        for (j, (&a, &b)) in yr.iter().zip(er).enumerate() {
            let d = (a - b).abs();
            if d.is_nan() {
                failures += 1;
                continue;
            }
            max_abs = max_abs.max(d);
            if d <= tier1 {
                continue;
            }
            let extra = allow.map_or(0.0, |al| {
                let sw = if al.weight_scales.len() == 1 {
                    al.weight_scales[0]
                } else {
                    al.weight_scales.get(j).copied().unwrap_or(0.0)
                };
                2.0 * al.q * al.act_scales.get(row).copied().unwrap_or(0.0) * sw
            });
            if allow.is_some() && d <= tier1 + extra {
                needed = true;
            } else {
                failures += 1;
            }
        }
        tier2_rows += usize::from(needed);
    }
    let allowed = (m / 16).max(1);
    Comparison {
        max_abs,
        max_rel_to_max: if scale > 0.0 {
            max_abs / scale
        } else {
            max_abs
        },
        tier2_rows,
        tier2_rows_allowed: allowed,
        failures,
        pass: failures == 0 && tier2_rows <= allowed,
    }
}
