//! Batched attention (flash attention on cooperative matrices where the
//! adapter has them, else the scalar kernels) against the CPU reference:
//! the runtime's choice, every one-walk tuning that fits, double staging,
//! and tunings or operands refused.

use super::{Batch, attend, attention_ref, cache_of, reference, rounded, tolerance, up_qkv};
use crate::ops_common::{Ctx, ctx, nan_tensor, run, up};
use dynvram_gpu::ops::attention::{
    DecodeTuning, FlashKernel, FlashTuning, Heads, Mask, default_flash_kernel,
    default_flash_tuning, default_flash_tunings, flash_geometry, flash_kernel_unusable,
    flash_unusable, record_attention_tuned, record_flash_attention, record_flash_attention_tuned,
};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::LinearScratch;
use dynvram_gpu::{ActDtype, GpuTensor};
use dynvram_test_support::random::nonzero;
use dynvram_test_support::skip::coop_skipped;
use dynvram_test_support::tolerance::assert_close;
use dynvram_test_support::variants::thorough;

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

/// Which flash kernels a run of the flash cases ([`flash_cases`]) takes.
/// The three are three tests so that the test harness compiles their
/// pipelines side by side: each is a pipeline per head shape that lavapipe
/// compiles for seconds to a minute, and all of them in one test took most
/// of CI's cooperative-matrix stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    /// The two-walk kernel and the one-walk default this adapter gets at
    /// the case's head dim, on every case.
    Own,
    /// [`DEFAULTS_PER_CASE`] of the other one-walk defaults
    /// ([`default_flash_tunings`] as they are: what other adapters get),
    /// rotating over the cases.
    Defaults,
    /// [`EXTRAS_PER_CASE`] of the other stagings, grids, prefetch, layouts
    /// and the materialized queries (the shapes `bench/flash_sweep.sh`
    /// times on 16x16 matrices), rotating over the cases of head dim
    /// [`EXTRAS_HEAD_DIM`] (one compile each), their rows and keys scaled
    /// to the adapter's matrix edge (edge / 16) so that each subgroup holds
    /// as many matrices as on the GPU.
    Extras,
}

/// The kernels of `pick` that fit the adapter at `head_dim`
/// ([`flash_fits`]; why not in `skipped`), and how many of them a case
/// runs ([`case_kernels`]).
fn flash_kernels(
    c: &Ctx,
    pick: Pick,
    head_dim: u64,
    skipped: &mut std::collections::BTreeSet<String>,
) -> (Vec<FlashKernel>, usize) {
    let caps = &c.gpu.caps;
    let edge = caps.coop_matrix_edge;
    let mut fits = |k: &FlashKernel| flash_fits(c, k, head_dim, skipped);
    let own = default_flash_tuning(caps, head_dim).map(FlashKernel::OneWalk);
    let defaults: Vec<FlashKernel> = default_flash_tunings()
        .into_iter()
        .map(FlashKernel::OneWalk)
        .filter(|k| Some(*k) != own)
        .collect();
    let (all, take) = match pick {
        Pick::Own => {
            let all: Vec<FlashKernel> = std::iter::once(FlashKernel::TwoWalk)
                .chain(own)
                .filter(&mut fits)
                .collect();
            let n = all.len();
            (all, n)
        }
        Pick::Defaults => (
            defaults.iter().copied().filter(&mut fits).collect(),
            DEFAULTS_PER_CASE,
        ),
        Pick::Extras => {
            let mut others: Vec<FlashKernel> = Vec::new();
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
                if Some(k) != own && !defaults.contains(&k) && !others.contains(&k) && fits(&k) {
                    others.push(k);
                }
            }
            (others, EXTRAS_PER_CASE)
        }
    };
    (all, take)
}

/// The kernels of `all` the `case`-th case runs: every one that has not
/// `ran` yet (a kernel that fits few head dims still runs once), then
/// others from `case · take` on (a rotation) up to `take`; all of them with
/// `DYNVRAM_THOROUGH=1`.
fn case_kernels(
    all: &[FlashKernel],
    take: usize,
    case: usize,
    ran: &std::collections::BTreeMap<String, usize>,
) -> Vec<FlashKernel> {
    if thorough() {
        return all.to_vec();
    }
    let mut out: Vec<FlashKernel> = (all.iter())
        .filter(|k| !ran.contains_key(&k.to_string()))
        .copied()
        .collect();
    for i in 0..all.len() {
        let k = all[(case * take + i) % all.len()];
        if out.len() >= take {
            break;
        }
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// The other one-walk defaults that fit which a flash case runs, rotating
/// (on lavapipe 3 to 5 fit a head dim: each runs on several cases).
const DEFAULTS_PER_CASE: usize = 1;

/// The non-default flash kernels a case of [`EXTRAS_HEAD_DIM`] runs at
/// least, rotating over the four such cases (the first runs all that fit).
const EXTRAS_PER_CASE: usize = 3;

/// The head dim of the cases that run the non-default kernels (the
/// quickest to compile on lavapipe).
const EXTRAS_HEAD_DIM: u64 = 64;

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
    if let Some(why) = flash_kernel_unusable(&c.gpu, k, head_dim) {
        skipped.insert(format!("{k} at head_dim {head_dim}: {why}"));
        return false;
    }
    let regs = match k {
        FlashKernel::OneWalk(t) => flash_geometry(caps, t, head_dim).map_or(0, |g| g.registers()),
        FlashKernel::TwoWalk | FlashKernel::Cm2(_) => 0,
    };
    if regs > 224 {
        skipped.insert(format!(
            "{k} at head_dim {head_dim}: {regs} registers of matrices"
        ));
        return false;
    }
    true
}

/// Batched flash attention with the adapter's own flash kernels (the
/// two-walk kernel and its one-walk default) against the f64 reference,
/// f16 ([`flash_cases`]). `DYNVRAM_REQUIRE_COOP=1` fails where no tuning
/// runs.
#[test]
fn flash_tunings_match_cpu() {
    flash_cases("flash_tunings_match_cpu", Pick::Own);
}

/// [`flash_tunings_match_cpu`]'s cases with the one-walk defaults other
/// adapters get, rotating.
#[test]
fn flash_other_defaults_match_cpu() {
    flash_cases("flash_other_defaults_match_cpu", Pick::Defaults);
}

/// [`flash_tunings_match_cpu`]'s cases of head dim 64 with the non-default
/// stagings, grids and layouts, rotating.
#[test]
fn flash_other_tunings_match_cpu() {
    flash_cases("flash_other_tunings_match_cpu", Pick::Extras);
}

/// The flash cases with the kernels `pick` takes ([`flash_kernels`]), each
/// against the f64 reference: rows and keys off every block size, one row,
/// more queries than keys, GQA groups of 1 to 4, head_dim 32 to 256 (64,
/// 80, 128 included), batch 2, causal with pos0 > 0, many key blocks, and
/// keys whose scores grow along the sequence (the running maximum moves by
/// more than the lazy threshold: the outputs' rescale). Then the cache
/// form (`record_attention_tuned`: a chunk after a cached prefix, NaN past
/// kv_len). Checks that every kernel of the pick that fits ran.
fn flash_cases(test: &str, pick: Pick) {
    let Some(c) = ctx(test) else {
        return;
    };
    let g = &c.gpu;
    let caps = &g.caps;
    eprintln!(
        "{test}: {} matrices {}x{}, subgroups {}..{}, {} bytes of workgroup memory, default at head_dim 128: {:?}",
        caps.name,
        caps.coop_matrix_edge,
        caps.coop_matrix_edge,
        caps.subgroup_min_size,
        caps.subgroup_max_size,
        caps.max_workgroup_storage,
        default_flash_tuning(caps, 128).map(|t| t.to_string())
    );
    if let Some(why) = flash_unusable(caps, ActDtype::F16, 64) {
        let msg = format!("{test}: skipped: {why}");
        assert!(std::env::var("DYNVRAM_REQUIRE_COOP").is_err(), "{msg}");
        eprintln!("{msg}");
        return;
    }
    let heads = |n_heads, n_kv_heads, head_dim| Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    };
    // (heads, batch, sq, skv, mask, key ramp).
    let cases = [
        (heads(4, 4, 64), 1, 48, 48, Mask::None, false),
        (heads(4, 2, 64), 2, 37, 37, Mask::None, false),
        (heads(2, 1, 128), 1, 70, 70, Mask::Causal, false),
        (heads(3, 3, 64), 2, 21, 53, Mask::Causal, false),
        (heads(2, 2, 80), 1, 33, 100, Mask::None, false),
        (heads(8, 2, 128), 1, 100, 100, Mask::Causal, false),
        (heads(2, 1, 64), 2, 17, 300, Mask::Causal, true),
        (heads(2, 2, 128), 1, 150, 77, Mask::None, true),
        (heads(2, 2, 32), 1, 1, 9, Mask::None, false),
        (heads(1, 1, 256), 1, 20, 40, Mask::None, false),
    ];
    let mut ran = std::collections::BTreeMap::new();
    let mut fitting = std::collections::BTreeSet::new();
    let mut skipped = std::collections::BTreeSet::new();
    let mut failed = Vec::new();
    // The cases that take kernels of this pick, counted for the rotation.
    let mut taken = 0;
    // The kernels of the next case at `head_dim`, each that fits noted.
    let mut next = |head_dim, ran: &std::collections::BTreeMap<String, usize>| {
        let (all, take) = flash_kernels(&c, pick, head_dim, &mut skipped);
        let kernels = case_kernels(&all, take, taken, ran);
        taken += 1;
        fitting.extend(all.iter().map(ToString::to_string));
        kernels
    };
    for (i, &(h, batch, sq, skv, mask, ramp)) in cases.iter().enumerate() {
        if pick == Pick::Extras && h.head_dim != EXTRAS_HEAD_DIM {
            continue;
        }
        let kernels = next(h.head_dim, &ran);
        if kernels.is_empty() {
            continue;
        }
        let b = Batch::plain(batch, sq, skv, mask);
        let (q, k, v, want) = flash_case(&c, h, b, 300 + 3 * i as u64, ramp);
        for t in kernels {
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
    if pick != Pick::Extras {
        for (h, max_seq, kv_len, sq, pos0) in [
            (heads(4, 2, 64), 64usize, 50usize, 40usize, 10usize),
            (heads(4, 1, 128), 220, 200, 40, 160),
        ] {
            let kernels = next(h.head_dim, &ran);
            if kernels.is_empty() {
                continue;
            }
            let case = CacheCase::new(&c, h, (max_seq, kv_len, sq, pos0));
            for t in kernels {
                *ran.entry(t.to_string()).or_insert(0) += 1;
                let got = case.run(&c, &t);
                let tag = format!("{t} cache {h:?} kv_len {kv_len} sq {sq} pos0 {pos0}");
                check_close(&mut failed, &tag, &got, &case.want);
            }
        }
    }
    for (t, n) in &ran {
        eprintln!("{test}: {t}: {n} cases");
    }
    for why in &skipped {
        eprintln!("{test}: skipped: {why}");
    }
    let never: Vec<&String> = fitting.iter().filter(|t| !ran.contains_key(*t)).collect();
    assert!(never.is_empty(), "{test}: never ran: {never:?}");
    if pick == Pick::Own {
        for hd in [32, 64, 80, 128, 256] {
            if let Some(k) = default_flash_kernel(caps, ActDtype::F16, hd) {
                assert!(
                    ran.contains_key(&k.to_string()),
                    "the default {k} never ran"
                );
            }
        }
    }
    assert!(!ran.is_empty(), "{test}: no kernel ran");
    assert!(
        failed.is_empty(),
        "{} cases failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The cache form of a flash case: f16 queries of `sq` rows at `pos0` over
/// `kv_len` keys of caches of `max_seq` rows (NaN past kv_len), and the
/// f64 reference's output.
pub(super) struct CacheCase {
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    heads: Heads,
    kv_len: usize,
    pos0: usize,
    pub want: Vec<f32>,
}

impl CacheCase {
    /// Random values seeded by `kv_len`; `(max_seq, kv_len, sq, pos0)`.
    pub(super) fn new(
        c: &Ctx,
        h: Heads,
        (max_seq, kv_len, sq, pos0): (usize, usize, usize, usize),
    ) -> Self {
        let dtype = ActDtype::F16;
        let (nh, nkv, hd) = (
            h.n_heads as usize,
            h.n_kv_heads as usize,
            h.head_dim as usize,
        );
        let width = nkv * hd;
        let ks = rounded(17 + kv_len as u64, kv_len * width, 1.5, dtype);
        let vs = rounded(18 + kv_len as u64, kv_len * width, 2.0, dtype);
        let qs = rounded(19 + kv_len as u64, sq * nh * hd, 1.5, dtype);
        Self {
            q: up(c, &qs, &[sq as u64, (nh * hd) as u64], dtype),
            k: cache_of(c, &ks, max_seq, width, dtype),
            v: cache_of(c, &vs, max_seq, width, dtype),
            heads: h,
            kv_len,
            pos0,
            want: attention_ref(&qs, &ks, &vs, h, kv_len, pos0),
        }
    }

    /// The attention with flash kernel `t` into a NaN-filled output, read
    /// back.
    pub(super) fn run(&self, c: &Ctx, t: &FlashKernel) -> Vec<f32> {
        let out = up(
            c,
            &vec![f32::NAN; self.want.len()],
            &self.q.shape,
            ActDtype::F16,
        );
        run(c, |enc| {
            let mut scratch = LinearScratch::new();
            record_attention_tuned(
                &c.gpu,
                &c.cache,
                enc,
                &self.q,
                &self.k,
                &self.v,
                &out,
                self.heads,
                self.kv_len as u64,
                self.pos0 as u64,
                None,
                &mut scratch,
                &DecodeTuning::default(),
                Some(t),
            )
        });
        host::read(&c.gpu, &out).expect("read")
    }
}

/// A flash case's f16 q, k and v on the GPU and the f64 reference's output:
/// random values from `seed`, with `ramp` keys whose scores grow about 5x
/// along the sequence (the running maximum moves: the outputs' rescale).
pub(super) fn flash_case(
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
pub(super) fn flash_run(
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
pub(super) fn check_close(failed: &mut Vec<String>, what: &str, got: &[f32], want: &[f32]) {
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
