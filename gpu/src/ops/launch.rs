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
use smallvec::SmallVec;

use crate::ops::cache::{PipelineCache, Program};
use crate::ops::encoder::Encoder;

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

/// A launch's storage bindings (binding number, resource): inline, so a
/// launch allocates nothing.
pub(crate) type Bindings<'a> = SmallVec<[(u32, wgpu::BindingResource<'a>); 16]>;

/// A launch's override constants, inline.
pub(crate) type Constants = SmallVec<[(&'static str, f64); 12]>;

/// One kernel launch.
pub(crate) struct Launch<'a> {
    /// What runs: module, entry, constants, activation type (the
    /// pipeline's identity, see [`Program`]).
    pub program: Program<'a>,
    /// What the profile and the pipeline's label call it (the op and its
    /// variant): formatted only while profiling or compiling, so pass
    /// `&format_args!(..)` rather than a `String`.
    pub label: &'a dyn std::fmt::Display,
    /// Buffer bindings of group 0.
    pub bindings: &'a [(u32, wgpu::BindingResource<'a>)],
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
    let kernel = cache.get(gpu, &l.program, l.label)?;
    let bind_group = cache.bind_group(gpu, &kernel, l.label, l.bindings)?;
    let offsets = DynamicOffsets::of(kernel.dynamic, l.bindings);
    let record = |pass: &mut wgpu::ComputePass<'_>| {
        pass.set_pipeline(&kernel.pipeline);
        pass.set_bind_group(0, &bind_group, offsets.as_slice());
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

/// Dynamic offsets are what a binding's offset adds to where its bind
/// group binds it: the largest multiple of this at or below the offset
/// (a `u32` offset then reaches every byte of a large buffer).
const DYNAMIC_SPAN: u64 = 1 << 31;

/// Where binding `b` (number `i`) sits in its bind group on a pipeline
/// whose `dynamic` bindings take dynamic offsets: `(offset, size, dynamic
/// offset)`. A dynamic binding is bound at a multiple of [`DYNAMIC_SPAN`]
/// with an explicit size, so one bind group serves every offset.
fn placed(
    dynamic: u64,
    i: u32,
    b: &wgpu::BufferBinding<'_>,
) -> (u64, Option<NonZeroU64>, Option<u32>) {
    if i >= 64 || dynamic & (1 << i) == 0 {
        return (b.offset, b.size, None);
    }
    let size = b
        .size
        .or_else(|| NonZeroU64::new(b.buffer.size().saturating_sub(b.offset)));
    let rest = b.offset % DYNAMIC_SPAN;
    (b.offset - rest, size, Some(rest as u32))
}

/// The dynamic offsets of one launch, in binding order.
#[derive(Debug, Default)]
pub(crate) struct DynamicOffsets {
    len: usize,
    offsets: [u32; crate::gpu::MAX_DYNAMIC],
}

impl DynamicOffsets {
    /// The offsets of `bindings`' dynamic bindings.
    pub(crate) fn of(dynamic: u64, bindings: &[(u32, wgpu::BindingResource<'_>)]) -> Self {
        let mut o = Self::default();
        if dynamic == 0 {
            return o;
        }
        let mut by_binding = [(0u32, 0u32); crate::gpu::MAX_DYNAMIC];
        for (i, r) in bindings {
            if let wgpu::BindingResource::Buffer(b) = r
                && let (_, _, Some(d)) = placed(dynamic, *i, b)
                && o.len < by_binding.len()
            {
                by_binding[o.len] = (*i, d);
                o.len += 1;
            }
        }
        by_binding[..o.len].sort_unstable();
        for (o, (_, d)) in o.offsets.iter_mut().zip(by_binding) {
            *o = d;
        }
        o
    }

    /// The offsets as `set_bind_group` takes them.
    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.offsets[..self.len]
    }
}

/// A bind group's identity: the pipeline and each buffer binding as its
/// bind group has it (wgpu compares buffers and pipelines by id, never
/// reused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BindKey {
    /// [`Self::hash_of`] the same bindings, kept for rehashing the table.
    pub(crate) hash: u64,
    pipeline: wgpu::ComputePipeline,
    entries: Vec<(u32, wgpu::Buffer, u64, Option<NonZeroU64>)>,
}

impl BindKey {
    /// The hash of `bindings` on `pipeline` (whose `dynamic` bindings take
    /// dynamic offsets), computed from the borrowed bindings (a lookup
    /// builds no key); `None` when a binding is not a whole-buffer or
    /// buffer-range binding (never cached).
    pub(crate) fn hash_of(
        pipeline: &wgpu::ComputePipeline,
        dynamic: u64,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> Option<u64> {
        let mut h = rustc_hash::FxHasher::default();
        pipeline.hash(&mut h);
        for (i, r) in bindings {
            let wgpu::BindingResource::Buffer(b) = r else {
                return None;
            };
            let (offset, size, _) = placed(dynamic, *i, b);
            (i, b.buffer, offset, size).hash(&mut h);
        }
        Some(h.finish())
    }

    /// Whether this is the key of `bindings` on `pipeline`.
    pub(crate) fn matches(
        &self,
        pipeline: &wgpu::ComputePipeline,
        dynamic: u64,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> bool {
        self.pipeline == *pipeline
            && self.entries.len() == bindings.len()
            && self
                .entries
                .iter()
                .zip(bindings)
                .all(|((i, buf, off, size), (j, r))| {
                    let wgpu::BindingResource::Buffer(b) = r else {
                        return false;
                    };
                    let (offset, bound, _) = placed(dynamic, *j, b);
                    i == j && *b.buffer == *buf && (offset, bound) == (*off, *size)
                })
    }

    /// The key of `bindings` on `pipeline` (hashing to `hash`); `None` as
    /// for [`Self::hash_of`].
    pub(crate) fn of(
        hash: u64,
        pipeline: &wgpu::ComputePipeline,
        dynamic: u64,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> Option<Self> {
        let entries = bindings
            .iter()
            .map(|(i, r)| match r {
                wgpu::BindingResource::Buffer(b) => {
                    let (offset, size, _) = placed(dynamic, *i, b);
                    Some((*i, b.buffer.clone(), offset, size))
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            hash,
            pipeline: pipeline.clone(),
            entries,
        })
    }

    /// `bindings` as the bind group binds them (dynamic ones at their
    /// bind-group offset).
    pub(crate) fn entries<'a>(
        dynamic: u64,
        bindings: &'a [(u32, wgpu::BindingResource<'a>)],
    ) -> Vec<wgpu::BindGroupEntry<'a>> {
        bindings
            .iter()
            .map(|(i, r)| {
                let resource = match r {
                    wgpu::BindingResource::Buffer(b) => {
                        let (offset, size, _) = placed(dynamic, *i, b);
                        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: b.buffer,
                            offset,
                            size,
                        })
                    }
                    other => other.clone(),
                };
                wgpu::BindGroupEntry {
                    binding: *i,
                    resource,
                }
            })
            .collect()
    }
}
