//! RMSNorm and LayerNorm against a CPU reference (f64) over row lengths
//! that are not multiples of the workgroup size.

use crate::ops_common::{ctx, nan_tensor, read, run, upload};
use dynvram_gpu::GpuError;
use dynvram_gpu::ops::elementwise::record_add_inplace;
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::norm::{record_add_rms_norm, record_layer_norm, record_rms_norm};
use dynvram_test_support::random::nonzero;
use dynvram_test_support::tolerance::assert_close;

const ROWS: &[u64] = &[1, 19];
const COLS: &[u64] = &[1, 33, 256, 1000, 4099];

fn rms_ref(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    x.chunks(w.len())
        .flat_map(|row| {
            let ms = row
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
                / row.len() as f64;
            let r = 1.0 / (ms + f64::from(eps)).sqrt();
            row.iter()
                .zip(w)
                .map(move |(&v, &wi)| (f64::from(wi) * f64::from(v) * r) as f32)
        })
        .collect()
}

fn layer_ref(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32) -> Vec<f32> {
    x.chunks(w.len())
        .flat_map(|row| {
            let n = row.len() as f64;
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let var = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / n;
            let r = 1.0 / (var + f64::from(eps)).sqrt();
            row.iter().enumerate().map(move |(i, &v)| {
                let bias = b.map_or(0.0, |b| f64::from(b[i]));
                ((f64::from(v) - mean) * r * f64::from(w[i]) + bias) as f32
            })
        })
        .collect()
}

/// The fused residual add + RMSNorm gives the bits of the add, then the
/// norm, as two launches: the residual stream and the norm's output.
#[test]
fn add_rms_norm_equals_add_then_norm() {
    let Some(c) = ctx("add_rms_norm_equals_add_then_norm") else {
        return;
    };
    let g = &c.gpu;
    for &rows in ROWS {
        for &cols in COLS {
            let shape = [rows, cols];
            let n = (rows * cols) as usize;
            let (xs, ds) = (
                nonzero(rows + cols, n, 3.0),
                nonzero(rows * cols + 5, n, 2.0),
            );
            let ws = nonzero(cols + 3, cols as usize, 1.5);
            let (x1, x2, d, w) = (
                upload(g, &shape, &xs),
                upload(g, &shape, &xs),
                upload(g, &shape, &ds),
                upload(g, &[cols], &ws),
            );
            let (o1, o2) = (nan_tensor(g, &shape), nan_tensor(g, &shape));
            run(&c, |enc| {
                record_add_rms_norm(g, &c.cache, enc, &x1, &d, &w, &o1, 1e-5)?;
                record_add_inplace(g, &c.cache, enc, &x2, &d)?;
                record_rms_norm(g, &c.cache, enc, &x2, &w, &o2, 1e-5)
            });
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            let tag = format!("[{rows}, {cols}]");
            assert_eq!(bits(read(g, &x1)), bits(read(g, &x2)), "residual {tag}");
            assert_eq!(bits(read(g, &o1)), bits(read(g, &o2)), "norm {tag}");
            let sum: Vec<f32> = xs.iter().zip(&ds).map(|(a, b)| a + b).collect();
            assert_close(
                &format!("add_rms_norm {tag}"),
                &read(g, &o1),
                &rms_ref(&sum, &ws, 1e-5),
                2e-6,
                2e-6,
            );
        }
    }
    // The residual stream may not be the addend.
    let x = upload(g, &[1, 8], &[1.0; 8]);
    let w = upload(g, &[8], &[1.0; 8]);
    let o = nan_tensor(g, &[1, 8]);
    let mut enc = Encoder::new(&g.device, "test");
    assert!(record_add_rms_norm(g, &c.cache, &mut enc, &x, &x, &w, &o, 1e-5).is_err());
}

#[test]
fn norms_match_cpu() {
    let Some(c) = ctx("norms_match_cpu") else {
        return;
    };
    let g = &c.gpu;
    for &rows in ROWS {
        for &cols in COLS {
            let shape = [rows, cols];
            let xs = nonzero(rows * 7919 + cols, (rows * cols) as usize, 3.0);
            let ws = nonzero(cols + 1, cols as usize, 1.5);
            let bs = nonzero(cols + 2, cols as usize, 0.5);
            let (x, w, b) = (
                upload(g, &shape, &xs),
                upload(g, &[cols], &ws),
                upload(g, &[cols], &bs),
            );
            let (o1, o2, o3) = (
                nan_tensor(g, &shape),
                nan_tensor(g, &shape),
                nan_tensor(g, &shape),
            );
            run(&c, |enc| {
                record_rms_norm(g, &c.cache, enc, &x, &w, &o1, 1e-5)?;
                record_layer_norm(g, &c.cache, enc, &x, &w, Some(&b), &o2, 1e-5)?;
                record_layer_norm(g, &c.cache, enc, &x, &w, None, &o3, 1e-6)
            });
            let tag = format!("[{rows}, {cols}]");
            // cols = 1: layer norm of one value is 0·w + b, rms norm is ±w
            assert_close(
                &format!("rms_norm {tag}"),
                &read(g, &o1),
                &rms_ref(&xs, &ws, 1e-5),
                2e-6,
                2e-6,
            );
            assert_close(
                &format!("layer_norm+bias {tag}"),
                &read(g, &o2),
                &layer_ref(&xs, &ws, Some(&bs), 1e-5),
                4e-6,
                4e-6,
            );
            assert_close(
                &format!("layer_norm {tag}"),
                &read(g, &o3),
                &layer_ref(&xs, &ws, None, 1e-6),
                4e-6,
                4e-6,
            );
        }
    }
}

#[test]
fn norm_rejects_bad_weight() {
    let Some(c) = ctx("norm_rejects_bad_weight") else {
        return;
    };
    let g = &c.gpu;
    let mut enc = Encoder::new(&g.device, "test");
    let x = upload(g, &[2, 5], &[1.0; 10]);
    let w = upload(g, &[4], &[1.0; 4]);
    let out = nan_tensor(g, &[2, 5]);
    let err = record_rms_norm(g, &c.cache, &mut enc, &x, &w, &out, 1e-5)
        .expect_err("weight [4] for hidden 5");
    assert!(
        matches!(
            &err,
            GpuError::ShapeMismatch { op: "rms_norm", name, shape, expected }
                if name == "weight" && shape == &[4] && expected == &[5]
        ),
        "{err}"
    );
}
