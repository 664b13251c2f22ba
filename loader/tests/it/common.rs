//! Helpers shared by the loader tests: writing safetensors files by hand
//! (including broken ones) and opening a wgpu device directly.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Bytes of a safetensors file with the given header text and data section.
pub fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// A valid file with the given `(name, dtype, shape, bytes)` tensors laid
/// out back to back, plus `__metadata__`.
pub fn valid_file(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        serde_json::json!({"format": "pt", "note": "test"}),
    );
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            (*name).into(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    raw_file(&serde_json::Value::Object(header).to_string(), &data)
}

/// Opens a device on the adapter `WGPU_BACKEND` selects (with host-memory
/// import enabled where the adapter offers it), or prints `skipped: …` and
/// returns `None` (a failure with `DYNVRAM_REQUIRE_GPU=1`).
pub fn test_device(test: &str) -> Option<(wgpu::Device, wgpu::Queue)> {
    let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all());
    device_on(test, backends).map(|(d, q, _)| (d, q))
}

/// [`test_device`] on the given backends; also says whether
/// `VK_EXT_external_memory_host` was enabled.
pub fn device_on(
    test: &str,
    backends: wgpu::Backends,
) -> Option<(wgpu::Device, wgpu::Queue, bool)> {
    let required = std::env::var("DYNVRAM_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()));
    let adapter = match adapter {
        Ok(a) => a,
        Err(e) => {
            assert!(
                !required,
                "{test}: DYNVRAM_REQUIRE_GPU=1 but no adapter: {e}"
            );
            eprintln!("{test}: skipped: no GPU adapter ({e})");
            return None;
        }
    };
    let desc = wgpu::DeviceDescriptor {
        label: Some(test),
        required_limits: adapter.limits(),
        ..Default::default()
    };
    match dynvram_loader::hostmem::request_device(&adapter, &desc, Default::default()) {
        Ok((device, queue, extras)) => {
            eprintln!(
                "{test}: running on {} (host import {})",
                adapter.get_info().name,
                extras.host_import
            );
            Some((device, queue, extras.host_import))
        }
        Err(e) => {
            assert!(!required, "{test}: request_device failed: {e}");
            eprintln!("{test}: skipped: request_device failed ({e})");
            None
        }
    }
}

/// Reads `len` bytes of `buffer` back to the host.
pub fn read_back(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
    len: u64,
) -> Vec<u8> {
    let padded = len.div_ceil(4) * 4;
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size: padded.max(4),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, padded);
    queue.submit([encoder.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |r| r.expect("map for read back"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    let view = staging.get_mapped_range(..).expect("mapped range");
    view[..len as usize].to_vec()
}

/// A `COPY_DST | COPY_SRC` device buffer of `size` bytes (rounded to 4).
pub fn device_buffer(device: &wgpu::Device, size: u64) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("test destination"),
        size: size.div_ceil(4).max(1) * 4,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    })
}
