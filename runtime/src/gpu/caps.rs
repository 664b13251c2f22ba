//! Translating wgpu's features and limits into [`AdapterCaps`].

use dynvram_quant::AdapterCaps;

/// The caps of an opened device (features as enabled, limits as granted).
pub fn caps_of(adapter: &wgpu::Adapter, device: &wgpu::Device) -> AdapterCaps {
    caps_from(&adapter.get_info(), device.features(), &device.limits())
}

/// The caps an adapter would offer (before opening a device).
pub fn adapter_caps(adapter: &wgpu::Adapter) -> AdapterCaps {
    caps_from(&adapter.get_info(), adapter.features(), &adapter.limits())
}

fn caps_from(info: &wgpu::AdapterInfo, f: wgpu::Features, l: &wgpu::Limits) -> AdapterCaps {
    AdapterCaps {
        name: info.name.clone(),
        backend: info.backend.to_str().to_owned(),
        shader_f16: f.contains(wgpu::Features::SHADER_F16),
        subgroups: f.contains(wgpu::Features::SUBGROUP),
        subgroup_min_size: info.subgroup_min_size,
        subgroup_max_size: info.subgroup_max_size,
        timestamps: f.contains(wgpu::Features::TIMESTAMP_QUERY),
        cooperative_matrix: f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
        max_buffer_size: l.max_buffer_size,
        max_storage_binding: l.max_storage_buffer_binding_size,
        max_workgroup_storage: l.max_compute_workgroup_storage_size,
        max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
    }
}
