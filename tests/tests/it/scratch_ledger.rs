//! The integer linears' scratch (rotated input, activation codes, scales)
//! is VRAM like any other: a runtime's ledger counts it as `scratch`.

use std::collections::HashMap;

use dynvram_quant::LinearDtype;
use dynvram_quant::quantize::{QuantizeOptions, TargetFormat, quantize_file};
use dynvram_runtime::{BlockSpec, Model, ModelSpec, Runtime, RuntimeConfig};
use dynvram_test_support::gpu::have_gpu;
use safetensors::{Dtype, tensor::TensorView};

#[test]
fn linear_scratch_is_in_the_ledger() {
    let name = "linear_scratch_is_in_the_ledger";
    if !have_gpu(name) {
        return;
    }
    let (m, k, n) = (40usize, 1024usize, 64usize);
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5)
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let (float, quant) = (
        dir.path().join("f.safetensors"),
        dir.path().join("q.safetensors"),
    );
    let wb: Vec<u8> = bytemuck::cast_slice(&w).to_vec();
    let view = TensorView::new(Dtype::F32, vec![n, k], &wb).expect("view");
    safetensors::serialize_to_file(
        vec![("lin.weight".to_owned(), view)],
        None::<HashMap<String, String>>,
        &float,
    )
    .expect("write");
    let target = TargetFormat::ConvrotW4a4 {
        group: 256,
        linear_dtype: LinearDtype::Int4,
    };
    let opts = QuantizeOptions::new(target, None, None).expect("options");
    quantize_file(&float, &quant, &opts, &mut |_, _, _| {}).expect("quantize");

    let rt = Runtime::new(RuntimeConfig::with_vram(64 << 20)).expect("runtime");
    let spec = ModelSpec {
        views: Default::default(),
        files: vec![quant],
        blocks: vec![BlockSpec {
            name: "only".into(),
            linears: vec!["lin".into()],
            ..BlockSpec::default()
        }],
        scratch_bytes: 4 << 20,
        scratch_wish: 0,
    };
    let model = Model::open(&rt, &spec).expect("open");
    let xs = rt.activation("x", &[m, k]).expect("x");
    rt.write_f32(&xs, &vec![0.25; m * k]).expect("write x");
    let out = rt.activation("out", &[m, n]).expect("out");
    let before = rt.budget_report().tracked;
    model
        .run_pass(&rt, None, |ctx| ctx.linear("lin", &xs, &out))
        .expect("pass");
    let after = rt.budget_report().tracked;
    // The rotated input (f32) and the codes (one byte each) at least.
    let least = (m * k * 4 + m * k) as u64;
    assert!(
        after >= before + least,
        "tracked {before} -> {after} bytes; the scratch needs {least}"
    );
}
