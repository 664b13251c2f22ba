//! The built-in model of `dynvram run`: a deterministic MLP stack whose
//! layers cycle through f32, f16 and every quantized ComfyUI format, written
//! once to the cache directory and reused.

use std::path::{Path, PathBuf};

use dynvram_runtime::quant::meta::comfy_quant_json;
use dynvram_runtime::quant::{self, Format, LinearDtype};
use safetensors::{Dtype, tensor::TensorView};

pub use super::{INPUT_SEED, random_normal};

/// Blocks of the built-in model.
pub const BLOCKS: usize = 16;
/// Residual width.
pub const HIDDEN: usize = 512;
/// Inner width.
pub const FFN: usize = 2048;
/// Seed of the weights.
pub const SEED: u64 = 20_261_202;
/// Bump when the generator changes, so stale cache files are not reused.
const VERSION: u32 = 1;

/// The format of each layer, in order: every format appears, and each block
/// pairs a wide and a narrow one so blocks stream similar byte counts.
pub fn layer_formats() -> Vec<Format> {
    let cycle = [
        Format::F32,
        Format::ConvrotW4a4 {
            group: 256,
            linear_dtype: LinearDtype::Int4,
        },
        Format::F16,
        Format::ConvrotW4a4 {
            group: 64,
            linear_dtype: LinearDtype::Int8,
        },
        Format::Int8Tensorwise {
            convrot_group: None,
        },
        Format::Float8E4m3fn,
    ];
    (0..2 * BLOCKS).map(|i| cycle[i % cycle.len()]).collect()
}

/// The built-in model cached in `dir`, generated on first use.
pub fn ensure_cached_in(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join(format!(
        "builtin-mlp-v{VERSION}-{BLOCKS}x{HIDDEN}x{FFN}.safetensors"
    ));
    if !path.exists() {
        std::fs::create_dir_all(dir)?;
        tracing::info!(path = %path.display(), "writing the built-in model (once)");
        write(&path)?;
    }
    Ok(path)
}

struct Owned {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// One layer's tensors in `format`, from float weights `w` [n, k] and bias `b`.
fn layer_tensors(
    name: &str,
    format: Format,
    w: &[f32],
    b: &[f32],
    n: usize,
    k: usize,
) -> Vec<Owned> {
    let t = |suffix: &str, dtype, shape: Vec<usize>, data: Vec<u8>| Owned {
        name: format!("{name}.{suffix}"),
        dtype,
        shape,
        data,
    };
    let f32s = |v: &[f32]| bytemuck::cast_slice::<f32, u8>(v).to_vec();
    let mut out = vec![t("bias", Dtype::F32, vec![n], f32s(b))];
    match format {
        Format::F32 => out.push(t("weight", Dtype::F32, vec![n, k], f32s(w))),
        Format::F16 => {
            let h: Vec<u16> = w
                .iter()
                .map(|&v| half::f16::from_f32(v).to_bits())
                .collect();
            out.push(t(
                "weight",
                Dtype::F16,
                vec![n, k],
                bytemuck::cast_slice(&h).to_vec(),
            ));
        }
        Format::ConvrotW4a4 { group, .. } => {
            // Shapes are fixed constants that satisfy the format (k % group == 0).
            let (q, s) =
                quant::quantize::quantize_convrot_w4a4_weight(w, k, group).unwrap_or_default();
            out.push(t("weight", Dtype::I8, vec![n, k / 2], q));
            out.push(t("weight_scale", Dtype::F32, vec![n], f32s(&s)));
        }
        Format::Int8Tensorwise { .. } => {
            let (q, s) = quant::quantize::quantize_int8_tensorwise_weight(w);
            out.push(t(
                "weight",
                Dtype::I8,
                vec![n, k],
                bytemuck::cast_slice(&q).to_vec(),
            ));
            out.push(t("weight_scale", Dtype::F32, vec![], f32s(&[s])));
        }
        _ => {
            let (q, s) = quant::quantize::quantize_float8_e4m3fn_weight(w);
            out.push(t("weight", Dtype::F8_E4M3, vec![n, k], q));
            out.push(t("weight_scale", Dtype::F32, vec![], f32s(&[s])));
        }
    }
    if let Some(json) = comfy_quant_json(format) {
        let bytes = json.into_bytes();
        out.push(t("comfy_quant", Dtype::U8, vec![bytes.len()], bytes));
    }
    out
}

/// Writes the built-in model to `path` atomically (temp file, then rename).
pub fn write(path: &Path) -> std::io::Result<()> {
    let formats = layer_formats();
    let mut tensors = Vec::new();
    for (i, format) in formats.iter().enumerate() {
        let (block, second) = (i / 2, i % 2 == 1);
        let (n, k) = if second { (HIDDEN, FFN) } else { (FFN, HIDDEN) };
        let seed = SEED.wrapping_mul(1_000_003).wrapping_add(i as u64);
        let mut w = random_normal(n * k + n, seed);
        let scale = 1.0 / (k as f32).sqrt();
        let b: Vec<f32> = w.split_off(n * k).into_iter().map(|v| 0.1 * v).collect();
        w.iter_mut().for_each(|v| *v *= scale);
        let name = super::layer_names(block)[usize::from(second)].clone();
        tensors.extend(layer_tensors(&name, *format, &w, &b, n, k));
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            TensorView::new(t.dtype, t.shape.clone(), &t.data)
                .map(|v| (t.name.clone(), v))
                .map_err(std::io::Error::other)
        })
        .collect::<Result<_, _>>()?;
    let meta = std::collections::HashMap::from([(
        "dynvram_builtin".to_owned(),
        format!("{{\"version\": {VERSION}, \"seed\": {SEED}}}"),
    )]);
    // The built-in model is a few MiB: serialized in memory, written atomically.
    let bytes = safetensors::serialize(views, Some(meta)).map_err(std::io::Error::other)?;
    dynvram_runtime::loader::atomic::write_file(path, &bytes)
        .map(drop)
        .map_err(std::io::Error::other)
}
