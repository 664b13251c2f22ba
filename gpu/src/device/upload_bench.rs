//! The GPU measurements behind `dynvram bench upload`: file → VRAM through
//! the ring (warm and cold page cache; slots in mapped buffers or imported
//! host RAM), registered pin → VRAM (imported host RAM and mapped buffer),
//! and the zero-copy import of the file's own map; [`run_upload`] runs them
//! with the host's own baselines (raw reads, multi-threaded memcpy) of
//! [`dynvram_loader::bench`]. Each returns a [`Figure`]; the CLI prints them
//! side by side.

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use dynvram_loader::bench::Figure;

use dynvram_loader::bench::{median_seconds, memcpy, open, raw_read, write_test_file};
use dynvram_loader::{
    FileRange, HostBytes, LoadError, ReaderConfig, ReaderPool, RingCounters, align4,
};

use super::error::UploadError;
use super::host_memory::{self, HostMemory, HostMemoryChoice};
use super::pinned_buffer::PinnedBuffer;
use super::staging_ring::{RingConfig, StagingRing};

type Result<T, E = UploadError> = std::result::Result<T, E>;

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
    let dst_size = align4(len.min(1 << 30).min(device.limits().max_buffer_size)).max(4);
    let dst = device_buffer(device, dst_size);
    let piece = ring.config().slot_size.min(dst_size);
    let before = ring.counters();
    let seconds = median_seconds(reps, || {
        if cold {
            dynvram_loader::drop_page_cache(&file);
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
            let dst_offset = if wrapped + align4(n) <= dst_size {
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
    let counters = ring.counters().since(&before);
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
    let bytes = align4(bytes.min(device.limits().max_buffer_size)).max(4);
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

/// The first `bytes` of the file (warm in the page cache) into a new
/// registered pin, as a pass's first use of a pinned weight makes it:
/// allocation, the reader pool's copy (which faults the pages in), and the
/// import where the device imports host RAM (else a mapped buffer, filled
/// while mapped); the pin freed after each repetition. A streamed pass's first step pays this for every
/// weight it pins (12 s for 17.3 GB of FLUX.1-dev at 8 GiB on the H100,
/// BENCHMARKS.md session 24).
pub fn file_to_pin(
    device: &wgpu::Device,
    pool: &ReaderPool,
    path: &Path,
    bytes: u64,
    reps: usize,
) -> Result<Figure> {
    let (file, len) = open(path)?;
    let n = len.min(bytes);
    let src = FileRange {
        file: &file,
        path,
        tensor: "",
        start: 0,
        len: n,
    };
    let mut memory = None;
    let seconds = median_seconds(reps, || {
        let pin = PinnedBuffer::create(device, "bench pin", pool, &src)?;
        memory = Some(pin.memory());
        Ok::<_, UploadError>(())
    })?;
    Ok(Figure {
        name: format!(
            "file → new registered pin ({})",
            memory.map_or("none".to_owned(), |m| m.to_string())
        ),
        bytes: n,
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
    let align = match host_memory::import_alignment(device) {
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
        match host_memory::import_mapping(device, "bench file map probe", map.clone(), 0, piece) {
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
                host_memory::import_mapping(device, "bench file map", map.clone(), at, len)
            })
            .collect::<std::result::Result<Vec<_>, _>>()
    };
    let dst = device_buffer(device, max_piece);
    let copy_all = |bufs: &[host_memory::ImportedBuffer]| {
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
    /// The adapter's name, to time host → VRAM copies on a Vulkan device
    /// of the probe's own (`copy_probe`: each host memory kind, one and
    /// several transfer queues); `None` skips it.
    pub copy_probe: Option<String>,
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
    figures.push(file_to_pin(device, &pool, &options.file, 1 << 30, reps)?);
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
    if let Some(name) = &options.copy_probe {
        match copy_probe(name, len.min(1 << 30), reps) {
            Ok(f) => figures.extend(f),
            Err(e) => notes.push(format!("copy probe: {e}")),
        }
    }
    let mut rings = Vec::new();
    for &memory in &options.ring_memories {
        let config = RingConfig {
            memory,
            ..options.ring
        };
        let mut ring = StagingRing::new(device, config, pool.clone())?;
        if memory == HostMemoryChoice::Host && ring.memory() != HostMemory::Imported {
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

/// `copy_probe::host_copies` where there is Vulkan.
fn copy_probe(name: &str, bytes: u64, reps: usize) -> Result<Vec<Figure>, String> {
    #[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
    return super::copy_probe::host_copies(name, bytes, reps);
    #[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
    {
        let _ = (name, bytes, reps);
        Err("needs Vulkan".into())
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
    super::wait(device, None, "wait for uploads").map_err(Into::into)
}
