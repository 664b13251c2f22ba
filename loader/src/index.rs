//! The tensor index of one safetensors file, validated before any byte is
//! used (a model of several files: [`crate::ModelFiles`]).
//!
//! Which path touches which memory:
//! - the header is read with positional reads, never through the map;
//! - [`SafetensorsFile::read_into`] and every [`FileRange`] (the streaming,
//!   ring and pin paths) use `pread`, so a file truncated while open gives
//!   [`LoadError::ShortRead`];
//! - [`SafetensorsFile::bytes`] returns a slice of the read-only memory map for
//!   small tensors (metadata, scales). It re-checks the file length first and
//!   refuses with [`LoadError::FileChanged`]; a truncation racing with the
//!   caller's use of the slice can still fault, so never stream weights
//!   through it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use serde_json::Value;

use crate::error::{LoadError, Result};
use crate::fileio::{self, Hint, ReadFault};
use crate::source::FileRange;
use crate::write_only::WriteOnlyBytes;

/// Largest header accepted (the safetensors crate's own limit).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor of a file: name, dtype, shape and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub range: Range<u64>,
}

impl TensorInfo {
    /// Number of bytes.
    pub fn len(&self) -> u64 {
        self.range.end - self.range.start
    }

    /// Whether the tensor has no bytes.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// An open, validated safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    path: PathBuf,
    file: File,
    map: Option<memmap2::Mmap>,
    file_len: u64,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
}

impl SafetensorsFile {
    /// Opens `path`, reads and validates its header, maps it read-only and
    /// hints sequential access.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let _span = tracing::debug_span!("safetensors_open", path = %path.display()).entered();
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| LoadError::Io { path, op, source }
        };
        // A FIFO or device would block or never end: refused before opening.
        let kind = std::fs::metadata(&path).map_err(io("stat"))?.file_type();
        if !kind.is_file() {
            return Err(LoadError::Io {
                path: path.clone(),
                op: "open",
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{}, not a file; a safetensors file is needed",
                        describe_kind(&kind)
                    ),
                ),
            });
        }
        let file = File::open(&path).map_err(io("open"))?;
        let file_len = file.metadata().map_err(io("stat"))?.len();
        let header = read_header(&path, &file, file_len)?;
        let data_start = 8 + header.len() as u64;
        let parsed = parse_header(&path, &header, file_len - data_start, data_start)?;
        fileio::advise(&file, 0, 0, Hint::Sequential);
        let map = if file_len > 0 {
            // SAFETY: the map is read-only and private to this struct; the
            // file may still be truncated by another process, which is why
            // streaming uses pread and `bytes` re-checks the length.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io("mmap"))?;
            #[cfg(unix)]
            if let Err(e) = map.advise(memmap2::Advice::Sequential) {
                tracing::debug!(error = %e, "madvise(SEQUENTIAL) failed (ignored)");
            }
            Some(map)
        } else {
            None
        };
        let by_name = parsed
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        tracing::debug!(
            tensors = parsed.tensors.len(),
            file_len,
            "safetensors indexed"
        );
        Ok(Self {
            path,
            file,
            map,
            file_len,
            tensors: parsed.tensors,
            by_name,
            metadata: parsed.metadata,
        })
    }

    /// The tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`, if present.
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor called `name`, or [`LoadError::NoSuchTensor`].
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.get(name).ok_or_else(|| LoadError::NoSuchTensor {
            path: self.path.clone(),
            tensor: name.to_owned(),
        })
    }

    /// The `__metadata__` map (empty when absent).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (for positional reads).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file's length at open.
    pub fn len(&self) -> u64 {
        self.file_len
    }

    /// Whether the file is empty (never true for a valid file).
    pub fn is_empty(&self) -> bool {
        self.file_len == 0
    }

    /// The tensor's bytes from the memory map, after checking that the file
    /// still has its original length. For small tensors only (see module docs).
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor(name)?;
        let actual = self
            .file
            .metadata()
            .map_err(|source| LoadError::Io {
                path: self.path.clone(),
                op: "stat",
                source,
            })?
            .len();
        if actual != self.file_len {
            return Err(LoadError::FileChanged {
                file: self.path.clone(),
                expected: self.file_len,
                actual,
            });
        }
        let map: &[u8] = self.map.as_deref().unwrap_or(&[]);
        // In range: validated against `file_len` at open.
        let (start, end) = (info.range.start as usize, info.range.end as usize);
        Ok(map.get(start..end).unwrap_or(&[]))
    }

    /// A [`FileRange`] over the whole tensor, for the reader pool and the ring.
    pub fn source(&self, name: &str) -> Result<FileRange<'_>> {
        let info = self.tensor(name)?;
        Ok(self.range_source(info, 0..info.len()))
    }

    /// Copies `range` (relative to the tensor's start) of tensor `name` into
    /// `dst` with positional reads; `dst.len()` must equal the range length.
    pub fn read_into(&self, name: &str, range: Range<u64>, dst: &mut [u8]) -> Result<()> {
        let info = self.tensor(name)?;
        let len = range.end.saturating_sub(range.start);
        if range.start > range.end || range.end > info.len() || len != dst.len() as u64 {
            return Err(LoadError::RangeOutsideTensor {
                path: self.path.clone(),
                tensor: name.to_owned(),
                offset: range.start,
                len: dst.len() as u64,
                tensor_len: info.len(),
            });
        }
        let at = info.range.start + range.start;
        fileio::pread_exact(&self.file, at, WriteOnlyBytes::from_mut(dst)).map_err(|fault| {
            match fault {
                ReadFault::Short { got } => LoadError::ShortRead {
                    file: self.path.clone(),
                    tensor: name.to_owned(),
                    offset: at,
                    expected: len,
                    got,
                },
                ReadFault::Os { got, error } => LoadError::Read {
                    file: self.path.clone(),
                    tensor: name.to_owned(),
                    offset: at + got,
                    source: error,
                },
            }
        })
    }

    fn range_source<'a>(&'a self, info: &'a TensorInfo, range: Range<u64>) -> FileRange<'a> {
        FileRange {
            file: &self.file,
            path: &self.path,
            tensor: &info.name,
            start: info.range.start + range.start,
            len: range.end - range.start,
        }
    }
}

/// Reads the 8-byte length and the header bytes, checking both against the file.
fn read_header(path: &Path, file: &File, file_len: u64) -> Result<Vec<u8>> {
    if file_len < 8 {
        return Err(LoadError::TooShort {
            path: path.to_owned(),
            len: file_len,
        });
    }
    let read = |offset: u64, dst: &mut [u8]| {
        let want = dst.len();
        fileio::pread_exact(file, offset, WriteOnlyBytes::from_mut(dst)).map_err(|fault| {
            let source = match fault {
                ReadFault::Short { got } => std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("file ended after {got} of {} header bytes", want),
                ),
                ReadFault::Os { error, .. } => error,
            };
            LoadError::Io {
                path: path.to_owned(),
                op: "read header of",
                source,
            }
        })
    };
    let mut len_bytes = [0u8; 8];
    read(0, &mut len_bytes)?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_LEN {
        return Err(LoadError::HeaderTooLarge {
            path: path.to_owned(),
            header_len,
            limit: MAX_HEADER_LEN,
        });
    }
    if header_len > file_len - 8 {
        return Err(LoadError::HeaderPastEnd {
            path: path.to_owned(),
            header_len,
            file_len,
        });
    }
    let mut header = vec![0u8; header_len as usize];
    read(8, &mut header)?;
    Ok(header)
}

/// The validated contents of a header.
#[derive(Debug)]
pub struct ParsedHeader {
    /// The tensors, sorted by offset, with absolute byte ranges.
    pub tensors: Vec<TensorInfo>,
    /// The `__metadata__` map (empty when absent).
    pub metadata: BTreeMap<String, String>,
}

/// "is a FIFO" and the like, for a path that is not a regular file.
pub fn describe_kind(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "is a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "is a socket";
        }
        if kind.is_block_device() {
            return "is a block device";
        }
        if kind.is_char_device() {
            return "is a character device";
        }
    }
    if kind.is_dir() {
        "is a folder"
    } else if kind.is_symlink() {
        "is a symbolic link"
    } else {
        "is a special file"
    }
}

/// Parses and validates a header: every entry's dtype, shape, offsets and
/// byte count, and that no two tensors overlap. `data_start` turns relative
/// offsets into absolute ones; `data_len` is the length of the data section.
/// Public so the fuzz targets can drive it without a file; [`SafetensorsFile::open`]
/// is the normal entry point.
pub fn parse_header(
    path: &Path,
    header: &[u8],
    data_len: u64,
    data_start: u64,
) -> Result<ParsedHeader> {
    let json_err = |message: String| LoadError::HeaderJson {
        path: path.to_owned(),
        message,
    };
    let text = std::str::from_utf8(header).map_err(|e| json_err(format!("not UTF-8: {e}")))?;
    let value: Value =
        serde_json::from_str(text.trim_end_matches(' ')).map_err(|e| json_err(e.to_string()))?;
    let Value::Object(entries) = value else {
        return Err(json_err("the header is not a JSON object".into()));
    };
    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        if name == "__metadata__" {
            metadata = parse_metadata(path, entry)?;
        } else {
            tensors.push(parse_entry(path, name, entry, data_len, data_start)?);
        }
    }
    tensors.sort_by_key(|t| (t.range.start, t.range.end));
    let mut last: Option<&TensorInfo> = None;
    for t in tensors.iter().filter(|t| !t.is_empty()) {
        if let Some(prev) = last
            && t.range.start < prev.range.end
        {
            return Err(LoadError::Overlap {
                path: path.to_owned(),
                tensor: t.name.clone(),
                begin: t.range.start - data_start,
                end: t.range.end - data_start,
                other: prev.name.clone(),
                other_begin: prev.range.start - data_start,
                other_end: prev.range.end - data_start,
            });
        }
        if last.is_none_or(|p| t.range.end > p.range.end) {
            last = Some(t);
        }
    }
    // As the `safetensors` crate refuses them (`MetadataIncompleteBuffer`):
    // bytes past the last tensor are a sign of a damaged or foreign file.
    let used = last.map_or(0, |t| t.range.end - data_start);
    if used != data_len {
        return Err(LoadError::TrailingBytes {
            path: path.to_owned(),
            used,
            data_len,
        });
    }
    Ok(ParsedHeader { tensors, metadata })
}

fn parse_metadata(path: &Path, entry: Value) -> Result<BTreeMap<String, String>> {
    let bad = |message: String| LoadError::BadEntry {
        path: path.to_owned(),
        tensor: "__metadata__".into(),
        message,
    };
    let Value::Object(map) = entry else {
        return Err(bad("must be an object of strings".into()));
    };
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            other => Err(bad(format!("value of `{k}` is {other}, not a string"))),
        })
        .collect()
}

fn parse_entry(
    path: &Path,
    name: String,
    entry: Value,
    data_len: u64,
    data_start: u64,
) -> Result<TensorInfo> {
    let bad = |name: &str, message: &str| LoadError::BadEntry {
        path: path.to_owned(),
        tensor: name.to_owned(),
        message: message.to_owned(),
    };
    let Value::Object(fields) = entry else {
        return Err(bad(&name, "entry is not an object"));
    };
    let dtype_str = fields
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(&name, "missing string field `dtype`"))?;
    let dtype: Dtype =
        serde_json::from_value(Value::String(dtype_str.to_owned())).map_err(|_| {
            LoadError::UnknownDtype {
                path: path.to_owned(),
                tensor: name.clone(),
                dtype: dtype_str.to_owned(),
            }
        })?;
    let shape = fields
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(&name, "missing array field `shape`"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad(&name, "`shape` must hold non-negative integers"))?;
    let offsets = fields
        .get("data_offsets")
        .and_then(Value::as_array)
        .and_then(|a| match a.as_slice() {
            [b, e] => Some((b.as_u64()?, e.as_u64()?)),
            _ => None,
        })
        .ok_or_else(|| bad(&name, "`data_offsets` must be two non-negative integers"))?;
    let (begin, end) = offsets;
    if begin > end || end > data_len {
        return Err(LoadError::OffsetsOutOfRange {
            path: path.to_owned(),
            tensor: name,
            begin,
            end,
            data_len,
        });
    }
    let expected = byte_count(dtype, &shape).map_err(|message| LoadError::BadShape {
        path: path.to_owned(),
        tensor: name.clone(),
        dtype,
        shape: shape.clone(),
        message,
    })?;
    if expected != end - begin {
        return Err(LoadError::ByteCountMismatch {
            path: path.to_owned(),
            tensor: name,
            dtype,
            shape,
            expected,
            actual: end - begin,
        });
    }
    Ok(TensorInfo {
        name,
        dtype,
        shape,
        range: data_start + begin..data_start + end,
    })
}

/// Bytes of a tensor of `dtype` and `shape`, or why it has none.
pub fn byte_count(dtype: Dtype, shape: &[usize]) -> std::result::Result<u64, String> {
    let elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or("element count overflows u64")?;
    let bits = elements
        .checked_mul(dtype.bitsize() as u64)
        .ok_or("bit count overflows u64")?;
    if !bits.is_multiple_of(8) {
        return Err(format!(
            "{elements} elements of {} bits are not a whole number of bytes",
            dtype.bitsize()
        ));
    }
    Ok(bits / 8)
}
