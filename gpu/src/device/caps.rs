//! Translating wgpu's features and limits into [`AdapterCaps`].

use dynvram_quant::AdapterCaps;

/// The caps of an opened device (features as enabled, limits as granted).
pub fn caps_of(adapter: &wgpu::Adapter, device: &wgpu::Device) -> AdapterCaps {
    caps_from(adapter, device.features(), &device.limits())
}

/// The caps an adapter would offer (before opening a device).
pub fn adapter_caps(adapter: &wgpu::Adapter) -> AdapterCaps {
    caps_from(adapter, adapter.features(), &adapter.limits())
}

/// What wgpu reports of an adapter, the part [`AdapterCaps`] is made of:
/// plain data, so each backend's capabilities (Metal's, DX12's, GL's, as
/// wgpu-hal reports them) can go through the same reasoning without that
/// backend's adapter.
#[derive(Debug, Clone)]
pub struct AdapterReport<'a> {
    /// Adapter name.
    pub name: &'a str,
    /// Its backend.
    pub backend: wgpu::Backend,
    /// Smallest subgroup size (0 when unknown).
    pub subgroup_min_size: u32,
    /// Largest subgroup size (0 when unknown).
    pub subgroup_max_size: u32,
    /// Features (an opened device's, or the adapter's).
    pub features: wgpu::Features,
    /// Limits.
    pub limits: &'a wgpu::Limits,
    /// `cooperative_matrix_properties()`: the configurations it lists.
    pub coop_configs: &'a [wgpu::CooperativeMatrixProperties],
}

/// Edge of the square cooperative-matrix configuration the kernels can use
/// on this adapter: f16 A and B, f32 accumulators, 16×16×16 (NVIDIA) or
/// else 8×8×8 (lavapipe); 0 without one. wgpu lists only
/// subgroup-scoped configurations and does not check shaders against them.
///
/// Vulkan only: the kernels run in CI on lavapipe's Vulkan and are meant for
/// tensor cores through Vulkan; wgpu's Metal path (simdgroup matrices) has
/// not run them, so it is not offered them (and Metal has no 16×16 ones:
/// `dynvram_shaders::backends`).
pub fn coop_f16_edge(adapter: &wgpu::Adapter) -> u32 {
    let info = adapter.get_info();
    report_coop_f16_edge(
        info.backend,
        adapter.features(),
        &adapter.cooperative_matrix_properties(),
    )
}

/// [`coop_f16_edge`] from reported data.
fn report_coop_f16_edge(
    backend: wgpu::Backend,
    features: wgpu::Features,
    configs: &[wgpu::CooperativeMatrixProperties],
) -> u32 {
    if backend != wgpu::Backend::Vulkan
        || !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
    {
        return 0;
    }
    [16, 8]
        .into_iter()
        .find(|&e| {
            configs.iter().any(|c| {
                (c.m_size, c.n_size, c.k_size) == (e, e, e)
                    && c.ab_type == wgpu::CooperativeScalarType::F16
                    && c.cr_type == wgpu::CooperativeScalarType::F32
            })
        })
        .unwrap_or(0)
}

fn caps_from(adapter: &wgpu::Adapter, f: wgpu::Features, l: &wgpu::Limits) -> AdapterCaps {
    let info = adapter.get_info();
    caps_of_report(&AdapterReport {
        name: &info.name,
        backend: info.backend,
        subgroup_min_size: info.subgroup_min_size,
        subgroup_max_size: info.subgroup_max_size,
        features: f,
        limits: l,
        coop_configs: &adapter.cooperative_matrix_properties(),
    })
}

/// The caps of an adapter that reports `r`.
pub fn caps_of_report(r: &AdapterReport<'_>) -> AdapterCaps {
    let (f, l) = (r.features, r.limits);
    AdapterCaps {
        name: r.name.to_owned(),
        backend: r.backend.to_str().to_owned(),
        shader_f16: f.contains(wgpu::Features::SHADER_F16),
        subgroups: f.contains(wgpu::Features::SUBGROUP),
        subgroup_min_size: r.subgroup_min_size,
        subgroup_max_size: r.subgroup_max_size,
        timestamps: f.contains(wgpu::Features::TIMESTAMP_QUERY),
        coop_matrix_edge: report_coop_f16_edge(r.backend, f, r.coop_configs),
        max_buffer_size: l.max_buffer_size,
        max_storage_binding: l.max_storage_buffer_binding_size,
        max_workgroup_storage: l.max_compute_workgroup_storage_size,
        max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
    }
}
