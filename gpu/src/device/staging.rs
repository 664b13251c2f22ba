//! Small wgpu helpers shared by the staging ring, the pins and the upload
//! benchmark: creating mapped staging buffers inside error scopes and
//! checking copy preconditions.

use dynvram_loader::align4;

use super::GpuError;

// The ring's bookkeeping (dynvram_loader) pads copies to 4 bytes: wgpu's.
const _: () = assert!(wgpu::COPY_BUFFER_ALIGNMENT == 4);

/// Creates a `MAP_WRITE | COPY_SRC` buffer of `size` bytes, mapped at creation,
/// turning out-of-memory and validation errors into [`GpuError::Upload`].
pub(crate) fn create_mapped_staging(
    device: &wgpu::Device,
    label: &str,
    size: u64,
) -> Result<wgpu::Buffer, GpuError> {
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
        Some(e) => Err(GpuError::Upload {
            what: format!("create staging buffer `{label}` ({size} bytes)"),
            message: e.to_string(),
        }),
        None => Ok(buffer),
    }
}

/// Checks that `len` bytes (padded to 4) can be copied to `dst` at `dst_offset`.
/// Returns the padded length.
pub(crate) fn check_copy(dst: &wgpu::Buffer, dst_offset: u64, len: u64) -> Result<u64, GpuError> {
    let padded = align4(len);
    let what = || {
        format!(
            "copy of {len} bytes to offset {dst_offset} of a {}-byte buffer",
            dst.size()
        )
    };
    if !dst_offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) {
        return Err(GpuError::Upload {
            what: what(),
            message: "destination offset is not a multiple of 4".into(),
        });
    }
    if !dst.usage().contains(wgpu::BufferUsages::COPY_DST) {
        return Err(GpuError::Upload {
            what: what(),
            message: "destination lacks COPY_DST usage".into(),
        });
    }
    if dst_offset
        .checked_add(padded)
        .is_none_or(|end| end > dst.size())
    {
        return Err(GpuError::Upload {
            what: what(),
            message: format!(
                "needs {padded} bytes (padded to 4) but the buffer has {} bytes",
                dst.size()
            ),
        });
    }
    Ok(padded)
}

/// A mapped view of wgpu as the loader's write-only destination (the reader
/// pool fills mapped staging memory through it).
pub(crate) fn write_only(view: wgpu::WriteOnly<'_, [u8]>) -> dynvram_loader::WriteOnlyBytes<'_> {
    let len = view.len();
    let mut view = view;
    let first = view.as_raw_element_ptr();
    // SAFETY: `view` grants writes to `len` bytes at `first` for its
    // lifetime, which the result keeps (it is consumed here, so nothing else
    // writes through it meanwhile).
    unsafe {
        dynvram_loader::WriteOnlyBytes::new(std::ptr::NonNull::slice_from_raw_parts(first, len))
    }
}
