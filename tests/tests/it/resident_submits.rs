//! How often a resident pass submits (`RuntimeConfig::resident_submit_blocks`):
//! after block 1, 1 + k, 1 + 2k, … and at the end; every block at k = 1;
//! once, at the end, at k = 0; a pipelined pass (`PassEnd::Submitted`) once
//! whatever k is. The outputs do not depend on it.

use std::collections::HashMap;

use dynvram_runtime::{BlockSpec, Model, ModelSpec, PassEnd, Runtime, RuntimeConfig};
use dynvram_test_support::gpu::have_gpu;
use safetensors::{Dtype, tensor::TensorView};

const BLOCKS: usize = 9;
const K: usize = 16;

#[test]
fn resident_passes_submit_every_k_blocks() {
    let name = "resident_passes_submit_every_k_blocks";
    if !have_gpu(name) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("stack.safetensors");
    let w: Vec<Vec<u8>> = (0..BLOCKS)
        .map(|b| {
            let v: Vec<f32> = (0..K * K)
                .map(|i| ((i * 7 + b * 3) % 13) as f32 / 13.0 - 0.5)
                .collect();
            bytemuck::cast_slice(&v).to_vec()
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = w
        .iter()
        .enumerate()
        .map(|(b, bytes)| {
            let view = TensorView::new(Dtype::F32, vec![K, K], bytes).expect("view");
            (format!("l{b}.weight"), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None::<HashMap<String, String>>, &file).expect("write");
    let spec = ModelSpec {
        views: Default::default(),
        files: vec![file],
        blocks: (0..BLOCKS)
            .map(|b| BlockSpec {
                name: format!("b{b}"),
                linears: vec![format!("l{b}")],
                ..BlockSpec::default()
            })
            .collect(),
        scratch_bytes: 1 << 20,
        scratch_wish: 0,
    };
    let mut outputs = Vec::new();
    for (k, want) in [(4, 3), (1, BLOCKS as u64), (0, 1), (100, 2)] {
        let rt = Runtime::new(RuntimeConfig {
            resident_submit_blocks: k,
            ..RuntimeConfig::with_vram(64 << 20)
        })
        .expect("runtime");
        let model = Model::open(&rt, &spec).expect("open");
        let xs = [0, 1].map(|i| rt.activation(&format!("x{i}"), &[1, K]).expect("x"));
        let pass = |rt: &Runtime| {
            rt.write_f32(&xs[0], &[0.5; K]).expect("write x");
            model
                .run_pass(rt, None, |ctx| {
                    let b = ctx.index();
                    ctx.linear(&format!("l{b}"), &xs[b % 2], &xs[(b + 1) % 2])
                })
                .expect("pass")
        };
        // The first pass also loads the weights (submits of its own).
        pass(&rt);
        let stats = pass(&rt);
        assert_eq!(stats.submits, want, "k = {k}: submits of a resident pass");
        outputs.push(rt.read_f32(&xs[BLOCKS % 2]).expect("read"));
        // A pipelined pass submits once whatever k is.
        rt.write_f32(&xs[0], &[0.5; K]).expect("write x");
        let run = model
            .run_pass_with(&rt, None, PassEnd::Submitted, |ctx| {
                let b = ctx.index();
                ctx.linear(&format!("l{b}"), &xs[b % 2], &xs[(b + 1) % 2])
            })
            .expect("pipelined pass");
        assert_eq!(run.stats.submits, 1, "k = {k}: submits of a pipelined pass");
        outputs.push(rt.read_f32(&xs[BLOCKS % 2]).expect("read"));
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{outputs:?}");
}
