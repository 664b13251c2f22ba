//! The VAE's image kernels against f64 CPU references on random inputs:
//! convolution (3×3, 1×1, nearest ×2 upsampling, the encoder's stride 2 with
//! pad (0, 1, 0, 1), a residual; weights f32, f16 and bf16; odd sizes, 1×1
//! images, channel counts off the 64-wide tiles), GroupNorm with 1, 2 and 3
//! channels per group and groups spread over several chunks (with and
//! without SiLU), and single-head spatial attention up to 512 channels.

use crate::ops_common::{ctx, nan_tensor, read, run, stored_as, upload, upload_bytes};
use dynvram_gpu::ops::conv::{ConvWeight, Geometry, record_conv2d};
use dynvram_gpu::ops::embed::TableDtype;
use dynvram_gpu::ops::group_norm::{record_group_norm, scratch_len};
use dynvram_gpu::ops::spatial_attention::record_spatial_attention;
use dynvram_test_support::random::nonzero;
use dynvram_test_support::tolerance::{assert_close, max_abs};

/// One convolution case: `[b, cin, h, w]` in, `cout` channels of a `k×k` kernel.
struct ConvCase {
    b: usize,
    cin: usize,
    h: usize,
    w: usize,
    cout: usize,
    k: usize,
    geom: Geometry,
    res: bool,
}

/// `conv(x, w) + bias (+ res)` in f64, as `record_conv2d` defines it.
fn conv_ref(c: &ConvCase, x: &[f32], wt: &[f32], bias: &[f32], res: Option<&[f32]>) -> Vec<f32> {
    let (ho, wo) = c.geom.out_size(c.h as u64, c.w as u64, c.k as u64).unwrap();
    let (ho, wo) = (ho as usize, wo as usize);
    let g = c.geom;
    let (up, st) = (g.up as usize, g.stride as usize);
    let (top, left) = (g.pad[0] as usize, g.pad[2] as usize);
    let mut out = vec![0f32; c.b * c.cout * ho * wo];
    for b in 0..c.b {
        for o in 0..c.cout {
            for y in 0..ho {
                for xo in 0..wo {
                    let mut s = f64::from(bias[o]);
                    for i in 0..c.cin {
                        for ky in 0..c.k {
                            for kx in 0..c.k {
                                let (iy, ix) = (y * st + ky, xo * st + kx);
                                if iy < top || ix < left {
                                    continue;
                                }
                                let (iy, ix) = (iy - top, ix - left);
                                if iy >= c.h * up || ix >= c.w * up {
                                    continue;
                                }
                                let xv = x[((b * c.cin + i) * c.h + iy / up) * c.w + ix / up];
                                let wv = wt[((o * c.cin + i) * c.k + ky) * c.k + kx];
                                s += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    let idx = ((b * c.cout + o) * ho + y) * wo + xo;
                    if let Some(r) = res {
                        s += f64::from(r[idx]);
                    }
                    out[idx] = s as f32;
                }
            }
        }
    }
    out
}

#[test]
fn conv2d_matches_reference() {
    let Some(c) = ctx("conv2d_matches_reference") else {
        return;
    };
    let g = &c.gpu;
    let same = Geometry::same;
    let up2 = Geometry {
        up: 2,
        ..Geometry::same(1)
    };
    let down = Geometry {
        up: 1,
        stride: 2,
        pad: [0, 1, 0, 1],
    };
    #[rustfmt::skip]
    let cases = [
        ConvCase { b: 1, cin: 3, h: 5, w: 7, cout: 5, k: 3, geom: same(1), res: false },
        ConvCase { b: 2, cin: 17, h: 1, w: 1, cout: 70, k: 3, geom: same(1), res: true },
        ConvCase { b: 1, cin: 16, h: 9, w: 6, cout: 33, k: 1, geom: same(0), res: true },
        ConvCase { b: 2, cin: 5, h: 3, w: 4, cout: 7, k: 3, geom: up2, res: false },
        ConvCase { b: 1, cin: 6, h: 7, w: 9, cout: 10, k: 3, geom: down, res: false },
        ConvCase { b: 1, cin: 6, h: 8, w: 6, cout: 3, k: 3, geom: down, res: false },
        ConvCase { b: 1, cin: 40, h: 13, w: 11, cout: 129, k: 3, geom: same(1), res: true },
    ];
    for (n, case) in cases.iter().enumerate() {
        let seed = n as u64 * 10;
        let (ho, wo) = case
            .geom
            .out_size(case.h as u64, case.w as u64, case.k as u64)
            .unwrap();
        let x_shape = [case.b, case.cin, case.h, case.w].map(|d| d as u64);
        let out_shape = [case.b as u64, case.cout as u64, ho, wo];
        let x = nonzero(seed + 1, x_shape.iter().product::<u64>() as usize, 2.0);
        let wv = nonzero(seed + 2, case.cout * case.cin * case.k * case.k, 0.5);
        let bias = nonzero(seed + 3, case.cout, 1.0);
        let res = nonzero(seed + 4, out_shape.iter().product::<u64>() as usize, 1.0);
        let (xt, bt, rt) = (
            upload(g, &x_shape, &x),
            upload(g, &[case.cout as u64], &bias),
            upload(g, &out_shape, &res),
        );
        for dtype in [TableDtype::F32, TableDtype::F16, TableDtype::Bf16] {
            let (stored, bytes) = stored_as(&wv, dtype);
            let wbuf = upload_bytes(g, "weight", &bytes);
            let weight = ConvWeight {
                buffer: &wbuf,
                offset: 0,
                dtype,
                cout: case.cout as u64,
                cin: case.cin as u64,
                ksize: case.k as u64,
            };
            let out = nan_tensor(g, &out_shape);
            let r = case.res.then_some(&rt);
            run(&c, |enc| {
                record_conv2d(g, &c.cache, enc, &xt, &weight, &bt, r, &out, case.geom)
            });
            let want = conv_ref(case, &x, &stored, &bias, case.res.then_some(&res[..]));
            let tag = format!("conv case {n} {dtype:?}");
            assert_close(&tag, &read(g, &out), &want, 1e-4 * max_abs(&want), 1e-5);
        }
    }
}

/// GroupNorm (+ SiLU) in f64.
#[allow(clippy::too_many_arguments)] // the op's operands
fn group_norm_ref(
    x: &[f32],
    c: usize,
    hw: usize,
    groups: usize,
    w: &[f32],
    bias: &[f32],
    eps: f64,
    silu: bool,
) -> Vec<f32> {
    let len = c / groups * hw;
    x.chunks(len)
        .enumerate()
        .flat_map(|(bg, grp)| {
            let n = grp.len() as f64;
            let mean = grp.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let var = grp
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / n;
            let r = 1.0 / (var + eps).sqrt();
            let first = (bg % groups) * (c / groups);
            grp.iter().enumerate().map(move |(i, &v)| {
                let ch = first + i / hw;
                let y = (f64::from(v) - mean) * r * f64::from(w[ch]) + f64::from(bias[ch]);
                (if silu { y / (1.0 + (-y).exp()) } else { y }) as f32
            })
        })
        .collect()
}

#[test]
fn group_norm_matches_reference() {
    let Some(c) = ctx("group_norm_matches_reference") else {
        return;
    };
    let g = &c.gpu;
    // (batch, channels, h, w, groups): one channel per group (the fixture),
    // two and three (the real VAE's 128..512 channels), a group of several
    // chunks, 1x1 images.
    let cases = [
        (2usize, 32usize, 5usize, 3usize, 32usize),
        (1, 64, 7, 9, 32),
        (2, 96, 3, 5, 32),
        (1, 64, 70, 61, 32),
        (3, 96, 1, 1, 32),
        (1, 6, 11, 1, 3),
    ];
    for (n, &(b, ch, h, w, groups)) in cases.iter().enumerate() {
        let shape = [b, ch, h, w].map(|d| d as u64);
        let numel = b * ch * h * w;
        // An offset, so a one-pass sum of squares would cancel.
        let x: Vec<f32> = nonzero(n as u64, numel, 2.0)
            .iter()
            .map(|v| v + 5.0)
            .collect();
        let wv = nonzero(n as u64 + 7, ch, 1.5);
        let bv = nonzero(n as u64 + 9, ch, 0.5);
        let (xt, wt, bt) = (
            upload(g, &shape, &x),
            upload(g, &[ch as u64], &wv),
            upload(g, &[ch as u64], &bv),
        );
        let need = scratch_len(b as u64, ch as u64, (h * w) as u64, groups as u64);
        let scratch = nan_tensor(g, &[need]);
        for silu in [false, true] {
            let out = nan_tensor(g, &shape);
            run(&c, |enc| {
                record_group_norm(
                    g,
                    &c.cache,
                    enc,
                    &xt,
                    &wt,
                    &bt,
                    &scratch,
                    &out,
                    groups as u64,
                    1e-6,
                    silu,
                )
            });
            let want = group_norm_ref(&x, ch, h * w, groups, &wv, &bv, 1e-6, silu);
            let tag = format!("group norm {:?} in {groups} groups, silu {silu}", shape);
            assert_close(&tag, &read(g, &out), &want, 1e-5 * max_abs(&want), 1e-5);
        }
    }
}

/// Single-head attention over positions, in f64.
fn attention_ref(q: &[f32], k: &[f32], v: &[f32], b: usize, c: usize, n: usize) -> Vec<f32> {
    let scale = 1.0 / (c as f64).sqrt();
    let mut out = vec![0f32; b * c * n];
    for bi in 0..b {
        let at = |t: &[f32], ch: usize, p: usize| f64::from(t[(bi * c + ch) * n + p]);
        for i in 0..n {
            let s: Vec<f64> = (0..n)
                .map(|j| (0..c).map(|ch| at(q, ch, i) * at(k, ch, j)).sum::<f64>() * scale)
                .collect();
            let m = s.iter().copied().fold(f64::MIN, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = e.iter().sum();
            for ch in 0..c {
                let o: f64 = (0..n).map(|j| e[j] * at(v, ch, j)).sum::<f64>() / l;
                out[(bi * c + ch) * n + i] = o as f32;
            }
        }
    }
    out
}

#[test]
fn spatial_attention_matches_reference() {
    let Some(c) = ctx("spatial_attention_matches_reference") else {
        return;
    };
    let g = &c.gpu;
    // (batch, channels, h, w): positions off the 4-query and 128-key tiles,
    // several key blocks (the online softmax), one position, the real VAE's
    // 512 channels.
    let cases = [
        (1usize, 32usize, 3usize, 5usize),
        (1, 8, 17, 19),
        (2, 40, 12, 12),
        (2, 17, 1, 1),
        (1, 64, 13, 11),
        (2, 300, 4, 5),
        (1, 512, 3, 3),
    ];
    for (n, &(b, ch, h, w)) in cases.iter().enumerate() {
        let shape = [b, ch, h, w].map(|d| d as u64);
        let numel = b * ch * h * w;
        let seed = 100 + n as u64 * 3;
        let (q, k, v) = (
            nonzero(seed, numel, 2.0),
            nonzero(seed + 1, numel, 2.0),
            nonzero(seed + 2, numel, 1.0),
        );
        let (qt, kt, vt) = (
            upload(g, &shape, &q),
            upload(g, &shape, &k),
            upload(g, &shape, &v),
        );
        let out = nan_tensor(g, &shape);
        run(&c, |enc| {
            record_spatial_attention(g, &c.cache, enc, &qt, &kt, &vt, &out)
        });
        let want = attention_ref(&q, &k, &v, b, ch, h * w);
        let tag = format!("attention {shape:?}");
        assert_close(&tag, &read(g, &out), &want, 1e-5 * max_abs(&want), 1e-5);
    }
}

/// The three kernels with f16 activations (sums in f32) against their f32
/// runs: the stored-f16 rounding of inputs and outputs only.
#[test]
fn vae_ops_in_f16_match_f32() {
    let Some(c) = crate::ops_common::ctx_with(
        "vae_ops_in_f16_match_f32",
        dynvram_test_support::gpu::needs_f16,
    ) else {
        return;
    };
    use crate::ops_common::{up, zeros};
    use dynvram_gpu::ActDtype;
    let g = &c.gpu;
    let (b, ch, h, w) = (2u64, 64u64, 9u64, 7u64);
    let shape = [b, ch, h, w];
    let n = (b * ch * h * w) as usize;
    let x = nonzero(1, n, 2.0);
    let wv = nonzero(2, (ch * ch * 9) as usize, 0.1);
    let (gw, gb) = (nonzero(3, ch as usize, 1.0), nonzero(4, ch as usize, 0.5));
    let bias = upload(g, &[ch], &nonzero(5, ch as usize, 0.5));
    let (gwt, gbt) = (upload(g, &[ch], &gw), upload(g, &[ch], &gb));
    let wbuf = upload_bytes(g, "weight", bytemuck::cast_slice(&wv));
    let weight = ConvWeight {
        buffer: &wbuf,
        offset: 0,
        dtype: TableDtype::F32,
        cout: ch,
        cin: ch,
        ksize: 3,
    };
    let scratch = nan_tensor(g, &[scratch_len(b, ch, h * w, 32)]);
    let mut results = Vec::new();
    for dtype in [ActDtype::F32, ActDtype::F16] {
        let xt = up(&c, &x, &shape, dtype);
        let (n1, c1, att) = (
            zeros(&c, &shape, dtype),
            zeros(&c, &shape, dtype),
            zeros(&c, &shape, dtype),
        );
        run(&c, |enc| {
            record_group_norm(
                g, &c.cache, enc, &xt, &gwt, &gbt, &scratch, &n1, 32, 1e-6, true,
            )?;
            record_conv2d(
                g,
                &c.cache,
                enc,
                &n1,
                &weight,
                &bias,
                Some(&xt),
                &c1,
                Geometry::same(1),
            )?;
            record_spatial_attention(g, &c.cache, enc, &c1, &n1, &xt, &att)
        });
        results.push([read(g, &n1), read(g, &c1), read(g, &att)]);
    }
    for (i, name) in ["group_norm", "conv2d", "spatial_attention"]
        .iter()
        .enumerate()
    {
        let (f32s, f16s) = (&results[0][i], &results[1][i]);
        let scale = max_abs(f32s);
        assert_close(
            &format!("{name} f16 vs f32"),
            f16s,
            f32s,
            1e-2 * scale,
            1e-2,
        );
    }
}

/// Operands that do not fit the op are typed errors naming them.
#[test]
fn vae_ops_reject_bad_operands() {
    let Some(c) = ctx("vae_ops_reject_bad_operands") else {
        return;
    };
    let g = &c.gpu;
    let x = upload(g, &[1, 6, 4, 4], &nonzero(1, 96, 1.0));
    let bias = upload(g, &[8], &[0.5; 8]);
    let wbuf = upload_bytes(g, "weight", &[0u8; 8 * 6 * 9 * 4]);
    let weight = |cin| ConvWeight {
        buffer: &wbuf,
        offset: 0,
        dtype: TableDtype::F32,
        cout: 8,
        cin,
        ksize: 3,
    };
    let err = |f: &dyn Fn(
        &mut dynvram_gpu::ops::encoder::Encoder,
    ) -> Result<(), dynvram_gpu::GpuError>| {
        let mut enc = dynvram_gpu::ops::encoder::Encoder::new(&g.device, "bad");
        f(&mut enc).expect_err("bad operands recorded")
    };
    let out = nan_tensor(g, &[1, 8, 4, 4]);
    let e = err(&|enc| {
        record_conv2d(
            g,
            &c.cache,
            enc,
            &x,
            &weight(5),
            &bias,
            None,
            &out,
            Geometry::same(1),
        )
    });
    let e = e.to_string();
    assert!(e.contains("6 channels") && e.contains("takes 5"), "{e}");
    let small = nan_tensor(g, &[1, 8, 3, 4]);
    let e = err(&|enc| {
        record_conv2d(
            g,
            &c.cache,
            enc,
            &x,
            &weight(6),
            &bias,
            None,
            &small,
            Geometry::same(1),
        )
    });
    assert!(
        matches!(
            &e,
            dynvram_gpu::GpuError::ShapeMismatch { op: "conv2d", name, shape, expected }
                if name == "out" && shape == &[1, 8, 3, 4] && expected == &[1, 8, 4, 4]
        ),
        "{e}"
    );
    let stats = nan_tensor(g, &[4]);
    let e = err(&|enc| {
        record_group_norm(
            g, &c.cache, enc, &x, &bias, &bias, &stats, &out, 4, 1e-6, false,
        )
    });
    let e = e.to_string();
    assert!(e.contains("6 channels do not split into 4 groups"), "{e}");
    let wide = upload(g, &[1, 513, 1, 1], &[1.0; 513]);
    let wide_out = nan_tensor(g, &[1, 513, 1, 1]);
    let e = err(&|enc| record_spatial_attention(g, &c.cache, enc, &wide, &wide, &wide, &wide_out));
    let e = e.to_string();
    assert!(e.contains("513 channels exceed"), "{e}");
}
