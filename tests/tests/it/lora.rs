//! Live LoRA: the patched output matches a CPU reference, the patch is
//! accounted as `patches`, and `loaded_vram` does not move.

use std::collections::HashMap;

use dynvram_runtime::{BlockSpec, Model, ModelSpec, Runtime, RuntimeConfig};
use dynvram_test_support::gpu::have_gpu;
use safetensors::{Dtype, tensor::TensorView};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            (h >> 8) as f32 / (1 << 24) as f32 - 0.5
        })
        .collect()
}

#[test]
fn lora_patch_matches_cpu_reference_and_is_not_loaded_vram() {
    let name = "lora_patch_matches_cpu_reference_and_is_not_loaded_vram";
    if !have_gpu(name) {
        return;
    }
    let (m, k, n, r) = (3usize, 96usize, 40usize, 4usize);
    let w = values(n * k, 1);
    let bias = values(n, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("lin.safetensors");
    let wb: Vec<u8> = bytemuck::cast_slice(&w).to_vec();
    let bb: Vec<u8> = bytemuck::cast_slice(&bias).to_vec();
    let views = vec![
        (
            "lin.weight".to_owned(),
            TensorView::new(Dtype::F32, vec![n, k], &wb).expect("view"),
        ),
        (
            "lin.bias".to_owned(),
            TensorView::new(Dtype::F32, vec![n], &bb).expect("view"),
        ),
    ];
    safetensors::serialize_to_file(views, None::<HashMap<String, String>>, &file).expect("write");

    let rt = Runtime::new(RuntimeConfig::with_vram(64 << 20)).expect("runtime");
    let spec = ModelSpec {
        views: Default::default(),
        files: vec![file.clone()],
        blocks: vec![BlockSpec {
            name: "only".into(),
            linears: vec!["lin".into()],
            ..BlockSpec::default()
        }],
        scratch_bytes: 1 << 20,
        scratch_wish: 0,
    };
    let mut model = Model::open(&rt, &spec).expect("open");
    let loaded = rt.budget_report().loaded_vram;
    let (a, b, alpha) = (values(r * k, 3), values(n * r, 4), 8.0f32);
    model
        .attach_lora(&rt, "lin", &a, &b, r, alpha)
        .expect("attach");
    assert_eq!(
        rt.budget_report().loaded_vram,
        loaded,
        "patches are not the model proper"
    );

    let x = values(m * k, 5);
    let xs = rt.activation("x", &[m, k]).expect("x");
    rt.write_f32(&xs, &x).expect("write x");
    let out = rt.activation("out", &[m, n]).expect("out");
    model
        .run_pass(&rt, None, |ctx| ctx.linear("lin", &xs, &out))
        .expect("pass");
    let got = rt.read_f32(&out).expect("read");

    let scale = alpha / r as f32;
    let mut max_err = 0f32;
    for i in 0..m {
        let xi = &x[i * k..(i + 1) * k];
        let t: Vec<f32> = (0..r)
            .map(|j| (0..k).map(|c| xi[c] * a[j * k + c]).sum())
            .collect();
        for o in 0..n {
            let base: f32 = (0..k).map(|c| xi[c] * w[o * k + c]).sum::<f32>() + bias[o];
            let low: f32 = (0..r).map(|j| t[j] * b[o * r + j]).sum();
            max_err = max_err.max((got[i * n + o] - (base + scale * low)).abs());
        }
    }
    assert!(max_err < 1e-4, "max error {max_err}");

    assert!(model.detach_lora("lin"));
    model
        .run_pass(&rt, None, |ctx| ctx.linear("lin", &xs, &out))
        .expect("pass");
    let plain = rt.read_f32(&out).expect("read");
    let diff = plain
        .iter()
        .zip(&got)
        .fold(0f32, |d, (p, q)| d.max((p - q).abs()));
    assert!(diff > 1e-3, "detaching changed nothing");
}
