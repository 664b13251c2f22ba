//! The decode kernel (flash-decoding) against the CPU reference: every
//! tuning that fits, RoPE fused into it, and tunings refused.

use super::{
    attend_tuned, attention_ref, cache_of, dtypes, report_skipped, rounded, tolerance, tuning_fits,
    tunings,
};
use crate::ops_common::{Ctx, ctx, nan_tensor, run, up};
use dynvram_gpu::ActDtype;
use dynvram_gpu::ops::attention::{
    DecodeTuning, Heads, lanes_per_key, record_kv_write, uses_subgroups,
};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::rope::{RopeTable, record_rope_qk};
use dynvram_test_support::tolerance::assert_close;
use dynvram_test_support::variants::rotation;

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
