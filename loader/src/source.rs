//! Where upload bytes come from: a range of a file (read with `pread`) or
//! bytes already in host memory (an unregistered pin, a test vector).

use std::fs::File;
use std::path::Path;

use crate::write_only::WriteOnlyBytes;

use crate::error::{LoadError, Result};
use crate::fileio::{self, Hint, ReadFault};

/// A byte range that can be copied into write-only memory from several
/// threads at once (each call covers a disjoint part).
pub trait ByteSource: Sync {
    /// Total number of bytes.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes bytes `[offset, offset + dst.len())` of this source into `dst`.
    fn read_at(&self, offset: u64, dst: WriteOnlyBytes<'_>) -> Result<()>;

    /// Tells the OS that `[offset, offset + len)` will not be read again soon
    /// (drop-behind after a cold read). Default: nothing to drop.
    fn drop_behind(&self, _offset: u64, _len: u64) {}

    /// A short description for logs and errors.
    fn describe(&self) -> String;
}

/// A byte range of an open file, read with positional reads (never through a
/// memory map, so truncation gives [`LoadError::ShortRead`], not SIGBUS).
#[derive(Debug, Clone, Copy)]
pub struct FileRange<'a> {
    /// The open file.
    pub file: &'a File,
    /// Its path (for errors).
    pub path: &'a Path,
    /// The tensor these bytes belong to (for errors; may be empty).
    pub tensor: &'a str,
    /// Absolute file offset of the first byte.
    pub start: u64,
    /// Number of bytes.
    pub len: u64,
}

impl ByteSource for FileRange<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, dst: WriteOnlyBytes<'_>) -> Result<()> {
        let want = dst.len() as u64;
        if offset.checked_add(want).is_none_or(|end| end > self.len) {
            return Err(LoadError::RangeOutsideTensor {
                path: self.path.to_owned(),
                tensor: self.tensor.to_owned(),
                offset,
                len: want,
                tensor_len: self.len,
            });
        }
        let at = self.start + offset;
        fileio::pread_exact(self.file, at, dst).map_err(|fault| match fault {
            ReadFault::Short { got } => LoadError::ShortRead {
                file: self.path.to_owned(),
                tensor: self.tensor.to_owned(),
                offset: at,
                expected: want,
                got,
            },
            ReadFault::Os { got, error } => LoadError::Read {
                file: self.path.to_owned(),
                tensor: self.tensor.to_owned(),
                offset: at + got,
                source: error,
            },
        })
    }

    fn drop_behind(&self, offset: u64, len: u64) {
        fileio::advise(self.file, self.start + offset, len, Hint::DontNeed);
    }

    fn describe(&self) -> String {
        format!(
            "`{}` tensor `{}` [{}, +{})",
            self.path.display(),
            self.tensor,
            self.start,
            self.len
        )
    }
}

/// Bytes already in host memory (copied into the destination per task).
#[derive(Debug, Clone, Copy)]
pub struct HostBytes<'a>(pub &'a [u8]);

impl ByteSource for HostBytes<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&self, offset: u64, mut dst: WriteOnlyBytes<'_>) -> Result<()> {
        let want = dst.len();
        let part = usize::try_from(offset)
            .ok()
            .and_then(|o| self.0.get(o..o.checked_add(want)?));
        match part {
            Some(bytes) => {
                dst.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(LoadError::RangeOutsideTensor {
                path: "<host memory>".into(),
                tensor: String::new(),
                offset,
                len: want as u64,
                tensor_len: self.0.len() as u64,
            }),
        }
    }

    fn describe(&self) -> String {
        format!("{} host bytes", self.0.len())
    }
}
