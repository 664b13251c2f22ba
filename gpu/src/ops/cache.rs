//! Compiled pipelines, created once per [`Program`] (module, entry,
//! override constants, activation type), and the bind groups launched with
//! them.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::{FxHashMap, FxHasher};

use crate::device::{Gpu, GpuError};
use crate::ops::bindings::BindKey;
use crate::ops::launch::Cost;
use crate::ops::profile::{KernelSample, Profiler};
use crate::tensor::ActDtype;

/// What a pipeline is compiled from. Two launches of the same program get
/// the same pipeline, so no launch builds a key by hand (a hand-built key
/// can forget a specialisation; this one is the compiler's input).
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// The WGSL module: `'static`, so its address identifies it for the
    /// life of the process (generated modules are made once and leaked).
    pub source: &'static str,
    /// Entry point.
    pub entry: &'static str,
    /// Override constants.
    pub constants: &'a [(&'static str, f64)],
    /// Activation type of the module's `act` buffers.
    pub act: ActDtype,
}

/// Generated modules (text with a shape written in), made once per process
/// and key and kept, so that they are `'static` as [`Program`] wants and a
/// launch per layer and token never rewrites the text. A process makes a
/// few shapes (head dims × tunings): leaking them is the point.
pub(crate) struct Generated<K>(OnceLock<Mutex<FxHashMap<K, &'static str>>>);

impl<K: Hash + Eq> Generated<K> {
    /// An empty set, for a `static`.
    pub(crate) const fn new() -> Self {
        Self(OnceLock::new())
    }

    /// The module of `key`, from `make` the first time.
    pub(crate) fn get(&self, key: K, make: impl FnOnce() -> String) -> &'static str {
        let Ok(text) = self.try_get(key, || Ok::<_, std::convert::Infallible>(make()));
        text
    }

    /// [`Self::get`] for a `make` that can fail (nothing is kept then).
    pub(crate) fn try_get<E>(
        &self,
        key: K,
        make: impl FnOnce() -> Result<String, E>,
    ) -> Result<&'static str, E> {
        let mut map = self
            .0
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(text) = map.get(&key) {
            return Ok(text);
        }
        let text: &'static str = Box::leak(make()?.into_boxed_str());
        map.insert(key, text);
        Ok(text)
    }
}

/// The [`SpirvProgram`]s of a static list of modules, in its order, each
/// made by the const fn `$program` (a `static` initializer).
macro_rules! spirv_programs {
    ($list:expr, $program:ident) => {{
        let mut out = [$program(&$list[0]); $list.len()];
        let mut i = 1;
        while i < out.len() {
            out[i] = $program(&$list[i]);
            i += 1;
        }
        out
    }};
}
pub(crate) use spirv_programs;

/// A raw SPIR-V module and its layout, which wgpu cannot reflect from it
/// (`dynvram_shaders::spirv`; compiled by [`Gpu`] only where the device took
/// passthrough shaders). Its address identifies it, like [`Program`]'s.
#[derive(Debug, Clone, Copy)]
pub struct SpirvProgram {
    /// The module.
    pub spirv: &'static [u8],
    /// Its entry point.
    pub entry: &'static str,
    /// Its storage bindings of group 0: (binding, read-only), ascending.
    /// The module binds their ranks (0, 1, …), which is how Vulkan numbers
    /// them (`device::spirv_pipeline`).
    pub bindings: &'static [(u32, bool)],
    /// Bytes of its push constants (the launch's immediates).
    pub immediate_size: u32,
}

/// A [`Program`] as kept: hashed and compared by the module's text in
/// [`Pipelines::by_text`], by its address in [`Pipelines::by_address`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ProgramKey {
    source: &'static str,
    entry: &'static str,
    /// Each constant's value as bits.
    constants: Box<[(&'static str, u64)]>,
    act: ActDtype,
}

/// A compiled [`Program`], found by the module's address: a lookup hashes
/// a pointer and a few constants, never the text, and allocates nothing.
#[derive(Debug)]
struct ByAddress {
    hash: u64,
    key: ProgramKey,
    kernel: Arc<Kernel>,
}

impl Program<'_> {
    fn address_hash(&self) -> u64 {
        let mut h = FxHasher::default();
        (self.source.as_ptr() as usize, self.source.len()).hash(&mut h);
        self.entry.hash(&mut h);
        for (name, v) in self.constants {
            (name, v.to_bits()).hash(&mut h);
        }
        self.act.hash(&mut h);
        h.finish()
    }

    /// Whether `k` is this program with its module at the same address.
    fn is(&self, k: &ProgramKey) -> bool {
        std::ptr::eq(self.source.as_ptr(), k.source.as_ptr())
            && self.source.len() == k.source.len()
            && self.entry == k.entry
            && self.act == k.act
            && self.constants.len() == k.constants.len()
            && self
                .constants
                .iter()
                .zip(&k.constants)
                .all(|((n, v), (m, bits))| n == m && v.to_bits() == *bits)
    }

    fn key(&self) -> ProgramKey {
        ProgramKey {
            source: self.source,
            entry: self.entry,
            constants: self
                .constants
                .iter()
                .map(|(n, v)| (*n, v.to_bits()))
                .collect(),
            act: self.act,
        }
    }
}

/// A cache of compute pipelines by [`Program`].
#[derive(Debug, Default)]
pub struct PipelineCache {
    pipelines: Mutex<Pipelines>,
    /// Bind groups by pipeline and buffers (see [`Self::bind_group`]).
    bind_groups: Mutex<BindGroups>,
    /// Timestamps and costs of launches while profiling.
    profile: Profiler,
    /// Pipelines of [`SpirvProgram`]s, by the module's address.
    spirv: Mutex<FxHashMap<usize, Arc<Kernel>>>,
}

#[derive(Debug, Default)]
struct Pipelines {
    by_address: hashbrown::HashTable<ByAddress>,
    /// The same pipelines by the module's text: the same module at another
    /// address (a `const` may be one copy per use) shares the pipeline
    /// compiled for the first.
    by_text: FxHashMap<ProgramKey, Arc<Kernel>>,
}

/// A compiled pipeline and which of its bindings take dynamic offsets.
#[derive(Debug)]
pub struct Kernel {
    /// The pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Bit `b` set: binding `b` of group 0 takes a dynamic offset (its
    /// writable storage bindings, see `device::dynamic_layout`).
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
    /// The pipeline of `program`, compiled on first use under the name
    /// `label` (formatted only then): f32 activations compile the module as
    /// is, f16 compile [`dynvram_shaders::with_f16_activations`] of it,
    /// after checking the device has `SHADER_F16`; f16 words are decoded by
    /// [`dynvram_shaders::with_f16_unpack`] where the adapter grants it.
    pub fn get(
        &self,
        gpu: &Gpu,
        program: &Program<'_>,
        label: &dyn std::fmt::Display,
    ) -> Result<Arc<Kernel>, GpuError> {
        let hash = program.address_hash();
        if let Ok(p) = self.pipelines.lock()
            && let Some(c) = p.by_address.find(hash, |c| program.is(&c.key))
        {
            return Ok(c.kernel.clone());
        }
        let key = program.key();
        let known = self
            .pipelines
            .lock()
            .ok()
            .and_then(|p| p.by_text.get(&key).cloned());
        let kernel = match known {
            Some(k) => k,
            None => Arc::new(self.compile(gpu, program, label)?),
        };
        if let Ok(mut p) = self.pipelines.lock() {
            if let Some(c) = p.by_address.find(hash, |c| program.is(&c.key)) {
                // Another thread compiled it meanwhile.
                return Ok(c.kernel.clone());
            }
            p.by_text
                .entry(key.clone())
                .or_insert_with(|| kernel.clone());
            p.by_address.insert_unique(
                hash,
                ByAddress {
                    hash,
                    key,
                    kernel: kernel.clone(),
                },
                |c| c.hash,
            );
        }
        Ok(kernel)
    }

    /// The pipeline of `program`, created on first use under the name
    /// `label`.
    pub(crate) fn get_spirv(
        &self,
        gpu: &Gpu,
        program: &SpirvProgram,
        label: &dyn std::fmt::Display,
    ) -> Result<Arc<Kernel>, GpuError> {
        let key = program.spirv.as_ptr() as usize;
        if let Some(k) = self.spirv.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(k);
        }
        let pipeline = gpu.create_spirv_pipeline(
            &label.to_string(),
            program.spirv,
            program.entry,
            program.bindings,
            program.immediate_size,
        )?;
        let kernel = Arc::new(Kernel {
            pipeline,
            dynamic: 0,
        });
        if let Ok(mut m) = self.spirv.lock() {
            return Ok(m.entry(key).or_insert(kernel).clone());
        }
        Ok(kernel)
    }

    fn compile(
        &self,
        gpu: &Gpu,
        p: &Program<'_>,
        label: &dyn std::fmt::Display,
    ) -> Result<Kernel, GpuError> {
        let f16_text;
        let (source, label) = match p.act {
            ActDtype::F32 => (p.source, label.to_string()),
            ActDtype::F16 => {
                let label = format!("{label} (f16)");
                check_act_dtype(gpu, &label, p.act)?;
                f16_text = dynvram_shaders::with_f16_activations(p.source);
                (f16_text.as_str(), label)
            }
        };
        // f16 words through the hardware's conversion where it is granted:
        // decoded in integer arithmetic, a Llama-7B decode ran 25 % slower
        // on f16 weights than on bf16 ones (BENCHMARKS.md, session 30).
        let unpack_text = gpu
            .f16_unpack()
            .then(|| dynvram_shaders::with_f16_unpack(source))
            .flatten();
        let source = unpack_text.as_deref().unwrap_or(source);
        let (pipeline, dynamic) =
            gpu.create_launch_pipeline(&label, source, p.entry, p.constants)?;
        Ok(Kernel { pipeline, dynamic })
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
        what: &dyn std::fmt::Display,
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
        let what = what.to_string();
        let entries = BindKey::entries(dynamic, bindings);
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&what),
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

/// Launch profiling (`ops::profile`).
impl PipelineCache {
    /// Opens a recording (dropping any earlier one): later launches write
    /// timestamps where the device has `TIMESTAMP_QUERY`.
    pub fn start_profile(&self, gpu: &Gpu) {
        self.profile.start(gpu);
    }

    /// Where the next launch writes its timestamps (and records it), while
    /// a recording is open.
    pub(crate) fn profile_slot(
        &self,
        gpu: &Gpu,
        label: &dyn std::fmt::Display,
        cost: Cost,
    ) -> Option<(wgpu::QuerySet, u32)> {
        self.profile.slot(gpu, label, cost)
    }

    /// Closes the recording and reads its timestamps back. Call after the
    /// profiled work was submitted; waits for the GPU.
    pub fn finish_profile(&self, gpu: &Gpu) -> Result<Vec<KernelSample>, GpuError> {
        self.profile.finish(gpu)
    }
}
