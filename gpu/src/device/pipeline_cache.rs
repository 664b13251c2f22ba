//! The pipeline cache on disk: the driver's compiled kernels kept between
//! runs (wgpu's `PipelineCache`, Vulkan only), so a warm start skips the
//! driver's shader compiler.
//!
//! One file per adapter class in the folder [`super::GpuOptions::pipeline_cache`]
//! names, called by `wgpu::util::pipeline_cache_key`. The file is our
//! envelope around wgpu's data:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | `DYNVPLC1` |
//! | 8 | payload length, little-endian |
//! | 8 | SipHash-1-3 (std's `DefaultHasher::new()`) of the payload, little-endian |
//! | n | the payload: `PipelineCache::get_data` |
//!
//! wgpu checks its own header (version, pointer size, adapter, driver
//! version) but not the data behind it, which the driver deserializes; the
//! envelope's hash keeps a damaged file (a flipped bit, a foreign file under
//! our name) from ever reaching the driver. A file that fails any check is
//! logged and ignored: the run starts cold and the next save replaces it.
//! Files are written atomically (`dynvram_loader::atomic`).

use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use dynvram_loader::LoadError;

const MAGIC: &[u8; 8] = b"DYNVPLC1";
const HEADER: usize = 24;

/// Files above this are not read (a pipeline cache of our few hundred
/// kernels is megabytes; something this large is not ours).
const MAX_FILE: u64 = 256 << 20;

/// What [`super::Gpu::pipeline_cache_info`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineCacheInfo {
    /// The cache file (it may not exist yet).
    pub path: PathBuf,
    /// Payload bytes read from the file and handed to the driver; 0 when
    /// there was no file, it failed a check, or wgpu refused it. (wgpu
    /// silently starts empty on data from another wgpu or driver version;
    /// that still counts here.)
    pub loaded_bytes: u64,
}

/// An open cache and where it is saved.
#[derive(Debug)]
pub(super) struct DiskCache {
    cache: wgpu::PipelineCache,
    info: PipelineCacheInfo,
    /// Pipelines created through the cache since it was loaded or saved.
    created: AtomicU64,
    /// Length and hash of the payload the file holds (loaded or last
    /// saved), so an unchanged cache is not written again. Held while
    /// saving, so saves do not interleave.
    on_disk: Mutex<Option<(u64, u64)>>,
}

fn digest(payload: &[u8]) -> (u64, u64) {
    let mut h = std::hash::DefaultHasher::new();
    h.write(payload);
    (payload.len() as u64, h.finish())
}

/// The file's bytes for `payload`.
pub(super) fn encode(payload: &[u8]) -> Vec<u8> {
    let (len, hash) = digest(payload);
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&hash.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of a file's bytes, or why it is not one of ours.
pub(super) fn decode(bytes: &[u8]) -> Result<&[u8], &'static str> {
    let head = bytes.get(..HEADER).ok_or("shorter than its header")?;
    if &head[..8] != MAGIC {
        return Err("not a dynvram pipeline cache (bad magic)");
    }
    let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
    let payload = &bytes[HEADER..];
    if word(8) != payload.len() as u64 {
        return Err("truncated or extended (length differs from its header)");
    }
    if digest(payload).1 != word(16) {
        return Err("corrupt (hash differs from its header)");
    }
    Ok(payload)
}

/// The file's payload if it passes [`decode`]; `None` (logged) otherwise.
fn read(path: &Path) -> Option<Vec<u8>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!(path = %path.display(), "no pipeline cache yet: compiling cold");
            return None;
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), %e, "pipeline cache unreadable: compiling cold");
            return None;
        }
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_FILE {
        tracing::warn!(path = %path.display(), len, "pipeline cache ignored: larger than {MAX_FILE} bytes");
        return None;
    }
    let mut bytes = Vec::with_capacity(len as usize);
    if let Err(e) = std::io::Read::read_to_end(&mut &file, &mut bytes) {
        tracing::warn!(path = %path.display(), %e, "pipeline cache unreadable: compiling cold");
        return None;
    }
    match decode(&bytes) {
        Ok(payload) => Some(payload.to_vec()),
        Err(why) => {
            tracing::warn!(path = %path.display(), why, "pipeline cache ignored: compiling cold (the next save replaces it)");
            None
        }
    }
}

/// Creates a cache on `device` from `data`; wgpu's message when it refused
/// (caught here, not left for the device's uncaptured-error handler, which
/// would fail the run's next health check).
fn create(device: &wgpu::Device, data: Option<&[u8]>) -> Result<wgpu::PipelineCache, String> {
    let scopes = [
        wgpu::ErrorFilter::Validation,
        wgpu::ErrorFilter::OutOfMemory,
        wgpu::ErrorFilter::Internal,
    ]
    .map(|f| device.push_error_scope(f));
    // SAFETY: `data` is the payload of a file whose envelope (`decode`)
    // matched: bytes `get_data` returned, as written by `DiskCache::save`.
    // wgpu checks its header against this adapter and driver version, the
    // Vulkan driver its own; `fallback` makes a mismatch an empty cache.
    let cache = unsafe {
        device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
            label: Some("dynvram pipeline cache"),
            data,
            fallback: true,
        })
    };
    let mut err = None;
    for s in scopes.into_iter().rev() {
        if let Some(e) = pollster::block_on(s.pop()) {
            err.get_or_insert(e.to_string());
        }
    }
    err.map_or(Ok(cache), Err)
}

impl DiskCache {
    /// The cache of `info`'s adapter class in `dir`, seeded from its file
    /// where that passes the checks. `None` (logged) where the backend has
    /// no pipeline cache or wgpu refuses even an empty one.
    pub(super) fn open(
        device: &wgpu::Device,
        info: &wgpu::AdapterInfo,
        dir: &Path,
    ) -> Option<Self> {
        let path = dir.join(wgpu::util::pipeline_cache_key(info)?);
        let data = read(&path);
        let mut on_disk = data.as_deref().map(digest);
        let mut loaded_bytes = data.as_ref().map_or(0, |d| d.len() as u64);
        let cache = match create(device, data.as_deref()) {
            Ok(c) => c,
            Err(e) => {
                // An avoidable mismatch (another adapter's data under this
                // name) is an error in wgpu even with `fallback`.
                tracing::warn!(path = %path.display(), %e, "pipeline cache refused: compiling cold (the next save replaces it)");
                on_disk = None;
                loaded_bytes = 0;
                create(device, None)
                    .map_err(|e| tracing::warn!(%e, "no pipeline cache"))
                    .ok()?
            }
        };
        drop(data);
        tracing::debug!(path = %path.display(), loaded_bytes, "pipeline cache opened");
        Some(Self {
            cache,
            info: PipelineCacheInfo { path, loaded_bytes },
            created: AtomicU64::new(0),
            on_disk: Mutex::new(on_disk),
        })
    }

    pub(super) fn info(&self) -> &PipelineCacheInfo {
        &self.info
    }

    /// The cache for a pipeline about to be created (counted, so a save
    /// knows there may be something new).
    pub(super) fn for_pipeline(&self) -> &wgpu::PipelineCache {
        self.created.fetch_add(1, Ordering::Relaxed);
        &self.cache
    }

    /// The size of the cache's data now (the driver serializes it).
    pub(super) fn data_len(&self) -> usize {
        self.cache.get_data().map_or(0, |d| d.len())
    }

    /// Writes the cache to its file if pipelines were created since it was
    /// loaded or saved and its data differs from the file's. Returns the
    /// bytes written.
    pub(super) fn save(&self) -> Result<Option<u64>, LoadError> {
        let mut on_disk = self.on_disk.lock().unwrap_or_else(|p| p.into_inner());
        let created = self.created.swap(0, Ordering::Relaxed);
        if created == 0 {
            return Ok(None);
        }
        let Some(payload) = self.cache.get_data() else {
            return Ok(None);
        };
        let d = digest(&payload);
        if *on_disk == Some(d) {
            tracing::debug!(path = %self.info.path.display(), created, "pipeline cache unchanged: not written");
            return Ok(None);
        }
        let written = self.write(&payload).inspect_err(|_| {
            self.created.fetch_add(created, Ordering::Relaxed);
        })?;
        *on_disk = Some(d);
        tracing::info!(path = %self.info.path.display(), bytes = written, created, "pipeline cache saved");
        Ok(Some(written))
    }

    fn write(&self, payload: &[u8]) -> Result<u64, LoadError> {
        let path = &self.info.path;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| LoadError::Io {
                path: dir.to_owned(),
                op: "create the pipeline cache folder",
                source,
            })?;
        }
        dynvram_loader::atomic::write_file(path, &encode(payload))
    }
}

impl Drop for DiskCache {
    /// Saves what is new (a run that ends early still leaves its kernels).
    fn drop(&mut self) {
        if let Err(e) = self.save() {
            tracing::warn!(%e, "pipeline cache not saved");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HEADER, decode, encode};

    #[test]
    fn the_envelope_round_trips_and_refuses_damage() {
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let file = encode(&payload);
        assert_eq!(decode(&file), Ok(&payload[..]));
        assert_eq!(decode(&encode(&[])), Ok(&[][..]));
        let mut flipped = file.clone();
        flipped[HEADER + 500] ^= 1;
        assert!(decode(&flipped).unwrap_err().contains("corrupt"));
        assert!(
            decode(&file[..file.len() - 1])
                .unwrap_err()
                .contains("truncated")
        );
        assert!(decode(&file[..10]).unwrap_err().contains("shorter"));
        let mut longer = file.clone();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().contains("extended"));
        assert!(
            decode(b"garbage garbage garbage garbage")
                .unwrap_err()
                .contains("magic")
        );
    }
}
