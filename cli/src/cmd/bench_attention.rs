//! `dynvram bench attention`: decode attention (one query row over a KV
//! cache, RoPE fused as the models run it) per decode tuning — workgroup
//! size, split policy or forced splits, merge of the key groups — timed
//! like `bench linear` (the median of 5 submits of `--reps` attentions,
//! GPU timestamps where the adapter has them), the combine launch included
//! where the keys split. With `--queries`, prefill attention instead (a
//! Flux step's joint attention, a Llama prefill): blocks of query rows
//! over plain k/v as flash attention on cooperative matrices, per flash
//! kernel ([`FlashKernel`]: the two-walk kernel or a one-walk tuning), in
//! TFLOP/s.

use std::process::ExitCode;

use dynvram_runtime::ops::attention::{
    DecodeTuning, FlashGrid, FlashKernel, Heads, Mask, decode_fuses_rope, decode_unusable,
    flash_geometry, flash_kernel_for, flash_kernel_unusable, record_attention_tuned,
    record_flash_attention_tuned,
};
use dynvram_runtime::ops::cache::PipelineCache;
use dynvram_runtime::ops::linear::LinearScratch;
use dynvram_runtime::ops::rope::RopeTable;
use dynvram_runtime::{ActDtype, Gpu, GpuTensor};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::gpu_timing::{activation, median_seconds, submit_timed};
use crate::output::print_json;

/// Arguments of `dynvram bench attention`.
#[derive(Debug, clap::Args)]
pub struct AttentionArgs {
    /// KV cache lengths (keys) to time, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "128,512,2048,8192",
          value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    keys: Vec<u64>,
    /// Query heads.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    heads: u64,
    /// KV heads, comma separated (a case each; each must divide --heads).
    /// Default: 32,8 (decode), --heads (prefill).
    #[arg(long, value_delimiter = ',',
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    kv_heads: Vec<u64>,
    /// Prefill attention instead of decode: this many query rows per batch
    /// element over each --keys count of keys (flash attention, timed per
    /// --flash tuning). Causal (the queries are the last positions of the
    /// keys) unless --no-causal.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    queries: Option<u64>,
    /// Prefill: every query row sees every key (a diffusion transformer's
    /// joint attention).
    #[arg(long)]
    no_causal: bool,
    /// Prefill: batch elements.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    batch: u64,
    /// Prefill: flash kernels to time after the device's choice (always
    /// first: the adapter's default, the one-walk kernel in its first
    /// fitting tuning, or `DYNVRAM_FLASH`), comma separated: `two-walk`, or a one-walk tuning
    /// `BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m]`: BR query rows a workgroup,
    /// BC keys a block, NSG subgroups, KG key groups splitting a row
    /// block's scores, CG column groups splitting an output row block's
    /// head columns, staging serial/paired/global/double (d needs r), r: the next block read
    /// into registers, t: scores and probabilities column-major, m: the
    /// queries materialized in registers (see `FlashTuning`); or
    /// `cm2-ROWSxKEYS`, a SPIR-V kernel on NVIDIA's cooperative matrices 2
    /// (`f` or `fN` after it: inner key blocks loaded unclamped, N a loop
    /// iteration). A kernel may be listed more than once (repeats
    /// interleaved with the others), the device's choice too, but for
    /// its first place. Each output is compared with the first's
    /// (`max_diff`).
    #[arg(long, value_delimiter = ',', value_parser = str::parse::<FlashKernel>,
          default_value = "two-walk,64x64w4c2,64x64w4c2m,64x64w4c2t,64x64w4c2r,64x32w4c2pr,128x32w8c2,128x32w8c2m,128x32w8c2t,128x32w8c2p,128x32w8c2pr,128x32w8c2prm,128x32w8k2c4,64x64w4c2g,128x32w8c2g,128x32w8c2gm,64x32w8k2c4")]
    flash: Vec<FlashKernel>,
    /// Head dimension.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=256))]
    head_dim: u64,
    /// f32 activations and cache (default: f16, as the models decode).
    #[arg(long)]
    f32: bool,
    /// Plain attention, without the RoPE of the query and the new key
    /// fused in.
    #[arg(long)]
    no_rope: bool,
    /// Decode tunings to time, comma separated, each
    /// `WG[xTARGET|sSPLITS][mMERGE][hHEADS]`: `WG` invocations per workgroup (a
    /// power of two, 32 to 1024); `xTARGET` splits the keys aiming for
    /// `TARGET` workgroups (the runtime's policy: 32 to 512 keys a split), or
    /// `sSPLITS` forces that many splits (`s1`: one workgroup per kv head,
    /// no combine launch); `mMERGE` merges that many key groups a round at
    /// the end of a workgroup (without `m`: 1, one at a time; more than the
    /// workgroup has: all at once); `hHEADS` gives each workgroup that many
    /// query heads of those sharing a kv head (without `h`: one; `h8`: up
    /// to 8, all of a Llama-3 group, each key read once). `256x132m4` is
    /// the runtime's default.
    #[arg(long, value_delimiter = ',', value_parser = str::parse::<DecodeTuning>,
          default_value = "256x132m4,256x132m4h8,128x264m4,128x264,512x32m8,1024x32,512s1,1024s1,1024s1m32")]
    tunings: Vec<DecodeTuning>,
    /// Attentions per submit (the median of 5 submits is reported).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    reps: u64,
    #[command(flatten)]
    adapter: AdapterArgs,
}

/// One case's figures.
#[derive(Debug, Serialize)]
struct Figure {
    keys: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    /// The tuning as given (`WG[xTARGET|sSPLITS][mMERGE][hHEADS]`).
    tuning: String,
    /// The kernel that ran: `decode` (the tuning's) or `scalar` (more
    /// queries per kv head than the decode kernel takes; the tuning unread).
    kernel: &'static str,
    /// Key splits per kv head (decode kernel).
    splits: u64,
    /// Keys per split.
    chunk: u64,
    /// Workgroups of the decode launch (kv heads × splits).
    workgroups: u64,
    /// Launches per attention on the decode kernel: 1, one more where the
    /// keys split (the combine), one more where RoPE cannot be fused
    /// (`null` on the scalar kernels).
    launches: Option<u32>,
    /// Microseconds per attention, the combine included.
    us: f64,
    /// K and V cache bytes read per second (each once).
    kv_gb_per_s: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    backend: String,
    /// `gpu timestamps` or `wall` (submit to idle, fixed costs included).
    timing: &'static str,
    dtype: String,
    rope: bool,
    reps: u64,
    figures: Vec<Figure>,
    /// Cases not timed, and why (a tuning the adapter cannot run).
    skipped: Vec<String>,
}

/// Runs the subcommand.
pub fn run(mut a: AttentionArgs, json: bool) -> anyhow::Result<ExitCode> {
    if let Some(queries) = a.queries {
        return run_prefill(&a, queries, json);
    }
    if a.kv_heads.is_empty() {
        a.kv_heads = vec![32, 8];
    }
    for &kv in &a.kv_heads {
        anyhow::ensure!(
            a.heads.is_multiple_of(kv),
            "--kv-heads {kv} does not divide --heads {}",
            a.heads
        );
    }
    anyhow::ensure!(!a.tunings.is_empty(), "--tunings lists no tuning");
    let rope = !a.no_rope;
    anyhow::ensure!(
        !rope || a.head_dim.is_multiple_of(2),
        "RoPE needs an even --head-dim (or --no-rope)"
    );
    let gpu = Gpu::open(&a.adapter.choice())?;
    let act = if a.f32 { ActDtype::F32 } else { ActDtype::F16 };
    anyhow::ensure!(
        act == ActDtype::F32 || gpu.caps.shader_f16,
        "{} lacks SHADER_F16: use --f32",
        gpu.caps.name
    );
    let stamps = gpu.device.features().contains(
        wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS,
    );
    let mut report = Report {
        adapter: gpu.info.name.clone(),
        backend: gpu.caps.backend.to_string(),
        timing: if stamps { "gpu timestamps" } else { "wall" },
        dtype: act.to_string(),
        rope,
        reps: a.reps,
        figures: Vec::new(),
        skipped: Vec::new(),
    };
    if !json {
        println!(
            "adapter {} [{}], {act}, {}",
            report.adapter,
            report.backend,
            if rope { "RoPE fused" } else { "no RoPE" }
        );
        println!(
            "timing: {}",
            if stamps {
                "GPU timestamps around each submit's repetitions"
            } else {
                "wall time from submit to idle (no timestamps inside encoders)"
            }
        );
        println!(
            "{:>6} {:>5} {:>4} {:>4}  {:<12} {:>6} {:>6} {:>5} {:>4} {:>9} {:>8}",
            "keys",
            "heads",
            "kv",
            "hd",
            "tuning",
            "splits",
            "chunk",
            "wgs",
            "disp",
            "us",
            "KV GB/s"
        );
    }
    let cache = PipelineCache::default();
    for &kv_heads in &a.kv_heads {
        let heads = Heads {
            n_heads: a.heads,
            n_kv_heads: kv_heads,
            head_dim: a.head_dim,
        };
        for &keys in &a.keys {
            let case = Case::new(&gpu, heads, keys, act, rope)?;
            for tuning in &a.tunings {
                match case.time(&gpu, &cache, tuning, a.reps as usize)? {
                    Timed::Figure(f) => {
                        if !json {
                            println!(
                                "{:>6} {:>5} {:>4} {:>4}  {:<12} {:>6} {:>6} {:>5} {:>4} {:>9.2} {:>8.1}{}",
                                f.keys,
                                f.heads,
                                f.kv_heads,
                                f.head_dim,
                                f.tuning,
                                f.splits,
                                f.chunk,
                                f.workgroups,
                                f.launches.map_or("-".into(), |l| l.to_string()),
                                f.us,
                                f.kv_gb_per_s,
                                if f.kernel == "decode" {
                                    ""
                                } else {
                                    "  (scalar kernels)"
                                }
                            );
                        }
                        report.figures.push(f);
                    }
                    Timed::Skipped(why) => skip(
                        &mut report.skipped,
                        json,
                        format!(
                            "{keys} keys, {} heads / {kv_heads} kv, tuning {tuning}: {why}",
                            a.heads
                        ),
                    ),
                }
            }
        }
    }
    if json {
        print_json(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Says (unless `json`) and keeps a case or tuning not timed.
fn skip(skipped: &mut Vec<String>, json: bool, line: String) {
    if !json {
        println!("skipped: {line}");
    }
    skipped.push(line);
}

/// A timed attention's operands: q and out `[q_rows,
/// n_heads·head_dim]`, k and v `[kv_rows, n_kv_heads·head_dim]` (labelled
/// `kv_labels`).
struct Operands {
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    out: GpuTensor,
}

impl Operands {
    fn new(
        gpu: &Gpu,
        heads: Heads,
        (q_rows, kv_rows): (u64, u64),
        kv_labels: [&str; 2],
        act: ActDtype,
    ) -> anyhow::Result<Self> {
        let width = heads.n_kv_heads * heads.head_dim;
        let q_width = heads.n_heads * heads.head_dim;
        Ok(Self {
            q: activation(gpu, "bench.q", q_rows, q_width, act, 1)?,
            k: activation(gpu, kv_labels[0], kv_rows, width, act, 2)?,
            v: activation(gpu, kv_labels[1], kv_rows, width, act, 3)?,
            out: activation(gpu, "bench.out", q_rows, q_width, act, 4)?,
        })
    }
}

/// A case's tensors: one query row at the last of `keys` positions over a
/// full cache, and the RoPE table.
struct Case {
    heads: Heads,
    keys: u64,
    ops: Operands,
    rope: Option<RopeTable>,
}

/// A case's outcome with one tuning.
enum Timed {
    Figure(Figure),
    Skipped(String),
}

impl Case {
    fn new(gpu: &Gpu, heads: Heads, keys: u64, act: ActDtype, rope: bool) -> anyhow::Result<Self> {
        let labels = ["bench.k_cache", "bench.v_cache"];
        let ops = Operands::new(gpu, heads, (1, keys), labels, act)?;
        let rope = rope
            .then(|| RopeTable::new(gpu, 10000.0, heads.head_dim, keys))
            .transpose()?;
        Ok(Self {
            heads,
            keys,
            ops,
            rope,
        })
    }

    /// Times `reps` attentions a submit with `tuning`.
    fn time(
        &self,
        gpu: &Gpu,
        cache: &PipelineCache,
        tuning: &DecodeTuning,
        reps: usize,
    ) -> anyhow::Result<Timed> {
        let h = self.heads;
        // As `record_attention_tuned` chooses: the decode kernel, RoPE
        // fused where it can, else a RoPE launch before it.
        let decode = decode_unusable(h, 1, false).is_none();
        let rope_launch = self.rope.is_some() && !decode_fuses_rope(h, 1, tuning);
        if decode {
            let queries = tuning.queries(h, 1);
            let limits = gpu.device.limits();
            if let Some(why) = tuning.unusable(&gpu.caps, &limits, h.head_dim, queries) {
                return Ok(Timed::Skipped(why));
            }
        }
        let mut scratch = LinearScratch::new();
        let mut run = |times: usize| {
            submit_timed(gpu, |enc| {
                for _ in 0..times {
                    record_attention_tuned(
                        gpu,
                        cache,
                        enc,
                        &self.ops.q,
                        &self.ops.k,
                        &self.ops.v,
                        &self.ops.out,
                        h,
                        self.keys,
                        self.keys - 1,
                        self.rope.as_ref(),
                        &mut scratch,
                        tuning,
                        None,
                    )?;
                }
                Ok(())
            })
        };
        run(2)?; // compile the pipelines, warm the caches
        let per = median_seconds(reps, &mut run)?;
        let per_split = tuning.workgroups_per_split(h);
        let (chunk, splits) = if decode {
            tuning.split(per_split, self.keys)
        } else {
            (0, 0)
        };
        let kv_bytes = 2 * self.keys * h.n_kv_heads * h.head_dim * self.ops.q.dtype.size();
        Ok(Timed::Figure(Figure {
            keys: self.keys,
            heads: h.n_heads,
            kv_heads: h.n_kv_heads,
            head_dim: h.head_dim,
            tuning: tuning.to_string(),
            kernel: if decode { "decode" } else { "scalar" },
            splits,
            chunk,
            workgroups: per_split * splits,
            launches: decode.then_some(1 + u32::from(splits > 1) + u32::from(rope_launch)),
            us: per * 1e6,
            kv_gb_per_s: kv_bytes as f64 / per / 1e9,
        }))
    }
}

/// One prefill case's figures with one flash tuning.
#[derive(Debug, Serialize)]
struct PrefillFigure {
    queries: u64,
    keys: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    batch: u64,
    causal: bool,
    /// The flash kernel (`two-walk` or `BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m]`).
    tuning: String,
    /// Whether it is the device's choice at this head_dim (the adapter's
    /// default, or `DYNVRAM_FLASH`).
    default: bool,
    /// Workgroups of the launch (heads x query blocks; 0: the two-walk
    /// kernel's, not reported).
    workgroups: u64,
    /// Bytes of workgroup memory a workgroup takes (one-walk kernel).
    workgroup_bytes: u32,
    /// Registers an invocation's matrices take (an estimate).
    registers: u32,
    /// Microseconds per attention.
    us: f64,
    /// Useful FLOPs (q·k and p·v over the keys each row sees) per second.
    tflops: f64,
    /// Largest |difference| from the default tuning's output (0 for the
    /// default itself).
    max_diff: f64,
}

#[derive(Debug, Serialize)]
struct PrefillReport {
    adapter: String,
    backend: String,
    timing: &'static str,
    reps: u64,
    figures: Vec<PrefillFigure>,
    /// Tunings not timed, and why.
    skipped: Vec<String>,
}

/// `--queries`: flash attention per tuning at each key count and kv-head
/// count.
fn run_prefill(a: &AttentionArgs, queries: u64, json: bool) -> anyhow::Result<ExitCode> {
    let kv_heads = if a.kv_heads.is_empty() {
        vec![a.heads]
    } else {
        a.kv_heads.clone()
    };
    for &kv in &kv_heads {
        anyhow::ensure!(
            a.heads.is_multiple_of(kv),
            "--kv-heads {kv} does not divide --heads {}",
            a.heads
        );
    }
    anyhow::ensure!(
        !a.f32,
        "prefill attention is timed in f16 (flash attention)"
    );
    let causal = !a.no_causal;
    let gpu = Gpu::open(&a.adapter.choice())?;
    let caps = &gpu.caps;
    // The device's choice over these query rows: the adapter's default, or
    // DYNVRAM_FLASH.
    let grid = FlashGrid {
        heads: a.heads * a.batch,
        rows: queries,
    };
    let default = flash_kernel_for(&gpu, ActDtype::F16, a.head_dim, grid).map_err(|why| {
        anyhow::anyhow!(
            "{} runs no flash attention at head_dim {}: {why}",
            caps.name,
            a.head_dim
        )
    })?;
    // The device's choice listed first again is not timed twice; later in
    // the list it is (interleaved repeats, to see a run's scatter).
    let mut tunings = vec![default];
    let from = usize::from(a.flash.first() == Some(&default));
    tunings.extend(&a.flash[from..]);
    let stamps = gpu.device.features().contains(
        wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS,
    );
    let mut report = PrefillReport {
        adapter: gpu.info.name.clone(),
        backend: caps.backend.to_string(),
        timing: if stamps { "gpu timestamps" } else { "wall" },
        reps: a.reps,
        figures: Vec::new(),
        skipped: Vec::new(),
    };
    if !json {
        println!(
            "adapter {} [{}], f16, flash attention ({}x{} matrices, subgroups of {}, {} bytes of workgroup memory), {}",
            report.adapter,
            report.backend,
            caps.coop_matrix_edge,
            caps.coop_matrix_edge,
            caps.subgroup_min_size,
            caps.max_workgroup_storage,
            report.timing
        );
        println!(
            "{:>6} {:>6} {:>5} {:>4} {:>4} {:>5} {:>6}  {:<16} {:>6} {:>6} {:>4} {:>10} {:>8} {:>9}",
            "rows",
            "keys",
            "heads",
            "kv",
            "hd",
            "batch",
            "causal",
            "tuning",
            "wgs",
            "wg KiB",
            "regs",
            "us",
            "TFLOP/s",
            "max_diff"
        );
    }
    let cache = PipelineCache::default();
    for &kv in &kv_heads {
        let heads = Heads {
            n_heads: a.heads,
            n_kv_heads: kv,
            head_dim: a.head_dim,
        };
        for &keys in &a.keys {
            if causal && keys < queries {
                report.skipped.push(format!(
                    "{queries} causal rows over {keys} keys (the rows are the last positions of the keys)"
                ));
                continue;
            }
            let case = Prefill::new(&gpu, heads, a.batch, queries, keys)?;
            let mut reference: Option<Vec<f32>> = None;
            for t in &tunings {
                if let Some(why) = flash_kernel_unusable(&gpu, t, a.head_dim) {
                    let line = format!("{t} at head_dim {}: {why}", a.head_dim);
                    skip(&mut report.skipped, json, line);
                    continue;
                }
                let f = case.time(
                    &gpu,
                    &cache,
                    t,
                    *t == default,
                    causal,
                    a.reps as usize,
                    &mut reference,
                )?;
                if !json {
                    println!(
                        "{:>6} {:>6} {:>5} {:>4} {:>4} {:>5} {:>6}  {:<16} {:>6} {:>6.1} {:>4} {:>10.1} {:>8.2} {:>9.2e}{}",
                        f.queries,
                        f.keys,
                        f.heads,
                        f.kv_heads,
                        f.head_dim,
                        f.batch,
                        f.causal,
                        f.tuning,
                        f.workgroups,
                        f64::from(f.workgroup_bytes) / 1024.0,
                        f.registers,
                        f.us,
                        f.tflops,
                        f.max_diff,
                        if f.default { "  (default)" } else { "" }
                    );
                }
                report.figures.push(f);
            }
        }
    }
    if json {
        print_json(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A prefill case's tensors: `batch` elements of `queries` rows over
/// `keys` keys.
struct Prefill {
    heads: Heads,
    batch: u64,
    queries: u64,
    keys: u64,
    ops: Operands,
}

impl Prefill {
    fn new(gpu: &Gpu, heads: Heads, batch: u64, queries: u64, keys: u64) -> anyhow::Result<Self> {
        let rows = (batch * queries, batch * keys);
        let ops = Operands::new(gpu, heads, rows, ["bench.k", "bench.v"], ActDtype::F16)?;
        Ok(Self {
            heads,
            batch,
            queries,
            keys,
            ops,
        })
    }

    /// Times `reps` attentions a submit with `tuning`; the output is
    /// compared with `reference` (set by the first tuning timed).
    #[allow(clippy::too_many_arguments)]
    fn time(
        &self,
        gpu: &Gpu,
        cache: &PipelineCache,
        tuning: &FlashKernel,
        default: bool,
        causal: bool,
        reps: usize,
        reference: &mut Option<Vec<f32>>,
    ) -> anyhow::Result<PrefillFigure> {
        let h = self.heads;
        let mask = if causal { Mask::Causal } else { Mask::None };
        let mut run = |times: usize| {
            submit_timed(gpu, |enc| {
                for _ in 0..times {
                    record_flash_attention_tuned(
                        gpu,
                        cache,
                        enc,
                        &self.ops.q,
                        &self.ops.k,
                        &self.ops.v,
                        &self.ops.out,
                        h,
                        self.batch,
                        mask,
                        Some(tuning),
                    )?;
                }
                Ok(())
            })
        };
        run(1)?; // compile the pipeline, warm the caches
        let got = dynvram_runtime::ops::host::read(gpu, &self.ops.out)?;
        let max_diff = match reference {
            Some(want) => got
                .iter()
                .zip(want.iter())
                .map(|(g, w)| f64::from((g - w).abs()))
                .fold(
                    0.0,
                    |m: f64, d| if d.is_nan() { f64::NAN } else { m.max(d) },
                ),
            None => {
                anyhow::ensure!(
                    got.iter().all(|x| x.is_finite()),
                    "the default tuning {tuning} wrote non-finite outputs"
                );
                *reference = Some(got);
                0.0
            }
        };
        let per = median_seconds(reps, &mut run)?;
        // Keys the query rows see, over batch elements and rows.
        let pairs = if causal {
            let pos0 = self.keys - self.queries;
            (0..self.queries).map(|r| pos0 + r + 1).sum::<u64>()
        } else {
            self.queries * self.keys
        } * self.batch;
        let flops = 4 * h.n_heads * h.head_dim * pairs;
        let g = match tuning {
            FlashKernel::OneWalk(t) => flash_geometry(&gpu.caps, t, h.head_dim),
            FlashKernel::TwoWalk | FlashKernel::Cm2(_) => None,
        };
        let rows = match tuning {
            FlashKernel::OneWalk(t) => u64::from(t.rows),
            FlashKernel::Cm2(b) => u64::from(b.rows),
            // Its shape's rows: subgroups of one matrix edge each.
            FlashKernel::TwoWalk => 0,
        };
        Ok(PrefillFigure {
            queries: self.queries,
            keys: self.keys,
            heads: h.n_heads,
            kv_heads: h.n_kv_heads,
            head_dim: h.head_dim,
            batch: self.batch,
            causal,
            tuning: tuning.to_string(),
            default,
            workgroups: if rows == 0 {
                0
            } else {
                h.n_heads * self.batch * self.queries.div_ceil(rows)
            },
            workgroup_bytes: g.map_or(0, |g| g.workgroup_bytes()),
            registers: g.map_or(0, |g| g.registers()),
            us: per * 1e6,
            tflops: flops as f64 / per / 1e12,
            max_diff,
        })
    }
}
