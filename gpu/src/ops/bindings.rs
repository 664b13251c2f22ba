//! How a launch's buffers are bound: where a binding sits in its bind
//! group and its dynamic offset ([`DynamicOffsets`]), and the bind-group
//! cache's key ([`BindKey`]), so a bind group serves every offset of the
//! same buffers.

use std::hash::{Hash, Hasher};
use std::num::NonZeroU64;

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
    offsets: [u32; crate::device::MAX_DYNAMIC],
}

impl DynamicOffsets {
    /// The offsets of `bindings`' dynamic bindings.
    pub(crate) fn of(dynamic: u64, bindings: &[(u32, wgpu::BindingResource<'_>)]) -> Self {
        let mut o = Self::default();
        if dynamic == 0 {
            return o;
        }
        let mut by_binding = [(0u32, 0u32); crate::device::MAX_DYNAMIC];
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
