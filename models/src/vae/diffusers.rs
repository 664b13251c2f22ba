//! diffusers' `AutoencoderKL` weights read as the BFL `ae.safetensors`
//! tensors the decoder and encoder name, in place (loader's
//! `TensorView`s): every key is a rename (the tiny-flux-pipeline fixture's
//! README has the table, diffusers' `convert_ldm_vae_checkpoint` read
//! backwards), the decoder's `up_blocks` in reverse level order, and the
//! mid-block attention's `[C, C]` linears read as BFL's `[C, C, 1, 1]`
//! convolutions.

use dynvram_runtime::loader::{Dtype, ModelFiles, TensorView};

use super::VaeError;
use crate::block_index::block_index;

/// A tensor only a diffusers autoencoder has.
pub const MARKER: &str = "decoder.mid_block.resnets.0.conv1.weight";

/// Whether `files` (as stored) hold a diffusers autoencoder.
pub fn is_diffusers(files: &ModelFiles) -> bool {
    files.info(MARKER).is_some()
}

/// The BFL name of diffusers' `name` in an autoencoder of `levels` up
/// blocks, and whether it is an attention linear read as a 1×1
/// convolution; `None` for a key BFL's layout has no place for.
fn bfl_name(name: &str, levels: usize) -> Option<(String, bool)> {
    let (part, rest) = name.split_once('.')?;
    if part != "encoder" && part != "decoder" {
        return None;
    }
    let resnet = |r: &str| -> Option<String> {
        let (layer, t) = r.split_once('.')?;
        let layer = match layer {
            "norm1" | "conv1" | "norm2" | "conv2" => layer,
            "conv_shortcut" => "nin_shortcut",
            _ => return None,
        };
        Some(format!("{layer}.{t}"))
    };
    let mapped = if let Some(r) = rest.strip_prefix("mid_block.resnets.") {
        let (j, r) = r.split_once('.')?;
        let block = match j {
            "0" => "block_1",
            "1" => "block_2",
            _ => return None,
        };
        (format!("mid.{block}.{}", resnet(r)?), false)
    } else if let Some(r) = rest.strip_prefix("mid_block.attentions.0.") {
        let (layer, t) = r.rsplit_once('.')?;
        let (bfl, linear) = match layer {
            "group_norm" => ("norm", false),
            "to_q" | "query" => ("q", true),
            "to_k" | "key" => ("k", true),
            "to_v" | "value" => ("v", true),
            "to_out.0" | "proj_attn" => ("proj_out", true),
            _ => return None,
        };
        (format!("mid.attn_1.{bfl}.{t}"), linear && t == "weight")
    } else if let Some(r) = rest.strip_prefix("conv_norm_out.") {
        (format!("norm_out.{r}"), false)
    } else if rest.starts_with("conv_in.") || rest.starts_with("conv_out.") {
        (rest.to_owned(), false)
    } else if part == "encoder" {
        let i = block_index(rest, "down_blocks.")?;
        let r = rest.strip_prefix(&format!("down_blocks.{i}."))?;
        if let Some(r) = r.strip_prefix("resnets.") {
            let (j, r) = r.split_once('.')?;
            (format!("down.{i}.block.{j}.{}", resnet(r)?), false)
        } else {
            let t = r.strip_prefix("downsamplers.0.conv.")?;
            (format!("down.{i}.downsample.conv.{t}"), false)
        }
    } else {
        let i = block_index(rest, "up_blocks.")?;
        let r = rest.strip_prefix(&format!("up_blocks.{i}."))?;
        let level = levels.checked_sub(i + 1)?;
        if let Some(r) = r.strip_prefix("resnets.") {
            let (j, r) = r.split_once('.')?;
            (format!("up.{level}.block.{j}.{}", resnet(r)?), false)
        } else {
            let t = r.strip_prefix("upsamplers.0.conv.")?;
            (format!("up.{level}.upsample.conv.{t}"), false)
        }
    };
    Some((format!("{part}.{}", mapped.0), mapped.1))
}

/// The BFL-named views of `files`, a diffusers autoencoder as stored: one
/// per stored tensor. A key BFL's layout has no place for (`quant_conv`:
/// not Flux's; a quantized folder's extra tensors) or a dtype other than
/// f32, f16 or bf16 is an error naming the file and the tensor.
pub fn views(files: &ModelFiles) -> Result<Vec<TensorView>, VaeError> {
    let err = |tensor: &str, why: String| VaeError::Weights {
        path: files
            .path_of(tensor)
            .map(|p| p.to_owned())
            .unwrap_or_default(),
        why,
    };
    let levels = files
        .tensors()
        .filter_map(|t| block_index(&t.name, "decoder.up_blocks."))
        .max()
        .map_or(0, |m| m + 1);
    let mut views = Vec::new();
    for t in files.tensors() {
        let Some((name, as_conv)) = bfl_name(&t.name, levels) else {
            return Err(err(
                &t.name,
                format!(
                    "`{}` has no place in the Flux autoencoder (a quantized folder, or \
                     another model's `quant_conv`?)",
                    t.name
                ),
            ));
        };
        if !matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(err(
                &t.name,
                format!(
                    "`{}` is {:?}: diffusers autoencoders are read in f32, f16 or bf16",
                    t.name, t.dtype
                ),
            ));
        }
        let view = TensorView::rename(name, t.name.clone());
        views.push(match (as_conv, t.shape.as_slice()) {
            (true, &[o, i]) => view.with_shape(vec![o, i, 1, 1]),
            _ => view,
        });
    }
    Ok(views)
}

#[cfg(test)]
mod tests {
    use super::bfl_name;

    #[test]
    fn diffusers_keys_map_to_bfl_keys() {
        let m = |n: &str| bfl_name(n, 4);
        let b = |s: &str, conv: bool| Some((s.to_owned(), conv));
        assert_eq!(
            m("decoder.up_blocks.0.resnets.2.conv_shortcut.weight"),
            b("decoder.up.3.block.2.nin_shortcut.weight", false)
        );
        assert_eq!(
            m("decoder.up_blocks.3.upsamplers.0.conv.bias"),
            b("decoder.up.0.upsample.conv.bias", false)
        );
        assert_eq!(
            m("encoder.down_blocks.1.downsamplers.0.conv.weight"),
            b("encoder.down.1.downsample.conv.weight", false)
        );
        assert_eq!(
            m("encoder.mid_block.attentions.0.to_out.0.weight"),
            b("encoder.mid.attn_1.proj_out.weight", true)
        );
        assert_eq!(
            m("decoder.mid_block.attentions.0.to_q.bias"),
            b("decoder.mid.attn_1.q.bias", false)
        );
        assert_eq!(
            m("decoder.mid_block.resnets.1.norm2.weight"),
            b("decoder.mid.block_2.norm2.weight", false)
        );
        assert_eq!(
            m("decoder.conv_norm_out.bias"),
            b("decoder.norm_out.bias", false)
        );
        assert_eq!(m("quant_conv.weight"), None);
        assert_eq!(m("decoder.up_blocks.4.resnets.0.conv1.weight"), None);
    }
}
