//! Causal GQA attention against a CPU reference (f64): prefill (seq 19, and
//! seq 130 over 150 keys: one split per (head, row)),
//! decode (seq 1 at the end of the cache), a chunk in the middle, head_dim
//! 32 and 64, 8 query / 2 kv heads, and a kv_len of 1500 (many key tiles).

mod ops_common;

use dynvram_runtime::GpuError;
use dynvram_runtime::ops::attention::{Heads, record_attention, record_kv_write};
use dynvram_runtime::ops::encoder::Encoder;
use dynvram_runtime::ops::linear::LinearScratch;
use ops_common::{Ctx, assert_close, ctx, nan_tensor, random, read, run, upload};

/// softmax(q kᵀ / √hd + causal) v per query head, kv head = h / group.
fn attention_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    h: Heads,
    kv_len: usize,
    pos0: usize,
) -> Vec<f32> {
    let (nh, nkv, hd) = (
        h.n_heads as usize,
        h.n_kv_heads as usize,
        h.head_dim as usize,
    );
    let sq = q.len() / (nh * hd);
    let mut out = vec![0f32; q.len()];
    let scale = 1.0 / (hd as f64).sqrt();
    for r in 0..sq {
        let limit = kv_len.min(pos0 + r + 1);
        for head in 0..nh {
            let kvh = head / (nh / nkv);
            let qrow = &q[(r * nh + head) * hd..][..hd];
            let scores: Vec<f64> = (0..limit)
                .map(|j| {
                    let krow = &k[j * nkv * hd + kvh * hd..][..hd];
                    qrow.iter()
                        .zip(krow)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = (0..limit)
                    .map(|j| e[j] * f64::from(v[j * nkv * hd + kvh * hd + d]))
                    .sum();
                out[(r * nh + head) * hd + d] = (acc / sum) as f32;
            }
        }
    }
    out
}

/// Writes `k`/`v` rows `0..kv_len` into caches of `max_seq` rows in two
/// appends (as prefill then decode would), then attends `sq` queries at `pos0`.
fn check(c: &Ctx, heads: Heads, max_seq: usize, kv_len: usize, sq: usize, pos0: usize, seed: u64) {
    let g = &c.gpu;
    let (nh, nkv, hd) = (
        heads.n_heads as usize,
        heads.n_kv_heads as usize,
        heads.head_dim as usize,
    );
    // range 1.5 with hd 64 gives peaked softmax rows, not uniform ones
    let qs = random(seed, sq * nh * hd, 1.5);
    let ks = random(seed + 1, kv_len * nkv * hd, 1.5);
    let vs = random(seed + 2, kv_len * nkv * hd, 2.0);
    let width = (nkv * hd) as u64;
    let split = kv_len / 2;
    let k_lo = upload(g, &[split as u64, width], &ks[..split * nkv * hd]);
    let k_hi = upload(
        g,
        &[(kv_len - split) as u64, width],
        &ks[split * nkv * hd..],
    );
    let v_lo = upload(g, &[split as u64, width], &vs[..split * nkv * hd]);
    let v_hi = upload(
        g,
        &[(kv_len - split) as u64, width],
        &vs[split * nkv * hd..],
    );
    let k_cache = nan_tensor(g, &[max_seq as u64, width]);
    let v_cache = nan_tensor(g, &[max_seq as u64, width]);
    let q = upload(g, &[sq as u64, (nh * hd) as u64], &qs);
    let out = nan_tensor(g, &q.shape);
    let mut scratch = LinearScratch::new();
    run(c, |enc| {
        if split > 0 {
            record_kv_write(enc, &k_lo, &k_cache, 0)?;
            record_kv_write(enc, &v_lo, &v_cache, 0)?;
        }
        record_kv_write(enc, &k_hi, &k_cache, split as u64)?;
        record_kv_write(enc, &v_hi, &v_cache, split as u64)?;
        record_attention(
            g,
            &c.cache,
            enc,
            &q,
            &k_cache,
            &v_cache,
            &out,
            heads,
            kv_len as u64,
            pos0 as u64,
            &mut scratch,
        )
    });
    let want = attention_ref(&qs, &ks, &vs, heads, kv_len, pos0);
    let tag = format!("{heads:?} kv_len {kv_len} sq {sq} pos0 {pos0}");
    assert_close(&tag, &read(g, &out), &want, 2e-6, 2e-5);
}

#[test]
fn attention_matches_cpu() {
    let Some(c) = ctx("attention_matches_cpu") else {
        return;
    };
    for hd in [32u64, 64] {
        let heads = Heads {
            n_heads: 8,
            n_kv_heads: 2,
            head_dim: hd,
        };
        check(&c, heads, 32, 19, 19, 0, hd); // prefill
        check(&c, heads, 32, 19, 1, 18, hd + 10); // decode
        check(&c, heads, 32, 12, 5, 7, hd + 20); // a chunk after a cached prefix
        check(&c, heads, 24, 1, 1, 0, hd + 30); // first token
    }
    // many 64-key tiles, the online softmax's rescaling
    let heads = Heads {
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 48,
    };
    check(&c, heads, 1600, 1500, 2, 1498, 7);
    // head_dim at the kernel's maximum, no grouping
    let heads = Heads {
        n_heads: 2,
        n_kv_heads: 2,
        head_dim: 256,
    };
    check(&c, heads, 80, 70, 3, 67, 8);
    // enough (head, row) pairs for one split per pair over many key tiles
    // (a prefill), head_dim not a power of two
    let heads = Heads {
        n_heads: 8,
        n_kv_heads: 4,
        head_dim: 40,
    };
    check(&c, heads, 200, 150, 130, 20, 9);
}

#[test]
fn attention_rejects_bad_operands() {
    let Some(c) = ctx("attention_rejects_bad_operands") else {
        return;
    };
    let g = &c.gpu;
    let heads = Heads {
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 32,
    };
    let q = upload(g, &[3, 256], &vec![1.0; 768]);
    let kc = nan_tensor(g, &[16, 64]);
    let vc = nan_tensor(g, &[16, 64]);
    let out = nan_tensor(g, &[3, 256]);
    let mut enc = Encoder::new(&g.device, "test");
    let attend = |enc: &mut Encoder, heads: Heads, kv_len: u64| {
        record_attention(
            g,
            &c.cache,
            enc,
            &q,
            &kc,
            &vc,
            &out,
            heads,
            kv_len,
            2,
            &mut LinearScratch::new(),
        )
    };
    let err = attend(&mut enc, heads, 4).expect_err("queries past kv_len");
    assert!(
        matches!(
            err,
            GpuError::BadOperands {
                op: "attention",
                ..
            }
        ),
        "{err}"
    );
    let bad_heads = Heads {
        n_kv_heads: 3,
        ..heads
    };
    assert!(attend(&mut enc, bad_heads, 5).is_err());
    let rows = upload(g, &[3, 64], &[1.0; 192]);
    let err = record_kv_write(&mut enc, &rows, &kc, 14).expect_err("rows 14..17 of 16");
    assert!(err.to_string().contains("14..17"), "{err}");
}
