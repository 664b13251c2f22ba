//! Attention with an additive per-head bias and a score scale
//! (`record_attention_bias`, T5's encoder attention) against an f64 CPU
//! reference: one head and several, head_dim 8 to 64, query and key counts
//! that are not multiples of the 64-wide workgroup (1, 7, 65, 130), batches
//! of 1 to 3, scale 1 and head_dim^-0.5; f16 activations where the adapter
//! has them; and operand checks.

use crate::ops_common::{Ctx, ctx, nan_tensor, read, run, up, upload};
use dynvram_gpu::ops::attention::{Heads, record_attention_bias};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::{ActDtype, GpuError};
use dynvram_test_support::random::nonzero;
use dynvram_test_support::tolerance::assert_close;

/// softmax(q kᵀ · scale + bias) v per batch element and head, in f64.
#[allow(clippy::too_many_arguments)] // the op's operands
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: &[f32],
    nh: usize,
    hd: usize,
    [batch, sq, skv]: [usize; 3],
    scale: f32,
) -> Vec<f32> {
    let w = nh * hd;
    let mut out = vec![0f32; batch * sq * w];
    for b in 0..batch {
        for h in 0..nh {
            for i in 0..sq {
                let qrow = &q[(b * sq + i) * w + h * hd..][..hd];
                let scores: Vec<f64> = (0..skv)
                    .map(|j| {
                        let krow = &k[(b * skv + j) * w + h * hd..][..hd];
                        let dot: f64 = qrow
                            .iter()
                            .zip(krow)
                            .map(|(&x, &y)| f64::from(x) * f64::from(y))
                            .sum();
                        dot * f64::from(scale) + f64::from(bias[(i * skv + j) * nh + h])
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::MIN, f64::max);
                let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let l: f64 = p.iter().sum();
                for d in 0..hd {
                    let o: f64 = (0..skv)
                        .map(|j| p[j] * f64::from(v[(b * skv + j) * w + h * hd + d]))
                        .sum();
                    out[(b * sq + i) * w + h * hd + d] = (o / l) as f32;
                }
            }
        }
    }
    out
}

/// One case on `c` in `dtype`, checked against the reference.
#[allow(clippy::too_many_arguments)] // the case's parameters
fn check(c: &Ctx, nh: usize, hd: usize, dims: [usize; 3], scale: f32, dtype: ActDtype, seed: u64) {
    let g = &c.gpu;
    let [batch, sq, skv] = dims;
    let w = nh * hd;
    let q = nonzero(seed, batch * sq * w, 1.0);
    let k = nonzero(seed + 1, batch * skv * w, 1.0);
    let v = nonzero(seed + 2, batch * skv * w, 1.0);
    // Biases as T5's table holds: a few units, so they shape the softmax.
    let bias = nonzero(seed + 3, sq * skv * nh, 4.0);
    let want = reference(&q, &k, &v, &bias, nh, hd, dims, scale);
    let qt = up(c, &q, &[(batch * sq) as u64, w as u64], dtype);
    let kt = up(c, &k, &[(batch * skv) as u64, w as u64], dtype);
    let vt = up(c, &v, &[(batch * skv) as u64, w as u64], dtype);
    let bt = upload(g, &[(sq * skv) as u64, nh as u64], &bias);
    let out = up(
        c,
        &vec![f32::NAN; batch * sq * w],
        &[(batch * sq) as u64, w as u64],
        dtype,
    );
    let heads = Heads {
        n_heads: nh as u64,
        n_kv_heads: nh as u64,
        head_dim: hd as u64,
    };
    run(c, |enc| {
        record_attention_bias(
            g,
            &c.cache,
            enc,
            &qt,
            &kt,
            &vt,
            &bt,
            &out,
            heads,
            batch as u64,
            scale,
        )
    });
    let tol = if dtype == ActDtype::F16 { 1e-2 } else { 1e-5 };
    assert_close(
        &format!("{nh} heads x {hd}, batch/sq/skv {dims:?}, scale {scale}, {dtype:?}"),
        &read(g, &out),
        &want,
        tol,
        tol,
    );
}

#[test]
fn attention_bias_matches_cpu() {
    let Some(c) = ctx("attention_bias_matches_cpu") else {
        return;
    };
    let cases: &[(usize, usize, [usize; 3], f32)] = &[
        (1, 8, [1, 1, 1], 1.0),
        (2, 8, [2, 7, 7], 1.0),
        (3, 16, [1, 65, 65], 1.0),
        (2, 64, [3, 13, 130], 0.125),
        (4, 24, [1, 130, 31], 1.0),
    ];
    for (i, &(nh, hd, dims, scale)) in cases.iter().enumerate() {
        check(&c, nh, hd, dims, scale, ActDtype::F32, 10 * i as u64);
    }
    if c.gpu.caps.shader_f16 {
        check(&c, 2, 16, [2, 33, 33], 1.0, ActDtype::F16, 99);
    } else {
        eprintln!("attention_bias_matches_cpu: f16 case skipped: the adapter has no SHADER_F16");
    }
}

#[test]
fn attention_bias_rejects_bad_operands() {
    let Some(c) = ctx("attention_bias_rejects_bad_operands") else {
        return;
    };
    let g = &c.gpu;
    let mut enc = Encoder::new(&g.device, "test");
    let heads = Heads {
        n_heads: 2,
        n_kv_heads: 2,
        head_dim: 4,
    };
    let x = upload(g, &[6, 8], &[0.5; 48]);
    let out = nan_tensor(g, &[6, 8]);
    // batch 2: 3 rows each, so the bias needs 3 * 3 * 2 values.
    let short = upload(g, &[9, 1], &[0.0; 9]);
    let err = record_attention_bias(
        g, &c.cache, &mut enc, &x, &x, &x, &short, &out, heads, 2, 1.0,
    )
    .expect_err("short bias");
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            GpuError::BadOperands {
                op: "attention_bias",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("[3, 3, 2]") && msg.contains("18"), "{msg}");
    let bias = upload(g, &[9, 2], &[0.0; 18]);
    let err = record_attention_bias(
        g, &c.cache, &mut enc, &x, &x, &x, &bias, &out, heads, 4, 1.0,
    )
    .expect_err("6 rows in 4 elements");
    assert!(err.to_string().contains("batch"), "{err}");
    let err = record_attention_bias(
        g,
        &c.cache,
        &mut enc,
        &x,
        &x,
        &x,
        &bias,
        &out,
        heads,
        2,
        f32::NAN,
    )
    .expect_err("NaN scale");
    assert!(err.to_string().contains("scale"), "{err}");
}
