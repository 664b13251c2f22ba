//! Compute pipelines from raw SPIR-V (`Features::PASSTHROUGH_SHADERS`): the
//! kernels of `dynvram_shaders::spirv`, which wgpu neither validates nor
//! reflects, so their layout is given explicitly.

use super::dynamic_layout::storage_entry;
use super::{Gpu, GpuError};

impl Gpu {
    /// A compute pipeline of the SPIR-V module `spirv` (entry `entry`),
    /// whose group-0 storage bindings are `bindings` (number, read-only)
    /// and whose push constants are `immediate_size` bytes, inside a
    /// validation scope. An error where the device lacks
    /// `PASSTHROUGH_SHADERS` (it is requested only where a SPIR-V kernel can
    /// run: see `device_open`).
    pub(crate) fn create_spirv_pipeline(
        &self,
        label: &str,
        spirv: &[u8],
        entry: &str,
        bindings: &[(u32, bool)],
        immediate_size: u32,
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        self.check_health()?;
        if !self
            .device
            .features()
            .contains(wgpu::Features::PASSTHROUGH_SHADERS)
        {
            return Err(GpuError::Validation {
                what: format!("SPIR-V pipeline `{label}`"),
                message: "the device was opened without PASSTHROUGH_SHADERS".into(),
            });
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let entries: Vec<_> = bindings
            .iter()
            .map(|&(binding, read_only)| storage_entry(binding, read_only, false))
            .collect();
        let group = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(label),
                entries: &entries,
            });
        let layout = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(label),
                bind_group_layouts: &[Some(&group)],
                immediate_size,
            });
        let words = wgpu::util::make_spirv_raw(spirv);
        // SAFETY: the modules are the crate's own (`dynvram_shaders::spirv`:
        // validated by spirv-val for Vulkan 1.3 in CI), created only on
        // devices that enabled the extensions and features they declare
        // (`device_open`), with the layout above matching their bindings and
        // push constants; the GPU tests check their results.
        let module = unsafe {
            self.device
                .create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                    label: Some(label),
                    entry_points: std::borrow::Cow::Owned(vec![
                        wgpu::PassthroughShaderEntryPoint {
                            name: entry.to_owned().into(),
                            workgroup_size: (0, 0, 0),
                        },
                    ]),
                    spirv: Some(words),
                    ..Default::default()
                })
        };
        self.finish_pipeline(scope, label, Some(&layout), &module, entry, &[])
    }
}
