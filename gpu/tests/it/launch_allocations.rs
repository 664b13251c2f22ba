//! The launch path allocates nothing once its pipelines and bind groups
//! exist: a decode step's ~300 launches are recorded every token, and
//! per-launch `String` keys and `Vec`s cost ~half of the recording's CPU
//! time (issue 15 item 2). Counted with this binary's global allocator,
//! on this thread, while a warm sequence of decode-sized launches (norm,
//! int4 linear with its rotation/quantization, f16/f32 linear, residual
//! add, decode attention) and prefill-sized ones (the two linears as
//! GEMMs, cooperative where the adapter has them, and prefill attention,
//! flash there) is recorded again into an open pass. The binary's
//! global allocator ([`dynvram_test_support::allocations::Counting`]) is
//! installed in `main.rs`.

use crate::linear_common::{HostLayer, env_with};
use dynvram_gpu::device::AdapterChoice;
use dynvram_gpu::ops::attention::{Heads, record_attention};
use dynvram_gpu::ops::elementwise::record_add_inplace;
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::{LinearWeights, record_linear};
use dynvram_gpu::ops::norm::record_rms_norm;
use dynvram_gpu::{ActDtype, GpuTensor};
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::allocations::count as allocations;
use dynvram_test_support::gpu::any_adapter;
use dynvram_test_support::random::{rng, uniform};

#[test]
fn warm_launches_allocate_nothing() {
    let Some(mut env) = env_with(
        "warm_launches_allocate_nothing",
        &AdapterChoice::default(),
        any_adapter,
    ) else {
        return;
    };
    let g = &env.gpu;
    let act = if g.caps.shader_f16 {
        ActDtype::F16
    } else {
        ActDtype::F32
    };
    let (k, n) = (256usize, 512usize);
    let mut rng = rng(7);
    let int4 = Format::ConvrotW4a4 {
        group: 16,
        linear_dtype: LinearDtype::Int4,
    };
    let layers = [(int4, n, k), (Format::Bf16, k, n)].map(|(format, n, k)| {
        let h = HostLayer::random(&mut rng, format, n, k, false);
        LinearWeights::upload(g, &h.meta, h.bytes()).expect("upload")
    });
    let mut tensor = |name: &str, rows: usize, len: usize| {
        let v = uniform(&mut rng, rows * len, 1.0);
        host::upload(g, name, &v, vec![rows as u64, len as u64], act).expect("upload")
    };
    let (xs, h, out) = (tensor("xs", 1, k), tensor("h", 1, k), tensor("out", 1, k));
    let (mid, att) = (tensor("mid", 1, n), tensor("att", 1, n));
    // A prefill's GEMMs and attention (flash on cooperative matrices).
    const ROWS: usize = 64;
    let (hp, outp) = (tensor("hp", ROWS, k), tensor("outp", ROWS, k));
    let (midp, attp) = (tensor("midp", ROWS, n), tensor("attp", ROWS, n));
    let nw = host::upload(
        g,
        "nw",
        &uniform(&mut rng, k, 1.0),
        vec![k as u64],
        ActDtype::F32,
    )
    .expect("upload");
    let heads = Heads {
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 64,
    };
    let mut kv = |name: &str| -> GpuTensor {
        let v = uniform(&mut rng, ROWS * 128, 1.0);
        host::upload(g, name, &v, vec![ROWS as u64, 128], act).expect("upload")
    };
    let (kc, vc) = (kv("k"), kv("v"));
    let int = KernelChoice::Integer {
        act: ActArith::Int4,
        fast: false,
    };
    let mut enc = Encoder::new(&g.device, "allocations");
    // One step of decode-sized launches, or (`prefill`) of prefill-sized.
    let mut step = |enc: &mut Encoder, prefill: bool| {
        if prefill {
            for (layer, choice, x, y) in
                [(0, int, &hp, &midp), (1, KernelChoice::Float, &midp, &outp)]
            {
                record_linear(
                    g,
                    &env.cache,
                    enc,
                    &layers[layer],
                    choice,
                    x,
                    y,
                    &mut env.scratch,
                )
                .expect("prefill linear");
            }
            record_attention(
                g,
                &env.cache,
                enc,
                &midp,
                &kc,
                &vc,
                &attp,
                heads,
                ROWS as u64,
                0,
                None,
                &mut env.scratch,
            )
            .expect("prefill attention");
            return;
        }
        record_rms_norm(g, &env.cache, enc, &xs, &nw, &h, 1e-5).expect("norm");
        record_linear(
            g,
            &env.cache,
            enc,
            &layers[0],
            int,
            &h,
            &mid,
            &mut env.scratch,
        )
        .expect("int4 linear");
        record_linear(
            g,
            &env.cache,
            enc,
            &layers[1],
            KernelChoice::Float,
            &mid,
            &out,
            &mut env.scratch,
        )
        .expect("bf16 linear");
        record_add_inplace(g, &env.cache, enc, &xs, &out).expect("add");
        record_attention(
            g,
            &env.cache,
            enc,
            &mid,
            &kc,
            &vc,
            &att,
            heads,
            32,
            31,
            None,
            &mut env.scratch,
        )
        .expect("attention");
    };
    // Cold: pipelines, bind groups and scratch are made; the pass's
    // command lists grow.
    for _ in 0..4 {
        step(&mut enc, false);
        step(&mut enc, true);
    }
    const STEPS: u64 = 32;
    let mut count = |prefill: bool| {
        let before = allocations();
        for _ in 0..STEPS {
            step(&mut enc, prefill);
        }
        allocations() - before
    };
    let warm = count(false);
    // wgpu's command lists double as they grow (about ten allocations
    // over these ~220 launches); per-launch keys and binding lists made
    // 1,162 before the launch path took `Program`s.
    println!("decode: {warm} allocations in {STEPS} warm steps of ~7 launches");
    assert!(
        warm < STEPS,
        "{warm} allocations recording {STEPS} warm decode steps: the launch path allocates"
    );
    // Prefill-sized launches as well: no path not taken formats why.
    let warm = count(true);
    println!("prefill: {warm} allocations in {STEPS} warm steps of 3 launches");
    assert!(
        warm < STEPS,
        "{warm} allocations recording {STEPS} warm prefill steps: the launch path allocates"
    );
    g.queue.submit([enc.finish()]);
}
