//! Registered pins: a weight's bytes held in a persistent `COPY_SRC` buffer,
//! filled once from the file (by the reader pool, straight into the buffer's
//! memory) and from then on streamed to the GPU by `copy_buffer_to_buffer`
//! alone: no CPU copy, DMA at PCIe speed.
//!
//! The memory is imported host RAM where the device can import it
//! ([`super::host_memory`]); elsewhere an ordinary mapped buffer, which on a
//! resizable-BAR GPU is device-local (then the "pin" costs VRAM: the
//! [`PinnedBuffer::memory`] flag says which). Which weights get one is
//! policy (the memory crate); this is the mechanism.

use dynvram_loader::{ByteSource, ReaderPool, align4};

use super::error::{GpuError, UploadError};
use super::host_memory::{self, HostMemory, ImportError, ImportedBuffer};
use super::staging::{self, write_only};

type Result<T, E = UploadError> = std::result::Result<T, E>;

#[derive(Debug)]
enum Backing {
    Imported(ImportedBuffer),
    Mapped(wgpu::Buffer),
}

/// A weight's bytes in a persistent `COPY_SRC` buffer.
#[derive(Debug)]
pub struct PinnedBuffer {
    backing: Backing,
    len: u64,
}

impl PinnedBuffer {
    /// Allocates a buffer for `source` (padded with zeros), fills it through
    /// `pool`: imported host RAM when the device can import it, else a mapped
    /// buffer (filled while mapped, then unmapped).
    pub fn create(
        device: &wgpu::Device,
        label: &str,
        pool: &ReaderPool,
        source: &dyn ByteSource,
    ) -> Result<Self> {
        let len = source.len();
        let _span = tracing::debug_span!("pin_create", label, bytes = len).entered();
        // Filled before the import: the reader threads fault the pages in
        // as they copy (see `import_anonymous_filled`).
        let filled =
            host_memory::import_anonymous_filled(device, label, align4(len).max(4), |mut view| {
                pool.read(source, 0, view.slice(..len as usize))?;
                view.slice(len as usize..).fill(0);
                Ok::<_, UploadError>(())
            });
        match filled {
            Ok(buffer) => Ok(Self {
                backing: Backing::Imported(buffer),
                len,
            }),
            Err(Ok(ImportError::Unsupported(_))) => {
                Self::create_mapped(device, label, pool, source)
            }
            Err(Ok(e)) => {
                tracing::warn!(%e, "host-memory import failed: pin falls back to a mapped buffer");
                Self::create_mapped(device, label, pool, source)
            }
            Err(Err(e)) => Err(e),
        }
    }

    /// [`Self::create`] in an ordinary mapped buffer, never imported.
    pub fn create_mapped(
        device: &wgpu::Device,
        label: &str,
        pool: &ReaderPool,
        source: &dyn ByteSource,
    ) -> Result<Self> {
        let len = source.len();
        let _span = tracing::debug_span!("pin_register", label, bytes = len).entered();
        let padded = align4(len).max(4);
        let buffer = staging::create_mapped_staging(device, label, padded)?;
        let filled = {
            let mut view = buffer
                .get_mapped_range_mut(..)
                .map_err(|e| GpuError::Upload {
                    what: format!("map pinned buffer `{label}` ({padded} bytes)"),
                    message: e.to_string(),
                })?;
            let result = pool.read(source, 0, write_only(view.slice(..len as usize)));
            view.slice(len as usize..).fill(0);
            result
        };
        buffer.unmap();
        filled?;
        Ok(Self {
            backing: Backing::Mapped(buffer),
            len,
        })
    }

    /// Records a copy of the whole weight into `dst` at `dst_offset`.
    pub fn copy_to(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        dst: &wgpu::Buffer,
        dst_offset: u64,
    ) -> Result<(), GpuError> {
        self.copy_range_to(encoder, 0, self.len, dst, dst_offset)
    }

    /// Records a copy of bytes `[offset, offset + len)` (a multiple-of-4
    /// `offset`) into `dst` at `dst_offset`, e.g. one tile of a split weight.
    pub fn copy_range_to(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        offset: u64,
        len: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
    ) -> Result<(), GpuError> {
        let padded = self.check_range(offset, len, dst, dst_offset)?;
        encoder.copy_buffer_to_buffer(self.buffer(), offset, dst, dst_offset, padded);
        Ok(())
    }

    /// Checks a copy of bytes `[offset, offset + len)` into `dst` at
    /// `dst_offset` (as [`Self::copy_range_to`] records it) and returns the
    /// bytes it copies (`len` padded to 4), for callers recording the copy
    /// themselves, e.g. on another queue.
    pub fn check_range(
        &self,
        offset: u64,
        len: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
    ) -> Result<u64, GpuError> {
        let padded = staging::check_copy(dst, dst_offset, len)?;
        if !offset.is_multiple_of(4)
            || offset
                .checked_add(padded)
                .is_none_or(|e| e > self.buffer().size())
        {
            return Err(GpuError::Upload {
                what: format!("copy from pinned buffer of {} bytes", self.len),
                message: format!("range [{offset}, +{len}) is unaligned or outside it"),
            });
        }
        Ok(padded)
    }

    /// The weight's length in bytes (without padding).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the weight is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held (with padding), for the RAM ledger.
    pub fn size(&self) -> u64 {
        self.buffer().size()
    }

    /// Which memory the bytes are in.
    pub fn memory(&self) -> HostMemory {
        match self.backing {
            Backing::Imported(_) => HostMemory::Imported,
            Backing::Mapped(_) => HostMemory::Mapped,
        }
    }

    /// The weight's bytes from host memory, where readable (imported pins;
    /// mapped ones are write-only).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.backing {
            Backing::Imported(b) => Some(&b.host_bytes()[..self.len as usize]),
            Backing::Mapped(_) => None,
        }
    }

    /// The underlying buffer (a `COPY_SRC` source).
    pub fn buffer(&self) -> &wgpu::Buffer {
        match &self.backing {
            Backing::Imported(b) => b.buffer(),
            Backing::Mapped(b) => b,
        }
    }
}
