//! The host side of `dynvram bench upload`: the baselines the host can
//! measure by itself (raw reads through the reader pool, multi-threaded
//! memcpy), the [`Figure`] every measurement returns and the test file.
//! The GPU figures (file → VRAM through the ring, pins, imported file maps)
//! are `dynvram_gpu::device::upload_bench`'s, which runs them all.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use crate::atomic::AtomicFile;
use crate::error::{LoadError, Result};
use crate::reader::ReaderPool;
use crate::source::FileRange;

/// One measured throughput.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// What was measured.
    pub name: String,
    /// Bytes moved per repetition.
    pub bytes: u64,
    /// Median seconds per repetition.
    pub seconds: f64,
}

impl Figure {
    /// Throughput in GB/s (10⁹ bytes per second).
    pub fn gb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<40} {:>8.2} GB/s  ({} bytes in {:.4} s)",
            self.name,
            self.gb_per_s(),
            self.bytes,
            self.seconds
        )
    }
}

/// Median of timed repetitions of `run` (at least one).
pub fn median_seconds<E>(
    reps: usize,
    mut run: impl FnMut() -> std::result::Result<(), E>,
) -> std::result::Result<f64, E> {
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        run()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Host RAM → RAM copy of `bytes` split over `threads` threads.
pub fn memcpy(bytes: usize, threads: usize, reps: usize) -> Figure {
    let src: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
    let mut dst = vec![1u8; bytes];
    let threads = threads.max(1);
    let part = bytes.div_ceil(threads).max(1);
    let seconds = median_seconds(reps, || {
        std::thread::scope(|s| {
            for (d, sr) in dst.chunks_mut(part).zip(src.chunks(part)) {
                s.spawn(move || d.copy_from_slice(sr));
            }
        });
        Ok(())
    })
    .unwrap_or_else(|never: std::convert::Infallible| match never {});
    Figure {
        name: format!("memcpy, {threads} threads"),
        bytes: bytes as u64,
        seconds,
    }
}

/// The whole file read by the reader pool into RAM (64 MiB buffer reused).
pub fn raw_read(path: &Path, pool: &ReaderPool, cold: bool, reps: usize) -> Result<Figure> {
    let (file, len) = open(path)?;
    let mut buf = vec![0u8; len.min(64 << 20) as usize];
    let seconds = median_seconds(reps, || {
        if cold {
            crate::drop_page_cache(&file);
        }
        let mut at = 0;
        while at < len {
            let n = (len - at).min(buf.len() as u64);
            let src = whole(&file, path, len);
            pool.read_into(&src, at, &mut buf[..n as usize])?;
            at += n;
        }
        Ok(())
    })?;
    Ok(Figure {
        name: format!(
            "raw read ({}), {} threads",
            if cold { "cold" } else { "warm" },
            pool.config().threads
        ),
        bytes: len,
        seconds,
    })
}

/// Writes `size` bytes of a cheap pseudo-random pattern to `path` (atomically).
pub fn write_test_file(path: &Path, size: u64) -> Result<()> {
    let mut file = AtomicFile::create(path)?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for w in block.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            w.copy_from_slice(&state.to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        file.write_all(&block[..n]).map_err(|e| file.error(e))?;
        left -= n as u64;
    }
    file.commit().map(drop)
}

/// Opens the file at `path` and returns it with its length.
pub fn open(path: &Path) -> Result<(File, u64)> {
    let io = |op| {
        move |source| LoadError::Io {
            path: path.to_owned(),
            op,
            source,
        }
    };
    let file = File::open(path).map_err(io("open"))?;
    let len = file.metadata().map_err(io("stat"))?.len();
    Ok((file, len))
}

/// The first `len` bytes of `file` as a byte source.
pub fn whole<'a>(file: &'a File, path: &'a Path, len: u64) -> FileRange<'a> {
    FileRange {
        file,
        path,
        tensor: "",
        start: 0,
        len,
    }
}
