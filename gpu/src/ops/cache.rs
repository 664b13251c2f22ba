//! Compiled pipelines, created once per (shader, entry, constants,
//! activation type) key, and the bind groups launched with them.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use crate::gpu::{Gpu, GpuError};
use crate::ops::launch::BindKey;
use crate::tensor::ActDtype;

/// A cache of compute pipelines keyed by a string the caller builds from the
/// shader name, entry point and specialisation constants.
#[derive(Debug, Default)]
pub struct PipelineCache {
    pipelines: Mutex<FxHashMap<String, Arc<Kernel>>>,
    /// The f16-activation variants by their f32 key (see [`Self::get_act`]).
    f16: Mutex<FxHashMap<String, Arc<Kernel>>>,
    /// Bind groups by pipeline and buffers (see [`Self::bind_group`]).
    bind_groups: Mutex<BindGroups>,
    /// Timestamps and costs of launches while profiling.
    pub(crate) profile: Mutex<Option<crate::ops::profile::Recording>>,
}

/// A compiled pipeline and which of its bindings take dynamic offsets.
#[derive(Debug)]
pub struct Kernel {
    /// The pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Bit `b` set: binding `b` of group 0 takes a dynamic offset (its
    /// writable storage bindings, see `gpu::dynamic_layout`).
    pub dynamic: u64,
}

/// Fails with [`GpuError::NoShaderF16`] when `act` is f16 and the device
/// lacks `SHADER_F16` (f16 activations are an error there, never a silent
/// fallback: the caller chose the dtype of its buffers).
pub fn check_act_dtype(gpu: &Gpu, op: &str, act: ActDtype) -> Result<(), GpuError> {
    if act == ActDtype::F16 && !gpu.caps.shader_f16 {
        return Err(GpuError::NoShaderF16 {
            op: op.to_owned(),
            adapter: gpu.caps.name.clone(),
        });
    }
    Ok(())
}

impl PipelineCache {
    /// The pipeline for `key`, compiling `source`/`entry` with `constants` on first use.
    pub fn get(
        &self,
        gpu: &Gpu,
        key: &str,
        source: &str,
        entry: &str,
        constants: &[(&str, f64)],
    ) -> Result<Arc<Kernel>, GpuError> {
        if let Some(p) = self.pipelines.lock().ok().and_then(|m| m.get(key).cloned()) {
            return Ok(p);
        }
        let (pipeline, dynamic) = gpu.create_launch_pipeline(key, source, entry, constants)?;
        let pipeline = Arc::new(Kernel { pipeline, dynamic });
        if let Ok(mut m) = self.pipelines.lock() {
            m.insert(key.to_owned(), pipeline.clone());
        }
        Ok(pipeline)
    }

    /// [`Self::get`] for the `act` variant of `source` (a module written
    /// with `alias act = f32;`, see `dynvram_shaders`): f32 compiles it as
    /// is, f16 compiles [`dynvram_shaders::with_f16_activations`] of it
    /// under the key `key|f16`, after checking the device has `SHADER_F16`.
    pub fn get_act(
        &self,
        gpu: &Gpu,
        key: &str,
        source: &str,
        entry: &str,
        constants: &[(&str, f64)],
        act: ActDtype,
    ) -> Result<Arc<Kernel>, GpuError> {
        match act {
            ActDtype::F32 => self.get(gpu, key, source, entry, constants),
            ActDtype::F16 => {
                check_act_dtype(gpu, key, act)?;
                // Looked up by the caller's key: no `key|f16` string is
                // built on the hot path once the pipeline exists.
                if let Some(p) = self.f16.lock().ok().and_then(|m| m.get(key).cloned()) {
                    return Ok(p);
                }
                let source = dynvram_shaders::with_f16_activations(source);
                let p = self.get(gpu, &format!("{key}|f16"), &source, entry, constants)?;
                if let Ok(mut m) = self.f16.lock() {
                    m.insert(key.to_owned(), p.clone());
                }
                Ok(p)
            }
        }
    }
}

/// Bind groups kept before the map starts over (a model has a few per
/// layer and activation set).
const MAX_BIND_GROUPS: usize = 1 << 14;

/// Cached bind groups, valid while no tracked buffer was freed since
/// `epoch` (a freed buffer may be reallocated; its bind groups must go).
/// A table by [`BindKey::hash_of`], so a hit allocates and clones nothing.
#[derive(Debug, Default)]
struct BindGroups {
    epoch: u64,
    table: hashbrown::HashTable<(BindKey, wgpu::BindGroup)>,
    /// Each pipeline's group-0 layout, for the bind groups created on it.
    layouts: FxHashMap<wgpu::ComputePipeline, wgpu::BindGroupLayout>,
}

impl PipelineCache {
    /// The bind group of `bindings` on `pipeline`: created (and validated)
    /// on first use, then reused. Cached bind groups keep their buffers
    /// alive, so the cache is emptied whenever a tracked buffer is freed
    /// ([`crate::accounting::buffers_freed`]).
    pub(crate) fn bind_group(
        &self,
        gpu: &Gpu,
        kernel: &Kernel,
        what: &str,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> Result<wgpu::BindGroup, GpuError> {
        let (pipeline, dynamic) = (&kernel.pipeline, kernel.dynamic);
        let hash = BindKey::hash_of(pipeline, dynamic, bindings);
        let epoch = crate::accounting::buffers_freed();
        let mut layout = None;
        if let Some(hash) = hash
            && let Ok(mut cached) = self.bind_groups.lock()
        {
            if cached.epoch != epoch {
                cached.table.clear();
                cached.epoch = epoch;
            }
            if let Some((_, bg)) = cached
                .table
                .find(hash, |(k, _)| k.matches(pipeline, dynamic, bindings))
            {
                return Ok(bg.clone());
            }
            layout = cached.layouts.get(pipeline).cloned();
        }
        let layout = layout.unwrap_or_else(|| pipeline.get_bind_group_layout(0));
        let entries = BindKey::entries(dynamic, bindings);
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(what),
            layout: &layout,
            entries: &entries,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Validation {
                what: format!("bind group of `{what}`"),
                message: e.to_string(),
            });
        }
        if let Some(key) = hash.and_then(|h| BindKey::of(h, pipeline, dynamic, bindings))
            && let Ok(mut cached) = self.bind_groups.lock()
            && cached.epoch == epoch
        {
            if cached.table.len() >= MAX_BIND_GROUPS {
                cached.table.clear();
            }
            cached.layouts.entry(pipeline.clone()).or_insert(layout);
            cached
                .table
                .insert_unique(key.hash, (key, bind_group.clone()), |(k, _)| k.hash);
        }
        Ok(bind_group)
    }
}
