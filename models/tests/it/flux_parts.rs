//! Flux streamed by part: the tiny-flux fixture under a budget that holds
//! two arenas of its largest linear but not of its largest block matches
//! diffusers' reference as the resident run does; and FLUX.1-dev's real
//! shapes (a header over a sparse file: no weights, no GPU) plan at a
//! 1 GiB budget by part, where whole blocks cannot be planned at all.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use dynvram_models::flux::{Flux, FluxCheckpoint, FluxInputs, ForwardOptions, Shape, synth};
use dynvram_runtime::memory::BudgetConfig;
use dynvram_runtime::planning::{Granularity, PlanWeight, plan_model};
use dynvram_runtime::{ActDtype, Model, ModelSpec};
use dynvram_test_support::fixtures;
use dynvram_test_support::gpu::{have_gpu, part_budget, runtime};
use dynvram_test_support::safetensors;
use dynvram_test_support::tolerance::assert_close_rel;

/// ≤ 1e-3 × max|reference| in f32, as the resident and streamed runs.
const REL: f32 = 1e-3;

#[test]
fn tiny_flux_streamed_by_part_matches_reference() {
    let test = "tiny_flux_streamed_by_part_matches_reference";
    if !have_gpu(test) {
        return;
    }
    let (ckpt, inputs, mut spec) = tiny();
    let dtype = ActDtype::F32;
    spec.scratch_bytes += dynvram_models::flux::capture_bytes(&ckpt.config, inputs.shape, dtype);
    // Two arenas of the largest linear and nothing else: whole blocks
    // cannot be double-buffered.
    let budget = part_budget(&spec);
    let rt = runtime(Some(budget));
    let model = Model::open(&rt, &spec).expect("model opens");
    let plan = model.plan();
    assert_eq!(plan.granularity, Granularity::Part, "{plan:?}");
    let report = model.report();
    eprintln!("{test}: budget {budget} B, {report:?}");
    let mut flux = Flux::new(&rt, &ckpt, inputs.shape, dtype).expect("runner");
    let got = flux
        .forward_with(
            &rt,
            &model,
            &inputs,
            ForwardOptions {
                capture: true,
                ..ForwardOptions::default()
            },
        )
        .expect("forward");
    // More arena loads than blocks: blocks went in parts, each weight once.
    let blocks = ckpt.blocks().len() as u64;
    assert!(got.stats.staged_units > blocks, "{:?}", got.stats);
    assert_eq!(got.stats.staged_units, report.streamed_parts as u64);
    // Everything streams at this budget, each weight's file bytes once.
    assert_eq!(report.resident_bytes, 0, "{report:?}");
    assert_eq!(
        got.stats.streamed_bytes,
        ckpt.weight_bytes(),
        "{:?}",
        got.stats
    );
    let b = rt.budget_report();
    assert!(b.peak <= b.usable, "peak {} > usable {}", b.peak, b.usable);
    let reference = reference();
    for (name, values) in &got.captures {
        assert_close_rel(name, values, &reference[name.as_str()].values, REL);
    }
    assert_close_rel("out", &got.out, &reference["out"].values, REL);
}

/// A safetensors file of `tensors` (bf16) whose data is a hole: the header
/// is real, the bytes after it sparse, so planning sees FLUX.1-dev's real
/// shapes without 24 GB on disk.
fn sparse_bf16(path: &Path, tensors: &[(String, Vec<usize>)]) {
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for (name, shape) in tensors {
        let len = 2 * shape.iter().product::<usize>() as u64;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [at, at + len]}),
        );
        at += len;
    }
    let mut text = serde_json::to_string(&header).expect("json");
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut f = std::fs::File::create(path).expect("create");
    f.write_all(&(text.len() as u64).to_le_bytes())
        .expect("write");
    f.write_all(text.as_bytes()).expect("write");
    f.set_len(8 + text.len() as u64 + at).expect("sparse data");
}

#[test]
fn flux1_dev_plans_at_one_gib_by_part() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("flux1-dev.safetensors");
    let c = synth::preset("flux-dev").expect("preset");
    let tensors: Vec<(String, Vec<usize>)> = synth::tensors(&c, "")
        .into_iter()
        .map(|t| (t.name, t.shape))
        .collect();
    sparse_bf16(&file, &tensors);
    let ckpt = FluxCheckpoint::open(&file).expect("opens");
    assert_eq!(ckpt.config, c);
    // 1024²: 4096 image tokens, 512 text tokens, f16 activations.
    let shape = Shape {
        batch: 1,
        img_len: 4096,
        txt_len: 512,
    };
    let spec = ckpt.spec(shape, ActDtype::F16);
    let usable = 1 << 30;
    let (plan, weights) = dynvram_runtime::plan_spec(&spec, usable).expect("1 GiB plans");
    let peak = plan.plan.page_bytes + 2 * plan.arena_bytes + plan.scratch;
    eprintln!(
        "FLUX.1-dev at 1 GiB: {:?}, {} parts a step, arenas 2 × {} B, resident {} B, activations {} B, peak {peak} B, streamed {} B a step",
        plan.granularity,
        plan.streamed_parts,
        plan.arena_bytes,
        plan.plan.page_bytes,
        plan.scratch,
        plan.plan.streamed_bytes
    );
    assert_eq!(plan.granularity, Granularity::Part);
    assert!(peak <= usable, "{peak}");
    // Arenas hold the largest linear (single blocks' linear1, 132 MB bf16)
    // and less than a double block (680 MB).
    let linear1 = 2 * (3 * 3072 + 4 * 3072) * 3072;
    assert!(
        plan.arena_bytes >= linear1 && plan.arena_bytes < 680_000_000,
        "{plan:?}"
    );
    // More loads than the 59 blocks: the double blocks went in parts.
    assert!(plan.streamed_parts > 59, "{plan:?}");
    // Whole blocks cannot be planned at 1 GiB: the same weights ungrouped.
    let whole: Vec<PlanWeight> = weights
        .iter()
        .map(|w| PlanWeight {
            group: 0,
            ..w.clone()
        })
        .collect();
    let err = plan_model(&whole, usable, plan.scratch).expect_err("whole blocks do not fit");
    assert!(err.to_string().contains("budget too small"), "{err}");
    // At 2 GiB whole blocks fit again and keep moving whole.
    let (plan, _) = dynvram_runtime::plan_spec(&spec, 2 << 30).expect("2 GiB plans");
    assert_eq!(plan.granularity, Granularity::Block);
}

/// The tiny-flux fixture, its inputs, and its spec with room for captures.
fn tiny() -> (FluxCheckpoint, FluxInputs, ModelSpec) {
    let ckpt = FluxCheckpoint::open(&fixtures::tiny_flux()).expect("tiny-flux opens");
    let inputs = FluxInputs::from_file(
        &fixtures::tiny_flux().join("inputs.safetensors"),
        &ckpt.config,
    )
    .expect("inputs");
    let spec = ckpt.spec(inputs.shape, ActDtype::F32);
    (ckpt, inputs, spec)
}

/// What diffusers computed for the fixture.
fn reference() -> HashMap<String, safetensors::Tensor> {
    safetensors::read(&fixtures::tiny_flux().join("reference.safetensors"))
}

/// By part with copies from registered pins on the copy queue (wgpu's own
/// queue where the adapter has one queue, as CI's): the second pass copies
/// from pins and gives the first pass's output bit for bit.
#[test]
fn flux_by_part_on_the_copy_queue_is_bit_identical() {
    use dynvram_runtime::device::{CopyQueueMode, GpuOptions};
    use dynvram_runtime::{AdapterChoice, Runtime, RuntimeConfig};
    let test = "flux_by_part_on_the_copy_queue_is_bit_identical";
    if !have_gpu(test) {
        return;
    }
    let (ckpt, inputs, spec) = tiny();
    let rt = Runtime::new(RuntimeConfig {
        copy_queue: true,
        adapter: AdapterChoice {
            options: GpuOptions {
                copy_queue: CopyQueueMode::Shared,
                ..GpuOptions::default()
            },
            ..AdapterChoice::default()
        },
        // `with_vram` is the whole budget: no reserve.
        ..RuntimeConfig::with_vram(part_budget(&spec) - BudgetConfig::default().reserve)
    })
    .expect("runtime");
    if rt.gpu().transfer_queue().is_none() {
        eprintln!("{test}: skipped: no copy queue (needs Vulkan 1.2)");
        return;
    }
    let model = Model::open(&rt, &spec).expect("opens");
    assert_eq!(model.plan().granularity, Granularity::Part);
    let mut flux = Flux::new(&rt, &ckpt, inputs.shape, ActDtype::F32).expect("runner");
    let first = flux.forward(&rt, &model, &inputs).expect("pass 1");
    let second = flux.forward(&rt, &model, &inputs).expect("pass 2");
    eprintln!("{test}: pass 2 {:?}", second.stats);
    assert!(
        second.stats.sources.registered_pin_bytes > 0,
        "{:?}",
        second.stats
    );
    assert!(second.stats.staged_units > ckpt.blocks().len() as u64);
    assert!(
        first
            .out
            .iter()
            .zip(&second.out)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "pass 2 differs from pass 1"
    );
    assert_close_rel("out", &second.out, &reference()["out"].values, REL);
}

/// A block's code that uses an earlier part's weight after a later one's
/// gets an error naming the weight and the parts (its arena was reused),
/// and the runtime stays usable; groups that miss or repeat a weight are
/// refused at open, naming the block.
#[test]
fn parts_out_of_order_and_bad_groups_are_clear_errors() {
    let test = "parts_out_of_order_and_bad_groups_are_clear_errors";
    if !have_gpu(test) {
        return;
    }
    let (ckpt, inputs, spec) = tiny();
    let rt = runtime(Some(part_budget(&spec)));
    let mut missing = spec.clone();
    missing.blocks[1].groups.pop();
    let err = Model::open(&rt, &missing).expect_err("a linear in no group");
    let text = err.to_string();
    assert!(
        text.contains("double_blocks.0") && text.contains("txt_mlp.2") && text.contains("no group"),
        "{text}"
    );
    let mut twice = spec.clone();
    let first = twice.blocks[1].groups[0].clone();
    twice.blocks[1].groups.push(first);
    let text = Model::open(&rt, &twice).expect_err("twice").to_string();
    assert!(
        text.contains("img_mod.lin") && text.contains("groups 0 and"),
        "{text}"
    );

    let model = Model::open(&rt, &spec).expect("opens");
    let nm = &ckpt.names;
    let (late, early) = (
        nm.double(0, "txt_mlp.2.bias"),
        nm.double(0, "img_mod.lin.bias"),
    );
    let err = model
        .run_pass(&rt, None, |ctx| {
            if ctx.index() == 1 {
                ctx.weight_tensor(&late)?;
                ctx.weight_tensor(&early)?;
            }
            Ok(())
        })
        .expect_err("out of order");
    let text = err.to_string();
    assert!(
        text.contains(&early) && text.contains("(part 0) after part"),
        "{text}"
    );
    // The runtime still runs the real forward.
    let mut flux = Flux::new(&rt, &ckpt, inputs.shape, ActDtype::F32).expect("runner");
    let out = flux.forward(&rt, &model, &inputs).expect("forward");
    assert_close_rel("out", &out.out, &reference()["out"].values, REL);
}
