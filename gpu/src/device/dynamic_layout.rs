//! Pipeline layouts whose writable storage bindings take dynamic offsets.
//!
//! A kernel writing at a different offset of the same buffer every token
//! (new k/v rows written straight into the KV cache) would need a new bind
//! group per token and layer: ~20k instructions each on lavapipe, 9 % of a
//! decode step (BENCHMARKS.md, session 13). With the offset dynamic, one
//! bind group serves every position.

use wgpu::naga;

/// Most dynamic bindings a layout gets (Vulkan guarantees 4 dynamic storage
/// buffers; the adapter's limit decides).
pub(crate) const MAX_DYNAMIC: usize = 8;

/// An explicit layout for one entry point: its group-0 storage bindings as
/// the derived layout has them, the writable ones (up to the adapter's
/// limit) with dynamic offsets.
#[derive(Debug)]
pub(crate) struct DynamicLayout {
    pub layout: wgpu::PipelineLayout,
    /// Bit `b` set: binding `b` takes a dynamic offset.
    pub dynamic: u64,
}

/// A compute storage-buffer entry of a group layout.
pub(crate) fn storage_entry(
    binding: u32,
    read_only: bool,
    dynamic: bool,
) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: dynamic,
            min_binding_size: None,
        },
        count: None,
    }
}

/// The layout for `entry` of `source`, or `None` where the derived layout
/// should stay: nothing writable, a binding that is not a storage buffer or
/// not in group 0, or a module naga cannot read here.
pub(crate) fn dynamic_layout(
    device: &wgpu::Device,
    label: &str,
    source: &str,
    entry: &str,
) -> Option<DynamicLayout> {
    let module = naga::front::wgsl::parse_str(source).ok()?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::empty(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .ok()?;
    let index = module.entry_points.iter().position(|e| e.name == entry)?;
    let uses = info.get_entry_point(index);
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).ok()?;
    let limit = (device
        .limits()
        .max_dynamic_storage_buffers_per_pipeline_layout as usize)
        .min(MAX_DYNAMIC);
    let (mut entries, mut immediate_size, mut dynamic) = (Vec::new(), 0u32, 0u64);
    for (handle, var) in module.global_variables.iter() {
        if uses[handle].is_empty() {
            continue;
        }
        match var.space {
            naga::AddressSpace::Storage { access } => {
                let b = var.binding.as_ref()?;
                if b.group != 0 || b.binding >= 64 {
                    return None;
                }
                let read_only = !access.contains(naga::StorageAccess::STORE);
                let dyn_offset = !read_only && (dynamic.count_ones() as usize) < limit;
                if dyn_offset {
                    dynamic |= 1 << b.binding;
                }
                entries.push(storage_entry(b.binding, read_only, dyn_offset));
            }
            naga::AddressSpace::Immediate => {
                immediate_size = immediate_size.max(layouter[var.ty].size);
            }
            naga::AddressSpace::WorkGroup
            | naga::AddressSpace::Private
            | naga::AddressSpace::Function => {}
            _ => return None,
        }
    }
    if dynamic == 0 {
        return None;
    }
    let group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(label),
        entries: &entries,
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(label),
        bind_group_layouts: &[Some(&group)],
        immediate_size: immediate_size.next_multiple_of(4),
    });
    Some(DynamicLayout { layout, dynamic })
}
