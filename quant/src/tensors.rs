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

/// Whether `dtype` has NaN or infinite values at all ([`first_non_finite`]
/// finds them): the floats of 8 bits or more, not integers.
pub fn can_be_non_finite(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::F64
            | Dtype::F32
            | Dtype::F16
            | Dtype::BF16
            | Dtype::F8_E4M3
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ
            | Dtype::F8_E8M0
    )
}

/// The first element of `bytes` (little-endian `dtype`) that is NaN or
/// infinite, as its index and value; `None` when every element is finite
/// or the dtype cannot hold such values (integers, 4- and 6-bit floats).
/// Tests bit patterns only, so it runs near memory speed.
pub fn first_non_finite(dtype: Dtype, bytes: &[u8]) -> Option<(usize, f32)> {
    // Exponent all ones: NaN or infinity.
    let (index, size) = match dtype {
        Dtype::F64 => (
            first_hit::<8>(bytes, |c| {
                u64::from_le_bytes(c) & 0x7FF0_0000_0000_0000 == 0x7FF0_0000_0000_0000
            }),
            8,
        ),
        Dtype::F32 => (
            first_hit::<4>(bytes, |c| {
                u32::from_le_bytes(c) & 0x7F80_0000 == 0x7F80_0000
            }),
            4,
        ),
        Dtype::F16 => (
            first_hit::<2>(bytes, |c| u16::from_le_bytes(c) & 0x7C00 == 0x7C00),
            2,
        ),
        Dtype::BF16 => (
            first_hit::<2>(bytes, |c| u16::from_le_bytes(c) & 0x7F80 == 0x7F80),
            2,
        ),
        // e4m3fn: no infinity; S.1111.111 is NaN.
        Dtype::F8_E4M3 => (first_hit::<1>(bytes, |[b]| b & 0x7F == 0x7F), 1),
        // e5m2: exponent all ones is infinity (mantissa 0) or NaN.
        Dtype::F8_E5M2 => (first_hit::<1>(bytes, |[b]| b & 0x7C == 0x7C), 1),
        // The "fnuz" formats' only NaN is negative zero's pattern.
        Dtype::F8_E4M3FNUZ | Dtype::F8_E5M2FNUZ => (first_hit::<1>(bytes, |[b]| b == 0x80), 1),
        // e8m0 (a scale type): 0xFF is NaN.
        Dtype::F8_E8M0 => (first_hit::<1>(bytes, |[b]| b == 0xFF), 1),
        _ => return None,
    };
    let i = index?;
    let c = &bytes[i * size..(i + 1) * size];
    let value = match dtype {
        Dtype::F64 => f64::from_le_bytes(c.try_into().ok()?) as f32,
        Dtype::F32 => f32::from_le_bytes(c.try_into().ok()?),
        Dtype::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
        Dtype::BF16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f32(),
        Dtype::F8_E5M2 if c[0] & 0x03 == 0 => {
            if c[0] & 0x80 == 0 {
                f32::INFINITY
            } else {
                f32::NEG_INFINITY
            }
        }
        _ => f32::NAN,
    };
    Some((i, value))
}

/// Whether any element of `bytes` (little-endian bf16) is past f16's
/// range (magnitude 65536 or more, where bf16's next value after 65280
/// lies; infinity and NaN too): such a tensor cannot be read as f16.
pub fn bf16_beyond_f16(bytes: &[u8]) -> bool {
    first_hit::<2>(bytes, |c| u16::from_le_bytes(c) & 0x7FFF >= 0x4780).is_some()
}

/// The first `N`-byte element of `bytes` for which `hit` holds. Blocks of
/// 64 elements are tested without an early exit, which vectorizes (7×
/// faster here than stopping at each element); a hit is then found inside.
fn first_hit<const N: usize>(bytes: &[u8], hit: impl Fn([u8; N]) -> bool + Copy) -> Option<usize> {
    let test = move |c: &[u8]| c.try_into().is_ok_and(hit);
    bytes.chunks(64 * N).enumerate().find_map(|(b, block)| {
        let elements = || block.chunks_exact(N);
        elements()
            .fold(false, |any, c| any | test(c))
            .then(|| elements().position(test).map(|i| b * 64 + i))
            .flatten()
    })
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

#[cfg(test)]
mod non_finite_tests {
    use super::*;

    #[test]
    fn bf16_past_f16s_range_is_found() {
        let bytes = |v: &[u16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        // 65280 and -65280 fit f16; 65536, infinity and NaN do not.
        assert!(!bf16_beyond_f16(&bytes(&[0x3F80, 0x477F, 0xC77F, 0x0001])));
        for big in [0x4780u16, 0xC780, 0x7F80, 0x7FC0] {
            let mut v = vec![0u16; 300];
            v[299] = big;
            assert!(bf16_beyond_f16(&bytes(&v)), "{big:#06x}");
        }
        assert!(!bf16_beyond_f16(&[]));
    }

    #[test]
    fn first_non_finite_finds_nan_and_infinity_per_dtype() {
        let f32s: Vec<u8> = [1.0f32, -2.5, f32::INFINITY, f32::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(first_non_finite(Dtype::F32, &f32s[..8]), None);
        assert_eq!(
            first_non_finite(Dtype::F32, &f32s),
            Some((2, f32::INFINITY))
        );
        let halves = |vals: &[f32], bf: bool| -> Vec<u8> {
            vals.iter()
                .flat_map(|&v| {
                    if bf {
                        half::bf16::from_f32(v).to_le_bytes()
                    } else {
                        half::f16::from_f32(v).to_le_bytes()
                    }
                })
                .collect()
        };
        // 65504 is f16's largest finite value, 1e38 near bf16's.
        let finite = [0.0, -0.0, 65504.0, -1.0e-7];
        assert_eq!(first_non_finite(Dtype::F16, &halves(&finite, false)), None);
        assert_eq!(
            first_non_finite(Dtype::BF16, &halves(&[1.0e38, -3.0], true)),
            None
        );
        let (i, v) = first_non_finite(Dtype::F16, &halves(&[1.0, 2.0, f32::NAN], false)).unwrap();
        assert!(i == 2 && v.is_nan());
        assert_eq!(
            first_non_finite(Dtype::BF16, &halves(&[1.0, f32::NEG_INFINITY], true)),
            Some((1, f32::NEG_INFINITY))
        );
        let f64s: Vec<u8> = [1.0f64, f64::MAX, f64::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(first_non_finite(Dtype::F64, &f64s[..16]), None);
        assert!(first_non_finite(Dtype::F64, &f64s).is_some_and(|(i, v)| i == 2 && v.is_nan()));
        // e4m3fn: 0x7E is 448, its largest finite; 0xFF is NaN.
        assert_eq!(first_non_finite(Dtype::F8_E4M3, &[0x00, 0x7E, 0xFE]), None);
        assert!(
            first_non_finite(Dtype::F8_E4M3, &[0x01, 0xFF])
                .is_some_and(|(i, v)| i == 1 && v.is_nan())
        );
        // e5m2: 0x7B is 57344, 0x7C +inf, 0xFC -inf, 0x7D NaN.
        assert_eq!(first_non_finite(Dtype::F8_E5M2, &[0x7B, 0xFB]), None);
        assert_eq!(
            first_non_finite(Dtype::F8_E5M2, &[0x7B, 0xFC]),
            Some((1, f32::NEG_INFINITY))
        );
        assert!(first_non_finite(Dtype::F8_E5M2, &[0x7D]).is_some_and(|(_, v)| v.is_nan()));
        // Integer payloads cannot be non-finite: bytes that would be NaN as floats pass.
        assert_eq!(first_non_finite(Dtype::I8, &[0xFF, 0x7F]), None);
        assert_eq!(first_non_finite(Dtype::I32, &f32s), None);
        assert_eq!(first_non_finite(Dtype::U8, &[0xFF]), None);
    }
}
