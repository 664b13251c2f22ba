//! Causal GQA attention against a CPU reference (f64): prefill (seq 19, and
//! seq 130 over 150 keys: one split per (head, row)),
//! decode (seq 1 at the end of the cache), a chunk in the middle, head_dim
//! 32 and 64, 8 query / 2 kv heads, and a kv_len of 1500 (many key tiles).
//! Batched attention with and without the causal mask (flash attention on
//! cooperative matrices where the adapter has them, in f16; the scalar
//! kernels otherwise) on awkward row and key counts.

use crate::ops_common::{Ctx, ctx, nan_tensor, read, run, up, upload};
use dynvram_gpu::ops::attention::{
    DecodeTuning, FlashKernel, FlashTuning, Heads, Mask, decode_unusable, default_flash_kernel,
    default_flash_tuning, default_flash_tunings, flash_geometry, flash_kernel_unusable,
    flash_unusable, lanes_per_key, record_attention, record_attention_tuned,
    record_flash_attention, record_flash_attention_tuned, record_kv_write, uses_subgroups,
};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::LinearScratch;
use dynvram_gpu::ops::rope::{RopeTable, record_rope_qk};
use dynvram_gpu::{ActDtype, GpuError, GpuTensor};
use dynvram_test_support::random::nonzero;
use dynvram_test_support::skip::coop_skipped;
use dynvram_test_support::tolerance::assert_close;
use dynvram_test_support::variants::rotation;

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

/// Batched attention with and without a mask against the reference, in f32
/// and (where the adapter has SHADER_F16) f16, and the cache form with
/// enough query rows for flash attention. `DYNVRAM_REQUIRE_COOP=1` fails the
/// test where the adapter's f16 path is not flash attention.
#[test]
fn flash_attention_matches_cpu() {
    let Some(c) = ctx("flash_attention_matches_cpu") else {
        return;
    };
    let g = &c.gpu;
    let mut dtypes = vec![ActDtype::F32];
    if g.caps.shader_f16 {
        dtypes.push(ActDtype::F16);
    }
    match flash_unusable(&g.caps, ActDtype::F16, 64) {
        None => eprintln!("flash_attention_matches_cpu: f16 runs as flash attention"),
        Some(why) => {
            let msg = format!("flash_attention_matches_cpu: f16 on the scalar kernels: {why}");
            coop_skipped(&msg);
        }
    }
    let heads = |n_heads, n_kv_heads, head_dim| Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    };
    // (heads, batch, sq, skv, mask): rows and keys off every block size,
    // one row, more keys than rows, GQA, a head_dim the flash kernel does
    // not take (40: the scalar kernels).
    let cases = [
        (heads(4, 4, 32), 1, 48, 48, Mask::None),
        (heads(4, 2, 64), 2, 37, 37, Mask::None),
        (heads(2, 1, 128), 1, 70, 70, Mask::Causal),
        (heads(3, 3, 64), 2, 21, 53, Mask::Causal),
        (heads(2, 2, 64), 1, 1, 9, Mask::None),
        (heads(8, 2, 32), 3, 16, 100, Mask::None),
        (heads(2, 1, 40), 2, 33, 33, Mask::Causal),
        (heads(1, 1, 256), 1, 20, 40, Mask::None),
    ];
    for dtype in dtypes {
        for (i, &(h, batch, sq, skv, mask)) in cases.iter().enumerate() {
            let seed = 100 + i as u64;
            let (nh, nkv, hd) = (
                h.n_heads as usize,
                h.n_kv_heads as usize,
                h.head_dim as usize,
            );
            let qs = rounded(seed, batch * sq * nh * hd, 1.5, dtype);
            let ks = rounded(seed + 1, batch * skv * nkv * hd, 1.5, dtype);
            let vs = rounded(seed + 2, batch * skv * nkv * hd, 2.0, dtype);
            let b = Batch::plain(batch, sq, skv, mask);
            let (q, k, v) = up_qkv(&c, h, b, (&qs, &ks, &vs), dtype);
            let nan = vec![f32::NAN; qs.len()];
            let out = up(&c, &nan, &q.shape, dtype);
            run(&c, |enc| {
                record_flash_attention(g, &c.cache, enc, &q, &k, &v, &out, h, batch as u64, mask)
            });
            let want = reference(&qs, &ks, &vs, h, b);
            let got = host::read(g, &out).expect("read");
            let (atol, rtol) = tolerance(dtype);
            assert_close(&format!("{dtype:?} {h:?} {b:?}"), &got, &want, atol, rtol);
        }
        // The cache form with a prefill's rows: a chunk of 40 after a
        // prefix of 10 in a cache of 64 rows (flash attention in f16).
        let h = heads(4, 2, 64);
        let (max_seq, kv_len, sq, pos0) = (64usize, 50usize, 40usize, 10usize);
        let ks = rounded(7, max_seq * 2 * 64, 1.5, dtype);
        let vs = rounded(8, max_seq * 2 * 64, 2.0, dtype);
        let qs = rounded(9, sq * 4 * 64, 1.5, dtype);
        let kv_shape = [max_seq as u64, 128];
        let (kc, vc) = (up(&c, &ks, &kv_shape, dtype), up(&c, &vs, &kv_shape, dtype));
        let q = up(&c, &qs, &[sq as u64, 256], dtype);
        let out = up(&c, &vec![f32::NAN; qs.len()], &[sq as u64, 256], dtype);
        run(&c, |enc| {
            attend(&c, enc, [&q, &kc, &vc, &out], h, (kv_len, pos0), None)
        });
        let b = Batch {
            batch: 1,
            sq,
            kv_rows: max_seq,
            kv_len,
            pos0,
            causal: true,
        };
        let want = reference(&qs, &ks, &vs, h, b);
        let got = host::read(g, &out).expect("read");
        let (atol, rtol) = tolerance(dtype);
        assert_close(&format!("{dtype:?} cache {b:?}"), &got, &want, atol, rtol);
    }
}

#[test]
fn flash_attention_rejects_bad_operands() {
    let Some(c) = ctx("flash_attention_rejects_bad_operands") else {
        return;
    };
    let g = &c.gpu;
    let h = Heads {
        n_heads: 2,
        n_kv_heads: 2,
        head_dim: 32,
    };
    let q = nan_tensor(g, &[6, 64]);
    let k = nan_tensor(g, &[4, 64]);
    let out = nan_tensor(g, &[6, 64]);
    let mut enc = Encoder::new(&g.device, "test");
    let mut attend = |batch, mask| {
        record_flash_attention(g, &c.cache, &mut enc, &q, &k, &k, &out, h, batch, mask)
            .expect_err("bad")
            .to_string()
    };
    assert!(attend(4, Mask::None).contains("batch"));
    assert!(attend(0, Mask::None).contains("batch"));
    // 6 queries over 4 keys cannot be the last positions of the keys.
    assert!(attend(2, Mask::Causal).contains("causal"));
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

/// Says which reduction the decode kernel uses for each head_dim, and that
/// the subgroup one is skipped where the adapter cannot run it.
fn report_sums(c: &Ctx, test: &str, head_dims: &[u64]) {
    let caps = &c.gpu.caps;
    for &hd in head_dims {
        if uses_subgroups(caps, hd) {
            eprintln!("{test}: head_dim {hd}: subgroup sums");
        } else {
            eprintln!(
                "{test}: head_dim {hd}: skipped: subgroup sums ({} lanes per key; adapter subgroups {}, sizes {}..{}): workgroup sums",
                lanes_per_key(hd),
                caps.subgroups,
                caps.subgroup_min_size,
                caps.subgroup_max_size
            );
        }
    }
}

/// The test GPU for a decode test, having said which reductions its head
/// dims take, and the dtypes it runs.
fn decode_ctx(test: &str) -> Option<(Ctx, Vec<ActDtype>)> {
    let c = ctx(test)?;
    report_sums(&c, test, &[32, 64, 80, 128]);
    let dtypes = dtypes(&c, test);
    Some((c, dtypes))
}

/// The decode kernel (one or two query rows at the end of a cache) against
/// the reference: head_dim 32/64/80/128, GQA groups 1, 4 and 7, 1 to 1100
/// keys (one split, a partial step, many splits), f32 and f16, each head
/// shape with one tuning of [`tunings`] (where it fits the adapter),
/// rotating, so each runs on two or three shapes (all of them on every
/// shape with `DYNVRAM_THOROUGH=1`).
#[test]
fn decode_attention_matches_cpu() {
    let Some((c, dtypes)) = decode_ctx("decode_attention_matches_cpu") else {
        return;
    };
    let g = &c.gpu;
    let (tunings, mut skipped) = (tunings(), Default::default());
    let mut case = 0u64;
    for dtype in dtypes {
        for (ci, (hd, group, n_kv)) in [
            (64u64, 1u64, 3u64),
            (80, 4, 2),
            (128, 7, 2),
            (128, 1, 4),
            (64, 7, 1),
            (32, 4, 2),
        ]
        .into_iter()
        .enumerate()
        {
            let tunings = rotation(&tunings, ci + 3 * dtype as usize, 1);
            for (kv_len, sq) in [(1usize, 1usize), (31, 1), (33, 2), (300, 1), (1100, 2)] {
                // two rows of 7 heads are 14 queries: the scalar kernels'
                let sq = if group * sq as u64 > 8 { 1 } else { sq };
                case += 1;
                let h = Heads {
                    n_heads: group * n_kv,
                    n_kv_heads: n_kv,
                    head_dim: hd,
                };
                let (nh, nkv, hdu) = (h.n_heads as usize, n_kv as usize, hd as usize);
                let max_seq = kv_len + 5;
                let width = nkv * hdu;
                let qs = rounded(case * 3, sq * nh * hdu, 1.5, dtype);
                let ks = rounded(case * 3 + 1, kv_len * width, 1.5, dtype);
                let vs = rounded(case * 3 + 2, kv_len * width, 2.0, dtype);
                let kc = cache_of(&c, &ks, max_seq, width, dtype);
                let vc = cache_of(&c, &vs, max_seq, width, dtype);
                let q = up(&c, &qs, &[sq as u64, (nh * hdu) as u64], dtype);
                let pos0 = kv_len - sq;
                let want = attention_ref(&qs, &ks, &vs, h, kv_len, pos0);
                let (atol, rtol) = tolerance(dtype);
                for tuning in &tunings {
                    if !tuning_fits(&c, tuning, h, sq, &mut skipped) {
                        continue;
                    }
                    let out = up(&c, &vec![f32::NAN; qs.len()], &q.shape, dtype);
                    run(&c, |enc| {
                        let ops = [&q, &kc, &vc, &out];
                        attend_tuned(&c, enc, ops, h, (kv_len, pos0), None, tuning)
                    });
                    let got = host::read(g, &out).expect("read");
                    let tag = format!("{dtype:?} {h:?} kv_len {kv_len} sq {sq} tuning {tuning}");
                    assert_close(&tag, &got, &want, atol, rtol);
                }
            }
        }
    }
    report_skipped("decode_attention_matches_cpu", &skipped);
}

/// RoPE fused into the attention (`record_attention` with a table) against
/// `record_rope_qk` on q and the new k rows, their copy into the cache, then
/// the attention: the same cache bits, both outputs within the module's
/// tolerance of the reference on rope_qk's queries, and in f32 the same
/// output bits. (f16 outputs may differ in the last bits: Mesa 26's
/// lavapipe compiles the two kernels' f16 rounding of the rotated queries
/// differently — up to 2.5e-4 from the reference either way, within the
/// 2e-3 tolerance — while Mesa 22's gives the same bits.) Decoding (the fused
/// kernel: head_dim 32/64/80/128, groups 1, 4, 7, one split and many), and the
/// cases it leaves to a RoPE launch of its own (12 queries per kv head;
/// head_dim 36, not a multiple of 8); each with one tuning of [`tunings`]
/// (where it fits the adapter), rotating (all with `DYNVRAM_THOROUGH=1`).
#[test]
fn rope_in_attention_matches_rope_qk() {
    let Some((c, dtypes)) = decode_ctx("rope_in_attention_matches_rope_qk") else {
        return;
    };
    let g = &c.gpu;
    let (tunings, mut skipped) = (tunings(), Default::default());
    let mut case = 0u64;
    for dtype in dtypes {
        for (ci, (hd, group, n_kv, kv_len, sq)) in [
            (64u64, 1u64, 2u64, 40usize, 1usize),
            (80, 4, 2, 300, 2),
            (128, 7, 2, 1100, 1),
            (128, 4, 1, 17, 1),
            (64, 4, 2, 70, 3),
            (36, 2, 2, 50, 1),
            (32, 4, 2, 100, 2),
        ]
        .into_iter()
        .enumerate()
        {
            let tunings = rotation(&tunings, ci + 3 * dtype as usize, 1);
            case += 1;
            let h = Heads {
                n_heads: group * n_kv,
                n_kv_heads: n_kv,
                head_dim: hd,
            };
            let (nh, nkv, hdu) = (h.n_heads as usize, n_kv as usize, hd as usize);
            let (max_seq, width, pos0) = (kv_len + 3, nkv * hdu, kv_len - sq);
            let table = RopeTable::new(g, 10000.0, hd, max_seq as u64).expect("table");
            let qs = rounded(case * 5, sq * nh * hdu, 1.5, dtype);
            let ks = rounded(case * 5 + 1, pos0 * width, 1.5, dtype);
            let new_k = rounded(case * 5 + 2, sq * width, 1.5, dtype);
            let vs = rounded(case * 5 + 3, kv_len * width, 2.0, dtype);
            let q_shape = [sq as u64, (nh * hdu) as u64];
            let new_shape = [sq as u64, width as u64];
            for tuning in &tunings {
                if !tuning_fits(&c, tuning, h, sq, &mut skipped) {
                    continue;
                }
                let mut results = Vec::new();
                let mut q_rot = Vec::new();
                for fused in [false, true] {
                    let q = up(&c, &qs, &q_shape, dtype);
                    let k_new = up(&c, &new_k, &new_shape, dtype);
                    let kc = cache_of(&c, &ks, max_seq, width, dtype);
                    let vc = cache_of(&c, &vs, max_seq, width, dtype);
                    let out = up(&c, &vec![f32::NAN; qs.len()], &q_shape, dtype);
                    run(&c, |enc| {
                        if !fused {
                            record_rope_qk(
                                g,
                                &c.cache,
                                enc,
                                &table,
                                &q,
                                &k_new,
                                h.n_heads,
                                n_kv,
                                pos0 as u64,
                            )?;
                        }
                        record_kv_write(enc, &k_new, &kc, pos0 as u64)?;
                        attend_tuned(
                            &c,
                            enc,
                            [&q, &kc, &vc, &out],
                            h,
                            (kv_len, pos0),
                            fused.then_some(&table),
                            tuning,
                        )
                    });
                    let cache_rows = host::read(g, &kc).expect("read")[..kv_len * width].to_vec();
                    results.push((host::read(g, &out).expect("read"), cache_rows));
                    if !fused {
                        // rope_qk's rotated (and act-rounded) queries.
                        q_rot = host::read(g, &q).expect("read");
                    }
                }
                // Both against the reference on those queries and the cache.
                let want = attention_ref(&q_rot, &results[0].1, &vs, h, kv_len, pos0);
                let (atol, rtol) = tolerance(dtype);
                for (r, name) in results.iter().zip(["rope_qk", "fused"]) {
                    let what = format!("{dtype:?} {h:?} kv_len {kv_len} sq {sq} {tuning}: {name}");
                    assert_close(&what, &r.0, &want, atol, rtol);
                }
                let tag = format!("{dtype:?} {h:?} kv_len {kv_len} sq {sq} tuning {tuning}");
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&results[0].1), bits(&results[1].1), "{tag}: k cache");
                assert!(results[1].0.iter().all(|v| v.is_finite()), "{tag}");
                if dtype == ActDtype::F32 {
                    assert_eq!(bits(&results[0].0), bits(&results[1].0), "{tag}: output");
                }
                let same = bits(&results[0].0) == bits(&results[1].0);
                eprintln!("{tag}: fused RoPE output bit-identical: {same}");
            }
        }
    }
    report_skipped("rope_in_attention_matches_rope_qk", &skipped);
}

/// A tuning the adapter cannot run is an error where the decode kernel
/// would take it (and read by nothing where the scalar kernels run).
#[test]
fn decode_rejects_unfit_tunings() {
    let Some(c) = ctx("decode_rejects_unfit_tunings") else {
        return;
    };
    let g = &c.gpu;
    let h = Heads {
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
    };
    let q = nan_tensor(g, &[1, 256]);
    let kc = nan_tensor(g, &[16, 128]);
    let out = nan_tensor(g, &[1, 256]);
    let mut enc = Encoder::new(&g.device, "test");
    for bad in [
        DecodeTuning {
            workgroup: 96,
            ..DecodeTuning::default()
        },
        DecodeTuning {
            workgroup: 4096,
            ..DecodeTuning::default()
        },
        DecodeTuning {
            merge: 0,
            ..DecodeTuning::default()
        },
    ] {
        let err = attend_tuned(&c, &mut enc, [&q, &kc, &kc, &out], h, (9, 8), None, &bad)
            .expect_err("an unfit tuning");
        assert!(err.to_string().contains("decode tuning"), "{err}");
    }
}

/// The flash kernels case `case` of the flash tests runs, of those that fit
/// the adapter at `head_dim` ([`flash_fits`]; why not in `skipped`): the
/// two-walk kernel and the one-walk default this adapter gets at
/// `head_dim` always; [`DEFAULTS_PER_CASE`] of the other one-walk defaults
/// ([`default_flash_tunings`] as they are: what other adapters get),
/// rotating with `case`; with `extras: Some(n)`, [`EXTRAS_PER_CASE`] of the
/// other stagings, grids, prefetch, layouts and the materialized queries
/// (the shapes `bench/flash_sweep.sh` times on 16x16 matrices), rotating
/// with `n`, their rows and keys scaled to the adapter's matrix edge
/// (edge / 16) so that each subgroup holds as many matrices as on the GPU.
/// Every kernel with `DYNVRAM_THOROUGH=1`. (Each is a pipeline per head
/// shape that lavapipe compiles for seconds to a minute: all of them on
/// every case took most of CI's cooperative-matrix stage.)
fn flash_kernels(
    c: &Ctx,
    head_dim: u64,
    case: usize,
    extras: Option<usize>,
    skipped: &mut std::collections::BTreeSet<String>,
) -> Vec<FlashKernel> {
    let caps = &c.gpu.caps;
    let edge = caps.coop_matrix_edge;
    let mut fits = |k: &FlashKernel| flash_fits(c, k, head_dim, skipped);
    let own = default_flash_tuning(caps, head_dim).map(FlashKernel::OneWalk);
    let mut all: Vec<FlashKernel> = std::iter::once(FlashKernel::TwoWalk)
        .chain(own)
        .filter(&mut fits)
        .collect();
    let defaults: Vec<FlashKernel> = default_flash_tunings()
        .into_iter()
        .map(FlashKernel::OneWalk)
        .filter(|k| Some(*k) != own)
        .collect();
    let fitting: Vec<FlashKernel> = defaults.iter().copied().filter(&mut fits).collect();
    all.extend(rotation(&fitting, case, DEFAULTS_PER_CASE));
    let Some(extras_case) = extras else {
        return all;
    };
    let mut others = Vec::new();
    for t in [
        "64x64w4c2m",
        "64x32w4k2c2p",
        "64x32w4c2pr",
        "128x32w8c2",
        "128x32w8c2pm",
        "128x32w8k2c4pr",
        "64x64w4g",
        "128x32w8c2gm",
        "16x16w1g",
        "64x64w4c2t",
        "128x32w8k2c4prt",
    ] {
        let mut t: FlashTuning = t.parse().expect("tuning");
        t.rows = (t.rows * edge / 16).max(edge);
        t.keys = (t.keys * edge / 16).max(edge);
        let k = FlashKernel::OneWalk(t);
        if !all.contains(&k) && !defaults.contains(&k) && !others.contains(&k) && fits(&k) {
            others.push(k);
        }
    }
    all.extend(rotation(&others, extras_case, EXTRAS_PER_CASE));
    all
}

/// The other one-walk defaults that fit which a flash case runs, rotating
/// (on lavapipe 3 to 5 fit a head dim: each runs on several cases).
const DEFAULTS_PER_CASE: usize = 2;

/// The non-default flash kernels a smaller flash case runs, rotating over
/// the six cases that take them.
const EXTRAS_PER_CASE: usize = 4;

/// Whether the flash tests run `k` at `head_dim` here; where not, records
/// why in `skipped`: the adapter cannot run it, or its matrices would take
/// more than 224 registers an invocation (spills on a GPU, minutes of
/// compilation on lavapipe).
fn flash_fits(
    c: &Ctx,
    k: &FlashKernel,
    head_dim: u64,
    skipped: &mut std::collections::BTreeSet<String>,
) -> bool {
    let caps = &c.gpu.caps;
    if let Some(why) = flash_kernel_unusable(caps, k, head_dim) {
        skipped.insert(format!("{k} at head_dim {head_dim}: {why}"));
        return false;
    }
    let regs = match k {
        FlashKernel::OneWalk(t) => flash_geometry(caps, t, head_dim).map_or(0, |g| g.registers()),
        FlashKernel::TwoWalk => 0,
    };
    if regs > 224 {
        skipped.insert(format!(
            "{k} at head_dim {head_dim}: {regs} registers of matrices"
        ));
        return false;
    }
    true
}

/// Batched flash attention with the flash kernels the adapter can run
/// ([`flash_kernels`]: the two-walk kernel and the adapter's default on
/// every case, the other defaults and tunings rotating) against the f64
/// reference, f16: rows and keys off every block size, one row, more
/// queries than keys, GQA groups of 1 to 4,
/// head_dim 32 to 256 (64, 80, 128 included), batch 2, causal with pos0 >
/// 0, many key blocks, and keys whose scores grow along the sequence (the
/// running maximum moves by more than the lazy threshold: the outputs'
/// rescale). Then the cache form (`record_attention_tuned`: a chunk after a
/// cached prefix, NaN past kv_len). `DYNVRAM_REQUIRE_COOP=1` fails where no
/// tuning runs.
#[test]
fn flash_tunings_match_cpu() {
    let Some(c) = ctx("flash_tunings_match_cpu") else {
        return;
    };
    let g = &c.gpu;
    let caps = &g.caps;
    eprintln!(
        "flash_tunings_match_cpu: {} matrices {}x{}, subgroups {}..{}, {} bytes of workgroup memory, default at head_dim 128: {:?}",
        caps.name,
        caps.coop_matrix_edge,
        caps.coop_matrix_edge,
        caps.subgroup_min_size,
        caps.subgroup_max_size,
        caps.max_workgroup_storage,
        default_flash_tuning(caps, 128).map(|t| t.to_string())
    );
    if let Some(why) = flash_unusable(caps, ActDtype::F16, 64) {
        let msg = format!("flash_tunings_match_cpu: skipped: {why}");
        assert!(std::env::var("DYNVRAM_REQUIRE_COOP").is_err(), "{msg}");
        eprintln!("{msg}");
        return;
    }
    let heads = |n_heads, n_kv_heads, head_dim| Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    };
    // (heads, batch, sq, skv, mask, key ramp, extra kernels): the larger
    // cases run the defaults only (lavapipe takes minutes for all).
    let cases = [
        (heads(4, 4, 64), 1, 48, 48, Mask::None, false, true),
        (heads(4, 2, 64), 2, 37, 37, Mask::None, false, true),
        (heads(2, 1, 128), 1, 70, 70, Mask::Causal, false, true),
        (heads(3, 3, 64), 2, 21, 53, Mask::Causal, false, true),
        (heads(2, 2, 80), 1, 33, 100, Mask::None, false, true),
        (heads(8, 2, 128), 1, 100, 100, Mask::Causal, false, false),
        (heads(2, 1, 64), 2, 17, 300, Mask::Causal, true, true),
        (heads(2, 2, 128), 1, 150, 77, Mask::None, true, false),
        (heads(2, 2, 32), 1, 1, 9, Mask::None, false, false),
        (heads(1, 1, 256), 1, 20, 40, Mask::None, false, false),
    ];
    let dtype = ActDtype::F16;
    let mut ran = std::collections::BTreeMap::new();
    let mut skipped = std::collections::BTreeSet::new();
    let mut failed = Vec::new();
    let mut extras_case = 0;
    for (i, &(h, batch, sq, skv, mask, ramp, every)) in cases.iter().enumerate() {
        let b = Batch::plain(batch, sq, skv, mask);
        let (q, k, v, want) = flash_case(&c, h, b, 300 + 3 * i as u64, ramp);
        // The extras rotate over the cases that take them.
        let extras = every.then_some(extras_case);
        extras_case += usize::from(every);
        for t in flash_kernels(&c, h.head_dim, i, extras, &mut skipped) {
            *ran.entry(t.to_string()).or_insert(0) += 1;
            let got = flash_run(&c, (&q, &k, &v), h, b, &t);
            check_close(
                &mut failed,
                &format!("{t} {h:?} {b:?} ramp {ramp}"),
                &got,
                &want,
            );
        }
    }
    // The cache form: a chunk of sq rows at pos0 over kv_len keys of a
    // cache of max_seq rows, NaN past kv_len.
    for (i, (h, max_seq, kv_len, sq, pos0)) in [
        (heads(4, 2, 64), 64usize, 50usize, 40usize, 10usize),
        (heads(4, 1, 128), 220, 200, 40, 160),
    ]
    .into_iter()
    .enumerate()
    {
        let (nh, nkv, hd) = (
            h.n_heads as usize,
            h.n_kv_heads as usize,
            h.head_dim as usize,
        );
        let width = nkv * hd;
        let ks = rounded(17 + kv_len as u64, kv_len * width, 1.5, dtype);
        let vs = rounded(18 + kv_len as u64, kv_len * width, 2.0, dtype);
        let qs = rounded(19 + kv_len as u64, sq * nh * hd, 1.5, dtype);
        let (kc, vc) = (
            cache_of(&c, &ks, max_seq, width, dtype),
            cache_of(&c, &vs, max_seq, width, dtype),
        );
        let q = up(&c, &qs, &[sq as u64, (nh * hd) as u64], dtype);
        let want = attention_ref(&qs, &ks, &vs, h, kv_len, pos0);
        for t in flash_kernels(&c, h.head_dim, cases.len() + i, None, &mut skipped) {
            let out = up(&c, &vec![f32::NAN; qs.len()], &q.shape, dtype);
            run(&c, |enc| {
                let mut scratch = LinearScratch::new();
                record_attention_tuned(
                    g,
                    &c.cache,
                    enc,
                    &q,
                    &kc,
                    &vc,
                    &out,
                    h,
                    kv_len as u64,
                    pos0 as u64,
                    None,
                    &mut scratch,
                    &DecodeTuning::default(),
                    Some(&t),
                )
            });
            let got = host::read(g, &out).expect("read");
            let tag = format!("{t} cache {h:?} kv_len {kv_len} sq {sq} pos0 {pos0}");
            check_close(&mut failed, &tag, &got, &want);
        }
    }
    for (t, n) in &ran {
        eprintln!("flash_tunings_match_cpu: {t}: {n} cases");
    }
    for why in &skipped {
        eprintln!("flash_tunings_match_cpu: skipped: {why}");
    }
    for hd in [32, 64, 80, 128, 256] {
        if let Some(k) = default_flash_kernel(caps, ActDtype::F16, hd) {
            assert!(
                ran.contains_key(&k.to_string()),
                "the default {k} never ran"
            );
        }
        if let Some(t) = default_flash_tuning(caps, hd) {
            let k = FlashKernel::OneWalk(t);
            assert!(
                ran.contains_key(&k.to_string()),
                "the one-walk default {k} never ran"
            );
        }
    }
    assert!(ran.len() >= 4, "only {} tunings ran", ran.len());
    assert!(
        failed.is_empty(),
        "{} cases failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A flash case's f16 q, k and v on the GPU and the f64 reference's output:
/// random values from `seed`, with `ramp` keys whose scores grow about 5x
/// along the sequence (the running maximum moves: the outputs' rescale).
fn flash_case(
    c: &Ctx,
    h: Heads,
    b: Batch,
    seed: u64,
    ramp: bool,
) -> (GpuTensor, GpuTensor, GpuTensor, Vec<f32>) {
    let dtype = ActDtype::F16;
    let (nh, nkv, hd) = (
        h.n_heads as usize,
        h.n_kv_heads as usize,
        h.head_dim as usize,
    );
    let (batch, sq, skv) = (b.batch, b.sq, b.kv_rows);
    let qs = rounded(seed, batch * sq * nh * hd, 1.5, dtype);
    let mut ks = nonzero(seed + 1, batch * skv * nkv * hd, 1.5);
    if ramp {
        for (r, row) in ks.chunks_mut(nkv * hd).enumerate() {
            let f = 1.0 + 4.0 * (r % skv) as f32 / skv as f32;
            row.iter_mut().for_each(|x| *x *= f);
        }
    }
    let ks: Vec<f32> = ks.into_iter().map(|x| host::round_to(x, dtype)).collect();
    let vs = rounded(seed + 2, batch * skv * nkv * hd, 2.0, dtype);
    let (q, k, v) = up_qkv(c, h, b, (&qs, &ks, &vs), dtype);
    let want = reference(&qs, &ks, &vs, h, b);
    (q, k, v, want)
}

/// Flash attention of `b` with kernel `t` into a NaN-filled f16 output,
/// read back.
fn flash_run(
    c: &Ctx,
    (q, k, v): (&GpuTensor, &GpuTensor, &GpuTensor),
    h: Heads,
    b: Batch,
    t: &FlashKernel,
) -> Vec<f32> {
    let n = q.shape.iter().product::<u64>() as usize;
    let out = up(c, &vec![f32::NAN; n], &q.shape, ActDtype::F16);
    let mask = if b.causal { Mask::Causal } else { Mask::None };
    run(c, |enc| {
        record_flash_attention_tuned(
            &c.gpu,
            &c.cache,
            enc,
            q,
            k,
            v,
            &out,
            h,
            b.batch as u64,
            mask,
            Some(t),
        )
    });
    host::read(&c.gpu, &out).expect("read")
}

/// The one-walk flash kernel with double-staged keys and values (`d`: the
/// next block stored into a second stage while this one computes) against
/// the f64 reference, f16: several key blocks with a partial last one,
/// causal and not, GQA, batch 2, keys whose scores grow along the sequence
/// (the outputs' rescale, whose scratch the next block's scores would
/// overwrite without its barrier); tunings with key and column groups and
/// column-major scores, scaled to the adapter's matrix edge.
/// `DYNVRAM_REQUIRE_COOP=1` fails where none runs.
#[test]
fn flash_double_staging_matches_cpu() {
    let test = "flash_double_staging_matches_cpu";
    let Some(c) = ctx(test) else {
        return;
    };
    let caps = &c.gpu.caps;
    if let Some(why) = flash_unusable(caps, ActDtype::F16, 64) {
        let msg = format!("{test}: skipped: {why}");
        assert!(std::env::var("DYNVRAM_REQUIRE_COOP").is_err(), "{msg}");
        eprintln!("{msg}");
        return;
    }
    let edge = caps.coop_matrix_edge;
    let tunings: Vec<FlashKernel> = [
        "64x64w4c2dr",
        "64x32w4k2c2dr",
        "128x32w8c2drt",
        "128x16w8c2dr",
    ]
    .into_iter()
    .map(|t| {
        let mut t: FlashTuning = t.parse().expect("tuning");
        t.rows = (t.rows * edge / 16).max(edge);
        t.keys = (t.keys * edge / 16).max(edge);
        FlashKernel::OneWalk(t)
    })
    .collect();
    let heads = |n_heads, n_kv_heads, head_dim| Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    };
    let cases = [
        (heads(4, 2, 64), 1, 37, 150, Mask::Causal, true),
        (heads(4, 2, 64), 1, 37, 150, Mask::None, true),
        (heads(2, 2, 64), 2, 21, 70, Mask::None, false),
        (heads(2, 1, 128), 1, 17, 100, Mask::None, true),
    ];
    let mut skipped = std::collections::BTreeSet::new();
    let (mut ran, mut failed) = (0, Vec::new());
    for (i, &(h, batch, sq, skv, mask, ramp)) in cases.iter().enumerate() {
        let b = Batch::plain(batch, sq, skv, mask);
        let (q, k, v, want) = flash_case(&c, h, b, 700 + 3 * i as u64, ramp);
        for t in tunings
            .iter()
            .filter(|t| flash_fits(&c, t, h.head_dim, &mut skipped))
        {
            let got = flash_run(&c, (&q, &k, &v), h, b, t);
            check_close(
                &mut failed,
                &format!("{t} {h:?} {b:?} ramp {ramp}"),
                &got,
                &want,
            );
            ran += 1;
        }
    }
    for why in &skipped {
        eprintln!("{test}: skipped: {why}");
    }
    assert!(ran >= cases.len(), "only {ran} runs");
    assert!(
        failed.is_empty(),
        "{} cases failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// [`assert_close`] at the f16 tolerance, a failure kept in `failed`
/// (every tuning's cases run, and all failures are listed at the end).
fn check_close(failed: &mut Vec<String>, what: &str, got: &[f32], want: &[f32]) {
    let (atol, rtol) = tolerance(ActDtype::F16);
    let mut worst: Option<(usize, f32)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        let bad = err.is_nan() || err > atol + rtol * w.abs();
        if bad && worst.is_none_or(|(_, e)| err > e || err.is_nan()) {
            worst = Some((i, err));
        }
    }
    match worst {
        None => {
            let max = got
                .iter()
                .zip(want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0f32, f32::max);
            eprintln!("{what}: max |diff| {max:.3e}");
        }
        Some((i, err)) => {
            let zeros = got.iter().filter(|x| **x == 0.0).count();
            let nans = got.iter().filter(|x| x.is_nan()).count();
            let line = format!(
                "{what}: element {i}: got {}, want {} (|diff| {err}); {zeros} zeros, {nans} NaN of {}",
                got[i],
                want[i],
                got.len()
            );
            eprintln!("FAILED {line}");
            failed.push(line);
        }
    }
}

/// A flash tuning the adapter cannot run is an error, and f32 activations
/// are refused by an explicit tuning.
#[test]
fn flash_rejects_unfit_tunings() {
    let Some(c) = ctx("flash_rejects_unfit_tunings") else {
        return;
    };
    let g = &c.gpu;
    if !g.caps.shader_f16 {
        eprintln!("flash_rejects_unfit_tunings: skipped: the adapter lacks SHADER_F16");
        return;
    }
    let h = Heads {
        n_heads: 2,
        n_kv_heads: 2,
        head_dim: 64,
    };
    let q = up(&c, &[0.5; 32 * 128], &[32, 128], ActDtype::F16);
    let out = up(&c, &[0.5; 32 * 128], &[32, 128], ActDtype::F16);
    let q32 = up(&c, &[0.5; 32 * 128], &[32, 128], ActDtype::F32);
    let out32 = up(&c, &[0.5; 32 * 128], &[32, 128], ActDtype::F32);
    let mut enc = Encoder::new(&g.device, "test");
    let mut attend = |t: &str, q: &GpuTensor, out: &GpuTensor| {
        let t: FlashKernel = t.parse().expect("tuning");
        record_flash_attention_tuned(
            g,
            &c.cache,
            &mut enc,
            q,
            q,
            q,
            out,
            h,
            1,
            Mask::None,
            Some(&t),
        )
        .expect_err("unfit")
        .to_string()
    };
    // Far more workgroup memory than any adapter has.
    let err = attend("512x512w4", &q, &out);
    assert!(err.contains("flash tuning 512x512w4"), "{err}");
    let err = attend("64x64w4c3", &q, &out);
    assert!(err.contains("flash tuning 64x64w4c3"), "{err}");
    let err = attend("16x16w1", &q32, &out32);
    assert!(err.contains("f16"), "{err}");
}
