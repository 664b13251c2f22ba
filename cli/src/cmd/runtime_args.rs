//! The flags of the commands that run a diffusion model on the runtime
//! (`dit`, `txt2img`): adapter, budget, int4 activation arithmetic and the
//! activation dtype, and the runtime they open.

use dynvram_runtime::{ActDtype, Runtime, RuntimeConfig};

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::budget_args::BudgetArgs;
use crate::cmd::run::LinearDtypeArg;

/// Adapter, budget and arithmetic flags.
#[derive(Debug, clap::Args)]
pub struct RuntimeArgs {
    /// Activation dtype; kernels accumulate in f32 either way. auto: f16
    /// where the adapter has SHADER_F16, else f32.
    #[arg(long, value_enum, default_value = "auto")]
    pub compute_dtype: ComputeDtype,
    #[command(flatten)]
    pub adapter: AdapterArgs,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Activation arithmetic of int4 layers.
    #[arg(long, value_enum, default_value = "auto")]
    pub linear_dtype: LinearDtypeArg,
}

impl RuntimeArgs {
    /// The runtime these flags describe, and the activation dtype on its
    /// adapter.
    pub fn open(&self) -> anyhow::Result<(Runtime, ActDtype)> {
        let rt = Runtime::new(RuntimeConfig {
            adapter: self.adapter.choice(),
            budget: self.budget.config()?,
            linear_dtype: self.linear_dtype.into(),
            ..self.budget.host_config()?
        })?;
        let dtype = self.compute_dtype.resolve(&rt);
        Ok((rt, dtype))
    }
}

/// `--compute-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ComputeDtype {
    /// f16 where the adapter has SHADER_F16, else f32.
    Auto,
    /// 32-bit activations (the reference).
    F32,
    /// 16-bit activations (needs SHADER_F16; an error without it).
    F16,
}

impl ComputeDtype {
    /// The dtype on `rt`'s adapter.
    pub fn resolve(self, rt: &Runtime) -> ActDtype {
        match self {
            Self::Auto if rt.gpu().caps.shader_f16 => ActDtype::F16,
            Self::Auto | Self::F32 => ActDtype::F32,
            Self::F16 => ActDtype::F16,
        }
    }
}
