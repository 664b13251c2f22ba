//! RoPE (HF rotate_half) against a CPU reference for seq 1 and 19, 8 query /
//! 2 kv heads, head_dim 32 and 64, positions starting at 0 and mid-cache.

use crate::ops_common::{ctx, read, run, upload};
use dynvram_gpu::GpuError;
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::rope::{RopeTable, cos_sin_table, inv_freq, record_rope, record_rope_qk};
use dynvram_test_support::random::nonzero;
use dynvram_test_support::tolerance::assert_close;

/// `x · cos + rotate_half(x) · sin` per head, rotate_half(x) = cat(−x[d/2:], x[:d/2]).
fn rope_ref(x: &[f32], n_heads: usize, hd: usize, pos0: usize, table: &[f32]) -> Vec<f32> {
    let half = hd / 2;
    let mut out = x.to_vec();
    for (s, row) in out.chunks_mut(n_heads * hd).enumerate() {
        for head in row.chunks_mut(hd) {
            let orig = head.to_vec();
            for i in 0..hd {
                let j = i % half;
                let t = ((pos0 + s) * half + j) * 2;
                let (cos, sin) = (table[t], table[t + 1]);
                let rot = if i < half {
                    -orig[i + half]
                } else {
                    orig[i - half]
                };
                head[i] = orig[i] * cos + rot * sin;
            }
        }
    }
    out
}

#[test]
fn host_table_matches_f64_math() {
    let freqs = inv_freq(10000.0, 64);
    assert_eq!(freqs.len(), 32);
    let table = cos_sin_table(&freqs, 100, 1.0);
    for pos in [0usize, 1, 57, 99] {
        for i in 0..32 {
            let angle = pos as f64 * 10000f64.powf(-(2.0 * i as f64) / 64.0);
            let t = (pos * 32 + i) * 2;
            // f32 inv_freq and angle: error ≲ pos · 1e-7
            assert!(
                (f64::from(table[t]) - angle.cos()).abs() < 2e-5,
                "cos pos {pos} i {i}"
            );
            assert!(
                (f64::from(table[t + 1]) - angle.sin()).abs() < 2e-5,
                "sin pos {pos} i {i}"
            );
        }
    }
}

#[test]
fn rope_matches_cpu() {
    let Some(c) = ctx("rope_matches_cpu") else {
        return;
    };
    let g = &c.gpu;
    let (n_heads, n_kv) = (8usize, 2usize);
    for hd in [32usize, 64] {
        let freqs = inv_freq(10000.0, hd);
        let positions = 64u64;
        let table = RopeTable::from_inv_freq(g, &freqs, positions, 1.0).expect("table");
        let host = cos_sin_table(&freqs, positions, 1.0);
        for (seq, pos0) in [(1usize, 0usize), (1, 40), (19, 0), (19, 23)] {
            let qs = nonzero((hd * 100 + seq + pos0) as u64, seq * n_heads * hd, 2.0);
            let ks = nonzero((hd * 1000 + seq + pos0) as u64, seq * n_kv * hd, 2.0);
            let q = upload(g, &[seq as u64, (n_heads * hd) as u64], &qs);
            let k = upload(g, &[seq as u64, (n_kv * hd) as u64], &ks);
            run(&c, |enc| {
                record_rope_qk(
                    g,
                    &c.cache,
                    enc,
                    &table,
                    &q,
                    &k,
                    n_heads as u64,
                    n_kv as u64,
                    pos0 as u64,
                )
            });
            let tag = format!("hd {hd} seq {seq} pos0 {pos0}");
            assert_close(
                &format!("q {tag}"),
                &read(g, &q),
                &rope_ref(&qs, n_heads, hd, pos0, &host),
                1e-6,
                1e-6,
            );
            assert_close(
                &format!("k {tag}"),
                &read(g, &k),
                &rope_ref(&ks, n_kv, hd, pos0, &host),
                1e-6,
                1e-6,
            );
        }
    }
}

#[test]
fn rope_rejects_positions_past_the_table() {
    let Some(c) = ctx("rope_rejects_positions_past_the_table") else {
        return;
    };
    let g = &c.gpu;
    let table = RopeTable::new(g, 10000.0, 32, 8).expect("table");
    let x = upload(g, &[4, 64], &[1.0; 256]);
    let mut enc = Encoder::new(&g.device, "test");
    let err =
        record_rope(g, &c.cache, &mut enc, &table, &x, 2, 5).expect_err("positions 5..9 of 8");
    assert!(
        matches!(
            err,
            GpuError::PastEnd {
                op: "rope",
                what: "positions",
                start: 5,
                end: 9,
                len: 8,
                ..
            }
        ),
        "{err}"
    );
    let err = record_rope(g, &c.cache, &mut enc, &table, &x, 3, 0)
        .expect_err("64 columns is not 3 heads");
    assert!(err.to_string().contains("[4, 64]"), "{err}");
}
