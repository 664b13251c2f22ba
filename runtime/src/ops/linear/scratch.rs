//! Intermediate buffers of the integer path: rotated input, packed
//! activation codes, per-row scales. Grown on demand, reused across layers
//! (the dispatches of one encoder run in order).

use std::sync::Arc;

use crate::gpu::{Gpu, GpuError};

/// Scratch space for [`super::record_linear`].
#[derive(Debug, Default)]
pub struct LinearScratch {
    x_rot: Option<Arc<wgpu::Buffer>>,
    codes: Option<Arc<wgpu::Buffer>>,
    scales: Option<Arc<wgpu::Buffer>>,
    dummy: Option<Arc<wgpu::Buffer>>,
    /// Dispatches the last recorded linear took.
    dispatches: u32,
    /// The last recorded linear ran the cooperative-matrix GEMM.
    coop: bool,
}

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

fn ensure(
    slot: &mut Option<Arc<wgpu::Buffer>>,
    gpu: &Gpu,
    label: &str,
    bytes: u64,
) -> Result<Arc<wgpu::Buffer>, GpuError> {
    let bytes = bytes.max(16).div_ceil(256) * 256;
    if let Some(b) = slot.as_ref().filter(|b| b.size() >= bytes) {
        return Ok(b.clone());
    }
    let b = Arc::new(gpu.create_buffer(label, bytes, USAGE)?);
    *slot = Some(b.clone());
    Ok(b)
}

impl LinearScratch {
    /// Empty scratch; buffers appear on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rotated-input buffer, at least `bytes` long.
    pub(super) fn x_rot(&mut self, gpu: &Gpu, bytes: u64) -> Result<Arc<wgpu::Buffer>, GpuError> {
        ensure(&mut self.x_rot, gpu, "linear.x_rot", bytes)
    }

    /// The packed-codes buffer, at least `bytes` long.
    pub(super) fn codes(&mut self, gpu: &Gpu, bytes: u64) -> Result<Arc<wgpu::Buffer>, GpuError> {
        ensure(&mut self.codes, gpu, "linear.act_codes", bytes)
    }

    /// The per-row scale buffer, at least `bytes` long.
    pub(super) fn scales(&mut self, gpu: &Gpu, bytes: u64) -> Result<Arc<wgpu::Buffer>, GpuError> {
        ensure(&mut self.scales, gpu, "linear.act_scales", bytes)
    }

    /// A small buffer bound where a layer has no scale or bias.
    pub(super) fn dummy(&mut self, gpu: &Gpu) -> Result<Arc<wgpu::Buffer>, GpuError> {
        ensure(&mut self.dummy, gpu, "linear.unused", 16)
    }

    /// The last activation codes (`[M, ceil(K/4)]` u32 words, four i8 codes
    /// each, byte 0 first; for int4 weights on the dot4 kernels each 8-column
    /// block holds its even columns in the first word and its odd columns in
    /// the second, see [`Self::last_used_coop`]).
    pub fn act_codes(&self) -> Option<&Arc<wgpu::Buffer>> {
        self.codes.as_ref()
    }

    /// The last per-row activation scales (`[M]` f32).
    pub fn act_scales(&self) -> Option<&Arc<wgpu::Buffer>> {
        self.scales.as_ref()
    }

    /// Compute dispatches the last recorded linear took (a figure for
    /// benchmarks: each dispatch boundary costs a pipeline drain).
    pub fn last_dispatches(&self) -> u32 {
        self.dispatches
    }

    pub(super) fn set_dispatches(&mut self, count: u32) {
        self.dispatches = count;
    }

    /// The last recorded linear multiplied on cooperative matrices (its
    /// activation codes are in column order).
    pub fn last_used_coop(&self) -> bool {
        self.coop
    }

    pub(super) fn set_coop(&mut self, coop: bool) {
        self.coop = coop;
    }

    /// The last rotated input (`[M, K]` f32), for rotated layers.
    pub fn rotated(&self) -> Option<&Arc<wgpu::Buffer>> {
        self.x_rot.as_ref()
    }
}
