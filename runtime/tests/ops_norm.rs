//! RMSNorm and LayerNorm against a CPU reference (f64) over row lengths
//! that are not multiples of the workgroup size.

mod ops_common;

use dynvram_runtime::GpuError;
use dynvram_runtime::ops::encoder::Encoder;
use dynvram_runtime::ops::norm::{record_layer_norm, record_rms_norm};
use ops_common::{assert_close, ctx, nan_tensor, random, read, run, upload};

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

#[test]
fn norms_match_cpu() {
    let Some(c) = ctx("norms_match_cpu") else {
        return;
    };
    let g = &c.gpu;
    for &rows in ROWS {
        for &cols in COLS {
            let shape = [rows, cols];
            let xs = random(rows * 7919 + cols, (rows * cols) as usize, 3.0);
            let ws = random(cols + 1, cols as usize, 1.5);
            let bs = random(cols + 2, cols as usize, 0.5);
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
        matches!(err, GpuError::BadOperands { op: "rms_norm", .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("[4]") && err.to_string().contains("[5]"),
        "{err}"
    );
}
