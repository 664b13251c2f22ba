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

use crate::device::{Gpu, GpuError};
use smallvec::SmallVec;

use crate::ops::bindings::DynamicOffsets;
use crate::ops::cache::{Kernel, PipelineCache, Program, SpirvProgram};
use crate::ops::encoder::Encoder;

pub use crate::ops::profile::Cost;

/// A launch's storage bindings (binding number, resource): inline, so a
/// launch allocates nothing.
pub(crate) type Bindings<'a> = SmallVec<[(u32, wgpu::BindingResource<'a>); 16]>;

/// A launch's override constants, inline.
pub(crate) type Constants = SmallVec<[(&'static str, f64); 12]>;

/// One kernel launch.
pub(crate) struct Launch<'a, P = Program<'a>> {
    /// What runs: module, entry, constants, activation type (the
    /// pipeline's identity, see [`Program`]), or a [`SpirvProgram`].
    pub program: P,
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
    l: Launch<'_, Program<'_>>,
) -> Result<(), GpuError> {
    let kernel = cache.get(gpu, &l.program, l.label)?;
    record(gpu, cache, enc, &kernel, &l)
}

/// [`launch`] of a raw SPIR-V module.
pub(crate) fn launch_spirv(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    l: Launch<'_, &SpirvProgram>,
) -> Result<(), GpuError> {
    let kernel = cache.get_spirv(gpu, l.program, l.label)?;
    record(gpu, cache, enc, &kernel, &l)
}

/// Records `l` on `kernel`'s pipeline (its program's).
fn record<P>(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    kernel: &Kernel,
    l: &Launch<'_, P>,
) -> Result<(), GpuError> {
    let bind_group = cache.bind_group(gpu, kernel, l.label, l.bindings)?;
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
