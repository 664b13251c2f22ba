//! Compiled pipelines, created once per (shader, entry, constants,
//! activation type) key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::gpu::{Gpu, GpuError};
use crate::tensor::ActDtype;

/// A cache of compute pipelines keyed by a string the caller builds from the
/// shader name, entry point and specialisation constants.
#[derive(Debug, Default)]
pub struct PipelineCache {
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    /// Immutable params uniforms keyed by their bytes (see [`Self::uniform`]).
    uniforms: Mutex<HashMap<Vec<u8>, Arc<wgpu::Buffer>>>,
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
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        if let Some(p) = self.pipelines.lock().ok().and_then(|m| m.get(key).cloned()) {
            return Ok(p);
        }
        let pipeline = Arc::new(gpu.create_compute_pipeline(key, source, entry, constants)?);
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
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        match act {
            ActDtype::F32 => self.get(gpu, key, source, entry, constants),
            ActDtype::F16 => {
                check_act_dtype(gpu, key, act)?;
                let key = format!("{key}|f16");
                if let Some(p) = self
                    .pipelines
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&key).cloned())
                {
                    return Ok(p);
                }
                let source = dynvram_shaders::with_f16_activations(source);
                self.get(gpu, &key, &source, entry, constants)
            }
        }
    }
}

/// Distinct params uniforms kept before the map starts over (a model has a
/// few per layer shape; buffers still in use stay alive through wgpu).
const MAX_UNIFORMS: usize = 4096;

impl PipelineCache {
    /// A `UNIFORM` buffer holding `bytes`, shared by every dispatch with the
    /// same params: the contents never change after creation, so one buffer
    /// serves any number of dispatches in any encoders, and recording a
    /// dispatch creates no buffer once its params were seen. The first
    /// request writes it through the queue (applied at the next submit).
    pub fn uniform(&self, gpu: &Gpu, bytes: &[u8]) -> Result<Arc<wgpu::Buffer>, GpuError> {
        if let Some(b) = self
            .uniforms
            .lock()
            .ok()
            .and_then(|m| m.get(bytes).cloned())
        {
            return Ok(b);
        }
        let size = (bytes.len() as u64).max(16).next_multiple_of(16);
        let buffer = Arc::new(gpu.create_buffer(
            "params",
            size,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        )?);
        let mut padded = bytes.to_vec();
        padded.resize(size as usize, 0);
        gpu.queue.write_buffer(&buffer, 0, &padded);
        if let Ok(mut m) = self.uniforms.lock() {
            if m.len() >= MAX_UNIFORMS {
                m.clear();
            }
            m.insert(bytes.to_vec(), buffer.clone());
        }
        Ok(buffer)
    }
}
