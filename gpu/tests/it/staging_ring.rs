//! The staging ring and registered pins upload bit-exactly to GPU buffers on
//! the software adapter, with the ring's counters checked.

use std::sync::Arc;

use dynvram_gpu::device::{GpuError, PinnedBuffer, RingConfig, StagingRing, UploadError};
use dynvram_loader::{HostBytes, LoadError, ReaderConfig, ReaderPool, SafetensorsFile};
use dynvram_test_support::gpu::{device_buffer, read_back, test_device};
use dynvram_test_support::random;
use dynvram_test_support::safetensors::{file_bytes, one_tensor_file, write_bytes};

const SLOT: u64 = 64 << 10;

fn small_ring(device: &wgpu::Device, slots: usize) -> StagingRing {
    let pool = Arc::new(
        ReaderPool::new(ReaderConfig {
            threads: 3,
            task_size: 8 << 10,
            drop_behind: false,
        })
        .expect("pool"),
    );
    StagingRing::new(
        device,
        RingConfig {
            slots,
            slot_size: SLOT,
            ..RingConfig::default()
        },
        pool,
    )
    .expect("ring")
}

/// Uploads `data` to `dst` in parts of `piece` bytes, one upload and submit
/// each, as the runtime does per block; `after(i, ring)` runs after part
/// `i`'s submit.
pub fn upload_in_pieces(
    ring: &mut StagingRing,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    data: &[u8],
    dst: &wgpu::Buffer,
    piece: u64,
    mut after: impl FnMut(usize, &mut StagingRing),
) {
    for (i, part) in data.chunks(piece as usize).enumerate() {
        let mut encoder = device.create_command_encoder(&Default::default());
        let offset = i as u64 * piece;
        ring.upload(device, queue, &mut encoder, &HostBytes(part), dst, offset)
            .expect("upload");
        ring.submit(queue, encoder);
        after(i, ring);
    }
}

#[test]
fn file_tensors_larger_and_smaller_than_a_slot() {
    let Some((device, queue)) = test_device("file_tensors_larger_and_smaller_than_a_slot") else {
        return;
    };
    let big = random::bytes(3 * SLOT as usize + 1234, 1); // spans four slots
    let small = random::bytes(1001, 2); // not a multiple of 4
    let tiny = random::bytes(5, 3);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_bytes(
        dir.path(),
        "m.safetensors",
        &file_bytes(&[
            ("big", "U8", vec![big.len()], big.clone()),
            ("small", "U8", vec![small.len()], small.clone()),
            ("tiny", "U8", vec![tiny.len()], tiny.clone()),
        ]),
    );
    let file = SafetensorsFile::open(&path).expect("open");
    let mut ring = small_ring(&device, 3);
    let dst_big = device_buffer(&device, big.len() as u64);
    // Small tensors packed into one buffer at 4-aligned offsets.
    let dst_small = device_buffer(&device, 1004 + 8);
    let mut encoder = device.create_command_encoder(&Default::default());
    ring.upload(
        &device,
        &queue,
        &mut encoder,
        &file.source("small").expect("src"),
        &dst_small,
        0,
    )
    .expect("upload small");
    ring.upload(
        &device,
        &queue,
        &mut encoder,
        &file.source("tiny").expect("src"),
        &dst_small,
        1004,
    )
    .expect("upload tiny");
    ring.submit(&queue, encoder);
    let mut encoder = device.create_command_encoder(&Default::default());
    ring.upload(
        &device,
        &queue,
        &mut encoder,
        &file.source("big").expect("src"),
        &dst_big,
        0,
    )
    .expect("upload big");
    ring.submit(&queue, encoder);
    assert_eq!(read_back(&device, &queue, &dst_big, big.len() as u64), big);
    let got = read_back(&device, &queue, &dst_small, 1012);
    assert_eq!(&got[..1001], &small[..]);
    assert_eq!(&got[1001..1004], &[0, 0, 0], "padding is zeros");
    assert_eq!(&got[1004..1009], &tiny[..]);
    let c = ring.counters();
    assert_eq!(
        c.bytes_staged,
        (big.len() + small.len() + tiny.len()) as u64
    );
    // Slot 0 holds small+tiny (first submit); big fills slots 1, 2, 0 (after
    // waiting for the first submit's copy) and 1 again.
    assert_eq!(c.slots_used, 5);
    assert_eq!(
        c.flushes, 1,
        "big recorded in one encoder needs more than the ring"
    );
    // Slot 0 (first submit, never recycled) and slot 1 (after the flush).
    assert_eq!(c.stalls, 2, "{c:?}");
}

#[test]
fn streaming_more_than_the_ring_stalls_and_stays_exact() {
    let Some((device, queue)) = test_device("streaming_more_than_the_ring_stalls_and_stays_exact")
    else {
        return;
    };
    let mut ring = small_ring(&device, 2);
    let data = random::bytes(10 * SLOT as usize - 8, 4);
    let dst = device_buffer(&device, data.len() as u64);
    // One upload and submit per half slot, as the runtime would per block:
    // the first ten without recycling (every reuse after the first two slots
    // waits), the last ten after a wait and a recycle at each sync point.
    upload_in_pieces(
        &mut ring,
        &device,
        &queue,
        &data,
        &dst,
        SLOT / 2,
        |i, ring| {
            if i >= 9 {
                device
                    .poll(wgpu::PollType::wait_indefinitely())
                    .expect("poll");
                ring.recycle(&device).expect("recycle");
            }
        },
    );
    assert_eq!(read_back(&device, &queue, &dst, data.len() as u64), data);
    let c = ring.counters();
    assert_eq!(c.slots_used, 20, "each submit starts a new slot: {c:?}");
    assert_eq!((c.stalls, c.flushes), (8, 0), "{c:?}");
    assert_eq!(c.bytes_staged, data.len() as u64);
}

#[test]
fn read_error_leaves_the_ring_usable() {
    let Some((device, queue)) = test_device("read_error_leaves_the_ring_usable") else {
        return;
    };
    let data = random::bytes(200_000, 5);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_tensor_file(dir.path(), &data);
    let file = SafetensorsFile::open(&path).expect("open");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|h| h.set_len(100_000))
        .expect("truncate");
    let mut ring = small_ring(&device, 2);
    let dst = device_buffer(&device, data.len() as u64);
    let mut encoder = device.create_command_encoder(&Default::default());
    let err = ring
        .upload(
            &device,
            &queue,
            &mut encoder,
            &file.source("w").expect("src"),
            &dst,
            0,
        )
        .expect_err("truncated file");
    assert!(
        matches!(err, UploadError::Load(LoadError::ShortRead { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("`w`"), "{err}");
    ring.submit(&queue, encoder);
    // Another source goes through the same ring afterwards.
    let other = random::bytes(150_000, 6);
    let mut encoder = device.create_command_encoder(&Default::default());
    ring.upload(&device, &queue, &mut encoder, &HostBytes(&other), &dst, 0)
        .expect("upload");
    ring.submit(&queue, encoder);
    assert_eq!(read_back(&device, &queue, &dst, other.len() as u64), other);
}

#[test]
fn bad_destinations_are_errors() {
    let Some((device, queue)) = test_device("bad_destinations_are_errors") else {
        return;
    };
    let mut ring = small_ring(&device, 2);
    let dst = device_buffer(&device, 16);
    let mut encoder = device.create_command_encoder(&Default::default());
    let data = [1u8; 16];
    for (len, offset) in [(16, 4), (8, 2), (13, 4)] {
        let err = ring
            .upload(
                &device,
                &queue,
                &mut encoder,
                &HostBytes(&data[..len]),
                &dst,
                offset,
            )
            .expect_err("must not fit");
        assert!(
            matches!(err, UploadError::Gpu(GpuError::Upload { .. })),
            "{err}"
        );
    }
    ring.submit(&queue, encoder);
}

#[test]
fn registered_pin_copies_without_cpu() {
    let Some((device, queue)) = test_device("registered_pin_copies_without_cpu") else {
        return;
    };
    let data = random::bytes(300_001, 7);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_tensor_file(dir.path(), &data);
    let file = SafetensorsFile::open(&path).expect("open");
    let pool = ReaderPool::new(ReaderConfig::default()).expect("pool");
    let pin = PinnedBuffer::create(&device, "pin w", &pool, &file.source("w").expect("src"))
        .expect("pin");
    assert_eq!(pin.len(), 300_001);
    assert!(pin.size() >= 300_004, "padded to 4 (imported: to a page)");
    let dst = device_buffer(&device, 300_004 + 64);
    // Twice: the pin is a persistent source.
    for offset in [0, 64] {
        let mut encoder = device.create_command_encoder(&Default::default());
        pin.copy_to(&mut encoder, &dst, offset).expect("copy");
        queue.submit([encoder.finish()]);
        let got = read_back(&device, &queue, &dst, offset + data.len() as u64);
        assert_eq!(&got[offset as usize..], &data[..]);
    }
    let mut encoder = device.create_command_encoder(&Default::default());
    assert!(
        pin.copy_range_to(&mut encoder, 2, 8, &dst, 0).is_err(),
        "unaligned source offset"
    );
    assert!(
        pin.copy_to(&mut encoder, &dst, 128).is_err(),
        "does not fit"
    );
}
