//! `dynvram bench attention`: decode attention (one query row over a KV
//! cache, RoPE fused as the models run it) per decode tuning — workgroup
//! size, split policy or forced splits, merge of the key groups — timed
//! like `bench linear` (the median of 5 submits of `--reps` attentions,
//! GPU timestamps where the adapter has them), the combine launch included
//! where the keys split.

use std::process::ExitCode;

use dynvram_runtime::ops::attention::{
    DecodeTuning, Heads, decode_unusable, record_attention_with,
};
use dynvram_runtime::ops::cache::PipelineCache;
use dynvram_runtime::ops::linear::LinearScratch;
use dynvram_runtime::ops::rope::RopeTable;
use dynvram_runtime::{ActDtype, Gpu, GpuTensor};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::bench::{activation, median_seconds, submit_timed};
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
    #[arg(long, value_delimiter = ',', default_value = "32,8",
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    kv_heads: Vec<u64>,
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
    /// `WG[xTARGET|sSPLITS][mMERGE]`: `WG` invocations per workgroup (a
    /// power of two, 32 to 1024); `xTARGET` splits the keys aiming for
    /// `TARGET` workgroups (the runtime's policy: 32 to 512 keys a split), or
    /// `sSPLITS` forces that many splits (`s1`: one workgroup per kv head,
    /// no combine launch); `mMERGE` merges that many key groups a round at
    /// the end of a workgroup (without `m`: 1, one at a time; more than the
    /// workgroup has: all at once). `128x264m4` is the
    /// runtime's default.
    #[arg(long, value_delimiter = ',', value_parser = str::parse::<DecodeTuning>,
          default_value = "128x264m4,128x264,256x132,512x32,1024x32,512s1,1024s1,1024s1m32")]
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
    /// The tuning as given (`WG[xTARGET|sSPLITS][mMERGE]`).
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
pub fn run(a: AttentionArgs, json: bool) -> anyhow::Result<ExitCode> {
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
                    Timed::Skipped(why) => {
                        let line = format!(
                            "{keys} keys, {} heads / {kv_heads} kv, tuning {tuning}: {why}",
                            a.heads
                        );
                        if !json {
                            println!("skipped: {line}");
                        }
                        report.skipped.push(line);
                    }
                }
            }
        }
    }
    if json {
        print_json(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A case's tensors: one query row at the last of `keys` positions over a
/// full cache, and the RoPE table.
struct Case {
    heads: Heads,
    keys: u64,
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    out: GpuTensor,
    rope: Option<RopeTable>,
}

/// A case's outcome with one tuning.
enum Timed {
    Figure(Figure),
    Skipped(String),
}

impl Case {
    fn new(gpu: &Gpu, heads: Heads, keys: u64, act: ActDtype, rope: bool) -> anyhow::Result<Self> {
        let width = heads.n_kv_heads * heads.head_dim;
        let q = activation(gpu, "bench.q", 1, heads.n_heads * heads.head_dim, act, 1)?;
        let k = activation(gpu, "bench.k_cache", keys, width, act, 2)?;
        let v = activation(gpu, "bench.v_cache", keys, width, act, 3)?;
        let out = activation(gpu, "bench.out", 1, heads.n_heads * heads.head_dim, act, 4)?;
        let rope = rope
            .then(|| RopeTable::new(gpu, 10000.0, heads.head_dim, keys))
            .transpose()?;
        Ok(Self {
            heads,
            keys,
            q,
            k,
            v,
            out,
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
        // As `record_attention_with` chooses: the decode kernel, RoPE
        // fused where it can, else a RoPE launch before it.
        let decode = decode_unusable(h, 1, false).is_none();
        let rope_launch = self.rope.is_some() && decode_unusable(h, 1, true).is_some();
        if decode {
            let queries = h.n_heads / h.n_kv_heads;
            let limits = gpu.device.limits();
            if let Some(why) = tuning.unusable(&gpu.caps, &limits, h.head_dim, queries) {
                return Ok(Timed::Skipped(why));
            }
        }
        let mut scratch = LinearScratch::new();
        let mut run = |times: usize| {
            submit_timed(gpu, |enc| {
                for _ in 0..times {
                    record_attention_with(
                        gpu,
                        cache,
                        enc,
                        &self.q,
                        &self.k,
                        &self.v,
                        &self.out,
                        h,
                        self.keys,
                        self.keys - 1,
                        self.rope.as_ref(),
                        &mut scratch,
                        tuning,
                    )?;
                }
                Ok(())
            })
        };
        run(2)?; // compile the pipelines, warm the caches
        let per = median_seconds(reps, &mut run)?;
        let (chunk, splits) = if decode {
            tuning.split(h.n_kv_heads, self.keys)
        } else {
            (0, 0)
        };
        let kv_bytes = 2 * self.keys * h.n_kv_heads * h.head_dim * self.q.dtype.size();
        Ok(Timed::Figure(Figure {
            keys: self.keys,
            heads: h.n_heads,
            kv_heads: h.n_kv_heads,
            head_dim: h.head_dim,
            tuning: tuning.to_string(),
            kernel: if decode { "decode" } else { "scalar" },
            splits,
            chunk,
            workgroups: h.n_kv_heads * splits,
            launches: decode.then_some(1 + u32::from(splits > 1) + u32::from(rope_launch)),
            us: per * 1e6,
            kv_gb_per_s: kv_bytes as f64 / per / 1e9,
        }))
    }
}
