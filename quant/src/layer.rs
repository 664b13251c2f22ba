//! One linear layer's description (format, sizes, tensor names) and the check
//! that a file's tensors have exactly the dtypes and shapes its format needs.

use crate::format::Format;
use crate::meta::{LayerMeta, MetaError, MetaSource, layer_meta};
use crate::tensors::{Dtype, TensorList};

/// A file's tensors do not match a layer's format; every variant names the layer.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// Bad metadata.
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// A quantization scale (`weight_scale`, `input_scale`, fp8 and int4
    /// group scales) is zero, negative or not finite: every value computed
    /// with it would be garbage.
    #[error(
        "layer {layer}: tensor {tensor} holds scale {value} at element {index}{row}: quantization scales must be positive and finite"
    )]
    BadScale {
        /// The layer.
        layer: String,
        /// The scale tensor.
        tensor: String,
        /// The element.
        index: usize,
        /// ` (row R)` where the scale has one entry or more per weight row.
        row: String,
        /// The value found.
        value: f32,
    },
    /// A tensor the format needs is absent.
    #[error("layer {layer}: missing tensor {tensor} (needed by {format})")]
    Missing {
        /// Layer name.
        layer: String,
        /// Missing tensor.
        tensor: String,
        /// Format name.
        format: String,
    },
    /// Wrong dtype.
    #[error("layer {layer}: tensor {tensor} has dtype {found:?}, expected {expected}")]
    Dtype {
        /// Layer name.
        layer: String,
        /// Tensor name.
        tensor: String,
        /// Expected dtype(s).
        expected: String,
        /// Found dtype.
        found: Dtype,
    },
    /// Wrong shape.
    #[error("layer {layer}: tensor {tensor} has shape {found:?}, expected {expected}")]
    Shape {
        /// Layer name.
        layer: String,
        /// Tensor name.
        tensor: String,
        /// Expected shape, in words.
        expected: String,
        /// Found shape.
        found: Vec<usize>,
    },
    /// K does not fit the format's grouping.
    #[error("layer {layer}: in_features K = {k} is not a multiple of {multiple} ({why})")]
    Grouping {
        /// Layer name.
        layer: String,
        /// in_features.
        k: usize,
        /// The required multiple.
        multiple: usize,
        /// Which rule.
        why: &'static str,
    },
}

/// One linear layer of a file: its format, sizes and tensor names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantLayer {
    /// Layer name (the prefix before `.weight`).
    pub name: String,
    /// Weight format.
    pub format: Format,
    /// out_features.
    pub n: usize,
    /// in_features.
    pub k: usize,
    /// Weight tensor name.
    pub weight: String,
    /// Weight scale tensor name (`L.weight_scale`, or `L.scale_weight` in scaled_fp8 files).
    pub scale: Option<String>,
    /// Bias tensor name.
    pub bias: Option<String>,
    /// The bias dtype (`F32`, `F16` or `BF16`).
    pub bias_dtype: Option<Dtype>,
    /// fp8 input scale tensor name, where present.
    pub input_scale: Option<String>,
    /// `bias.is_some()`.
    pub has_bias: bool,
    /// `full_precision_matrix_mult` from the metadata.
    pub full_precision_matrix_mult: bool,
    /// Where the metadata came from (`None` for plain weights).
    pub source: Option<MetaSource>,
}

/// The `comfy_quant` format name, or the plain dtype, for messages.
pub fn format_name(format: Format) -> &'static str {
    match format {
        Format::ConvrotW4a4 { .. } => "convrot_w4a4",
        Format::Int8Tensorwise { .. } => "int8_tensorwise",
        Format::Float8E4m3fn => "float8_e4m3fn",
        Format::Float8E5m2 => "float8_e5m2",
        Format::F32 => "f32",
        Format::F16 => "f16",
        Format::Bf16 => "bf16",
    }
}

struct Check<'a> {
    file: &'a dyn TensorList,
    layer: &'a str,
    format: Format,
}

impl Check<'_> {
    fn get(&self, tensor: &str) -> Option<(Dtype, Vec<usize>)> {
        self.file.dtype_shape(tensor)
    }

    fn require(&self, tensor: &str) -> Result<(Dtype, Vec<usize>), LayoutError> {
        self.get(tensor).ok_or_else(|| LayoutError::Missing {
            layer: self.layer.to_owned(),
            tensor: tensor.to_owned(),
            format: format_name(self.format).to_owned(),
        })
    }

    fn dtype(&self, tensor: &str, found: Dtype, allowed: &[Dtype]) -> Result<(), LayoutError> {
        if allowed.contains(&found) {
            return Ok(());
        }
        let names: Vec<String> = allowed.iter().map(|d| format!("{d:?}")).collect();
        Err(LayoutError::Dtype {
            layer: self.layer.to_owned(),
            tensor: tensor.to_owned(),
            expected: names.join(" or "),
            found,
        })
    }

    fn shape(
        &self,
        tensor: &str,
        found: &[usize],
        allowed: &[&[usize]],
    ) -> Result<(), LayoutError> {
        if allowed.contains(&found) {
            return Ok(());
        }
        let names: Vec<String> = allowed.iter().map(|s| format!("{s:?}")).collect();
        Err(LayoutError::Shape {
            layer: self.layer.to_owned(),
            tensor: tensor.to_owned(),
            expected: names.join(" or "),
            found: found.to_vec(),
        })
    }

    fn multiple(&self, k: usize, multiple: usize, why: &'static str) -> Result<(), LayoutError> {
        if !k.is_multiple_of(multiple) {
            return Err(LayoutError::Grouping {
                layer: self.layer.to_owned(),
                k,
                multiple,
                why,
            });
        }
        Ok(())
    }

    /// A scale-like tensor: `F32` with one of the allowed shapes.
    fn scale(&self, tensor: &str, allowed: &[&[usize]]) -> Result<(), LayoutError> {
        let (dt, shape) = self.require(tensor)?;
        self.dtype(tensor, dt, &[Dtype::F32])?;
        self.shape(tensor, &shape, allowed)
    }
}

/// The format of a weight without quantization metadata, from its dtype.
fn plain_format(layer: &str, weight: &str, dtype: Dtype) -> Result<Format, LayoutError> {
    Ok(match dtype {
        Dtype::F32 => Format::F32,
        Dtype::F16 => Format::F16,
        Dtype::BF16 => Format::Bf16,
        Dtype::F8_E4M3 => Format::Float8E4m3fn,
        Dtype::F8_E5M2 => Format::Float8E5m2,
        found => {
            return Err(LayoutError::Dtype {
                layer: layer.to_owned(),
                tensor: weight.to_owned(),
                expected: "F32, F16, BF16 or F8 (no comfy_quant metadata for this layer)"
                    .to_owned(),
                found,
            });
        }
    })
}

/// Checks layer `layer` of `file` (metadata looked up with [`layer_meta`]).
pub fn validate_layer(file: &dyn TensorList, layer: &str) -> Result<QuantLayer, LayoutError> {
    let meta = layer_meta(file, layer)?;
    validate_layer_with(file, layer, meta)
}

/// Checks layer `layer` of `file` against already-parsed metadata (`None` = plain weight).
pub fn validate_layer_with(
    file: &dyn TensorList,
    layer: &str,
    meta: Option<LayerMeta>,
) -> Result<QuantLayer, LayoutError> {
    let weight = format!("{layer}.weight");
    let first = Check {
        file,
        layer,
        format: meta.as_ref().map_or(Format::F32, |m| m.format),
    };
    let (wdt, wshape) = first.require(&weight)?;
    let format = match &meta {
        Some(m) => m.format,
        None => plain_format(layer, &weight, wdt)?,
    };
    let c = Check {
        file,
        layer,
        format,
    };
    if wshape.len() != 2 {
        return Err(LayoutError::Shape {
            layer: layer.to_owned(),
            tensor: weight,
            expected: "2-D [N, K]".to_owned(),
            found: wshape,
        });
    }
    let n = wshape[0];
    let weight_scale = format!("{layer}.weight_scale");
    let mut scale = Some(weight_scale.clone());
    let mut input_scale = None;
    let k = match format {
        Format::ConvrotW4a4 { group, .. } => {
            c.dtype(&weight, wdt, &[Dtype::I8])?;
            let k = wshape[1] * 2;
            c.multiple(k, group as usize, "convrot_groupsize")?;
            c.multiple(k, 64, "convrot_w4a4 needs K % 64 == 0")?;
            c.scale(&weight_scale, &[&[n]])?;
            k
        }
        Format::Int8Tensorwise { convrot_group } => {
            c.dtype(&weight, wdt, &[Dtype::I8])?;
            let k = wshape[1];
            match convrot_group {
                Some(g) => {
                    c.multiple(k, g as usize, "convrot_groupsize")?;
                    c.scale(&weight_scale, &[&[n, 1]])?;
                }
                None => c.scale(&weight_scale, &[&[], &[1]])?,
            }
            k
        }
        Format::Float8E4m3fn | Format::Float8E5m2 => {
            let want = if format == Format::Float8E4m3fn {
                Dtype::F8_E4M3
            } else {
                Dtype::F8_E5M2
            };
            c.dtype(&weight, wdt, &[want])?;
            let old = meta
                .as_ref()
                .is_some_and(|m| m.source == MetaSource::ScaledFp8);
            let (sname, iname) = if old {
                (
                    format!("{layer}.scale_weight"),
                    format!("{layer}.scale_input"),
                )
            } else {
                (weight_scale, format!("{layer}.input_scale"))
            };
            if meta.is_some() || c.get(&sname).is_some() {
                c.scale(&sname, &[&[], &[1]])?;
                scale = Some(sname);
            } else {
                // A bare fp8 weight without metadata or scale: ComfyUI casts it (scale 1).
                scale = None;
            }
            if c.get(&iname).is_some() {
                c.scale(&iname, &[&[], &[1]])?;
                input_scale = Some(iname);
            }
            wshape[1]
        }
        Format::F32 | Format::F16 | Format::Bf16 => {
            let want = match format {
                Format::F32 => Dtype::F32,
                Format::F16 => Dtype::F16,
                _ => Dtype::BF16,
            };
            c.dtype(&weight, wdt, &[want])?;
            scale = None;
            wshape[1]
        }
    };
    let bias_name = format!("{layer}.bias");
    let bias_dtype = match c.get(&bias_name) {
        Some((dt, shape)) => {
            c.dtype(&bias_name, dt, &[Dtype::F32, Dtype::F16, Dtype::BF16])?;
            c.shape(&bias_name, &shape, &[&[n]])?;
            Some(dt)
        }
        None => None,
    };
    Ok(QuantLayer {
        name: layer.to_owned(),
        format,
        n,
        k,
        weight,
        scale,
        bias: bias_dtype.map(|_| bias_name),
        bias_dtype,
        input_scale,
        has_bias: bias_dtype.is_some(),
        full_precision_matrix_mult: meta.as_ref().is_some_and(|m| m.full_precision_matrix_mult),
        source: meta.map(|m| m.source),
    })
}

/// Every linear layer of a file: each 2-D `X.weight` (plus layers named only in the
/// header metadata), checked, sorted by name.
pub fn discover_layers(file: &dyn TensorList) -> Result<Vec<QuantLayer>, LayoutError> {
    let mut names: Vec<String> = file
        .names()
        .into_iter()
        .filter_map(|n| {
            let layer = n.strip_suffix(".weight")?.to_owned();
            let (_, shape) = file.dtype_shape(&n)?;
            (shape.len() == 2).then_some(layer)
        })
        .collect();
    for (name, _) in crate::meta::header_layers(file)? {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names.sort();
    names.iter().map(|n| validate_layer(file, n)).collect()
}

/// Checks a validated layer's quantization scales (`weight_scale`,
/// `input_scale`): each must be positive and finite
/// ([`LayoutError::BadScale`], naming the tensor, element and weight row).
/// They are small (one value, or a few per row), so every model open reads
/// them all. A float layer has none to check; a scale whose bytes this
/// view cannot read is left to the kernels' own checks.
pub fn check_scales(file: &dyn TensorList, layer: &QuantLayer) -> Result<(), LayoutError> {
    if matches!(layer.format, Format::F32 | Format::F16 | Format::Bf16) {
        return Ok(());
    }
    for name in [&layer.scale, &layer.input_scale].into_iter().flatten() {
        let (Some((dtype, shape)), Some(bytes)) = (file.dtype_shape(name), file.bytes(name)) else {
            continue;
        };
        let Some(values) = crate::tensors::floats_to_f32(dtype, &bytes) else {
            continue;
        };
        if let Some(index) = values.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            let per_row = values.len() / layer.n.max(1);
            let row = if shape.first() == Some(&layer.n) && per_row >= 1 {
                format!(" (row {})", index / per_row)
            } else {
                String::new()
            };
            return Err(LayoutError::BadScale {
                layer: layer.name.clone(),
                tensor: name.clone(),
                index,
                row,
                value: values[index],
            });
        }
    }
    Ok(())
}
