//! The measurements behind `dynvram bench upload`: file → VRAM through the
//! ring (warm and cold page cache; slots in mapped buffers or imported host
//! RAM), registered pin → VRAM (imported host RAM and mapped buffer), the
//! zero-copy import of the file's own map, and the baselines the host can
//! measure by itself (raw reads, multi-threaded memcpy).
//! Each returns a [`Figure`]; the CLI prints them side by side.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::atomic::AtomicFile;
use crate::error::{LoadError, Result};
use crate::hostmem::{self, HostMemoryChoice};
use crate::pinned::PinnedBuffer;
use crate::reader::{ReaderConfig, ReaderPool};
use crate::ring::{RingConfig, RingCounters, StagingRing};
use crate::source::{FileRange, HostBytes};

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
fn median_seconds(reps: usize, mut run: impl FnMut() -> Result<()>) -> Result<f64> {
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
    .unwrap_or(0.0);
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

/// The whole file → VRAM through the staging ring: one ring upload per slot
/// of bytes, a submit after each, into a device buffer of at most 1 GiB that
/// is overwritten as the file goes by. Returns the figure and the counters.
pub fn file_to_vram(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    ring: &mut StagingRing,
    path: &Path,
    cold: bool,
    reps: usize,
) -> Result<(Figure, RingCounters)> {
    let (file, len) = open(path)?;
    let dst_size = crate::gpu::align4(len.min(1 << 30).min(device.limits().max_buffer_size)).max(4);
    let dst = device_buffer(device, dst_size);
    let piece = ring.config().slot_size.min(dst_size);
    let before = ring.counters();
    let seconds = median_seconds(reps, || {
        if cold {
            crate::drop_page_cache(&file);
        }
        let mut at = 0;
        while at < len {
            let n = (len - at).min(piece);
            let src = FileRange {
                file: &file,
                path,
                tensor: "",
                start: at,
                len: n,
            };
            let mut encoder = device.create_command_encoder(&Default::default());
            let wrapped = at % dst_size;
            let dst_offset = if wrapped + crate::gpu::align4(n) <= dst_size {
                wrapped
            } else {
                0
            };
            ring.upload(device, queue, &mut encoder, &src, &dst, dst_offset)?;
            ring.submit(queue, encoder);
            at += n;
        }
        wait(device)
    })?;
    let after = ring.counters();
    let counters = RingCounters {
        bytes_staged: after.bytes_staged - before.bytes_staged,
        copies: after.copies - before.copies,
        slots_used: after.slots_used - before.slots_used,
        stalls: after.stalls - before.stalls,
        stall_time: after.stall_time - before.stall_time,
        flushes: after.flushes - before.flushes,
    };
    let cfg = ring.config();
    let figure = Figure {
        name: format!(
            "file → VRAM ({}), ring {}×{} MiB in {}, {} threads",
            if cold { "cold" } else { "warm" },
            cfg.slots,
            cfg.slot_size >> 20,
            ring.memory(),
            ring.pool().config().threads
        ),
        bytes: len,
        seconds,
    };
    Ok((figure, counters))
}

/// A registered pin of `bytes` → VRAM by `copy_buffer_to_buffer` alone, in
/// imported host RAM where the device can import (`memory: Host`) or in a
/// mapped buffer (`Mapped`: BAR on resizable-BAR GPUs, then VRAM → VRAM).
pub fn pinned_to_vram(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    pool: &ReaderPool,
    bytes: u64,
    memory: HostMemoryChoice,
    reps: usize,
) -> Result<Figure> {
    let bytes = crate::gpu::align4(bytes.min(device.limits().max_buffer_size)).max(4);
    let host: Vec<u8> = (0..bytes).map(|i| (i % 253) as u8).collect();
    let pin = match memory {
        HostMemoryChoice::Host => {
            PinnedBuffer::create(device, "bench pin", pool, &HostBytes(&host))?
        }
        HostMemoryChoice::Mapped => {
            PinnedBuffer::create_mapped(device, "bench pin", pool, &HostBytes(&host))?
        }
    };
    drop(host);
    let dst = device_buffer(device, bytes);
    let seconds = median_seconds(reps, || {
        let mut encoder = device.create_command_encoder(&Default::default());
        pin.copy_to(&mut encoder, &dst, 0)?;
        queue.submit([encoder.finish()]);
        wait(device)
    })?;
    Ok(Figure {
        name: format!("registered pin ({}) → VRAM", pin.memory()),
        bytes,
        seconds,
    })
}

/// How the file is mapped for [`file_import_to_vram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMap {
    /// `MAP_SHARED`, read-only: the page-cache pages themselves.
    SharedReadOnly,
    /// `MAP_PRIVATE`, writable (never written): a driver that pins pages for
    /// writing gets copy-on-write copies made by the kernel at import.
    PrivateCopyOnWrite,
}

/// The file's own map imported with `VK_EXT_external_memory_host` (in
/// pieces of at most 1 GiB) and copied to VRAM by DMA, no CPU copy of ours.
/// Returns two figures: import + copy + release per repetition, and the
/// copy alone from pieces imported once. The file's tail past the last
/// aligned piece is not counted. `Err(message)` carries the driver's answer
/// when the import is refused.
pub fn file_import_to_vram(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    path: &Path,
    how: FileMap,
    reps: usize,
) -> Result<std::result::Result<[Figure; 2], String>> {
    let (file, _) = open(path)?;
    let io = |source| LoadError::Io {
        path: path.to_owned(),
        op: "mmap",
        source,
    };
    match how {
        FileMap::SharedReadOnly => {
            // SAFETY: a map of a file the benchmark owns; the GPU only reads
            // it and the CPU never touches it (a truncation would fault the
            // DMA, not this process).
            let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io)?;
            import_pieces(device, queue, Arc::new(map), "shared", reps)
        }
        FileMap::PrivateCopyOnWrite => {
            // SAFETY: as above; a private map is never written by us.
            let map =
                unsafe { memmap2::MmapOptions::new().populate().map_copy(&file) }.map_err(io)?;
            import_pieces(device, queue, Arc::new(map), "private COW", reps)
        }
    }
}

fn import_pieces<M: AsRef<[u8]> + Send + Sync + 'static>(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    map: Arc<M>,
    kind: &str,
    reps: usize,
) -> Result<std::result::Result<[Figure; 2], String>> {
    let align = match hostmem::import_alignment(device) {
        Ok(a) => a,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let map_len = (*map).as_ref().len();
    let total = map_len as u64 / align * align;
    if total == 0 {
        return Ok(Err(format!(
            "file of {map_len} bytes is smaller than the import alignment {align}"
        )));
    }
    // Pieces of 1 GiB, else 64 MiB if the driver refuses large imports.
    let mut refusals = Vec::new();
    let mut max_piece = 0;
    for want in [1u64 << 30, 64 << 20] {
        let piece = want.min(device.limits().max_buffer_size).min(total) / align * align;
        match hostmem::import_mapping(device, "bench file map probe", map.clone(), 0, piece) {
            Ok(_) => {
                max_piece = piece;
                break;
            }
            Err(e) => refusals.push(format!("{} MiB pieces: {e}", piece >> 20)),
        }
    }
    if max_piece == 0 {
        return Ok(Err(refusals.join("; ")));
    }
    let pieces: Vec<(u64, u64)> = (0..total)
        .step_by(max_piece as usize)
        .map(|at| (at, max_piece.min(total - at)))
        .collect();
    let import_all = || {
        pieces
            .iter()
            .map(|&(at, len)| {
                hostmem::import_mapping(device, "bench file map", map.clone(), at, len)
            })
            .collect::<std::result::Result<Vec<_>, _>>()
    };
    let dst = device_buffer(device, max_piece);
    let copy_all = |bufs: &[hostmem::ImportedBuffer]| {
        for b in bufs {
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(b.buffer(), 0, &dst, 0, b.len() as u64);
            queue.submit([encoder.finish()]);
        }
        wait(device)
    };
    // Probe once: a refusal is a finding to print, not a failure.
    let once = match import_all() {
        Ok(bufs) => bufs,
        Err(e) => return Ok(Err(e.to_string())),
    };
    copy_all(&once)?;
    let copy_only = median_seconds(reps, || copy_all(&once))?;
    drop(once);
    wait(device)?;
    let mut failure = None;
    let with_import = median_seconds(reps, || {
        match import_all() {
            Ok(bufs) => copy_all(&bufs)?,
            Err(e) => failure = Some(e.to_string()),
        }
        wait(device)
    })?;
    if let Some(e) = failure {
        return Ok(Err(e));
    }
    Ok(Ok([
        Figure {
            name: format!("file map ({kind}) imported (import + DMA) → VRAM"),
            bytes: total,
            seconds: with_import,
        },
        Figure {
            name: format!("file map ({kind}) imported once, DMA → VRAM"),
            bytes: total,
            seconds: copy_only,
        },
    ]))
}

/// What `dynvram bench upload` runs.
#[derive(Debug, Clone)]
pub struct UploadBenchOptions {
    /// The file to stream (created with [`write_test_file`] if absent and
    /// `create_size` is set).
    pub file: PathBuf,
    /// Size of the test file to create when `file` does not exist.
    pub create_size: Option<u64>,
    /// Reader threads.
    pub threads: usize,
    /// The ring's shape; its `memory` is ignored, see `ring_memories`.
    pub ring: RingConfig,
    /// The ring memories to measure file → VRAM with (mapped, host).
    pub ring_memories: Vec<HostMemoryChoice>,
    /// Also measure the zero-copy import of the file's own map.
    pub file_import: bool,
    /// Repetitions per figure (the median is reported).
    pub reps: usize,
}

/// Every figure of one `bench upload` run, plus the ring counters of the
/// warm run.
#[derive(Debug, Clone)]
pub struct UploadReport {
    /// The figures, in the order measured.
    pub figures: Vec<Figure>,
    /// Ring counters of each warm file → VRAM run (one per ring memory).
    pub warm_counters: Vec<(String, RingCounters)>,
    /// Findings that are not figures (a refused import, with the driver's words).
    pub notes: Vec<String>,
}

/// Runs all upload measurements on one device, in one go.
pub fn run_upload(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    options: &UploadBenchOptions,
) -> Result<UploadReport> {
    let _span = tracing::info_span!("bench_upload", file = %options.file.display()).entered();
    if !options.file.exists()
        && let Some(size) = options.create_size
    {
        write_test_file(&options.file, size)?;
    }
    let (_, len) = open(&options.file)?;
    let pool = Arc::new(ReaderPool::new(ReaderConfig {
        threads: options.threads,
        ..ReaderConfig::default()
    })?);
    let reps = options.reps.max(1);
    let mut figures = Vec::new();
    let mut notes = Vec::new();
    let mut warm_counters = Vec::new();
    // Warm the page cache once, then measure.
    raw_read(&options.file, &pool, false, 1)?;
    figures.push(raw_read(&options.file, &pool, false, reps)?);
    let memcpy_bytes = len.min(1 << 30) as usize;
    for threads in [1, options.threads] {
        figures.push(memcpy(memcpy_bytes, threads, reps));
    }
    for memory in [HostMemoryChoice::Host, HostMemoryChoice::Mapped] {
        figures.push(pinned_to_vram(
            device,
            queue,
            &pool,
            len.min(1 << 30),
            memory,
            reps,
        )?);
    }
    let mut rings = Vec::new();
    for &memory in &options.ring_memories {
        let config = RingConfig {
            memory,
            ..options.ring
        };
        let mut ring = StagingRing::new(device, config, pool.clone())?;
        if memory == HostMemoryChoice::Host && ring.memory() != crate::HostMemory::Imported {
            notes
                .push("ring in host memory asked for, but the device cannot import: mapped".into());
        }
        let (warm, counters) = file_to_vram(device, queue, &mut ring, &options.file, false, reps)?;
        warm_counters.push((warm.name.clone(), counters));
        figures.push(warm);
        rings.push(ring);
    }
    if let Some(ring) = rings.first_mut() {
        figures.push(raw_read(&options.file, &pool, true, 1)?);
        figures.push(file_to_vram(device, queue, ring, &options.file, true, 1)?.0);
    }
    // Last: an experiment some drivers refuse (or are left unable to
    // allocate after); its failures are notes, never a lost report.
    if options.file_import {
        drop(rings);
        for how in [FileMap::SharedReadOnly, FileMap::PrivateCopyOnWrite] {
            match file_import_to_vram(device, queue, &options.file, how, reps) {
                Ok(Ok(two)) => figures.extend(two),
                Ok(Err(e)) => notes.push(format!("file map import ({how:?}) refused: {e}")),
                Err(e) => notes.push(format!("file map import ({how:?}) failed: {e}")),
            }
        }
    }
    Ok(UploadReport {
        figures,
        warm_counters,
        notes,
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

fn open(path: &Path) -> Result<(File, u64)> {
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

fn whole<'a>(file: &'a File, path: &'a Path, len: u64) -> FileRange<'a> {
    FileRange {
        file,
        path,
        tensor: "",
        start: 0,
        len,
    }
}

fn device_buffer(device: &wgpu::Device, size: u64) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench upload destination"),
        size,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    })
}

fn wait(device: &wgpu::Device) -> Result<()> {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map(|_| ())
        .map_err(|e| LoadError::Gpu {
            what: "wait for uploads".into(),
            message: e.to_string(),
        })
}
