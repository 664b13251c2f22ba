//! Which kernel path a linear layer gets on an adapter, and why.
//!
//! The rule is [`choose`]; it depends only on plain [`AdapterCaps`] data.

use serde::Serialize;

/// Activation arithmetic of an integer linear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActArith {
    /// Per-row int4 codes in [-7, 7], `s = max(absmax, 1e-10) / 7`.
    Int4,
    /// Per-row int8 codes in [-128, 127], `s = max(absmax * (1/127), 1e-30)`.
    Int8,
}

/// `int4` or `int8`, for messages.
impl std::fmt::Display for ActArith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ActArith::Int4 => "int4",
            ActArith::Int8 => "int8",
        })
    }
}

/// The user override `--linear-dtype int4|int8|auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearDtypeOverride {
    /// Follow the file's metadata and the adapter.
    #[default]
    Auto,
    /// int4 activations everywhere (a slower exact kernel where the fast one is missing).
    Int4,
    /// int8 activations everywhere.
    Int8,
}

/// The kernel family chosen for a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelChoice {
    /// Integer dot products over quantized activations.
    Integer {
        /// Activation arithmetic.
        act: ActArith,
        /// The fast (subgroup) variant; `false` = the portable exact kernel.
        fast: bool,
    },
    /// Dequantize or convert the weight and multiply in f32.
    Float,
}

/// In words, for reports: `int4 activations (fast subgroup kernel)`,
/// `int8 activations (portable kernel)`, `float`.
impl std::fmt::Display for KernelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelChoice::Integer { act, fast } => write!(
                f,
                "{act} activations ({} kernel)",
                if *fast { "fast subgroup" } else { "portable" }
            ),
            KernelChoice::Float => f.write_str("float"),
        }
    }
}

/// The decision for one layer on one adapter, with the reason in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelPath {
    /// The kernel.
    pub kernel: KernelChoice,
    /// Why, for `dynvram probe` and logs.
    pub reason: String,
}

use crate::caps::AdapterCaps;
use crate::format::{Format, LinearDtype};

/// Picks the kernel for a layer of `format` on an adapter with `caps`, honouring the
/// user's `--linear-dtype` override.
///
/// The rule (docs/behaviour.md, Kernel choice): the *fast* int4-activation kernel
/// needs subgroup operations (`caps.subgroups`), for the per-row absmax of the
/// activation quantization and for the K-split reduction of the dot products.
/// `dot4I8Packed` is core WGSL, so every adapter can run integer kernels; without
/// subgroups int4 activations run in a slower exact portable kernel, used only
/// when int4 is forced.
/// * convrot_w4a4, override `Int8` → int8 activations; override `Int4` → int4 (fast if
///   subgroups, else portable); `Auto` → file's `linear_dtype`: `int8` → int8, `int4`/absent
///   → int4 fast where subgroups exist, else the int8 fallback (as ComfyUI's CUDA backend
///   falls back on GPUs without its native int4 path).
/// * int8_tensorwise → int8 activations (fast variant where subgroups exist); the
///   override does not apply (its weights are int8, its arithmetic is fixed).
/// * float8 and plain weights → float GEMM.
pub fn choose(format: Format, caps: &AdapterCaps, ov: LinearDtypeOverride) -> KernelPath {
    let fast = caps.subgroups;
    let sub = if fast {
        "adapter has subgroups for the fast kernel"
    } else {
        "adapter lacks subgroups"
    };
    let (kernel, reason) =
        match format {
            Format::ConvrotW4a4 { linear_dtype, .. } => match (ov, linear_dtype) {
                (LinearDtypeOverride::Int8, _) => (
                    KernelChoice::Integer {
                        act: ActArith::Int8,
                        fast,
                    },
                    format!("int8 activations: forced by --linear-dtype int8; {sub}"),
                ),
                (LinearDtypeOverride::Int4, _) => (
                    KernelChoice::Integer {
                        act: ActArith::Int4,
                        fast,
                    },
                    if fast {
                        format!("int4 activations: forced by --linear-dtype int4; {sub}")
                    } else {
                        "int4 activations: forced by --linear-dtype int4; adapter lacks subgroups, \
                     so the slower exact portable int4 kernel runs"
                            .to_owned()
                    },
                ),
                (LinearDtypeOverride::Auto, LinearDtype::Int8) => (
                    KernelChoice::Integer {
                        act: ActArith::Int8,
                        fast,
                    },
                    format!("int8 activations: file asks int8; {sub}"),
                ),
                (LinearDtypeOverride::Auto, LinearDtype::Int4) => {
                    if fast {
                        (
                        KernelChoice::Integer { act: ActArith::Int4, fast: true },
                        "int4 activations: file asks int4 (default); adapter has subgroups for \
                         the fast int4 kernel"
                            .to_owned(),
                    )
                    } else {
                        (
                        KernelChoice::Integer { act: ActArith::Int8, fast: false },
                        "int8 activations (fallback): file asks int4 (default) but the adapter \
                         lacks subgroups, which the fast int4 kernel needs"
                            .to_owned(),
                    )
                    }
                }
            },
            Format::Int8Tensorwise { convrot_group } => (
                KernelChoice::Integer {
                    act: ActArith::Int8,
                    fast,
                },
                format!(
                    "int8 activations: int8_tensorwise{} always uses int8 arithmetic; {sub}",
                    if convrot_group.is_some() {
                        " (rotated)"
                    } else {
                        ""
                    }
                ),
            ),
            Format::Float8E4m3fn | Format::Float8E5m2 => (
                KernelChoice::Float,
                "float: fp8 weight dequantized (w · weight_scale), f32 multiply".to_owned(),
            ),
            Format::F32 | Format::F16 | Format::Bf16 => (
                KernelChoice::Float,
                "float: unquantized weight converted to f32, f32 multiply".to_owned(),
            ),
        };
    KernelPath { kernel, reason }
}

#[cfg(test)]
mod tests {
    /// Reports name kernels in words, not Rust's `Debug` text.
    #[test]
    fn kernel_choices_read_as_words() {
        let fast = KernelChoice::Integer {
            act: ActArith::Int4,
            fast: true,
        };
        assert_eq!(fast.to_string(), "int4 activations (fast subgroup kernel)");
        let portable = KernelChoice::Integer {
            act: ActArith::Int8,
            fast: false,
        };
        assert_eq!(portable.to_string(), "int8 activations (portable kernel)");
        assert_eq!(KernelChoice::Float.to_string(), "float");
    }

    use super::*;

    fn caps(subgroups: bool) -> AdapterCaps {
        AdapterCaps {
            subgroups,
            ..AdapterCaps::baseline("test", "vulkan")
        }
    }

    fn w4(ld: LinearDtype) -> Format {
        Format::ConvrotW4a4 {
            group: 256,
            linear_dtype: ld,
        }
    }

    fn int(act: ActArith, fast: bool) -> KernelChoice {
        KernelChoice::Integer { act, fast }
    }

    #[test]
    fn auto_int4_takes_fast_kernel_with_subgroups_else_int8_fallback() {
        let p = choose(
            w4(LinearDtype::Int4),
            &caps(true),
            LinearDtypeOverride::Auto,
        );
        assert_eq!(p.kernel, int(ActArith::Int4, true));
        assert!(p.reason.contains("file asks int4"), "{}", p.reason);
        let p = choose(
            w4(LinearDtype::Int4),
            &caps(false),
            LinearDtypeOverride::Auto,
        );
        assert_eq!(p.kernel, int(ActArith::Int8, false));
        assert!(p.reason.contains("fallback"), "{}", p.reason);
    }

    #[test]
    fn auto_int8_is_int8_everywhere() {
        for sg in [true, false] {
            let p = choose(w4(LinearDtype::Int8), &caps(sg), LinearDtypeOverride::Auto);
            assert_eq!(p.kernel, int(ActArith::Int8, sg));
        }
    }

    #[test]
    fn overrides_force_one_arithmetic() {
        for ld in [LinearDtype::Int4, LinearDtype::Int8] {
            for sg in [true, false] {
                let p = choose(w4(ld), &caps(sg), LinearDtypeOverride::Int8);
                assert_eq!(p.kernel, int(ActArith::Int8, sg));
                let p = choose(w4(ld), &caps(sg), LinearDtypeOverride::Int4);
                assert_eq!(p.kernel, int(ActArith::Int4, sg));
                if !sg {
                    assert!(p.reason.contains("portable"), "{}", p.reason);
                }
            }
        }
    }

    #[test]
    fn int8_tensorwise_and_float_formats() {
        for ov in [
            LinearDtypeOverride::Auto,
            LinearDtypeOverride::Int4,
            LinearDtypeOverride::Int8,
        ] {
            for sg in [true, false] {
                let p = choose(
                    Format::Int8Tensorwise {
                        convrot_group: None,
                    },
                    &caps(sg),
                    ov,
                );
                assert_eq!(p.kernel, int(ActArith::Int8, sg));
                for f in [
                    Format::Float8E4m3fn,
                    Format::Float8E5m2,
                    Format::F32,
                    Format::F16,
                    Format::Bf16,
                ] {
                    assert_eq!(choose(f, &caps(sg), ov).kernel, KernelChoice::Float);
                }
            }
        }
    }
}
