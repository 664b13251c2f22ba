//! Causal GQA attention against a CPU reference (f64): prefill (seq 19, and
//! seq 130 over 150 keys: one split per (head, row)),
//! decode (seq 1 at the end of the cache), a chunk in the middle, head_dim
//! 32 and 64, 8 query / 2 kv heads, and a kv_len of 1500 (many key tiles);
//! the references and launches the children share. The decode kernel's
//! tunings are `decode.rs`'s; batched attention with and without the causal
//! mask (flash attention on cooperative matrices where the adapter has
//! them, in f16; the scalar kernels otherwise) on awkward row and key
//! counts is `flash.rs`'s.

mod decode;
mod flash;
mod flash_cm2;

use crate::ops_common::{Ctx, ctx, nan_tensor, read, run, up, upload};
use dynvram_gpu::ops::attention::{
    DecodeTuning, Heads, Mask, decode_unusable, record_attention, record_attention_tuned,
    record_kv_write,
};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::LinearScratch;
use dynvram_gpu::ops::rope::RopeTable;
use dynvram_gpu::{ActDtype, GpuError, GpuTensor};
use dynvram_test_support::random::nonzero;
use dynvram_test_support::tolerance::assert_close;

/// softmax(q kᵀ / √hd + causal) v per query head, kv head = h / group,
/// over cache rows `0..kv_len`, queries at `pos0..`.
fn attention_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    h: Heads,
    kv_len: usize,
    pos0: usize,
) -> Vec<f32> {
    let sq = q.len() / (h.n_heads * h.head_dim) as usize;
    reference(
        q,
        k,
        v,
        h,
        Batch {
            batch: 1,
            sq,
            kv_rows: kv_len,
            kv_len,
            pos0,
            causal: true,
        },
    )
}

/// The rows of a batched attention.
#[derive(Debug, Clone, Copy)]
struct Batch {
    batch: usize,
    sq: usize,
    /// k/v rows per batch element.
    kv_rows: usize,
    kv_len: usize,
    pos0: usize,
    causal: bool,
}

impl Batch {
    /// `batch` elements of `sq` query rows over `skv` keys each, as
    /// `record_flash_attention` takes them.
    fn plain(batch: usize, sq: usize, skv: usize, mask: Mask) -> Self {
        let causal = mask == Mask::Causal;
        Self {
            batch,
            sq,
            kv_rows: skv,
            kv_len: skv,
            pos0: if causal { skv - sq } else { 0 },
            causal,
        }
    }
}

/// q `[batch·sq, n_heads·head_dim]`, k and v `[batch·skv,
/// n_kv_heads·head_dim]` of `b` on the GPU.
fn up_qkv(
    c: &Ctx,
    h: Heads,
    b: Batch,
    (qs, ks, vs): (&[f32], &[f32], &[f32]),
    dtype: ActDtype,
) -> (GpuTensor, GpuTensor, GpuTensor) {
    let q_shape = [(b.batch * b.sq) as u64, h.n_heads * h.head_dim];
    let kv_shape = [(b.batch * b.kv_rows) as u64, h.n_kv_heads * h.head_dim];
    (
        up(c, qs, &q_shape, dtype),
        up(c, ks, &kv_shape, dtype),
        up(c, vs, &kv_shape, dtype),
    )
}

fn reference(q: &[f32], k: &[f32], v: &[f32], h: Heads, b: Batch) -> Vec<f32> {
    let (nh, nkv, hd) = (
        h.n_heads as usize,
        h.n_kv_heads as usize,
        h.head_dim as usize,
    );
    let mut out = vec![0f32; q.len()];
    let scale = 1.0 / (hd as f64).sqrt();
    for (e, r) in (0..b.batch).flat_map(|e| (0..b.sq).map(move |r| (e, r))) {
        let limit = if b.causal {
            b.kv_len.min(b.pos0 + r + 1)
        } else {
            b.kv_len
        };
        let kv_row = |j: usize| (e * b.kv_rows + j) * nkv * hd;
        let qr = e * b.sq + r;
        for head in 0..nh {
            let kvh = head / (nh / nkv);
            let qrow = &q[(qr * nh + head) * hd..][..hd];
            let scores: Vec<f64> = (0..limit)
                .map(|j| {
                    let krow = &k[kv_row(j) + kvh * hd..][..hd];
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
                    .map(|j| e[j] * f64::from(v[kv_row(j) + kvh * hd + d]))
                    .sum();
                out[(qr * nh + head) * hd + d] = (acc / sum) as f32;
            }
        }
    }
    out
}

/// Records `record_attention` of `q` over the caches (`[q, k, v, out]`) for
/// `(kv_len, pos0)`, with a scratch of its own: [`attend_tuned`] with the
/// default tuning, which is what `record_attention` passes.
fn attend(
    c: &Ctx,
    enc: &mut Encoder,
    ops: [&GpuTensor; 4],
    heads: Heads,
    lens: (usize, usize),
    rope: Option<&RopeTable>,
) -> Result<(), GpuError> {
    attend_tuned(c, enc, ops, heads, lens, rope, &DecodeTuning::default())
}

/// [`attend`] with the decode kernel shaped and split by `tuning`.
fn attend_tuned(
    c: &Ctx,
    enc: &mut Encoder,
    [q, k, v, out]: [&GpuTensor; 4],
    heads: Heads,
    (kv_len, pos0): (usize, usize),
    rope: Option<&RopeTable>,
    tuning: &DecodeTuning,
) -> Result<(), GpuError> {
    let mut scratch = LinearScratch::new();
    record_attention_tuned(
        &c.gpu,
        &c.cache,
        enc,
        q,
        k,
        v,
        out,
        heads,
        kv_len as u64,
        pos0 as u64,
        rope,
        &mut scratch,
        tuning,
        None,
    )
}

/// The decode tunings the decode tests run: the default (256 invocations,
/// the split policy, key groups merged four at a time, one query head a
/// workgroup), the former one (128 invocations, one at a time), then
/// workgroups of 32 to 1024 invocations with forced single
/// and multiple splits and merges of one, several and all key groups a
/// round (1024s2m4 where the adapter's workgroup memory cannot take all 32
/// key groups of 1024s1m32, as llvmpipe's GL cannot), taking all heads of
/// a kv head (`h8`, RoPE fused) or two of them (`h2`).
fn tunings() -> Vec<DecodeTuning> {
    [
        "256x132m4",
        "128x264",
        "1024s1m32",
        "1024s2m4h8",
        "256s3m4h2",
        "32s1h8",
    ]
    .iter()
    .map(|t| t.parse().expect("tuning"))
    .collect()
}

/// Whether the decode kernel runs `heads` over `sq` rows with `tuning` on
/// this adapter; where it does not fit, records why in `skipped` (the
/// decode tests say so at the end).
fn tuning_fits(
    c: &Ctx,
    tuning: &DecodeTuning,
    heads: Heads,
    sq: usize,
    skipped: &mut std::collections::BTreeSet<String>,
) -> bool {
    let queries = tuning.queries(heads, sq as u64);
    if decode_unusable(heads, sq as u64, false).is_some() {
        // The scalar kernels: the tuning is not read.
        return true;
    }
    match tuning.unusable(&c.gpu.caps, &c.gpu.device.limits(), heads.head_dim, queries) {
        None => true,
        Some(why) => {
            skipped.insert(format!("tuning {tuning}: {why}"));
            false
        }
    }
}

/// Says which tunings some case skipped, and why.
fn report_skipped(test: &str, skipped: &std::collections::BTreeSet<String>) {
    for why in skipped {
        eprintln!("{test}: skipped: {why}");
    }
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
    let qs = nonzero(seed, sq * nh * hd, 1.5);
    let ks = nonzero(seed + 1, kv_len * nkv * hd, 1.5);
    let vs = nonzero(seed + 2, kv_len * nkv * hd, 2.0);
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
    run(c, |enc| {
        if split > 0 {
            record_kv_write(enc, &k_lo, &k_cache, 0)?;
            record_kv_write(enc, &v_lo, &v_cache, 0)?;
        }
        record_kv_write(enc, &k_hi, &k_cache, split as u64)?;
        record_kv_write(enc, &v_hi, &v_cache, split as u64)?;
        attend(
            c,
            enc,
            [&q, &k_cache, &v_cache, &out],
            heads,
            (kv_len, pos0),
            None,
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
    // decoding with grouped heads over many chunks (attend_decode): one
    // row of four heads per kv head, and two rows
    let heads = Heads {
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 128,
    };
    check(&c, heads, 800, 700, 1, 699, 11);
    check(&c, heads, 800, 333, 2, 331, 12);
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
            None,
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
    assert!(
        matches!(
            err,
            GpuError::PastEnd {
                op: "kv_write",
                start: 14,
                end: 17,
                len: 16,
                ..
            }
        ),
        "{err}"
    );
}

/// Inputs as the kernel sees them (rounded to `dtype`).
fn rounded(seed: u64, n: usize, range: f32, dtype: ActDtype) -> Vec<f32> {
    nonzero(seed, n, range)
        .into_iter()
        .map(|x| host::round_to(x, dtype))
        .collect()
}

/// Tolerance per dtype: f32 as the cache form; f16 rounds the output and,
/// on the flash path, the probabilities (half an f16 ulp each).
fn tolerance(dtype: ActDtype) -> (f32, f32) {
    match dtype {
        ActDtype::F32 => (2e-6, 2e-5),
        ActDtype::F16 => (2e-3, 2e-3),
    }
}

/// A cache `[max_seq, width]` of `dtype` holding `rows` then NaN (rows past
/// kv_len must never be read).
fn cache_of(c: &Ctx, rows: &[f32], max_seq: usize, width: usize, dtype: ActDtype) -> GpuTensor {
    let mut data = rows.to_vec();
    data.resize(max_seq * width, f32::NAN);
    up(c, &data, &[max_seq as u64, width as u64], dtype)
}

/// The dtypes the adapter runs: f32, and f16 where it has SHADER_F16 (else
/// says so).
fn dtypes(c: &Ctx, test: &str) -> Vec<ActDtype> {
    if c.gpu.caps.shader_f16 {
        vec![ActDtype::F32, ActDtype::F16]
    } else {
        eprintln!("{test}: skipped: f16 cases: the adapter lacks SHADER_F16");
        vec![ActDtype::F32]
    }
}
