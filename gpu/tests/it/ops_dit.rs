//! The diffusion-transformer ops (`ops::dit`) against CPU references in f64
//! on random inputs, over shapes that are not multiples of the workgroup
//! size, several batch elements, and blocks placed at offsets; outputs start
//! as NaN so an unwritten element shows, and elements outside a block must
//! stay NaN. Also the host tables (timestep embedding, n-axis RoPE) and the
//! operand checks.

use crate::ops_common::{ctx, nan_tensor, read, run, upload};
use dynvram_gpu::GpuError;
use dynvram_gpu::ops::dit::{
    Block, GatherOp, Joint, QK_MAX_HEAD_DIM, record_ada_norm, record_gated_add, record_gather,
    record_qk_place, rope_table, timestep_embedding,
};
use dynvram_test_support::random::nonzero;
use dynvram_test_support::tolerance::assert_close;

/// (batch, rows per batch element, columns, chunks of the modulation).
const SHAPES: &[(u64, u64, u64, u64)] = &[
    (1, 1, 1, 2),
    (2, 3, 33, 6),
    (3, 5, 300, 3),
    (1, 7, 1000, 2),
    (2, 2, 257, 6),
    // Vectors: up to three (2,060 columns) and four (4,096, the widest
    // ada_norm_vec takes) an invocation.
    (2, 3, 2060, 3),
    (1, 2, 4096, 2),
    // Past the columns ada_norm holds in registers (256 x 16).
    (1, 2, 4500, 2),
];

fn ada_norm_ref(x: &[f32], m: &[f32], per_batch: usize, cols: usize, ss: [usize; 2]) -> Vec<f32> {
    let mod_cols = m.len() / (x.len() / cols / per_batch);
    x.chunks(cols)
        .enumerate()
        .flat_map(|(r, row)| {
            let mrow = &m[(r / per_batch) * mod_cols..][..mod_cols];
            let n = cols as f64;
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let var = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / n;
            let rs = 1.0 / (var + 1e-6).sqrt();
            row.iter()
                .enumerate()
                .map(|(c, &v)| {
                    let shift = f64::from(mrow[ss[0] * cols + c]);
                    let scale = f64::from(mrow[ss[1] * cols + c]);
                    ((1.0 + scale) * (f64::from(v) - mean) * rs + shift) as f32
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn ada_norm_matches_reference() {
    let Some(c) = ctx("ada_norm_matches_reference") else {
        return;
    };
    let g = &c.gpu;
    for (i, &(batch, per, cols, chunks)) in SHAPES.iter().enumerate() {
        let rows = batch * per;
        let xs: Vec<f32> = nonzero(i as u64, (rows * cols) as usize, 3.0)
            .iter()
            .map(|v| v + 0.7) // a non-zero mean
            .collect();
        let ms = nonzero(100 + i as u64, (batch * chunks * cols) as usize, 1.5);
        let shift_scale = [chunks - 1, (chunks / 2).min(chunks - 1)];
        let x = upload(g, &[rows, cols], &xs);
        let m = upload(g, &[batch, chunks * cols], &ms);
        let out = nan_tensor(g, &[rows, cols]);
        run(&c, |enc| {
            record_ada_norm(g, &c.cache, enc, &x, &m, per, shift_scale, &out, 1e-6)
        });
        let want = ada_norm_ref(
            &xs,
            &ms,
            per as usize,
            cols as usize,
            shift_scale.map(|v| v as usize),
        );
        assert_close(
            &format!("ada_norm b{batch} [{per}, {cols}] x{chunks}"),
            &read(g, &out),
            &want,
            2e-5,
            1e-4,
        );
    }
}

#[test]
fn gated_add_matches_reference() {
    let Some(c) = ctx("gated_add_matches_reference") else {
        return;
    };
    let g = &c.gpu;
    for (i, &(batch, per, cols, chunks)) in SHAPES.iter().enumerate() {
        let rows = batch * per;
        let (xs, ys) = (
            nonzero(i as u64, (rows * cols) as usize, 3.0),
            nonzero(50 + i as u64, (rows * cols) as usize, 2.0),
        );
        let ms = nonzero(100 + i as u64, (batch * chunks * cols) as usize, 1.5);
        let gate = chunks / 2;
        let (x, y, m) = (
            upload(g, &[rows, cols], &xs),
            upload(g, &[rows, cols], &ys),
            upload(g, &[batch, chunks * cols], &ms),
        );
        run(&c, |enc| {
            record_gated_add(g, &c.cache, enc, &x, &y, &m, per, gate)
        });
        let mc = (chunks * cols) as usize;
        let want: Vec<f32> = (0..(rows * cols) as usize)
            .map(|e| {
                let (r, col) = (e / cols as usize, e % cols as usize);
                let gv = ms[(r / per as usize) * mc + gate as usize * cols as usize + col];
                (f64::from(xs[e]) + f64::from(gv) * f64::from(ys[e])) as f32
            })
            .collect();
        assert_close(
            &format!("gated_add b{batch} [{per}, {cols}] x{chunks}"),
            &read(g, &x),
            &want,
            1e-6,
            1e-6,
        );
    }
}

/// (batch, src rows per element, heads, head_dim, src col0 in heads·head_dim units, dst rows per element, dst row0).
const QK: &[(u64, u64, u64, u64, u64, u64, u64)] = &[
    (1, 1, 1, 2, 0, 1, 0),
    (2, 3, 2, 6, 1, 5, 2),
    (1, 12, 4, 32, 0, 60, 0),
    (2, 48, 4, 32, 1, 60, 12),
    (3, 5, 3, 128, 2, 7, 1),
    // The largest head the kernel takes (QK_MAX_HEAD_DIM): 4 pairs an
    // invocation.
    (1, 3, 2, 256, 1, 4, 1),
];

#[test]
fn qk_place_matches_reference() {
    let Some(c) = ctx("qk_place_matches_reference") else {
        return;
    };
    let g = &c.gpu;
    // src is a fused output: [q | k | v | extra], of an even width (the
    // scalar kernel moves pairs) or a multiple of four (the vector one
    // quads, where head_dim is one too).
    let cases = QK.iter().flat_map(|&c| [(c, 6), (c, 8)]);
    for (i, ((batch, per, heads, hd, col_unit, dper, row0), extra)) in cases.enumerate() {
        let width = heads * hd;
        let src_cols = 3 * width + extra;
        let col0 = col_unit * width;
        let rows = batch * per;
        let drows = batch * dper;
        let srcs = nonzero(i as u64, (rows * src_cols) as usize, 3.0);
        let ws: Vec<f32> = nonzero(7 + i as u64, hd as usize, 1.0)
            .iter()
            .map(|v| 1.5 + v * 0.5)
            .collect();
        let angles = nonzero(9 + i as u64, (drows * hd / 2) as usize, 3.0);
        let pes: Vec<f32> = angles.iter().flat_map(|a| [a.cos(), a.sin()]).collect();
        let src = upload(g, &[rows, src_cols], &srcs);
        let w = upload(g, &[hd], &ws);
        let pe = upload(g, &[drows, hd / 2, 2], &pes);
        let dst = nan_tensor(g, &[drows, width]);
        let to = Joint {
            dst: &dst,
            per_batch: dper,
            row0,
        };
        run(&c, |enc| {
            record_qk_place(g, &c.cache, enc, &src, per, col0, &w, &pe, hd, 1e-6, to)
        });
        let got = read(g, &dst);
        let mut want = vec![f32::NAN; got.len()];
        for r in 0..rows as usize {
            let (b, s) = (r / per as usize, r % per as usize);
            let drow = b * dper as usize + row0 as usize + s;
            for h in 0..heads as usize {
                let x =
                    &srcs[r * src_cols as usize + col0 as usize + h * hd as usize..][..hd as usize];
                let ms = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / hd as f64;
                let rr = 1.0 / (ms + 1e-6).sqrt();
                for p in 0..hd as usize / 2 {
                    let x0 = f64::from(x[2 * p]) * rr * f64::from(ws[2 * p]);
                    let x1 = f64::from(x[2 * p + 1]) * rr * f64::from(ws[2 * p + 1]);
                    let cs = &pes[(drow * hd as usize / 2 + p) * 2..][..2];
                    let (co, si) = (f64::from(cs[0]), f64::from(cs[1]));
                    let at = drow * width as usize + h * hd as usize + 2 * p;
                    want[at] = (co * x0 - si * x1) as f32;
                    want[at + 1] = (si * x0 + co * x1) as f32;
                }
            }
        }
        let tag = format!("qk_place b{batch} [{per}] {heads}x{hd} (+{extra}) -> [{dper}] @{row0}");
        for (e, (gv, wv)) in got.iter().zip(&want).enumerate() {
            if wv.is_nan() {
                assert!(
                    gv.is_nan(),
                    "{tag}: element {e} outside the block was written: {gv}"
                );
            } else {
                let err = (gv - wv).abs();
                assert!(
                    err <= 2e-5 + 1e-4 * wv.abs(),
                    "{tag}: element {e}: got {gv}, want {wv}"
                );
            }
        }
    }
}

fn gelu_ref(v: f64) -> f64 {
    0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
}

#[test]
fn gather_matches_reference() {
    let Some(c) = ctx("gather_matches_reference") else {
        return;
    };
    let g = &c.gpu;
    // (batch, src [per, width, row0, col0], dst [per, width, row0, col0], rows, cols)
    type Case = (u64, [u64; 4], [u64; 4], u64, u64);
    let cases: &[Case] = &[
        (1, [1, 1, 0, 0], [1, 1, 0, 0], 1, 1),
        (2, [12, 128, 0, 0], [60, 128, 0, 0], 12, 128),
        (2, [60, 128, 12, 0], [48, 128, 0, 0], 48, 128),
        (3, [5, 700, 1, 384], [9, 650, 3, 129], 4, 316),
        (2, [7, 37, 0, 5], [7, 40, 0, 3], 7, 32),
        // A width of no whole fours (one column an invocation).
        (2, [6, 50, 1, 3], [8, 47, 2, 0], 5, 43),
        // Fours on both sides (vectors), twelve columns.
        (2, [10, 20, 1, 4], [9, 24, 2, 8], 6, 12),
        // Vectors over two workgroups, the second partly filled.
        (2, [40, 200, 3, 8], [50, 120, 5, 4], 33, 100),
    ];
    for (i, &(batch, s, d, rows, cols)) in cases.iter().enumerate() {
        for op in [GatherOp::Copy, GatherOp::GeluTanh] {
            let srcs = nonzero(i as u64, (batch * s[0] * s[1]) as usize, 4.0);
            let src = upload(g, &[batch * s[0], s[1]], &srcs);
            let dst = nan_tensor(g, &[batch * d[0], d[1]]);
            let side = |t, v: [u64; 4]| Block {
                t,
                per_batch: v[0],
                row0: v[2],
                col0: v[3],
            };
            run(&c, |enc| {
                record_gather(
                    g,
                    &c.cache,
                    enc,
                    side(&src, s),
                    side(&dst, d),
                    batch,
                    [rows, cols],
                    op,
                )
            });
            let got = read(g, &dst);
            let mut want = vec![f32::NAN; got.len()];
            for b in 0..batch {
                for r in 0..rows {
                    for cc in 0..cols {
                        let from = ((b * s[0] + s[2] + r) * s[1] + s[3] + cc) as usize;
                        let to = ((b * d[0] + d[2] + r) * d[1] + d[3] + cc) as usize;
                        let v = f64::from(srcs[from]);
                        want[to] = match op {
                            GatherOp::Copy => v,
                            GatherOp::GeluTanh => gelu_ref(v),
                        } as f32;
                    }
                }
            }
            let tag = format!("gather {op:?} case {i}");
            for (e, (gv, wv)) in got.iter().zip(&want).enumerate() {
                if wv.is_nan() {
                    assert!(
                        gv.is_nan(),
                        "{tag}: element {e} outside the block was written"
                    );
                } else {
                    let tol = if op == GatherOp::Copy { 0.0 } else { 1e-5 };
                    assert!(
                        (gv - wv).abs() <= tol,
                        "{tag}: element {e}: got {gv}, want {wv}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_operands_are_refused() {
    let Some(c) = ctx("bad_operands_are_refused") else {
        return;
    };
    let g = &c.gpu;
    let x = nan_tensor(g, &[6, 8]);
    let out = nan_tensor(g, &[6, 8]);
    let m = nan_tensor(g, &[2, 16]);
    let m_odd = nan_tensor(g, &[2, 12]);
    let expect_bad = |what: &str, r: Result<(), GpuError>| match r {
        Err(GpuError::BadOperands { detail, .. }) => eprintln!("{what}: {detail}"),
        other => panic!("{what}: expected BadOperands, got {other:?}"),
    };
    let mut enc = dynvram_gpu::ops::encoder::Encoder::new(&g.device, "bad");
    // 6 rows are not 2 batch elements of 4 rows.
    expect_bad(
        "per_batch",
        record_ada_norm(g, &c.cache, &mut enc, &x, &m, 4, [0, 1], &out, 1e-6),
    );
    // Chunk 2 of a 2-chunk modulation.
    expect_bad(
        "chunk",
        record_ada_norm(g, &c.cache, &mut enc, &x, &m, 3, [0, 2], &out, 1e-6),
    );
    // 12 modulation columns are not chunks of 8.
    expect_bad(
        "chunks",
        record_gated_add(g, &c.cache, &mut enc, &x, &out, &m_odd, 3, 0),
    );
    // In place is not out of place.
    let aliased = record_ada_norm(g, &c.cache, &mut enc, &x, &m, 3, [0, 1], &x, 1e-6);
    assert!(
        matches!(&aliased, Err(GpuError::Aliased { op: "ada_norm", name, .. }) if name == "x"),
        "{aliased:?}"
    );
    let w = nan_tensor(g, &[4]);
    let pe = nan_tensor(g, &[6, 2, 2]);
    let dst = nan_tensor(g, &[6, 8]);
    // The stream's 3 rows at row 1 overrun 3 joint rows per element.
    let joint = Joint {
        dst: &dst,
        per_batch: 3,
        row0: 1,
    };
    expect_bad(
        "qk rows",
        record_qk_place(g, &c.cache, &mut enc, &x, 3, 0, &w, &pe, 4, 1e-6, joint),
    );
    // An odd head_dim.
    let joint = Joint {
        dst: &dst,
        per_batch: 3,
        row0: 0,
    };
    expect_bad(
        "qk head_dim",
        record_qk_place(g, &c.cache, &mut enc, &x, 3, 0, &w, &pe, 3, 1e-6, joint),
    );
    // An odd width of src (pairs would straddle rows).
    let odd = nan_tensor(g, &[3, 9]);
    expect_bad(
        "qk odd src width",
        record_qk_place(g, &c.cache, &mut enc, &odd, 3, 0, &w, &pe, 4, 1e-6, joint),
    );
    // A head past the kernel's registers.
    let wide = nan_tensor(g, &[3, 2 * QK_MAX_HEAD_DIM + 4]);
    let wide_dst = nan_tensor(g, &[6, QK_MAX_HEAD_DIM + 2]);
    let wide_joint = Joint {
        dst: &wide_dst,
        per_batch: 3,
        row0: 0,
    };
    expect_bad(
        "qk head_dim too large",
        record_qk_place(
            g,
            &c.cache,
            &mut enc,
            &wide,
            3,
            0,
            &w,
            &pe,
            QK_MAX_HEAD_DIM + 2,
            1e-6,
            wide_joint,
        ),
    );
    // Columns past the source.
    let b = |t, col0| Block {
        t,
        per_batch: 3,
        row0: 0,
        col0,
    };
    expect_bad(
        "gather columns",
        record_gather(
            g,
            &c.cache,
            &mut enc,
            b(&x, 4),
            b(&out, 0),
            2,
            [3, 5],
            GatherOp::Copy,
        ),
    );
}

#[test]
fn timestep_embedding_is_cos_then_sin_of_1000t() {
    let t = [0.0f32, 0.7, 3.5];
    let e = timestep_embedding(&t, 256);
    assert_eq!(e.len(), 3 * 256);
    for (row, &ti) in e.chunks(256).zip(&t) {
        for i in 0..128 {
            let f = (-(10000f64.ln()) * i as f64 / 128.0).exp();
            let a = 1000.0 * f64::from(ti) * f;
            // f32 arguments of up to 3500 rad: a few ulp of the angle.
            let tol = 1e-6 + 3e-7 * a.abs();
            assert!((f64::from(row[i]) - a.cos()).abs() <= tol, "cos {ti} {i}");
            assert!(
                (f64::from(row[128 + i]) - a.sin()).abs() <= tol,
                "sin {ti} {i}"
            );
        }
    }
    assert_eq!(&e[..2], &[1.0, 1.0]);
    assert_eq!(e[128], 0.0);
}

#[test]
fn rope_table_follows_the_axes() {
    // Two rows of ids (0, 2, 5) and (1, 0, 3); axes 4 + 6 + 2.
    let ids = [0.0f32, 2.0, 5.0, 1.0, 0.0, 3.0];
    let axes = [4usize, 6, 2];
    let t = rope_table(&ids, &axes, 10000.0);
    assert_eq!(t.len(), 2 * 6 * 2);
    for (r, row) in t.chunks(12).enumerate() {
        let mut p = 0;
        for (a, &d) in axes.iter().enumerate() {
            for j in 0..d / 2 {
                let omega = 1.0 / 10000f64.powf(2.0 * j as f64 / d as f64);
                let angle = f64::from(ids[r * 3 + a]) * omega;
                assert_eq!(row[2 * p], angle.cos() as f32, "row {r} axis {a} pair {j}");
                assert_eq!(
                    row[2 * p + 1],
                    angle.sin() as f32,
                    "row {r} axis {a} pair {j}"
                );
                p += 1;
            }
        }
    }
}
