//! Elementwise ops against a CPU reference over awkward sizes (1, primes,
//! not multiples of the 256-wide workgroup), plus operand checks.

use crate::ops_common::{ctx, nan_tensor, read, run, upload};
use dynvram_gpu::GpuError;
use dynvram_gpu::ops::elementwise::{
    Binary, Unary, record_add_inplace, record_binary, record_binary_inplace, record_swiglu,
    record_unary, record_unary_inplace,
};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_test_support::random::nonzero;
use dynvram_test_support::tolerance::assert_close;

const SHAPES: &[&[u64]] = &[&[1], &[19, 33], &[7, 1000], &[3, 257]];

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn gelu_tanh(h: f64) -> f64 {
    0.5 * h * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (h + 0.044715 * h * h * h)).tanh())
}

fn unary_ref(op: Unary, x: f32) -> f32 {
    let h = f64::from(x);
    (match op {
        Unary::GeluTanh => gelu_tanh(h),
        Unary::Silu => silu(h),
        Unary::Scale(s) => h * f64::from(s),
        Unary::QuickGelu => h / (1.0 + (-1.702 * h).exp()),
    }) as f32
}

fn binary_ref(op: Binary, a: f32, b: f32) -> f32 {
    let (a, b) = (f64::from(a), f64::from(b));
    (match op {
        Binary::Add => a + b,
        Binary::SwiGlu => silu(a) * b,
        Binary::Mul => a * b,
        Binary::GeGlu => gelu_tanh(a) * b,
    }) as f32
}

#[test]
fn elementwise_ops_match_cpu() {
    let Some(c) = ctx("elementwise_ops_match_cpu") else {
        return;
    };
    let g = &c.gpu;
    for (si, &shape) in SHAPES.iter().enumerate() {
        let n = shape.iter().product::<u64>() as usize;
        // range 6 exercises the tails of tanh and exp
        let a = nonzero(10 + si as u64, n, 6.0);
        let b = nonzero(100 + si as u64, n, 3.0);
        for op in [
            Unary::GeluTanh,
            Unary::Silu,
            Unary::Scale(-0.37),
            Unary::QuickGelu,
        ] {
            let want: Vec<f32> = a.iter().map(|&x| unary_ref(op, x)).collect();
            let x = upload(g, shape, &a);
            let out = nan_tensor(g, shape);
            run(&c, |enc| record_unary(g, &c.cache, enc, op, &x, &out));
            assert_close(
                &format!("{op:?} {shape:?}"),
                &read(g, &out),
                &want,
                1e-6,
                1e-6,
            );
            run(&c, |enc| record_unary_inplace(g, &c.cache, enc, op, &x));
            assert_close(
                &format!("{op:?} in place {shape:?}"),
                &read(g, &x),
                &want,
                1e-6,
                1e-6,
            );
        }
        for op in [Binary::Add, Binary::SwiGlu, Binary::Mul, Binary::GeGlu] {
            let want: Vec<f32> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| binary_ref(op, x, y))
                .collect();
            let x = upload(g, shape, &a);
            let y = upload(g, shape, &b);
            let out = nan_tensor(g, shape);
            run(&c, |enc| record_binary(g, &c.cache, enc, op, &x, &y, &out));
            assert_close(
                &format!("{op:?} {shape:?}"),
                &read(g, &out),
                &want,
                1e-6,
                1e-6,
            );
            run(&c, |enc| {
                record_binary_inplace(g, &c.cache, enc, op, &x, &y)
            });
            assert_close(
                &format!("{op:?} in place {shape:?}"),
                &read(g, &x),
                &want,
                1e-6,
                1e-6,
            );
        }
        // the named helpers are the same kernels
        let x = upload(g, shape, &a);
        let y = upload(g, shape, &b);
        let out = nan_tensor(g, shape);
        run(&c, |enc| {
            record_swiglu(g, &c.cache, enc, &x, &y, &out)?;
            record_add_inplace(g, &c.cache, enc, &x, &y)
        });
        let swiglu: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(&p, &q)| binary_ref(Binary::SwiGlu, p, q))
            .collect();
        let sum: Vec<f32> = a.iter().zip(&b).map(|(&p, &q)| p + q).collect();
        assert_close("record_swiglu", &read(g, &out), &swiglu, 1e-6, 1e-6);
        assert_close("record_add_inplace", &read(g, &x), &sum, 0.0, 0.0);
    }
}

/// GELU's tails: past e^x's f32 range (|x| > ~10 for the tanh argument)
/// the kernel's exp overflows or underflows, and the result must still be
/// x or zero, never NaN.
#[test]
fn gelu_tails_stay_finite() {
    let Some(c) = ctx("gelu_tails_stay_finite") else {
        return;
    };
    let g = &c.gpu;
    let a: Vec<f32> = [1e30, 1e4, 100.0, 20.0, 10.5, 10.0, 9.0, 5.0, 0.25, 0.0]
        .iter()
        .flat_map(|&v| [v, -v])
        .collect();
    let want: Vec<f32> = a.iter().map(|&x| unary_ref(Unary::GeluTanh, x)).collect();
    let x = upload(g, &[a.len() as u64], &a);
    let out = nan_tensor(g, &[a.len() as u64]);
    run(&c, |enc| {
        record_unary(g, &c.cache, enc, Unary::GeluTanh, &x, &out)
    });
    assert_close("gelu tails", &read(g, &out), &want, 1e-6, 1e-6);
}

#[test]
fn elementwise_rejects_bad_operands() {
    let Some(c) = ctx("elementwise_rejects_bad_operands") else {
        return;
    };
    let g = &c.gpu;
    let mut enc = Encoder::new(&g.device, "test");
    let a = upload(g, &[2, 3], &[1.0; 6]);
    let b = upload(g, &[3, 2], &[1.0; 6]);
    let out = nan_tensor(g, &[2, 3]);
    let err = record_binary(g, &c.cache, &mut enc, Binary::Add, &a, &b, &out)
        .expect_err("shape mismatch");
    assert!(
        matches!(
            &err,
            GpuError::ShapeMismatch { op: "add", shape, expected, .. }
                if shape == &[3, 2] && expected == &[2, 3]
        ),
        "{err}"
    );
    let err = record_unary(g, &c.cache, &mut enc, Unary::Silu, &a, &a).expect_err("aliasing");
    assert!(
        matches!(&err, GpuError::Aliased { op: "silu", .. }),
        "{err}"
    );
    let empty = upload(g, &[0], &[]);
    assert!(record_unary_inplace(g, &c.cache, &mut enc, Unary::Silu, &empty).is_err());
}
