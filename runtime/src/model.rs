//! A model: its files, the weights each block uses, where each weight lives
//! (resident buffer or transient arena), and the kernel plan of each linear.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU8;

use rustc_hash::FxHashMap;

use dynvram_loader::ModelFiles;
use dynvram_memory::{ModelId, Placement};
use dynvram_quant::{KernelPath, QuantLayer};

use crate::error::{Result, RuntimeError};
use crate::lora::LoraPatch;
use crate::planning::{
    Granularity, ModelPlan, PlanWeight, arena_layout, arena_size, part_capacity,
    plan_model_with_wish,
};
use crate::residency::{ModelResidency, Placed, SharedRegistry};
use crate::runtime::Runtime;
use crate::upload::{ModelView, Weight, upload_kind};
use dynvram_gpu::device::StagingRing;

/// One block of a model: a name and the weights its ops use.
#[derive(Debug, Clone, Default)]
pub struct BlockSpec {
    /// For logs and traces (e.g. `blocks.3`).
    pub name: String,
    /// Linear layers (prefixes of `L.weight`); their weight, scale, bias and
    /// input-scale tensors all belong to the block.
    pub linears: Vec<String>,
    /// Other tensors (norm weights…), uploaded as `f32`.
    pub tensors: Vec<String>,
    /// Tensors uploaded with their bytes as stored (e.g. an embedding table
    /// that a kernel decodes itself).
    pub raw_tensors: Vec<String>,
    /// Where the block may be cut when the budget cannot hold two arenas of
    /// it (it then streams in parts, each staged while the part before it
    /// computes): its linears and tensors by name, in groups, **in the
    /// order the block's code first uses them**. A part is a run of whole
    /// groups, so the linears of one fused launch (q/k/v) share a group.
    /// Empty: the block is never cut. Otherwise every linear and tensor of
    /// the block is in exactly one group.
    pub groups: Vec<Vec<String>>,
}

/// What to open: files and blocks.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// One or more safetensors files, or a `model.safetensors.index.json`.
    pub files: Vec<PathBuf>,
    /// Blocks in execution order.
    pub blocks: Vec<BlockSpec>,
    /// Bytes of activations a pass needs at most (reserved in the budget).
    pub scratch_bytes: u64,
    /// Scratch a pass would use beyond `scratch_bytes` where the budget has
    /// room (its converted layers in one piece each instead of several):
    /// held back from the resident weights up to a sixteenth of the budget
    /// (`planning::plan_model_with_wish`); 0 for none.
    pub scratch_wish: u64,
    /// The tensors as the blocks name them, made of the stored ones
    /// ([`ModelFiles::with_views`]: another layout's split or reordered
    /// tensors read in place); empty: the files' own names.
    pub views: std::sync::Arc<[dynvram_loader::TensorView]>,
}

/// A linear layer as the model opened it: its description, the kernel path
/// chosen for it, and its tensors' indices in [`Model`]'s weights (found
/// once here, not by name on every launch).
#[derive(Debug)]
pub(crate) struct Linear {
    pub info: QuantLayer,
    pub path: KernelPath,
    pub weight: usize,
    pub scale: Option<usize>,
    pub bias: Option<usize>,
    /// [`crate::BlockCtx::folds`]'s answer per M (index M − 1): 0 not yet
    /// asked, 1 no, 2 yes. Asked ~12 times per layer and token; the answer
    /// depends on the layer's shapes, format and kernel and the adapter.
    pub folds: [AtomicU8; dynvram_gpu::ops::linear::NORM_FOLD_MAX_M as usize],
}

#[derive(Debug)]
pub(crate) struct Block {
    pub name: String,
    pub weights: Vec<usize>,
}

/// An opened model under a runtime's budget. Its resident weights live in
/// the runtime's residency registry, so another model's pass can make it
/// yield them; dropping the model frees them.
#[derive(Debug)]
pub struct Model {
    pub(crate) path: PathBuf,
    /// Shared with the pin builder's jobs (`pin_builder.rs`).
    pub(crate) files: std::sync::Arc<ModelFiles>,
    pub(crate) weights: Vec<Weight>,
    /// Looked up by name while recording (norm weights, linears): FxHash.
    pub(crate) by_name: FxHashMap<String, usize>,
    pub(crate) layers: FxHashMap<String, Linear>,
    pub(crate) blocks: Vec<Block>,
    pub(crate) plan: ModelPlan,
    /// Sizes on the GPU, load order (what the policy and the plan see).
    pub(crate) plan_weights: Vec<PlanWeight>,
    /// Activation bytes a pass needs (`ModelSpec::scratch_bytes`).
    pub(crate) scratch_bytes: u64,
    /// `ModelSpec::scratch_wish`.
    pub(crate) scratch_wish: u64,
    pub(crate) id: ModelId,
    pub(crate) registry: SharedRegistry,
    /// The runtime's pins, so the model's RAM copies go with it.
    pins: std::sync::Arc<std::sync::Mutex<crate::pins::Pins>>,
    pub(crate) patches: FxHashMap<String, std::sync::Arc<LoraPatch>>,
}

/// Sizes of a model for reports: its residency now (after another model's
/// pass it may have yielded weights, which then stream).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelReport {
    /// Weight bytes on the GPU in all.
    pub model_bytes: u64,
    /// Resident weight bytes (uploaded once).
    pub resident_bytes: u64,
    /// Streamed weight bytes (uploaded every pass).
    pub streamed_bytes: u64,
    /// Resident / streamed tensor counts.
    pub resident_tensors: usize,
    /// Streamed tensor count.
    pub streamed_tensors: usize,
    /// Bytes of each transient arena its pass needs.
    pub arena_bytes: u64,
    /// Whether streamed blocks move whole or in parts (the plan's choice).
    pub granularity: Granularity,
    /// Arena loads of a pass (streamed blocks, or parts of blocks).
    pub streamed_parts: usize,
    /// Blocks.
    pub blocks: usize,
    /// Bytes of its resident weight buffers in the ledger.
    pub loaded_vram: u64,
    /// Pages resident (the watermark).
    pub pages_resident: u32,
    /// Pages in all.
    pub pages_total: u32,
}

impl Model {
    /// Opens the files, checks every declared layer and tensor, plans
    /// residency under the runtime's budget, registers the model with the
    /// runtime's residency policy (on top), and uploads what it can keep
    /// resident, making lower-priority models yield if needed.
    pub fn open(rt: &Runtime, spec: &ModelSpec) -> Result<Self> {
        let model = Self::open_unloaded(rt, spec)?;
        model.load(rt)?;
        Ok(model)
    }

    /// Opens the model as [`Self::open`] does but loads nothing, and puts
    /// it at the bottom of the priority list: a model opened ahead of its
    /// turn (the next stage of a pipeline), which [`Self::prefetch`] loads
    /// into free room while another runs, and whose first pass (or
    /// [`Self::load`]) takes the rest.
    pub fn open_unloaded(rt: &Runtime, spec: &ModelSpec) -> Result<Self> {
        let path = spec.files.first().cloned().unwrap_or_default();
        let _span = tracing::info_span!("model_open", path = %path.display()).entered();
        let files = open_files(spec)?;
        let c = collect(&path, &files, spec)?;
        let layers: FxHashMap<String, Linear> = c
            .layers
            .into_iter()
            .map(|(name, info)| {
                let path = dynvram_quant::choose(info.format, &rt.gpu.caps, rt.config.linear_dtype);
                // `collect` added every tensor a layer names.
                let index = |t: &String| c.by_name[t];
                let linear = Linear {
                    weight: index(&info.weight),
                    scale: info.scale.as_ref().map(index),
                    bias: info.bias.as_ref().map(index),
                    info,
                    path,
                    folds: Default::default(),
                };
                (name, linear)
            })
            .collect();
        let mut weights = c.weights;
        if dynvram_gpu::ops::linear::resident_bf16_as_f16(&rt.gpu) {
            mark_f16_in_place(&mut weights, &c.tensor_use, layers.values());
        }
        let plan_weights = plan_weights(&weights);
        let usable = dynvram_gpu::accounting::lock(&rt.budget).usable();
        let (plan, _) =
            plan_model_with_wish(&plan_weights, usable, spec.scratch_bytes, spec.scratch_wish)
                .map_err(|source| RuntimeError::Plan {
                    model: path.clone(),
                    source,
                })?;
        let id = crate::residency::lock(&rt.residency).register(&path, &plan_weights)?;
        // From here on, dropping `model` unregisters it.
        let model = Self {
            path,
            files: std::sync::Arc::new(files),
            weights,
            by_name: c.by_name,
            layers,
            blocks: c.blocks,
            plan,
            plan_weights,
            scratch_bytes: spec.scratch_bytes,
            scratch_wish: spec.scratch_wish,
            id,
            registry: rt.residency.clone(),
            pins: rt.pins.clone(),
            patches: FxHashMap::default(),
        };
        crate::residency::lock(&rt.residency).lower(model.id, &model.path)?;
        Ok(model)
    }

    /// Loads the model's first weights (its load order: the first blocks)
    /// into VRAM that is free now, at most `bytes`: never evicting anything
    /// and staying below the running model in priority, so a pipeline's
    /// next model uploads while the current one works. The uploads are
    /// submitted, not waited for. Returns the bytes loaded (0 where no
    /// room is free).
    pub fn prefetch(&self, rt: &Runtime, bytes: u64) -> Result<u64> {
        self.check_runtime(rt)?;
        let gpu = &rt.gpu;
        let mut ring = rt.ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        let loaded = crate::residency::lock(&rt.residency).prefetch(
            rt.device(),
            self.view(),
            bytes,
            &mut ring,
            &mut enc,
        );
        // What was recorded goes to the GPU whatever happened.
        ring.submit(&gpu.queue, enc);
        loaded
    }

    /// Starts building, in the background, the registered pins of the
    /// weights this model's plan streams (docs/behaviour.md, Pins), in
    /// pass order, so its first pass copies them from pins rather than
    /// reading its files through the staging ring: for a pipeline's next
    /// model while the current one runs. Returns the bytes queued (0 where
    /// pins are off, built in the pass, or RAM is short).
    pub fn pin_ahead(&self, rt: &Runtime) -> Result<u64> {
        self.check_runtime(rt)?;
        let ring = rt.ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut pins = rt.pins.lock().unwrap_or_else(|e| e.into_inner());
        let streamed = (0..self.weights.len()).filter(|&i| self.plan.streamed(i));
        let queued = pins.pin_ahead(self.view(), streamed, &ring, &rt.gpu)?;
        tracing::info!(queued, model = %self.path.display(), "pinning ahead");
        Ok(queued)
    }

    /// Acquires residency now, as a pass would (on top of the priority
    /// list, others yielding if room is short), and waits for the uploads.
    /// Returns the bytes it uploaded.
    pub fn load(&self, rt: &Runtime) -> Result<u64> {
        let gpu = &rt.gpu;
        let mut ring = rt.ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        let placed = self.acquire(rt, &mut ring, &mut enc)?;
        let _span = tracing::info_span!("upload_resident", bytes = placed.loaded_bytes).entered();
        ring.submit(&gpu.queue, enc);
        gpu.wait_idle()?;
        Ok(placed.loaded_bytes)
    }

    /// Linear layer `layer`.
    pub(crate) fn linear(&self, layer: &str) -> Result<&Linear> {
        self.layers
            .get(layer)
            .ok_or_else(|| RuntimeError::MissingLayer {
                model: self.path.clone(),
                layer: layer.to_owned(),
            })
    }

    /// What moving its weights needs to know of it.
    pub(crate) fn view(&self) -> ModelView<'_> {
        ModelView {
            id: self.id,
            path: &self.path,
            files: &self.files,
            weights: &self.weights,
            plan_weights: &self.plan_weights,
            scratch_bytes: self.scratch_bytes,
            scratch_wish: self.scratch_wish,
        }
    }

    /// Fails unless `rt` is the runtime this model was opened on: model ids
    /// count per runtime, so another runtime's registry could hold a model
    /// of the same id.
    pub(crate) fn check_runtime(&self, rt: &Runtime) -> Result<()> {
        if std::sync::Arc::ptr_eq(&self.registry, &rt.residency) {
            Ok(())
        } else {
            Err(RuntimeError::ForeignModel {
                model: self.path.clone(),
            })
        }
    }

    /// Acquires residency (see `residency::Registry::acquire`), recording
    /// uploads into `enc`. On error what was recorded is submitted and waited
    /// for, so the ring and the device stay usable.
    pub(crate) fn acquire(
        &self,
        rt: &Runtime,
        ring: &mut StagingRing,
        enc: &mut wgpu::CommandEncoder,
    ) -> Result<Placed> {
        let result =
            crate::residency::lock(&rt.residency).acquire(rt.device(), self.view(), ring, enc);
        if result.is_err() {
            let recorded = std::mem::replace(
                enc,
                rt.gpu
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("block"),
                    }),
            );
            ring.submit(&rt.gpu.queue, recorded);
            rt.gpu.wait_idle()?;
            ring.recycle(&rt.gpu.device)?;
        }
        result
    }

    /// The file the model was opened from (the first one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The residency plan made at open, as if the model were alone
    /// (`dynvram plan`); [`report`](Self::report) says what is resident now.
    pub fn plan(&self) -> &ModelPlan {
        &self.plan
    }

    /// Number of blocks.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// The kernel plan of a linear layer.
    pub fn kernel_path(&self, layer: &str) -> Option<&KernelPath> {
        self.layers.get(layer).map(|l| &l.path)
    }

    /// The layer description (format, N, K) of a linear layer.
    pub fn linear_layer(&self, layer: &str) -> Option<&QuantLayer> {
        self.layers.get(layer).map(|l| &l.info)
    }

    /// Its id under the runtime's residency policy.
    pub fn id(&self) -> ModelId {
        self.id
    }

    /// Its residency now, as the runtime's policy and ledger see it.
    pub fn residency(&self) -> Option<ModelResidency> {
        crate::residency::lock(&self.registry).report(self.id)
    }

    /// Sizes for reports, as resident now.
    pub fn report(&self) -> ModelReport {
        let (placement, residency) = {
            let reg = crate::residency::lock(&self.registry);
            (
                reg.placement(self.id).unwrap_or_default(),
                reg.report(self.id),
            )
        };
        let streamed = |i: usize| placement.get(i).is_none_or(|p| *p == Placement::Stream);
        let sum = |want: bool| {
            self.plan_weights
                .iter()
                .enumerate()
                .filter(|&(i, _)| streamed(i) == want)
                .map(|(_, w)| w.size)
                .sum::<u64>()
        };
        let streamed_tensors = (0..self.plan_weights.len())
            .filter(|&i| streamed(i))
            .count();
        let layout = arena_layout(&self.plan_weights, streamed, part_capacity(&self.plan));
        ModelReport {
            model_bytes: sum(false) + sum(true),
            resident_bytes: sum(false),
            streamed_bytes: sum(true),
            resident_tensors: self.plan_weights.len() - streamed_tensors,
            streamed_tensors,
            arena_bytes: arena_size(layout.fill),
            granularity: self.plan.granularity,
            streamed_parts: layout.streamed_parts,
            blocks: self.blocks.len(),
            loaded_vram: residency.as_ref().map_or(0, |r| r.loaded_vram),
            pages_resident: residency.as_ref().map_or(0, |r| r.pages_resident),
            pages_total: residency.as_ref().map_or(0, |r| r.pages_total),
        }
    }
}

impl Model {
    /// Attaches (or replaces) a LoRA patch on linear layer `layer`:
    /// `a` is `[rank, K]`, `b` is `[N, rank]`, row-major `f32`.
    pub fn attach_lora(
        &mut self,
        rt: &Runtime,
        layer: &str,
        a: &[f32],
        b: &[f32],
        rank: usize,
        alpha: f32,
    ) -> Result<()> {
        self.check_runtime(rt)?;
        let Linear { info, .. } =
            self.layers
                .get(layer)
                .ok_or_else(|| RuntimeError::MissingLayer {
                    model: self.path.clone(),
                    layer: layer.to_owned(),
                })?;
        let shape = (info.n, info.k);
        let patch = LoraPatch::upload(&rt.gpu, &rt.budget, layer, shape, a, b, rank, alpha)?;
        self.patches
            .insert(layer.to_owned(), std::sync::Arc::new(patch));
        Ok(())
    }

    /// Detaches the patch of `layer`; returns whether there was one. Its
    /// buffers (and ledger entries) go when the last pass using them ends.
    pub fn detach_lora(&mut self, layer: &str) -> bool {
        self.patches.remove(layer).is_some()
    }

    /// Layers with a patch attached.
    pub fn lora_layers(&self) -> Vec<&str> {
        self.patches.keys().map(String::as_str).collect()
    }
}

impl Runtime {
    /// Drops every RAM copy of `model` (e.g. before closing it; otherwise
    /// they stay until RAM pressure or the ceiling frees them, inactive
    /// models first).
    pub fn release_pins(&self, model: &Model) {
        self.pins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unload(model.id);
    }
}

impl Drop for Model {
    /// Frees its resident weights (and the shared arenas), its RAM copies
    /// (pins), and leaves the priority list.
    fn drop(&mut self) {
        crate::residency::lock(&self.registry).unregister(self.id);
        self.pins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unload(self.id);
    }
}

/// Plans a model from its files and blocks alone, without a GPU: exactly the
/// plan [`Model::open`] makes under the same usable bytes.
pub fn plan_spec(spec: &ModelSpec, usable: u64) -> Result<(ModelPlan, Vec<PlanWeight>)> {
    let path = spec.files.first().cloned().unwrap_or_default();
    let files = open_files(spec)?;
    let c = collect(&path, &files, spec)?;
    let weights = plan_weights(&c.weights);
    let (plan, _) = plan_model_with_wish(&weights, usable, spec.scratch_bytes, spec.scratch_wish)
        .map_err(|source| RuntimeError::Plan {
        model: path,
        source,
    })?;
    Ok((plan, weights))
}

/// Marks the weights whose resident copies are converted to f16 in place
/// as they are uploaded (`Weight::f16_in_place`): bf16 weights of bf16
/// linears, uploaded raw, that no block reads as a tensor too (a tied
/// embedding's table stays bf16).
fn mark_f16_in_place<'l>(
    weights: &mut [Weight],
    tensor_use: &[bool],
    linears: impl Iterator<Item = &'l Linear>,
) {
    for l in linears {
        let w = &mut weights[l.weight];
        if l.info.format == dynvram_quant::Format::Bf16
            && w.info.dtype == dynvram_loader::Dtype::BF16
            && w.upload == crate::upload::Upload::Raw
            && !tensor_use[l.weight]
        {
            w.f16_in_place = true;
        }
    }
}

fn plan_weights(weights: &[Weight]) -> Vec<PlanWeight> {
    weights
        .iter()
        .map(|w| PlanWeight {
            name: w.name.clone(),
            // As the ledger records it (`TrackedBuffer` rounds to 4 bytes),
            // so resident pages and ledger figures agree exactly.
            size: w.upload.gpu_size(&w.info).max(4).next_multiple_of(4),
            block: w.block,
            group: w.group,
        })
        .collect()
}

struct Collected {
    weights: Vec<Weight>,
    /// Per weight: a block declares it as a tensor or raw tensor too (not
    /// only as a linear's weight): other kernels read its bytes as stored.
    tensor_use: Vec<bool>,
    by_name: FxHashMap<String, usize>,
    layers: HashMap<String, QuantLayer>,
    blocks: Vec<Block>,
}

/// Every weight the blocks declare, in execution order, each layer validated.
fn collect(path: &Path, files: &ModelFiles, spec: &ModelSpec) -> Result<Collected> {
    let list = crate::files_list::FilesList::new(files);
    let mut weights = Vec::new();
    let mut by_name = FxHashMap::default();
    let mut layers = HashMap::new();
    let mut blocks = Vec::new();
    let mut tensor_use = Vec::new();
    for (b, block) in spec.blocks.iter().enumerate() {
        let mut ids = Vec::new();
        let mut add = |name: &str, raw: bool, group: usize, tensor: bool| -> Result<()> {
            if let Some(&i) = by_name.get(name) {
                tensor_use[i] |= tensor;
                return Ok(());
            }
            let info = files
                .info(name)
                .ok_or_else(|| RuntimeError::MissingTensor {
                    model: path.to_owned(),
                    tensor: name.to_owned(),
                })?;
            let upload = upload_kind(path, info, raw)?;
            by_name.insert(name.to_owned(), weights.len());
            ids.push(weights.len());
            weights.push(Weight::new(name, info, b, group, upload));
            tensor_use.push(tensor);
            Ok(())
        };
        // Load order: group by group where the block declares groups.
        for (name, kind, group) in block_items(path, block)? {
            match kind {
                Item::Linear => {
                    let layout = |source| RuntimeError::Layout {
                        model: path.to_owned(),
                        source,
                    };
                    let layer = dynvram_quant::validate_layer(&list, name).map_err(layout)?;
                    // Poisoned scales would make every output of the layer
                    // garbage (NaN/inf int scales even came out finite):
                    // refused at open.
                    dynvram_quant::check_scales(&list, &layer).map_err(layout)?;
                    add(&layer.weight, true, group, false)?;
                    for t in [&layer.scale, &layer.input_scale].into_iter().flatten() {
                        add(t, true, group, false)?;
                    }
                    if let Some(bias) = &layer.bias {
                        add(bias, false, group, false)?;
                    }
                    layers.insert(name.to_owned(), layer);
                }
                Item::Tensor => add(name, false, group, true)?,
                Item::Raw => add(name, true, group, true)?,
            }
        }
        blocks.push(Block {
            name: block.name.clone(),
            weights: ids,
        });
    }
    Ok(Collected {
        weights,
        tensor_use,
        by_name,
        layers,
        blocks,
    })
}

/// What a block declares a name as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Linear,
    Tensor,
    Raw,
}

/// A block's linears and tensors in load order with their group: as
/// declared (all in group 0) without groups, else group by group, each
/// checked to be declared once and grouped once.
fn block_items<'s>(path: &Path, block: &'s BlockSpec) -> Result<Vec<(&'s str, Item, usize)>> {
    let declared = block
        .linears
        .iter()
        .map(|n| (n, Item::Linear))
        .chain(block.tensors.iter().map(|n| (n, Item::Tensor)))
        .chain(block.raw_tensors.iter().map(|n| (n, Item::Raw)));
    if block.groups.is_empty() {
        return Ok(declared.map(|(n, kind)| (n.as_str(), kind, 0)).collect());
    }
    let bad = |why: String| RuntimeError::BadGroups {
        model: path.to_owned(),
        block: block.name.clone(),
        why,
    };
    let declared: Vec<(&str, Item)> = declared.map(|(n, kind)| (n.as_str(), kind)).collect();
    let kinds: HashMap<&str, Item> = declared.iter().copied().collect();
    let mut seen = HashMap::new();
    let mut items = Vec::new();
    for (g, group) in block.groups.iter().enumerate() {
        for name in group {
            let kind = *kinds.get(name.as_str()).ok_or_else(|| {
                bad(format!(
                    "group {g} names `{name}`, which is none of the block's linears or tensors"
                ))
            })?;
            if let Some(first) = seen.insert(name.as_str(), g) {
                return Err(bad(format!("`{name}` is in groups {first} and {g}")));
            }
            items.push((name.as_str(), kind, g));
        }
    }
    if let Some((name, _)) = declared.iter().find(|(n, _)| !seen.contains_key(n)) {
        return Err(bad(format!("`{name}` is in no group")));
    }
    Ok(items)
}

/// The spec's files, read through its views where it has them.
fn open_files(spec: &ModelSpec) -> Result<ModelFiles> {
    let files = match spec.files.as_slice() {
        [one] if one.extension().is_some_and(|e| e == "json") => ModelFiles::open_index(one)?,
        files => ModelFiles::from_files(files)?,
    };
    if spec.views.is_empty() {
        return Ok(files);
    }
    Ok(files.with_views(&spec.views)?)
}
