//! Embedding the runtime: open a GPU under a VRAM budget, open a model of
//! two blocks, run a pass with streamed weights, read the result.
//!
//! `cargo run -p dynvram-runtime --example embed -- MODEL.safetensors`
//! (any file with 2-D `blocks.{i}.fc.weight` of shape [H, H]); without an
//! argument the example writes a small one to the temp dir.

use dynvram_runtime::{BlockSpec, Model, ModelSpec, Runtime, RuntimeConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = match std::env::args().nth(1) {
        Some(p) => p.into(),
        None => write_example_model()?,
    };
    let mut config = RuntimeConfig::default();
    config.budget.vram_budget = Some(512 << 20); // as `--vram-budget 0.5`
    let rt = Runtime::new(config)?;
    let blocks = (0..2)
        .map(|i| BlockSpec {
            name: format!("blocks.{i}"),
            linears: vec![format!("blocks.{i}.fc")],
            ..BlockSpec::default()
        })
        .collect();
    let spec = ModelSpec {
        views: Default::default(),
        files: vec![path],
        blocks,
        scratch_bytes: 1 << 20,
        scratch_wish: 0,
    };
    let model = Model::open(&rt, &spec)?;
    let h = model.linear_layer("blocks.0.fc").map_or(0, |l| l.k);
    let x = rt.activation("x", &[1, h])?;
    let y = rt.activation("y", &[1, h])?;
    rt.write_f32(&x, &vec![1.0; h])?;
    let stats = model.run_pass(&rt, None, |ctx| {
        let layer = format!("blocks.{}.fc", ctx.index());
        ctx.linear(&layer, &x, &y)?; // y = x Wᵀ
        ctx.add_assign(&x, &y) // x += y
    })?;
    println!("x[..4] = {:?}", &rt.read_f32(&x)?[..4]);
    println!("{:?}\n{:?}", model.report(), stats);
    Ok(())
}

fn write_example_model() -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    use safetensors::{Dtype, tensor::TensorView};
    let h = 256;
    let w: Vec<u8> = (0..h * h)
        .flat_map(|i| ((i % 7) as f32 * 1e-3).to_le_bytes())
        .collect();
    let views = (0..2).map(|i| {
        (
            format!("blocks.{i}.fc.weight"),
            TensorView::new(Dtype::F32, vec![h, h], &w),
        )
    });
    let views: Vec<_> = views
        .map(|(n, v)| v.map(|v| (n, v)))
        .collect::<Result<_, _>>()?;
    let path = std::env::temp_dir().join("dynvram-example.safetensors");
    safetensors::serialize_to_file(views, None, &path)?;
    Ok(path)
}
