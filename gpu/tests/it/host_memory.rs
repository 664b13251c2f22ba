//! Host-memory buffers: the `VK_EXT_external_memory_host` import path round
//! trips bytes on lavapipe (anonymous memory, a file's own map, pins, ring
//! slots), and GL falls back to mapped buffers with the flag saying so.

use std::sync::Arc;

use dynvram_gpu::device::host_memory::{self, HostMemory, HostMemoryChoice, ImportError};
use dynvram_gpu::device::{PinnedBuffer, RingConfig, StagingRing};
use dynvram_loader::{HostBytes, ReaderConfig, ReaderPool, SafetensorsFile};
use dynvram_test_support::gpu::{bare_device, device_buffer, read_back};
use dynvram_test_support::random;
use dynvram_test_support::safetensors::{one_tensor_file, write_bytes};

use crate::staging_ring::upload_in_pieces;

/// A Vulkan device with the import extension, or `None` (skipped) where the
/// Vulkan adapter lacks it.
fn import_device(test: &str) -> Option<(wgpu::Device, wgpu::Queue)> {
    let (device, queue, enabled) = bare_device(test, wgpu::Backends::VULKAN)?;
    if !enabled {
        eprintln!("{test}: skipped: the Vulkan adapter lacks VK_EXT_external_memory_host");
        return None;
    }
    Some((device, queue))
}

fn pool() -> ReaderPool {
    ReaderPool::new(ReaderConfig {
        threads: 3,
        task_size: 8 << 10,
        drop_behind: false,
    })
    .expect("pool")
}

fn copy_back(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    src: &wgpu::Buffer,
    src_offset: u64,
    len: u64,
) -> Vec<u8> {
    let dst = device_buffer(device, len);
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(src, src_offset, &dst, 0, len.div_ceil(4) * 4);
    queue.submit([enc.finish()]);
    read_back(device, queue, &dst, len)
}

#[test]
fn imported_anonymous_memory_round_trips() {
    let Some((device, queue)) = import_device("imported_anonymous_memory_round_trips") else {
        return;
    };
    let align = host_memory::import_alignment(&device).expect("alignment");
    assert!(align.is_power_of_two() && align >= 4096, "{align}");
    let data = random::bytes(1_000_003, 11);
    let mut buf = host_memory::import_anonymous(&device, "round trip", data.len() as u64)
        .expect("import anonymous memory");
    assert!(buf.len() >= data.len() && (buf.len() as u64).is_multiple_of(align));
    assert_eq!(buf.buffer().usage(), wgpu::BufferUsages::COPY_SRC);
    buf.write_view()
        .expect("writable")
        .slice(..data.len())
        .copy_from_slice(&data);
    assert_eq!(&buf.host_bytes()[..data.len()], &data[..]);
    assert_eq!(
        copy_back(&device, &queue, buf.buffer(), 0, 1_000_000),
        &data[..1_000_000]
    );
    // The CPU writes again after the copy finished: the GPU sees the new bytes.
    let again = random::bytes(4096, 12);
    buf.write_view()
        .expect("writable")
        .slice(8192..8192 + 4096)
        .copy_from_slice(&again);
    assert_eq!(copy_back(&device, &queue, buf.buffer(), 8192, 4096), again);
    // Dropping the buffer while a copy is still queued must not free the memory under it.
    let dst = device_buffer(&device, 4096);
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buf.buffer(), 8192, &dst, 0, 4096);
    queue.submit([enc.finish()]);
    drop(buf);
    assert_eq!(read_back(&device, &queue, &dst, 4096), again);
}

/// Memory filled before its import (a registered pin's: the pages faulted
/// in by the writes, on huge pages where the kernel gives them) holds what
/// was written, the tail past the data as the fill left it; a failing fill
/// is the fill's error and imports nothing.
#[test]
fn memory_filled_then_imported_round_trips() {
    let Some((device, queue)) = import_device("memory_filled_then_imported_round_trips") else {
        return;
    };
    // Past a 2 MiB huge page, not a multiple of the alignment.
    let data = random::bytes(5 << 20 | 12_345, 14);
    let buf =
        host_memory::import_anonymous_filled(&device, "filled", data.len() as u64, |mut v| {
            v.slice(..data.len()).copy_from_slice(&data);
            v.slice(data.len()..).fill(0);
            Ok::<_, String>(())
        })
        .unwrap_or_else(|e| panic!("import filled memory: {e:?}"));
    assert!(buf.len() >= data.len());
    assert_eq!(&buf.host_bytes()[..data.len()], &data[..]);
    assert!(buf.host_bytes()[data.len()..].iter().all(|&b| b == 0));
    let len = data.len() as u64;
    assert_eq!(copy_back(&device, &queue, buf.buffer(), 0, len), &data[..]);
    let err = host_memory::import_anonymous_filled(&device, "refused", 4096, |_| {
        Err::<(), _>("fill failed".to_owned())
    })
    .expect_err("the fill's error");
    assert!(matches!(err, Err(ref m) if m == "fill failed"), "{err:?}");
}

#[test]
fn imported_file_map_copies_page_cache_bytes() {
    let Some((device, queue)) = import_device("imported_file_map_copies_page_cache_bytes") else {
        return;
    };
    let align = host_memory::import_alignment(&device).expect("alignment") as usize;
    let data = random::bytes(3 * align + 100, 13);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_bytes(dir.path(), "blob.bin", &data);
    let file = std::fs::File::open(&path).expect("open");
    // SAFETY: the test owns the file and does not change it while mapped.
    let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.expect("mmap"));
    let buf =
        host_memory::import_mapping(&device, "file", map.clone(), align as u64, 2 * align as u64)
            .expect("import file map");
    assert_eq!(buf.len(), 2 * align);
    let mut buf = buf;
    assert!(buf.write_view().is_none(), "a file map is read-only");
    assert_eq!(
        copy_back(&device, &queue, buf.buffer(), 0, 2 * align as u64),
        &data[align..3 * align]
    );
    // Unaligned and out-of-range requests are errors naming the range.
    for (offset, len) in [(1, align), (0, 4 * align), (0, 0)] {
        let err =
            host_memory::import_mapping(&device, "bad", map.clone(), offset as u64, len as u64)
                .expect_err("bad range");
        assert!(
            matches!(err, ImportError::Failed { step: "range", .. }),
            "{err}"
        );
    }
}

#[test]
fn pins_and_ring_slots_use_imported_memory() {
    let Some((device, queue)) = import_device("pins_and_ring_slots_use_imported_memory") else {
        return;
    };
    let data = random::bytes(300_001, 14);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_tensor_file(dir.path(), &data);
    let file = SafetensorsFile::open(&path).expect("open");
    let pool = pool();
    let pin =
        PinnedBuffer::create(&device, "pin", &pool, &file.source("w").expect("src")).expect("pin");
    assert_eq!(pin.memory(), HostMemory::Imported);
    assert_eq!(pin.host_bytes(), Some(&data[..]));
    let dst = device_buffer(&device, data.len() as u64);
    let mut enc = device.create_command_encoder(&Default::default());
    pin.copy_to(&mut enc, &dst, 0).expect("copy");
    queue.submit([enc.finish()]);
    assert_eq!(read_back(&device, &queue, &dst, data.len() as u64), data);

    // A ring of imported slots streams more than its size, reusing slots.
    let slot = 64u64 << 10;
    let mut ring = StagingRing::new(
        &device,
        RingConfig {
            slots: 2,
            slot_size: slot,
            memory: HostMemoryChoice::Host,
        },
        Arc::new(pool),
    )
    .expect("ring");
    assert_eq!(ring.memory(), HostMemory::Imported);
    let big = random::bytes(10 * slot as usize - 8, 15);
    let dst = device_buffer(&device, big.len() as u64);
    upload_in_pieces(
        &mut ring,
        &device,
        &queue,
        &big,
        &dst,
        slot / 2,
        |i, ring| {
            if i % 3 == 0 {
                ring.recycle(&device).expect("recycle");
            }
        },
    );
    assert_eq!(read_back(&device, &queue, &dst, big.len() as u64), big);
    let c = ring.counters();
    assert_eq!(
        (c.slots_used, c.bytes_staged),
        (20, big.len() as u64),
        "{c:?}"
    );
    // One upload larger than the whole ring in one recording flushes.
    let mut enc = device.create_command_encoder(&Default::default());
    ring.upload(&device, &queue, &mut enc, &HostBytes(&big), &dst, 0)
        .expect("upload big");
    ring.submit(&queue, enc);
    assert_eq!(read_back(&device, &queue, &dst, big.len() as u64), big);
    assert!(ring.counters().flushes > 0);
}

#[test]
fn gl_falls_back_to_mapped_buffers() {
    let Some((device, queue, enabled)) =
        bare_device("gl_falls_back_to_mapped_buffers", wgpu::Backends::GL)
    else {
        return;
    };
    assert!(!enabled, "GL has no host-memory import");
    let err = host_memory::import_anonymous(&device, "gl", 4096).expect_err("unsupported on GL");
    assert!(matches!(err, ImportError::Unsupported(_)), "{err}");
    let data = random::bytes(70_001, 16);
    let pool = pool();
    let pin = PinnedBuffer::create(&device, "gl pin", &pool, &HostBytes(&data)).expect("pin");
    assert_eq!(pin.memory(), HostMemory::Mapped);
    assert_eq!(pin.host_bytes(), None);
    assert_eq!(pin.size(), 70_004);
    let mut ring = StagingRing::new(
        &device,
        RingConfig {
            slots: 2,
            slot_size: 64 << 10,
            memory: HostMemoryChoice::Host,
        },
        Arc::new(pool),
    )
    .expect("ring");
    assert_eq!(
        ring.memory(),
        HostMemory::Mapped,
        "asked for host, fell back"
    );
    let dst = device_buffer(&device, 2 * data.len() as u64 + 4);
    let mut enc = device.create_command_encoder(&Default::default());
    pin.copy_to(&mut enc, &dst, 0).expect("copy");
    ring.upload(&device, &queue, &mut enc, &HostBytes(&data), &dst, 70_004)
        .expect("upload");
    ring.submit(&queue, enc);
    let got = read_back(&device, &queue, &dst, 2 * 70_004);
    assert_eq!(&got[..70_001], &data[..]);
    assert_eq!(&got[70_004..70_004 + 70_001], &data[..]);
}
