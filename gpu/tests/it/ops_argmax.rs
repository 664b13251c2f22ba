//! The GPU argmax against the CPU one greedy decoding uses
//! (`ops::argmax::argmax`) on seeded rows with ties, NaN, ±inf, −0 and
//! subnormals, at awkward lengths (1 to a 151 936-token vocabulary), in f32
//! and f16; and its token read back through a `ReadbackRing` a submit
//! behind.

use crate::ops_common::{Ctx, ctx, read, run, up, upload};
use dynvram_gpu::device::ReadbackRing;
use dynvram_gpu::ops::argmax::{argmax, record_argmax};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::{ActDtype, GpuTensor};
use dynvram_test_support::random::{rng, uniform};
use rand::Rng;

const LENGTHS: [usize; 7] = [1, 2, 31, 257, 1000, 32000, 151_936];

/// Rows of length `n` that stress the rule: first index on ties, NaN never
/// wins, all-NaN gives the last index.
fn rows(n: usize, seed: u64) -> Vec<(&'static str, Vec<f32>)> {
    let mut r = rng(seed);
    let mut out = vec![("uniform", uniform(&mut r, n, 30.0))];
    // Few distinct values: the maximum repeats, in many lanes.
    out.push((
        "ties",
        (0..n).map(|_| r.random_range(0..6) as f32 - 3.0).collect(),
    ));
    let mut nan = uniform(&mut r, n, 5.0);
    for v in nan.iter_mut() {
        if r.random_bool(0.2) {
            *v = f32::NAN;
        }
    }
    nan[0] = f32::NAN;
    out.push(("sprinkled NaN", nan));
    out.push(("all NaN", vec![f32::NAN; n]));
    let mut prefix = vec![f32::NAN; n];
    for (i, v) in prefix.iter_mut().enumerate().skip(n / 2) {
        *v = -((i % 7) as f32);
    }
    out.push(("NaN prefix", prefix));
    out.push(("all -inf", vec![f32::NEG_INFINITY; n]));
    let mut inf = vec![f32::NEG_INFINITY; n];
    for v in inf.iter_mut() {
        if r.random_bool(0.3) {
            *v = f32::NAN;
        }
    }
    out.push(("-inf and NaN", inf));
    let mut pinf = uniform(&mut r, n, 1e30);
    pinf[n - 1] = f32::INFINITY;
    pinf[n / 2] = f32::INFINITY;
    out.push(("two +inf", pinf));
    let mut zeros = vec![0.0f32; n];
    zeros[0] = -0.0;
    out.push(("-0 before +0", zeros.clone()));
    zeros[n - 1] = f32::from_bits(1); // the smallest subnormal
    out.push(("one subnormal", zeros.clone()));
    zeros[n / 3] = 6e-8; // an f16 subnormal too
    out.push(("subnormals", zeros));
    let mut neg = uniform(&mut r, n, 1.0);
    for v in neg.iter_mut() {
        *v = -v.abs() - 1.0;
    }
    out.push(("all negative", neg));
    out
}

/// A 4-byte tensor for the id, filled with a value no argmax gives.
fn id_tensor(c: &Ctx) -> GpuTensor {
    upload(&c.gpu, &[1], &[f32::from_bits(u32::MAX)])
}

fn gpu_argmax(c: &Ctx, logits: &GpuTensor, row: u64) -> u32 {
    let out = id_tensor(c);
    run(c, |enc| {
        record_argmax(&c.gpu, &c.cache, enc, logits, row, &out)
    });
    read(&c.gpu, &out)[0].to_bits()
}

/// `v` as the GPU holds it in `dtype`, widened back to f32.
fn stored(c: &Ctx, v: &[f32], dtype: ActDtype) -> (GpuTensor, Vec<f32>) {
    let t = up(c, v, &[1, v.len() as u64], dtype);
    let back = read(&c.gpu, &t);
    (t, back)
}

#[test]
fn gpu_argmax_matches_the_cpu_argmax() {
    let Some(c) = ctx("gpu_argmax_matches_the_cpu_argmax") else {
        return;
    };
    let mut dtypes = vec![ActDtype::F32];
    if c.gpu.caps.shader_f16 {
        dtypes.push(ActDtype::F16);
    } else {
        eprintln!("gpu_argmax_matches_the_cpu_argmax: no SHADER_F16, f32 only");
    }
    let mut checked = 0;
    for dtype in dtypes {
        for (k, &n) in LENGTHS.iter().enumerate() {
            for (what, row) in rows(n, 17 + k as u64) {
                let (logits, values) = stored(&c, &row, dtype);
                let want = argmax(&values);
                let got = gpu_argmax(&c, &logits, 0);
                assert_eq!(got, want, "{dtype:?}, n = {n}, {what}");
                checked += 1;
            }
        }
    }
    eprintln!("{checked} rows agree");
}

#[test]
fn gpu_argmax_takes_the_asked_row() {
    let Some(c) = ctx("gpu_argmax_takes_the_asked_row") else {
        return;
    };
    let n = 1001;
    let values = uniform(&mut rng(3), 3 * n, 10.0);
    let logits = up(&c, &values, &[3, n as u64], ActDtype::F32);
    for row in 0..3 {
        let want = argmax(&values[row * n..(row + 1) * n]);
        assert_eq!(gpu_argmax(&c, &logits, row as u64), want, "row {row}");
    }
    let out = id_tensor(&c);
    let mut enc = Encoder::new(&c.gpu.device, "test");
    let e = record_argmax(&c.gpu, &c.cache, &mut enc, &logits, 3, &out).expect_err("row 3 of 3");
    eprintln!("{e}");
}

/// Two tokens in flight: each read waits for its own submit only, and
/// a ring with no free slot says so.
#[test]
fn tokens_come_back_through_the_readback_ring() {
    let Some(c) = ctx("tokens_come_back_through_the_readback_ring") else {
        return;
    };
    let g = &c.gpu;
    let n = 32000;
    let mut ring = ReadbackRing::new(g, 2, 1).expect("ring");
    let rows: Vec<Vec<f32>> = (0..3).map(|s| uniform(&mut rng(40 + s), n, 8.0)).collect();
    let out = id_tensor(&c);
    let submit = |ring: &mut ReadbackRing, row: &[f32]| {
        let logits = up(&c, row, &[1, n as u64], ActDtype::F32);
        let mut enc = Encoder::new(&g.device, "step");
        record_argmax(g, &c.cache, &mut enc, &logits, 0, &out).expect("record");
        let mut commands = enc.into_inner();
        let slot = ring.record(&mut commands, &out.buffer, out.offset);
        let slot = slot.expect("a free slot");
        let index = g.queue.submit([commands.finish()]);
        ring.submitted(slot, index);
        slot
    };
    let a = submit(&mut ring, &rows[0]);
    let b = submit(&mut ring, &rows[1]);
    let mut enc = Encoder::new(&g.device, "full");
    let full = ring.record(enc.commands(), &out.buffer, out.offset);
    assert!(full.is_err(), "both slots are in flight");
    assert_eq!(ring.read(g, a).expect("read a"), [argmax(&rows[0])]);
    let c2 = submit(&mut ring, &rows[2]);
    assert_eq!(ring.read(g, b).expect("read b"), [argmax(&rows[1])]);
    assert_eq!(ring.read(g, c2).expect("read c"), [argmax(&rows[2])]);
    assert!(ring.read(g, a).is_err(), "a slot is read once");
}
