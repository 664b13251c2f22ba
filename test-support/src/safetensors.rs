//! Small safetensors files in tests: read whole (references, goldens,
//! models), written from values, or written by hand byte for byte (broken
//! files for the loader's fault tests).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// One tensor of a file: as stored, and decoded.
#[derive(Debug, Clone)]
pub struct Tensor {
    /// The stored dtype.
    pub dtype: Dtype,
    /// The shape.
    pub shape: Vec<usize>,
    /// The stored bytes.
    pub bytes: Vec<u8>,
    /// The values as f32 for F32/F16/BF16 (widened exactly), else empty.
    pub values: Vec<f32>,
    /// The values of an I64 tensor, else empty.
    pub ids: Vec<i64>,
}

impl Tensor {
    /// A tensor of `dtype` and `shape` from its stored bytes.
    pub fn new(dtype: Dtype, shape: Vec<usize>, bytes: Vec<u8>) -> Self {
        let (values, ids) = match dtype {
            Dtype::F32 => (
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                vec![],
            ),
            Dtype::F16 => (
                bytes
                    .chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                vec![],
            ),
            Dtype::BF16 => (
                bytes
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                vec![],
            ),
            Dtype::I64 => (
                vec![],
                bytes
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
            ),
            _ => (vec![], vec![]),
        };
        Self {
            dtype,
            shape,
            bytes,
            values,
            ids,
        }
    }

    /// An F32 tensor of `values`.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::new(Dtype::F32, shape, bytes)
    }

    /// The shape as `u64`s (GPU tensors' shapes).
    pub fn shape_u64(&self) -> Vec<u64> {
        self.shape.iter().map(|&d| d as u64).collect()
    }

    /// I64 ids as `u32` (token ids).
    pub fn ids_u32(&self) -> Vec<u32> {
        assert_eq!(self.dtype, Dtype::I64, "ids of a {:?} tensor", self.dtype);
        self.ids
            .iter()
            .map(|&i| u32::try_from(i).expect("id fits u32"))
            .collect()
    }
}

/// Every tensor of the safetensors file at `path` (small files only).
#[track_caller]
pub fn read(path: &Path) -> HashMap<String, Tensor> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    st.tensors()
        .into_iter()
        .map(|(name, v)| {
            let t = Tensor::new(v.dtype(), v.shape().to_vec(), v.data().to_vec());
            (name, t)
        })
        .collect()
}

/// Tensor `name` of `tensors`, or a panic naming it.
#[track_caller]
pub fn get<'a>(tensors: &'a HashMap<String, Tensor>, name: &str) -> &'a Tensor {
    tensors
        .get(name)
        .unwrap_or_else(|| panic!("tensor `{name}` missing"))
}

/// Writes `tensors` as a safetensors file at `path` (through the
/// safetensors crate: a valid file).
#[track_caller]
pub fn write<'a>(path: &Path, tensors: impl IntoIterator<Item = (String, &'a Tensor)>) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .into_iter()
        .map(|(name, t)| {
            let view = TensorView::new(t.dtype, t.shape.clone(), &t.bytes)
                .unwrap_or_else(|e| panic!("tensor `{name}`: {e}"));
            (name, view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path)
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// Writes F32 tensors `(name, shape, values)` at `path`.
#[track_caller]
pub fn write_f32(path: &Path, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
    let owned: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, s, v)| (n.to_string(), Tensor::from_f32(s.clone(), v)))
        .collect();
    write(path, owned.iter().map(|(n, t)| (n.clone(), t)));
}

/// Bytes of a safetensors file with the header text and data section given,
/// as they are: nothing is checked, so broken files can be made.
pub fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Bytes of a valid file with the `(name, dtype, shape, bytes)` tensors laid
/// out back to back, plus a `__metadata__` entry.
pub fn file_bytes(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        serde_json::json!({"format": "pt", "note": "test"}),
    );
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            (*name).into(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    raw_file(&serde_json::Value::Object(header).to_string(), &data)
}

/// Writes `bytes` to `dir/name` and returns the path.
#[track_caller]
pub fn write_bytes(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// Writes `dir/m.safetensors` holding `data` as one U8 tensor `w` and
/// returns its path.
#[track_caller]
pub fn one_tensor_file(dir: &Path, data: &[u8]) -> PathBuf {
    let bytes = file_bytes(&[("w", "U8", vec![data.len()], data.to_vec())]);
    write_bytes(dir, "m.safetensors", &bytes)
}

#[cfg(test)]
mod tests {
    use super::{Dtype, Tensor, file_bytes, get, read, write_bytes, write_f32};

    #[test]
    fn written_tensors_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.safetensors");
        write_f32(&path, &[("x", vec![2, 2], vec![1.0, -2.0, 3.5, 0.25])]);
        let t = read(&path);
        let x = get(&t, "x");
        assert_eq!((x.dtype, x.shape_u64()), (Dtype::F32, vec![2, 2]));
        assert_eq!(x.values, [1.0, -2.0, 3.5, 0.25]);
        let ids: Vec<u8> = [7i64, 300].iter().flat_map(|i| i.to_le_bytes()).collect();
        let p = write_bytes(
            dir.path(),
            "ids.safetensors",
            &file_bytes(&[("ids", "I64", vec![2], ids)]),
        );
        assert_eq!(get(&read(&p), "ids").ids_u32(), [7, 300]);
        let bf = Tensor::new(
            Dtype::BF16,
            vec![1],
            half::bf16::from_f32(1.5).to_le_bytes().to_vec(),
        );
        assert_eq!(bf.values, [1.5]);
    }
}
