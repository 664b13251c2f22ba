//! Tensors as a model reads them, made of row ranges of the tensors its
//! files store: where another layout splits, orders or shapes the same
//! bytes differently (diffusers' `to_q`, `to_k`, `to_v` for BFL's fused
//! `qkv`; a `[C, C]` linear read as a `[C, C, 1, 1]` convolution), the
//! model names one tensor and its bytes are read from the parts in place.
//! Nothing is copied: a part is a byte range of a stored tensor, because
//! rows (the first dimension) of a row-major tensor are contiguous.

use std::collections::HashMap;
use std::ops::Range;

use crate::error::{LoadError, Result};
use crate::index::{SafetensorsFile, TensorInfo, byte_count};
use crate::source::{ByteSource, FileRange};
use crate::write_only::WriteOnlyBytes;

/// One tensor a model reads: the rows of stored tensors, concatenated
/// along the first dimension in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorView {
    /// The name the model reads it by.
    pub name: String,
    /// Its shape; `None`: the parts' rows, then the first part's other
    /// dimensions. A given shape must have as many rows as the parts and
    /// as many elements per row.
    pub shape: Option<Vec<usize>>,
    /// The stored tensors' rows it is made of, in order.
    pub parts: Vec<ViewPart>,
}

/// Rows of one stored tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewPart {
    /// The stored tensor's name.
    pub tensor: String,
    /// Its rows; `None`: all of them.
    pub rows: Option<Range<usize>>,
}

impl TensorView {
    /// `name`, stored whole as `stored`.
    pub fn rename(name: impl Into<String>, stored: impl Into<String>) -> Self {
        Self::concat(name, [stored.into()])
    }

    /// `name`, the stored tensors `parts` (whole) one after the other.
    pub fn concat(name: impl Into<String>, parts: impl IntoIterator<Item = String>) -> Self {
        Self {
            name: name.into(),
            shape: None,
            parts: parts
                .into_iter()
                .map(|tensor| ViewPart { tensor, rows: None })
                .collect(),
        }
    }

    /// The same view read as `shape`.
    pub fn with_shape(mut self, shape: Vec<usize>) -> Self {
        self.shape = Some(shape);
        self
    }
}

/// A byte range of a stored tensor that a view reads.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    /// Index of the file in the model's files.
    pub file: usize,
    /// The stored tensor.
    pub tensor: String,
    /// Absolute byte range in the file.
    pub range: Range<u64>,
}

/// A view checked against the stored tensors.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// As the model reads it (`range` is `0..len`: the bytes are the pieces').
    pub info: TensorInfo,
    pub pieces: Vec<Piece>,
}

/// The views of a model, by name.
#[derive(Debug, Default)]
pub(crate) struct Views {
    pub tensors: Vec<Resolved>,
    pub by_name: HashMap<String, usize>,
}

impl Views {
    /// Resolves `views` against the stored tensors: `stored(name)` gives
    /// the file index and entry of a stored tensor.
    pub fn resolve<'a>(
        views: &[TensorView],
        files: &'a [SafetensorsFile],
        stored: impl Fn(&str) -> Option<(usize, &'a TensorInfo)>,
    ) -> Result<Self> {
        let mut out = Self::default();
        for v in views {
            let first_path = files
                .first()
                .map(|f| f.path().to_owned())
                .unwrap_or_default();
            let bad = |path: &std::path::Path, why: String| LoadError::BadView {
                path: path.to_owned(),
                tensor: v.name.clone(),
                why,
            };
            if out.by_name.contains_key(&v.name) {
                return Err(bad(&first_path, "named by two views".into()));
            }
            let mut pieces = Vec::with_capacity(v.parts.len());
            let mut first: Option<&TensorInfo> = None;
            let mut rows = 0usize;
            for part in &v.parts {
                let (file, info) = stored(&part.tensor).ok_or_else(|| {
                    bad(&first_path, format!("no stored tensor `{}`", part.tensor))
                })?;
                let path = files[file].path();
                let Some((&dim0, rest)) = info.shape.split_first() else {
                    return Err(bad(
                        path,
                        format!("`{}` is a scalar: it has no rows", part.tensor),
                    ));
                };
                if let Some(f) = first
                    && (f.dtype != info.dtype || f.shape[1..] != *rest)
                {
                    return Err(bad(
                        path,
                        format!(
                            "`{}` is {:?} {:?}, but `{}` is {:?} {:?}: rows of one tensor \
                             must share dtype and width",
                            part.tensor, info.dtype, info.shape, f.name, f.dtype, f.shape
                        ),
                    ));
                }
                let r = part.rows.clone().unwrap_or(0..dim0);
                if r.start > r.end || r.end > dim0 {
                    return Err(bad(
                        path,
                        format!(
                            "rows {r:?} of `{}` are outside its {dim0} rows",
                            part.tensor
                        ),
                    ));
                }
                // Rows are whole bytes wherever the tensor is (checked at open).
                let row_bytes = if dim0 == 0 {
                    0
                } else {
                    info.len() / dim0 as u64
                };
                pieces.push(Piece {
                    file,
                    tensor: part.tensor.clone(),
                    range: info.range.start + r.start as u64 * row_bytes
                        ..info.range.start + r.end as u64 * row_bytes,
                });
                rows += r.end - r.start;
                first.get_or_insert(info);
            }
            let Some(first) = first else {
                return Err(bad(&first_path, "made of no stored tensor".into()));
            };
            let natural: Vec<usize> = std::iter::once(rows)
                .chain(first.shape[1..].iter().copied())
                .collect();
            let shape = match &v.shape {
                None => natural,
                Some(s) => {
                    let per_row = |d: &[usize]| d.iter().skip(1).product::<usize>();
                    if s.first() != Some(&rows) || per_row(s) != per_row(&natural) {
                        return Err(bad(
                            &first_path,
                            format!(
                                "read as {s:?}, but the parts hold {natural:?} (`{}` …)",
                                first.name
                            ),
                        ));
                    }
                    s.clone()
                }
            };
            let len = byte_count(first.dtype, &shape).map_err(|why| bad(&first_path, why))?;
            debug_assert_eq!(
                len,
                pieces
                    .iter()
                    .map(|p| p.range.end - p.range.start)
                    .sum::<u64>()
            );
            out.by_name.insert(v.name.clone(), out.tensors.len());
            out.tensors.push(Resolved {
                info: TensorInfo {
                    name: v.name.clone(),
                    dtype: first.dtype,
                    shape,
                    range: 0..len,
                },
                pieces,
            });
        }
        Ok(out)
    }
}

/// A tensor's bytes as a [`ByteSource`]: one range of its file, or the
/// ranges of a view's parts one after the other.
#[derive(Debug, Clone)]
pub struct TensorBytes<'a> {
    tensor: &'a str,
    parts: Parts<'a>,
}

#[derive(Debug, Clone)]
enum Parts<'a> {
    One(FileRange<'a>),
    Many(Vec<FileRange<'a>>),
}

impl<'a> From<FileRange<'a>> for TensorBytes<'a> {
    /// A stored tensor's range.
    fn from(range: FileRange<'a>) -> Self {
        Self {
            tensor: range.tensor,
            parts: Parts::One(range),
        }
    }
}

impl<'a> TensorBytes<'a> {
    /// A view's pieces.
    pub(crate) fn view(files: &'a [SafetensorsFile], r: &'a Resolved) -> Self {
        Self {
            tensor: &r.info.name,
            parts: Parts::Many(
                r.pieces
                    .iter()
                    .map(|p| FileRange {
                        file: files[p.file].file(),
                        path: files[p.file].path(),
                        tensor: &p.tensor,
                        start: p.range.start,
                        len: p.range.end - p.range.start,
                    })
                    .collect(),
            ),
        }
    }

    /// The file ranges, in order.
    pub fn ranges(&self) -> &[FileRange<'a>] {
        match &self.parts {
            Parts::One(r) => std::slice::from_ref(r),
            Parts::Many(v) => v,
        }
    }

    /// The range holding byte `offset` of the tensor and the offset in it.
    pub fn locate(&self, offset: u64) -> Option<(&FileRange<'a>, u64)> {
        let mut at = offset;
        for r in self.ranges() {
            if at < r.len {
                return Some((r, at));
            }
            at -= r.len;
        }
        None
    }
}

impl ByteSource for TensorBytes<'_> {
    fn len(&self) -> u64 {
        self.ranges().iter().map(|r| r.len).sum()
    }

    fn read_at(&self, offset: u64, mut dst: WriteOnlyBytes<'_>) -> Result<()> {
        let want = dst.len() as u64;
        let total = self.len();
        if offset.checked_add(want).is_none_or(|end| end > total) {
            let path = self.ranges().first().map(|r| r.path.to_owned());
            return Err(LoadError::RangeOutsideTensor {
                path: path.unwrap_or_default(),
                tensor: self.tensor.to_owned(),
                offset,
                len: want,
                tensor_len: total,
            });
        }
        let mut at = offset;
        for r in self.ranges() {
            if dst.is_empty() {
                break;
            }
            if at >= r.len {
                at -= r.len;
                continue;
            }
            let n = (r.len - at).min(dst.len() as u64) as usize;
            r.read_at(at, dst.slice(..n))?;
            dst = dst.into_slice(n..);
            at = 0;
        }
        Ok(())
    }

    fn drop_behind(&self, offset: u64, len: u64) {
        let (mut at, mut left) = (offset, len);
        for r in self.ranges() {
            if left == 0 {
                break;
            }
            if at >= r.len {
                at -= r.len;
                continue;
            }
            let n = (r.len - at).min(left);
            r.drop_behind(at, n);
            left -= n;
            at = 0;
        }
    }

    fn describe(&self) -> String {
        match &self.parts {
            Parts::One(r) => r.describe(),
            Parts::Many(v) => format!(
                "`{}` from {}",
                self.tensor,
                v.iter()
                    .map(|r| r.describe())
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
        }
    }
}
