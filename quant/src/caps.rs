//! What an adapter offers that matters to kernel choice, as plain data.

use serde::Serialize;

/// The features and limits of one adapter that decide which kernel a layer gets.
///
/// Filled from wgpu by the runtime; plain data here so the rule is testable
/// without a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdapterCaps {
    /// Adapter name as the driver reports it.
    pub name: String,
    /// Backend name (`vulkan`, `gl`, `metal`, `dx12`).
    pub backend: String,
    /// `SHADER_F16` is available.
    pub shader_f16: bool,
    /// `SUBGROUP` is available (compute stage).
    pub subgroups: bool,
    /// Smallest and largest subgroup size (0 when unknown).
    pub subgroup_min_size: u32,
    /// Largest subgroup size (0 when unknown).
    pub subgroup_max_size: u32,
    /// `TIMESTAMP_QUERY` is available.
    pub timestamps: bool,
    /// Edge of the square cooperative-matrix configuration the kernels use
    /// (`EXPERIMENTAL_COOPERATIVE_MATRIX`, f16 inputs, f32 accumulators):
    /// 16 or 8, 0 without one.
    pub coop_matrix_edge: u32,
    /// `max_buffer_size` in bytes.
    pub max_buffer_size: u64,
    /// `max_storage_buffer_binding_size` in bytes.
    pub max_storage_binding: u64,
    /// `max_compute_workgroup_storage_size` in bytes.
    pub max_workgroup_storage: u32,
    /// `max_compute_invocations_per_workgroup`.
    pub max_invocations_per_workgroup: u32,
}

impl AdapterCaps {
    /// A conservative description of a WebGPU-baseline adapter (no optional features).
    pub fn baseline(name: &str, backend: &str) -> Self {
        Self {
            name: name.to_owned(),
            backend: backend.to_owned(),
            shader_f16: false,
            subgroups: false,
            subgroup_min_size: 0,
            subgroup_max_size: 0,
            timestamps: false,
            coop_matrix_edge: 0,
            max_buffer_size: 256 << 20,
            max_storage_binding: 128 << 20,
            max_workgroup_storage: 16 << 10,
            max_invocations_per_workgroup: 256,
        }
    }

    /// Whether the adapter has what every cooperative-matrix kernel needs:
    /// f16 matrices with f32 sums, `SHADER_F16` and subgroups (a cheap
    /// test, before anything formats why a kernel cannot run).
    pub fn f16_coop_matrices(&self) -> bool {
        self.coop_matrix_edge != 0 && self.shader_f16 && self.subgroups
    }
}
