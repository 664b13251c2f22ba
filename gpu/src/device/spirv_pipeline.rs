//! Compute pipelines from raw SPIR-V (`Features::PASSTHROUGH_SHADERS`): the
//! kernels of `dynvram_shaders::spirv`, which wgpu neither validates nor
//! reflects, so their layout is given explicitly.
//!
//! wgpu's Vulkan backend numbers a layout's bindings densely in ascending
//! order (wgpu-hal 30, `create_bind_group_layout`: the entry of the third
//! lowest wgpu binding is Vulkan binding 2) and remaps the bindings of the
//! modules it compiles to match, but not those of a passthrough module. So a
//! module's `binding = i` must be the rank `i` of its layout's bindings, not
//! the wgpu binding number: a module written with the numbers of a layout
//! that skips 0 reads the wrong buffers and writes through a descriptor that
//! is not there (an MMU fault, Xid 13, on NVIDIA). [`check_bindings`] refuses
//! such a module before it reaches the driver.

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
        check_bindings(spirv, bindings).map_err(|message| GpuError::Validation {
            what: format!("SPIR-V pipeline `{label}`"),
            message,
        })?;
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
        let start = std::time::Instant::now();
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
        let pipeline = self.finish_pipeline(scope, label, Some(&layout), &module, entry, &[]);
        self.count_pipeline(start);
        pipeline
    }
}

/// `OpDecorate`, and its `DescriptorSet` and `Binding` decorations.
const OP_DECORATE: u32 = 71;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;

/// Checks that the module `spirv` binds only set 0 and, there, only the
/// ranks `0..bindings.len()` of `bindings` (which must ascend): the Vulkan
/// numbers wgpu gives a layout of those bindings (see the module's doc).
pub(crate) fn check_bindings(spirv: &[u8], bindings: &[(u32, bool)]) -> Result<(), String> {
    if !bindings.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err(format!(
            "its layout's bindings {:?} do not ascend",
            bindings.iter().map(|b| b.0).collect::<Vec<_>>()
        ));
    }
    let words: Vec<u32> = spirv
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return Err("not a SPIR-V module (no magic number)".into());
    }
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let opcode = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err(format!("a malformed instruction at word {at}"));
        }
        if opcode == OP_DECORATE && count >= 4 {
            let (decoration, value) = (words[at + 2], words[at + 3]);
            if decoration == DECORATION_DESCRIPTOR_SET && value != 0 {
                return Err(format!(
                    "it uses descriptor set {value}; the layout has set 0 only"
                ));
            }
            if decoration == DECORATION_BINDING && value as usize >= bindings.len() {
                return Err(format!(
                    "it declares binding {value}, but its layout has {} bindings ({:?}), which \
                     Vulkan numbers 0..{}: a passthrough module binds their ranks, not their \
                     numbers",
                    bindings.len(),
                    bindings.iter().map(|b| b.0).collect::<Vec<_>>(),
                    bindings.len()
                ));
            }
        }
        at += count;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module of the header and `OpDecorate %1 <decoration> <value>`s.
    fn module(decorations: &[(u32, u32)]) -> Vec<u8> {
        let mut words = vec![0x0723_0203, 0x0001_0600, 0, 2, 0];
        for &(decoration, value) in decorations {
            words.extend([(4 << 16) | OP_DECORATE, 1, decoration, value]);
        }
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    const FLASH: [(u32, bool); 4] = [(1, true), (2, true), (3, true), (4, false)];

    #[test]
    fn a_module_binds_the_ranks_of_its_layout() {
        let ranks = module(&[(DECORATION_DESCRIPTOR_SET, 0), (DECORATION_BINDING, 3)]);
        assert_eq!(check_bindings(&ranks, &FLASH), Ok(()));
        // The numbers of a layout that skips 0: the last is past the ranks.
        let numbers = module(&[(DECORATION_BINDING, 4)]);
        let why = check_bindings(&numbers, &FLASH).expect_err("binding 4 of 4 entries");
        assert!(why.contains("binding 4") && why.contains("0..4"), "{why}");
        let set = module(&[(DECORATION_DESCRIPTOR_SET, 1)]);
        assert!(check_bindings(&set, &FLASH).is_err());
        let unsorted = [(2, true), (1, false)];
        assert!(check_bindings(&ranks, &unsorted).is_err());
        assert!(check_bindings(&[1, 2, 3, 4], &FLASH).is_err());
        let mut cut = module(&[(DECORATION_BINDING, 0)]);
        cut.truncate(cut.len() - 4);
        assert!(check_bindings(&cut, &FLASH).is_err());
    }
}
