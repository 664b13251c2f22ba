//! A small view of a safetensors file (names, dtypes, shapes, small tensor bytes,
//! header metadata) so metadata parsing and layout checks work the same over
//! `safetensors::SafeTensors`, an mmap index, or a hand-built table in a test.

use std::borrow::Cow;
use std::collections::HashMap;

pub use safetensors::Dtype;

/// What the quant crate needs to know about a file's tensors.
pub trait TensorList {
    /// Every tensor name, in any order.
    fn names(&self) -> Vec<String>;
    /// The dtype and shape of `name`, or `None` when the file has no such tensor.
    fn dtype_shape(&self, name: &str) -> Option<(Dtype, Vec<usize>)>;
    /// The raw little-endian bytes of `name` (used for small tensors: `comfy_quant` JSON,
    /// scales). `None` when absent or not readable through this view.
    fn bytes(&self, name: &str) -> Option<Cow<'_, [u8]>>;
    /// The header's `__metadata__` map, if any.
    fn header_metadata(&self) -> Option<&HashMap<String, String>>;
}

/// A parsed safetensors buffer with its header metadata kept (the `safetensors`
/// crate's `SafeTensors` drops `__metadata__`).
#[derive(Debug)]
pub struct SafeFile<'data> {
    tensors: safetensors::SafeTensors<'data>,
    metadata: Option<HashMap<String, String>>,
}

impl<'data> SafeFile<'data> {
    /// Parses the header of a whole-file buffer (an mmap or a `Vec`).
    pub fn parse(buffer: &'data [u8]) -> Result<Self, safetensors::SafeTensorError> {
        let (_, meta) = safetensors::SafeTensors::read_metadata(buffer)?;
        let tensors = safetensors::SafeTensors::deserialize(buffer)?;
        Ok(Self {
            tensors,
            metadata: meta.metadata().clone(),
        })
    }

    /// The underlying `SafeTensors`.
    pub fn tensors(&self) -> &safetensors::SafeTensors<'data> {
        &self.tensors
    }

    /// The borrowed bytes of one tensor, without copying.
    pub fn data(&self, name: &str) -> Option<&'data [u8]> {
        self.tensors.tensor(name).ok().map(|t| t.data())
    }
}

impl TensorList for SafeFile<'_> {
    fn names(&self) -> Vec<String> {
        self.tensors
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    fn dtype_shape(&self, name: &str) -> Option<(Dtype, Vec<usize>)> {
        let t = self.tensors.tensor(name).ok()?;
        Some((t.dtype(), t.shape().to_vec()))
    }

    fn bytes(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        self.data(name).map(Cow::Borrowed)
    }

    fn header_metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.as_ref()
    }
}

/// One row of a hand-built or index-built tensor table.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// The bytes, where the builder has them (at least `*.comfy_quant` for metadata).
    pub data: Option<Vec<u8>>,
}

/// A plain list of tensors plus header metadata: what a loader's mmap index can
/// build cheaply, and what tests use to describe a broken file.
#[derive(Debug, Clone, Default)]
pub struct TensorTable {
    /// The tensors.
    pub entries: Vec<TensorEntry>,
    /// The header's `__metadata__`.
    pub metadata: Option<HashMap<String, String>>,
}

impl TensorTable {
    /// Adds a tensor without data.
    pub fn push(&mut self, name: &str, dtype: Dtype, shape: &[usize]) -> &mut Self {
        self.entries.push(TensorEntry {
            name: name.to_owned(),
            dtype,
            shape: shape.to_vec(),
            data: None,
        });
        self
    }

    /// Adds a tensor with its bytes.
    pub fn push_data(
        &mut self,
        name: &str,
        dtype: Dtype,
        shape: &[usize],
        data: Vec<u8>,
    ) -> &mut Self {
        self.entries.push(TensorEntry {
            name: name.to_owned(),
            dtype,
            shape: shape.to_vec(),
            data: Some(data),
        });
        self
    }

    fn entry(&self, name: &str) -> Option<&TensorEntry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

impl TensorList for TensorTable {
    fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    fn dtype_shape(&self, name: &str) -> Option<(Dtype, Vec<usize>)> {
        self.entry(name).map(|e| (e.dtype, e.shape.clone()))
    }

    fn bytes(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        self.entry(name)?.data.as_deref().map(Cow::Borrowed)
    }

    fn header_metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.as_ref()
    }
}

/// Little-endian `f32`s from bytes of any alignment.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Little-endian `i32`s from bytes of any alignment.
pub fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bytes reinterpreted as `i8` (two's complement).
pub fn i8s(bytes: &[u8]) -> Vec<i8> {
    bytes.iter().map(|&b| b as i8).collect()
}

/// Converts a float tensor (`F32`, `F16`, `BF16`) to `f32`; `None` for other dtypes.
pub fn floats_to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    match dtype {
        Dtype::F32 => Some(f32s(bytes)),
        Dtype::F16 => Some(
            bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        Dtype::BF16 => Some(
            bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        _ => None,
    }
}

/// [`floats_to_f32`] into `dst` (one `f32` per element of `bytes`, the same
/// values); `false` for other dtypes.
pub(crate) fn floats_into_f32(dtype: Dtype, bytes: &[u8], dst: &mut [f32]) -> bool {
    match dtype {
        Dtype::F32 => convert_into(bytes.chunks_exact(4), dst, |c| {
            f32::from_le_bytes([c[0], c[1], c[2], c[3]])
        }),
        Dtype::F16 => convert_into(bytes.chunks_exact(2), dst, |c| {
            half::f16::from_le_bytes([c[0], c[1]]).to_f32()
        }),
        Dtype::BF16 => convert_into(bytes.chunks_exact(2), dst, |c| {
            half::bf16::from_le_bytes([c[0], c[1]]).to_f32()
        }),
        _ => return false,
    }
    true
}

fn convert_into<'a>(
    src: std::slice::ChunksExact<'a, u8>,
    dst: &mut [f32],
    f: impl Fn(&'a [u8]) -> f32,
) {
    debug_assert_eq!(src.len(), dst.len());
    for (d, c) in dst.iter_mut().zip(src) {
        *d = f(c);
    }
}

/// `f32`s as little-endian bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
