//! The device opens and its caps are read on the selected adapter.

use dynvram_test_support::gpu::{any_adapter, test_gpu};

#[test]
fn device_opens_and_round_trips_a_buffer() {
    let Some(gpu) = test_gpu("device_opens_and_round_trips_a_buffer", any_adapter) else {
        return;
    };
    assert!(gpu.caps.max_storage_binding >= 128 << 20);
    let data: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 3.0).collect();
    let buf = gpu
        .create_buffer(
            "roundtrip",
            4000,
            wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        )
        .expect("allocate");
    gpu.queue.write_buffer(&buf, 0, bytemuck::cast_slice(&data));
    let back = gpu.read_f32(&buf, 0, 1000).expect("read back");
    assert_eq!(back, data);
}
