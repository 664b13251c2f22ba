//! Small wgpu helpers shared by the ring and the pins: creating mapped
//! staging buffers inside error scopes and checking copy preconditions.

use crate::error::{LoadError, Result};

/// Rounds `n` up to wgpu's copy alignment (4 bytes).
pub(crate) fn align4(n: u64) -> u64 {
    n.div_ceil(wgpu::COPY_BUFFER_ALIGNMENT) * wgpu::COPY_BUFFER_ALIGNMENT
}

/// Creates a `MAP_WRITE | COPY_SRC` buffer of `size` bytes, mapped at creation,
/// turning out-of-memory and validation errors into [`LoadError::Gpu`].
pub(crate) fn create_mapped_staging(
    device: &wgpu::Device,
    label: &str,
    size: u64,
) -> Result<wgpu::Buffer> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: true,
    });
    let validation_err = pollster::block_on(validation.pop());
    let oom_err = pollster::block_on(oom.pop());
    match oom_err.or(validation_err) {
        Some(e) => Err(LoadError::Gpu {
            what: format!("create staging buffer `{label}` ({size} bytes)"),
            message: e.to_string(),
        }),
        None => Ok(buffer),
    }
}

/// Checks that `len` bytes (padded to 4) can be copied to `dst` at `dst_offset`.
/// Returns the padded length.
pub(crate) fn check_copy(dst: &wgpu::Buffer, dst_offset: u64, len: u64) -> Result<u64> {
    let padded = align4(len);
    let what = || {
        format!(
            "copy of {len} bytes to offset {dst_offset} of a {}-byte buffer",
            dst.size()
        )
    };
    if !dst_offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) {
        return Err(LoadError::Gpu {
            what: what(),
            message: "destination offset is not a multiple of 4".into(),
        });
    }
    if !dst.usage().contains(wgpu::BufferUsages::COPY_DST) {
        return Err(LoadError::Gpu {
            what: what(),
            message: "destination lacks COPY_DST usage".into(),
        });
    }
    if dst_offset
        .checked_add(padded)
        .is_none_or(|end| end > dst.size())
    {
        return Err(LoadError::Gpu {
            what: what(),
            message: format!(
                "needs {padded} bytes (padded to 4) but the buffer has {} bytes",
                dst.size()
            ),
        });
    }
    Ok(padded)
}
