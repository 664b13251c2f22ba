//! Resident bf16 weights kept as f16: where a device's bf16 GEMMs take the
//! f16 SPIR-V kernels, every pass converts each bf16 layer a piece at a
//! time (13 of 64 ms of a Llama-7B prefill on the H100, session 29). With
//! `Cm2Bf16::Auto` (the default, on such devices) or `ViaF16Resident` a
//! weight that stays resident is converted once instead, in place as it is
//! uploaded, and then read as f16 by every
//! kernel: the same values the per-pass conversion makes (exact in f16's
//! normal range), with no scratch. The caller keeps weights with values
//! past f16's range bf16.

use dynvram_shaders::linear::BF16_TO_F16_IN_PLACE;

use crate::device::{Cm2Bf16, Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch};
use crate::tensor::ActDtype;
use dynvram_quant::Format;

/// Whether resident bf16 linear weights are converted to f16 once, in
/// place, on this device: where `GpuOptions::cm2_bf16` asks for it
/// (`ViaF16Resident`, on any device: the WGSL kernels read the f16 weights
/// as they read any f16 weights, the same values but below f16's normal
/// range), and by default (`Auto`) where the device runs the f16 SPIR-V
/// GEMMs, whose prefills would convert those weights every pass.
pub fn resident_bf16_as_f16(gpu: &Gpu) -> bool {
    match gpu.cm2_bf16() {
        Cm2Bf16::ViaF16Resident => true,
        Cm2Bf16::Auto => super::cm2_gemm(gpu.cm2(), Format::F16, ActDtype::F16, None).is_ok(),
        Cm2Bf16::Staged | Cm2Bf16::ViaF16 => false,
    }
}

/// `bf16_to_f16_in_place.wgsl`'s `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    words: u32,
    _pad: [u32; 3],
}

/// Workgroups of one launch at most (it loops over the rest).
const GROUPS: u64 = 4096;

/// Records the conversion of the `bytes` bytes of bf16 values at the start
/// of `buffer` to f16 in place (a multiple of 4 bytes: whole pairs), one
/// launch per binding's worth.
pub fn record_bf16_to_f16_in_place(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    buffer: &wgpu::Buffer,
    bytes: u64,
) -> Result<(), GpuError> {
    if !bytes.is_multiple_of(4) || bytes > buffer.size() {
        return Err(kernel::bad(
            "bf16_to_f16_in_place",
            format!(
                "{bytes} bytes of a {}-byte buffer (whole pairs of bf16 values, within it)",
                buffer.size()
            ),
        ));
    }
    // Bindings of at most the device's limit, on 256-byte offsets.
    let limit = gpu.device.limits().max_storage_buffer_binding_size / 256 * 256;
    let mut at = 0;
    while at < bytes {
        let size = limit.min(bytes - at);
        let words = size / 4;
        let binding = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset: at,
            size: std::num::NonZeroU64::new(size),
        });
        kernel::record(
            gpu,
            cache,
            enc,
            Dispatch {
                source: BF16_TO_F16_IN_PLACE,
                entry: "main",
                constants: &[],
                params: bytemuck::bytes_of(&Params {
                    words: u32::try_from(words).map_err(|_| {
                        kernel::bad(
                            "bf16_to_f16_in_place",
                            format!("{words} words in one binding exceed u32"),
                        )
                    })?,
                    _pad: [0; 3],
                }),
                bindings: smallvec::smallvec![(0, binding)],
                groups: (words.div_ceil(256).clamp(1, GROUPS) as u32, 1),
                act: ActDtype::F32,
                cost: kernel::Cost::new(size, size, 0),
            },
        )?;
        at += size;
    }
    Ok(())
}
