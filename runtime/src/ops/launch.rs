//! The one dispatch path: every kernel launch of every op goes through
//! `launch`.
//!
//! Per launch on the hot path: a pipeline lookup, a bind-group lookup and
//! the commands, in the encoder's open compute pass ([`Encoder`]). Params travel as immediates (push constants), so a
//! bind group depends only on its buffers and is created once per
//! (pipeline, buffers) and reused by every later token; validation (an
//! error scope) runs only when a pipeline or bind group is created, never
//! per dispatch. With profiling on ([`super::profile`]), each launch's pass
//! also writes GPU timestamps.

use std::hash::{Hash, Hasher};
use std::num::NonZeroU64;

use crate::gpu::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::tensor::ActDtype;

/// What a launch moves and computes, for the profile's roofline columns.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    /// Bytes read and written from device memory (a lower bound: each
    /// operand once).
    pub bytes: u64,
    /// Arithmetic operations (a multiply-add counts 2).
    pub flops: u64,
}

impl Cost {
    /// A launch that reads `read` and writes `written` bytes, `flops` ops.
    pub fn new(read: u64, written: u64, flops: u64) -> Self {
        Self {
            bytes: read + written,
            flops,
        }
    }
}

/// One kernel launch.
pub(crate) struct Launch<'a> {
    /// Pipeline key: the shader, entry and every specialisation that changes
    /// the compiled code (constants, activation type is added here).
    pub key: &'a str,
    /// What the profile calls it (the op and its variant): formatted only
    /// while profiling, so pass `&format_args!(..)` rather than a `String`.
    pub label: &'a dyn std::fmt::Display,
    /// WGSL source.
    pub source: &'a str,
    /// Entry point.
    pub entry: &'a str,
    /// Override constants.
    pub constants: &'a [(&'a str, f64)],
    /// Activation type of the module's `act` buffers.
    pub act: ActDtype,
    /// Buffer bindings of group 0.
    pub bindings: Vec<(u32, wgpu::BindingResource<'a>)>,
    /// The module's `var<immediate>` params, exactly its size.
    pub immediates: &'a [u8],
    /// Workgroups (x, y).
    pub groups: (u32, u32),
    /// Bytes and FLOPs, for the profile.
    pub cost: Cost,
}

/// Records `l` into `enc`'s open compute pass (with profiling on, between
/// two timestamps: inside the pass where the adapter can, else in a pass of
/// its own).
pub(crate) fn launch(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    l: Launch<'_>,
) -> Result<(), GpuError> {
    let pipeline = cache.get_act(gpu, l.key, l.source, l.entry, l.constants, l.act)?;
    let bind_group = cache.bind_group(gpu, &pipeline, l.key, &l.bindings)?;
    let record = |pass: &mut wgpu::ComputePass<'_>| {
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        if !l.immediates.is_empty() {
            pass.set_immediates(0, l.immediates);
        }
        pass.dispatch_workgroups(l.groups.0, l.groups.1, 1);
    };
    match cache.profile_slot(gpu, l.label, l.cost) {
        None => record(enc.pass()),
        // Inside a pass the first timestamp may be written before the
        // launch's barrier wait is over: a kernel's time is an upper bound
        // that includes waiting for the launch it depends on.
        Some((set, i)) if gpu.device.features().contains(INSIDE_PASSES) => {
            let pass = enc.pass();
            pass.write_timestamp(&set, i);
            record(pass);
            pass.write_timestamp(&set, i + 1);
        }
        Some((set, i)) => record(&mut enc.own_pass(wgpu::ComputePassTimestampWrites {
            query_set: &set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        })),
    }
    Ok(())
}

/// Timestamps between launches of one pass.
const INSIDE_PASSES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;

/// A bind group's identity: the pipeline and each buffer binding (wgpu
/// compares buffers and pipelines by id, never reused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BindKey {
    /// [`Self::hash_of`] the same bindings, kept for rehashing the table.
    pub(crate) hash: u64,
    pipeline: wgpu::ComputePipeline,
    entries: Vec<(u32, wgpu::Buffer, u64, Option<NonZeroU64>)>,
}

impl BindKey {
    /// The hash of `bindings` on `pipeline`, computed from the borrowed
    /// bindings (a lookup builds no key); `None` when a binding is not a
    /// whole-buffer or buffer-range binding (never cached).
    pub(crate) fn hash_of(
        pipeline: &wgpu::ComputePipeline,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> Option<u64> {
        let mut h = rustc_hash::FxHasher::default();
        pipeline.hash(&mut h);
        for (i, r) in bindings {
            let wgpu::BindingResource::Buffer(b) = r else {
                return None;
            };
            (i, b.buffer, b.offset, b.size).hash(&mut h);
        }
        Some(h.finish())
    }

    /// Whether this is the key of `bindings` on `pipeline`.
    pub(crate) fn matches(
        &self,
        pipeline: &wgpu::ComputePipeline,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> bool {
        self.pipeline == *pipeline
            && self.entries.len() == bindings.len()
            && self
                .entries
                .iter()
                .zip(bindings)
                .all(|((i, buf, off, size), (j, r))| {
                    matches!(r, wgpu::BindingResource::Buffer(b)
                    if i == j && *b.buffer == *buf && b.offset == *off && b.size == *size)
                })
    }

    /// The key of `bindings` on `pipeline` (hashing to `hash`); `None` as
    /// for [`Self::hash_of`].
    pub(crate) fn of(
        hash: u64,
        pipeline: &wgpu::ComputePipeline,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> Option<Self> {
        let entries = bindings
            .iter()
            .map(|(i, r)| match r {
                wgpu::BindingResource::Buffer(b) => Some((*i, b.buffer.clone(), b.offset, b.size)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            hash,
            pipeline: pipeline.clone(),
            entries,
        })
    }
}
