//! Positional reads into write-only memory and page-cache hints.
//!
//! All tensor bytes that are streamed go through [`pread_exact`]: unlike
//! touching a memory map, a file truncated underneath us gives a short read
//! (an error) instead of SIGBUS. The destination is a [`WriteOnlyBytes`] so the
//! same code writes into a mapped staging slot (never read back: it may be
//! write-combined) or into ordinary memory.

use std::fs::File;
use std::io;

use crate::write_only::WriteOnlyBytes;

/// How a positional read ended when it did not fill the destination.
#[derive(Debug)]
pub(crate) enum ReadFault {
    /// End of file after `got` bytes.
    Short { got: u64 },
    /// An OS error after `got` bytes.
    Os { got: u64, error: io::Error },
}

/// Reads exactly `dst.len()` bytes of `file` starting at `offset` into `dst`.
#[cfg(unix)]
pub(crate) fn pread_exact(
    file: &File,
    offset: u64,
    mut dst: WriteOnlyBytes<'_>,
) -> Result<(), ReadFault> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut got: u64 = 0;
    while !dst.is_empty() {
        let want = dst.len().min(1 << 30);
        let ptr = dst.as_raw_ptr().as_ptr();
        let Ok(at) = libc::off_t::try_from(offset + got) else {
            let error = io::Error::new(io::ErrorKind::InvalidInput, "offset exceeds off_t");
            return Err(ReadFault::Os { got, error });
        };
        // SAFETY: `ptr` is valid for writes of `dst.len() >= want` bytes (the
        // `WriteOnlyBytes` contract) and nothing else accesses that memory while
        // `dst` is borrowed here; pread only writes into it.
        let n = unsafe { libc::pread(fd, ptr.cast(), want, at) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(ReadFault::Os { got, error });
        }
        if n == 0 {
            return Err(ReadFault::Short { got });
        }
        let n = n.unsigned_abs();
        got += n as u64;
        dst = dst.into_slice(n..);
    }
    Ok(())
}

/// Reads exactly `dst.len()` bytes of `file` starting at `offset` into `dst`
/// (through a bounce buffer: std has no raw-pointer positional read here).
#[cfg(not(unix))]
pub(crate) fn pread_exact(
    file: &File,
    offset: u64,
    mut dst: WriteOnlyBytes<'_>,
) -> Result<(), ReadFault> {
    #[cfg(windows)]
    use std::os::windows::fs::FileExt;
    let mut bounce = vec![0u8; dst.len().min(2 << 20)];
    let mut got: u64 = 0;
    while !dst.is_empty() {
        let want = dst.len().min(bounce.len());
        match file.seek_read(&mut bounce[..want], offset + got) {
            Ok(0) => return Err(ReadFault::Short { got }),
            Ok(n) => {
                dst.slice(..n).copy_from_slice(&bounce[..n]);
                got += n as u64;
                dst = dst.into_slice(n..);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(ReadFault::Os { got, error }),
        }
    }
    Ok(())
}

/// Page-cache hints for a file range.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hint {
    /// The range will be read front to back (larger read-ahead).
    Sequential,
    /// The range is no longer needed in the page cache (drop-behind).
    DontNeed,
}

/// Applies `hint` to `[offset, offset + len)` of `file` (`len == 0`: to the end).
/// Best effort: hints that the OS rejects are logged, never fatal.
pub(crate) fn advise(file: &File, offset: u64, len: u64, hint: Hint) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let advice = match hint {
            Hint::Sequential => libc::POSIX_FADV_SEQUENTIAL,
            Hint::DontNeed => libc::POSIX_FADV_DONTNEED,
        };
        let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return;
        };
        // SAFETY: posix_fadvise only reads its integer arguments; an invalid
        // fd or range is reported through the return value.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, advice) };
        if rc != 0 {
            tracing::debug!(rc, ?hint, "posix_fadvise failed (ignored)");
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len, hint);
    }
}
