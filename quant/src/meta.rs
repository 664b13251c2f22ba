//! `comfy_quant` metadata in the three places ComfyUI has kept it:
//! a per-layer `L.comfy_quant` `U8` JSON tensor (current), the header's
//! `__metadata__["_quantization_metadata"]` (older), and the `scaled_fp8` marker
//! tensor with `L.scale_weight` scales (oldest).

use serde_json::{Map, Value};

use crate::format::{Format, LinearDtype, is_power_of_four};
use crate::tensors::{Dtype, TensorList};

/// `convrot_groupsize` when the JSON does not say (ComfyUI's default).
pub const DEFAULT_GROUP_SIZE: u32 = 256;
/// Header key of the older metadata form.
pub const HEADER_KEY: &str = "_quantization_metadata";
/// Name of the oldest form's marker tensor.
pub const SCALED_FP8_MARKER: &str = "scaled_fp8";

/// Bad quantization metadata; every variant names the layer (or header key).
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// The JSON does not parse.
    #[error("layer {layer}: comfy_quant is not valid JSON: {message}")]
    Json {
        /// Layer name.
        layer: String,
        /// Parser message.
        message: String,
    },
    /// The JSON is not an object.
    #[error("layer {layer}: comfy_quant must be a JSON object, found {found}")]
    NotObject {
        /// Layer name.
        layer: String,
        /// What was found.
        found: String,
    },
    /// No `format` key.
    #[error("layer {layer}: comfy_quant has no \"format\"")]
    MissingFormat {
        /// Layer name.
        layer: String,
    },
    /// A format this crate does not know.
    #[error(
        "layer {layer}: unknown comfy_quant format {format:?} (known: convrot_w4a4, int8_tensorwise, float8_e4m3fn, float8_e5m2)"
    )]
    UnknownFormat {
        /// Layer name.
        layer: String,
        /// The format string.
        format: String,
    },
    /// `convrot_groupsize` is not a power of 4 >= 4.
    #[error("layer {layer}: convrot_groupsize {value} is not a power of 4 >= 4")]
    BadGroupSize {
        /// Layer name.
        layer: String,
        /// The value as written.
        value: String,
    },
    /// A key has a value of the wrong type or an unknown value.
    #[error("layer {layer}: comfy_quant key {key:?} has bad value {value} (expected {expected})")]
    BadValue {
        /// Layer name.
        layer: String,
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// The `comfy_quant` tensor is not a 1-D `U8` tensor or its bytes are unreadable.
    #[error(
        "layer {layer}: tensor {tensor} must be a 1-D U8 tensor with readable bytes, found {found}"
    )]
    BadTensor {
        /// Layer name.
        layer: String,
        /// Tensor name.
        tensor: String,
        /// Dtype and shape found.
        found: String,
    },
    /// The header's `_quantization_metadata` is malformed.
    #[error("header {HEADER_KEY}: {reason}")]
    BadHeader {
        /// What is wrong.
        reason: String,
    },
}

/// Where a layer's metadata came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetaSource {
    /// `L.comfy_quant` tensor.
    Tensor,
    /// Header `_quantization_metadata`.
    Header,
    /// The `scaled_fp8` marker tensor.
    ScaledFp8,
}

/// A layer's parsed quantization metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerMeta {
    /// The weight format.
    pub format: Format,
    /// `full_precision_matrix_mult` (ComfyUI: dequantize and multiply in float).
    pub full_precision_matrix_mult: bool,
    /// Where it was found.
    pub source: MetaSource,
}

/// Parses one `comfy_quant` JSON document (bytes as stored in the `U8` tensor).
pub fn parse_comfy_quant(layer: &str, json: &[u8]) -> Result<LayerMeta, MetaError> {
    let value: Value = serde_json::from_slice(json).map_err(|e| MetaError::Json {
        layer: layer.to_owned(),
        message: e.to_string(),
    })?;
    parse_comfy_quant_value(layer, &value, MetaSource::Tensor)
}

/// Parses an already-decoded `comfy_quant` object; keys in a nested `params` object
/// count too, the top level wins.
pub fn parse_comfy_quant_value(
    layer: &str,
    value: &Value,
    source: MetaSource,
) -> Result<LayerMeta, MetaError> {
    let Value::Object(top) = value else {
        return Err(MetaError::NotObject {
            layer: layer.to_owned(),
            found: short(value),
        });
    };
    let mut merged: Map<String, Value> = match top.get("params") {
        Some(Value::Object(p)) => p.clone(),
        Some(other) => {
            return Err(bad_value(layer, "params", other, "an object"));
        }
        None => Map::new(),
    };
    for (k, v) in top {
        if k != "params" {
            merged.insert(k.clone(), v.clone());
        }
    }
    let format_name = match merged.get("format") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(bad_value(layer, "format", other, "a string")),
        None => {
            return Err(MetaError::MissingFormat {
                layer: layer.to_owned(),
            });
        }
    };
    let group = || group_size(layer, merged.get("convrot_groupsize"));
    let format = match format_name {
        "convrot_w4a4" => Format::ConvrotW4a4 {
            group: group()?,
            linear_dtype: linear_dtype(layer, merged.get("linear_dtype"))?,
        },
        "int8_tensorwise" => {
            let convrot = bool_key(layer, &merged, "convrot")?;
            Format::Int8Tensorwise {
                convrot_group: if convrot { Some(group()?) } else { None },
            }
        }
        "float8_e4m3fn" => Format::Float8E4m3fn,
        "float8_e5m2" => Format::Float8E5m2,
        other => {
            return Err(MetaError::UnknownFormat {
                layer: layer.to_owned(),
                format: other.to_owned(),
            });
        }
    };
    Ok(LayerMeta {
        format,
        full_precision_matrix_mult: bool_key(layer, &merged, "full_precision_matrix_mult")?,
        source,
    })
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 60 {
        // Cut on a character boundary: a value may hold multi-byte UTF-8.
        let cut = (0..=60).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

fn bad_value(layer: &str, key: &'static str, v: &Value, expected: &'static str) -> MetaError {
    MetaError::BadValue {
        layer: layer.to_owned(),
        key,
        value: short(v),
        expected,
    }
}

fn bool_key(layer: &str, m: &Map<String, Value>, key: &'static str) -> Result<bool, MetaError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(bad_value(layer, key, other, "true or false")),
    }
}

fn group_size(layer: &str, v: Option<&Value>) -> Result<u32, MetaError> {
    let Some(v) = v else {
        return Ok(DEFAULT_GROUP_SIZE);
    };
    v.as_u64()
        .and_then(|g| u32::try_from(g).ok())
        .filter(|&g| is_power_of_four(g))
        .ok_or_else(|| MetaError::BadGroupSize {
            layer: layer.to_owned(),
            value: short(v),
        })
}

fn linear_dtype(layer: &str, v: Option<&Value>) -> Result<LinearDtype, MetaError> {
    match v {
        None | Some(Value::Null) => Ok(LinearDtype::Int4),
        Some(Value::String(s)) if s == "int4" => Ok(LinearDtype::Int4),
        Some(Value::String(s)) if s == "int8" => Ok(LinearDtype::Int8),
        Some(other) => Err(bad_value(
            layer,
            "linear_dtype",
            other,
            "\"int4\" or \"int8\"",
        )),
    }
}

/// The layers listed in the header's `_quantization_metadata`
/// (`{"format_version":"1.0","layers":{name:{…}}}`), parsed.
pub fn header_layers(file: &dyn TensorList) -> Result<Vec<(String, LayerMeta)>, MetaError> {
    let Some(raw) = file.header_metadata().and_then(|m| m.get(HEADER_KEY)) else {
        return Ok(Vec::new());
    };
    let doc: Value = serde_json::from_str(raw).map_err(|e| MetaError::BadHeader {
        reason: format!("not valid JSON: {e}"),
    })?;
    let layers = doc
        .get("layers")
        .and_then(Value::as_object)
        .ok_or_else(|| MetaError::BadHeader {
            reason: "no \"layers\" object".to_owned(),
        })?;
    layers
        .iter()
        .map(|(name, v)| {
            Ok((
                name.clone(),
                parse_comfy_quant_value(name, v, MetaSource::Header)?,
            ))
        })
        .collect()
}

/// The metadata of layer `layer` (the prefix before `.weight`), looked up in the
/// per-layer tensor first, then the header, then the `scaled_fp8` convention.
/// `Ok(None)`: the layer is not quantized by metadata (plain weight).
pub fn layer_meta(file: &dyn TensorList, layer: &str) -> Result<Option<LayerMeta>, MetaError> {
    let tensor = format!("{layer}.comfy_quant");
    if let Some((dtype, shape)) = file.dtype_shape(&tensor) {
        let bytes = file.bytes(&tensor);
        return match (dtype, shape.len(), bytes) {
            (Dtype::U8, 1, Some(b)) => parse_comfy_quant(layer, &b).map(Some),
            (_, _, b) => Err(MetaError::BadTensor {
                layer: layer.to_owned(),
                tensor,
                found: format!(
                    "{dtype:?} {shape:?}{}",
                    if b.is_none() {
                        " (bytes unavailable)"
                    } else {
                        ""
                    }
                ),
            }),
        };
    }
    if let Some((_, meta)) = header_layers(file)?.into_iter().find(|(n, _)| n == layer) {
        return Ok(Some(meta));
    }
    if file.dtype_shape(SCALED_FP8_MARKER).is_some() {
        let format = match file.dtype_shape(&format!("{layer}.weight")) {
            Some((Dtype::F8_E4M3, _)) => Some(Format::Float8E4m3fn),
            Some((Dtype::F8_E5M2, _)) => Some(Format::Float8E5m2),
            _ => None,
        };
        return Ok(format.map(|format| LayerMeta {
            format,
            full_precision_matrix_mult: false,
            source: MetaSource::ScaledFp8,
        }));
    }
    Ok(None)
}

/// The `comfy_quant` JSON for `format`, byte for byte as ComfyUI's `json.dumps`
/// writes it (`", "` and `": "` separators; `linear_dtype` only when int8).
/// `None` for unquantized formats.
pub fn comfy_quant_json(format: Format) -> Option<String> {
    Some(match format {
        Format::ConvrotW4a4 {
            group,
            linear_dtype,
        } => {
            let ld = match linear_dtype {
                LinearDtype::Int4 => "",
                LinearDtype::Int8 => ", \"linear_dtype\": \"int8\"",
            };
            format!("{{\"format\": \"convrot_w4a4\", \"convrot_groupsize\": {group}{ld}}}")
        }
        Format::Int8Tensorwise {
            convrot_group: None,
        } => "{\"format\": \"int8_tensorwise\"}".to_owned(),
        Format::Int8Tensorwise {
            convrot_group: Some(g),
        } => {
            format!(
                "{{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": {g}}}"
            )
        }
        Format::Float8E4m3fn => "{\"format\": \"float8_e4m3fn\"}".to_owned(),
        Format::Float8E5m2 => "{\"format\": \"float8_e5m2\"}".to_owned(),
        Format::F32 | Format::F16 | Format::Bf16 => return None,
    })
}
