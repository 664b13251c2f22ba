//! diffusers' `FluxTransformer2DModel` weights read as the BFL tensors the
//! forward names ([`super::Names`]), in place (loader's `TensorView`s):
//! diffusers splits what BFL fuses, always along the output rows, so each
//! BFL tensor is its diffusers parts' rows one after the other —
//! `to_q`/`to_k`/`to_v` are `qkv`, a single block's `to_q`/`to_k`/`to_v`/
//! `proj_mlp` are `linear1`, and `norm_out.linear`'s (scale, shift) halves
//! swapped are `final_layer.adaLN_modulation.1`'s (shift, scale). The
//! mapping is diffusers' `convert_flux_transformer_checkpoint_to_diffusers`
//! read backwards.

use std::collections::BTreeSet;

use dynvram_runtime::loader::{Dtype, ModelFiles, TensorView, ViewPart};

use super::FluxError;
use crate::block_index::block_index;

/// A tensor only a diffusers Flux transformer has.
pub const MARKER: &str = "x_embedder.weight";

/// Whether `files` (as stored) hold a diffusers Flux transformer.
pub fn is_diffusers(files: &ModelFiles) -> bool {
    files.info(MARKER).is_some()
        || files
            .info("transformer_blocks.0.attn.to_q.weight")
            .is_some()
}

/// A BFL linear and the diffusers linears whose rows it is.
fn linear(bfl: String, parts: &[String]) -> (String, Vec<String>) {
    (bfl, parts.to_vec())
}

/// Every linear of a transformer of `double` and `single` blocks, BFL name
/// first, without `.weight`/`.bias`.
fn linears(double: usize, single: usize, guidance: bool) -> Vec<(String, Vec<String>)> {
    let one = |bfl: &str, d: &str| linear(bfl.into(), &[d.into()]);
    let mut out = vec![
        one("img_in", "x_embedder"),
        one("txt_in", "context_embedder"),
        one(
            "time_in.in_layer",
            "time_text_embed.timestep_embedder.linear_1",
        ),
        one(
            "time_in.out_layer",
            "time_text_embed.timestep_embedder.linear_2",
        ),
        one(
            "vector_in.in_layer",
            "time_text_embed.text_embedder.linear_1",
        ),
        one(
            "vector_in.out_layer",
            "time_text_embed.text_embedder.linear_2",
        ),
    ];
    if guidance {
        out.extend([
            one(
                "guidance_in.in_layer",
                "time_text_embed.guidance_embedder.linear_1",
            ),
            one(
                "guidance_in.out_layer",
                "time_text_embed.guidance_embedder.linear_2",
            ),
        ]);
    }
    for i in 0..double {
        let b = |s: &str| format!("double_blocks.{i}.{s}");
        let d = |s: &str| format!("transformer_blocks.{i}.{s}");
        let qkv = |q: &str, k: &str, v: &str| [d(q), d(k), d(v)];
        out.extend([
            linear(b("img_mod.lin"), &[d("norm1.linear")]),
            linear(b("txt_mod.lin"), &[d("norm1_context.linear")]),
            linear(
                b("img_attn.qkv"),
                &qkv("attn.to_q", "attn.to_k", "attn.to_v"),
            ),
            linear(
                b("txt_attn.qkv"),
                &qkv("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
            ),
            linear(b("img_attn.proj"), &[d("attn.to_out.0")]),
            linear(b("txt_attn.proj"), &[d("attn.to_add_out")]),
            linear(b("img_mlp.0"), &[d("ff.net.0.proj")]),
            linear(b("img_mlp.2"), &[d("ff.net.2")]),
            linear(b("txt_mlp.0"), &[d("ff_context.net.0.proj")]),
            linear(b("txt_mlp.2"), &[d("ff_context.net.2")]),
        ]);
    }
    for i in 0..single {
        let b = |s: &str| format!("single_blocks.{i}.{s}");
        let d = |s: &str| format!("single_transformer_blocks.{i}.{s}");
        out.extend([
            linear(b("modulation.lin"), &[d("norm.linear")]),
            linear(
                b("linear1"),
                &[
                    d("attn.to_q"),
                    d("attn.to_k"),
                    d("attn.to_v"),
                    d("proj_mlp"),
                ],
            ),
            linear(b("linear2"), &[d("proj_out")]),
        ]);
    }
    out.push(one("final_layer.linear", "proj_out"));
    out
}

/// Every QK-norm scale: (BFL tensor, diffusers tensor).
fn norms(double: usize, single: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for i in 0..double {
        for (bfl, d) in [
            ("img_attn.norm.query_norm", "attn.norm_q"),
            ("img_attn.norm.key_norm", "attn.norm_k"),
            ("txt_attn.norm.query_norm", "attn.norm_added_q"),
            ("txt_attn.norm.key_norm", "attn.norm_added_k"),
        ] {
            out.push((
                format!("double_blocks.{i}.{bfl}.scale"),
                format!("transformer_blocks.{i}.{d}.weight"),
            ));
        }
    }
    for i in 0..single {
        for (bfl, d) in [
            ("norm.query_norm", "attn.norm_q"),
            ("norm.key_norm", "attn.norm_k"),
        ] {
            out.push((
                format!("single_blocks.{i}.{bfl}.scale"),
                format!("single_transformer_blocks.{i}.{d}.weight"),
            ));
        }
    }
    out
}

/// Blocks `{prefix}N.` up to the highest N stored (a gap is then a missing
/// tensor, named).
fn blocks(files: &ModelFiles, prefix: &str) -> usize {
    files
        .tensors()
        .filter_map(|t| block_index(&t.name, prefix))
        .max()
        .map_or(0, |m| m + 1)
}

/// The BFL-named views of `files`, a diffusers Flux transformer as stored:
/// every stored tensor used once, each f32, f16 or bf16. A missing part, a
/// stored tensor no BFL tensor reads (a quantized folder's extra tensors),
/// or another dtype is an error naming the file and the tensor.
pub fn views(files: &ModelFiles) -> Result<Vec<TensorView>, FluxError> {
    let first = || {
        files
            .files()
            .first()
            .map(|f| f.path().to_owned())
            .unwrap_or_default()
    };
    let err = |tensor: &str, why: String| FluxError::Weights {
        path: files.path_of(tensor).map_or_else(first, |p| p.to_owned()),
        why,
    };
    let has = |n: &str| files.info(n).is_some();
    let double = blocks(files, "transformer_blocks.");
    let single = blocks(files, "single_transformer_blocks.");
    let guidance = has("time_text_embed.guidance_embedder.linear_1.weight");
    let mut views = Vec::new();
    let mut used = BTreeSet::new();
    let need = |used: &mut BTreeSet<String>, stored: &str, bfl: &str| -> Result<(), FluxError> {
        if !has(stored) {
            return Err(FluxError::Weights {
                path: first(),
                why: format!(
                    "a diffusers Flux transformer without `{stored}` (BFL `{bfl}` is read from it)"
                ),
            });
        }
        used.insert(stored.to_owned());
        Ok(())
    };
    for (bfl, parts) in linears(double, single, guidance) {
        for p in &parts {
            need(&mut used, &format!("{p}.weight"), &format!("{bfl}.weight"))?;
        }
        views.push(TensorView::concat(
            format!("{bfl}.weight"),
            parts.iter().map(|p| format!("{p}.weight")),
        ));
        let biases: Vec<String> = parts.iter().map(|p| format!("{p}.bias")).collect();
        match biases.iter().filter(|b| has(b)).count() {
            0 => {}
            n if n == biases.len() => {
                used.extend(biases.iter().cloned());
                views.push(TensorView::concat(format!("{bfl}.bias"), biases));
            }
            _ => {
                let without = biases.iter().find(|b| !has(b)).cloned().unwrap_or_default();
                return Err(err(
                    &biases[0],
                    format!(
                        "`{without}` is missing where the other parts of BFL `{bfl}` have biases"
                    ),
                ));
            }
        }
    }
    for (bfl, stored) in norms(double, single) {
        need(&mut used, &stored, &bfl)?;
        views.push(TensorView::rename(bfl, stored));
    }
    // BFL's final modulation is (shift, scale); diffusers' (scale, shift).
    for t in ["weight", "bias"] {
        let stored = format!("norm_out.linear.{t}");
        let bfl = format!("final_layer.adaLN_modulation.1.{t}");
        need(&mut used, &stored, &bfl)?;
        let rows = files.info(&stored).and_then(|i| i.shape.first().copied());
        let half = match rows {
            Some(n) if n % 2 == 0 => n / 2,
            _ => {
                return Err(err(
                    &stored,
                    format!(
                        "`{stored}` has {rows:?} rows: (scale, shift) halves need an even count"
                    ),
                ));
            }
        };
        let part = |rows| ViewPart {
            tensor: stored.clone(),
            rows: Some(rows),
        };
        views.push(TensorView {
            name: bfl,
            shape: None,
            parts: vec![part(half..2 * half), part(0..half)],
        });
    }
    if let Some(extra) = files.tensors().find(|t| !used.contains(&t.name)) {
        return Err(err(
            &extra.name,
            format!(
                "`{}` is no weight of diffusers' FluxTransformer2DModel (a quantized folder? \
                 diffusers folders are read in f32, f16 or bf16; ComfyUI's single files may be \
                 quantized)",
                extra.name
            ),
        ));
    }
    if let Some(t) = files
        .tensors()
        .find(|t| !matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16))
    {
        return Err(err(
            &t.name,
            format!(
                "`{}` is {:?}: diffusers folders are read in f32, f16 or bf16 (quantized \
                 weights: ComfyUI's single files)",
                t.name, t.dtype
            ),
        ));
    }
    Ok(views)
}
