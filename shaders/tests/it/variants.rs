//! Every module the runtime can create: each file of `wgsl/` in both
//! activation types, and the generated ones (cooperative GEMM shapes,
//! decode attention shapes, flash attention tunings, two-walk flash
//! attention shapes). `validate.rs` and `translate.rs` walk these same
//! lists.

use dynvram_shaders::flash::{FlashTuning, flash_attention};
use dynvram_shaders::linear::{self, CoopGemmKernel, CoopGemmShape};
use dynvram_shaders::transformer::{
    DecodeShape, FLASH_ATTENTION8, FLASH_ATTENTION16, FLASH_TWO_WALK8, FLASH_TWO_WALK16,
    attention_decode, with_decode_shape, with_two_walk_shape,
};
use dynvram_shaders::with_f16_activations;

/// One module's text and the name failures print.
#[derive(Debug, Clone)]
pub struct Variant {
    /// The file or generator and its parameters.
    pub name: String,
    /// The complete WGSL module.
    pub source: String,
}

fn variant(name: String, source: String) -> Variant {
    Variant { name, source }
}

/// Every file, with f32 activations and then with f16 ones.
pub fn files() -> Vec<Variant> {
    let all = dynvram_shaders::all();
    let f32 = all
        .iter()
        .map(|(name, src)| variant(name.to_string(), src.to_string()));
    let f16 = all
        .iter()
        .map(|(name, src)| variant(format!("{name} [f16]"), with_f16_activations(src)));
    f32.chain(f16).collect()
}

/// The cooperative GEMMs (integer and float staging, both matrix edges,
/// single and double-buffered) in workgroup shapes of one to sixteen
/// subgroups, in f16.
pub fn coop_gemms() -> Vec<Variant> {
    let (single, double) = (CoopGemmKernel::Single, CoopGemmKernel::Double);
    let mut out = Vec::new();
    for (name, src, edge, kernel, float) in [
        ("int coop16", linear::INT_GEMM_COOP16, 16, single, false),
        ("float coop16", linear::FLOAT_GEMM_COOP16, 16, single, true),
        ("int coop8", linear::INT_GEMM_COOP8, 8, single, false),
        ("float coop8", linear::FLOAT_GEMM_COOP8, 8, single, true),
        (
            "int coop16 db",
            linear::INT_GEMM_COOP16_DB,
            16,
            double,
            false,
        ),
        (
            "float coop16 db",
            linear::FLOAT_GEMM_COOP16_DB,
            16,
            double,
            true,
        ),
        ("int coop8 db", linear::INT_GEMM_COOP8_DB, 8, double, false),
        (
            "float coop8 db",
            linear::FLOAT_GEMM_COOP8_DB,
            8,
            double,
            true,
        ),
    ] {
        for (sg, sg_m, sg_n, wm, wn, bk) in [
            (32, 4, 4, 2, 2, 32),
            (32, 2, 4, 4, 2, 64),
            (32, 2, 2, 4, 4, 32),
            (8, 1, 3, 3, 1, 16),
            (16, 2, 1, 1, 4, 48),
            (8, 1, 3, 3, 1, 32),
        ] {
            // The double-buffered integer staging takes 32 columns a slot.
            if kernel == double && !float && bk % 32 != 0 {
                continue;
            }
            let shape = CoopGemmShape {
                sg,
                sg_m,
                sg_n,
                wm,
                wn,
                bk,
            };
            let text = with_f16_activations(&linear::coop_gemm(src, edge, shape, kernel, float));
            out.push(variant(format!("{name} {shape:?}"), text));
        }
    }
    out
}

/// Decode attention in every module variant (sums on subgroups or
/// workgroup memory, RoPE fused or not), workgroups of 32 to 1024
/// invocations, merges of one key group to all, in both activation types.
pub fn decode_attention() -> Vec<Variant> {
    let mut out = Vec::new();
    for (subgroups, rope) in [(false, false), (true, false), (false, true), (true, true)] {
        let src = attention_decode(subgroups, rope);
        for (wg, lpk, merge, queries, head_dim) in [
            (128u32, 32u32, 1u32, 1u32, 128u32),
            (32, 32, 1, 8, 256),
            (256, 16, 4, 4, 64),
            (512, 32, 16, 2, 128),
            (1024, 32, 32, 1, 128),
            (1024, 8, 1, 8, 32),
        ] {
            let shape = DecodeShape {
                wg,
                key_groups: wg / lpk,
                merge,
                queries,
                head_dim,
            };
            let text = with_decode_shape(src, subgroups, shape);
            let name = format!("attention_decode {subgroups} {rope} {shape:?}");
            out.push(variant(
                format!("{name} [f16]"),
                with_f16_activations(&text),
            ));
            out.push(variant(name, text));
        }
    }
    out
}

/// A flash attention module and what generated it.
#[derive(Debug, Clone)]
pub struct FlashVariant {
    /// The module (f16 activations).
    pub variant: Variant,
    /// Its tuning.
    pub tuning: FlashTuning,
    /// Matrix edge, subgroup size and head dim it was generated for.
    pub edge: u32,
    /// Subgroup size.
    pub sg: u32,
    /// Head dim.
    pub hd: u32,
}

/// Flash attention in every staging, grids of rows and columns, prefetch,
/// both matrix edges and awkward head dims, in f16: the tunings the
/// generator accepts for each.
pub fn flash_attentions() -> Vec<FlashVariant> {
    let mut out = Vec::new();
    for (src, edge, sg) in [
        (FLASH_ATTENTION16, 16, 32),
        (FLASH_ATTENTION8, 8, 8),
        (FLASH_ATTENTION8, 8, 16),
    ] {
        for tuning in [
            "64x64w4c2",
            "64x64w4",
            "64x32w4k2c2p",
            "128x32w8c2pr",
            "64x64w4c2r",
            "128x64w8k2c4",
            "64x64w4g",
            "128x32w8c2g",
            "32x32w2",
            "256x16w4",
            "64x64w4c2t",
            "128x32w8k2c4prt",
            "64x64w4c2gt",
            "64x64w4c2m",
            "128x32w8c2prtm",
            "64x64w4c2dr",
            "64x32w4k2c2dr",
            "128x32w8c2drt",
            "64x64w4dr",
        ] {
            let tuning: FlashTuning = tuning.parse().expect("tuning");
            for hd in [edge * 4, 80, 128, 256] {
                let Ok(text) = flash_attention(src, edge, sg, hd, tuning) else {
                    continue;
                };
                out.push(FlashVariant {
                    variant: variant(
                        format!("flash {tuning} {edge} {sg} {hd}"),
                        with_f16_activations(&text),
                    ),
                    tuning,
                    edge,
                    sg,
                    hd,
                });
            }
        }
    }
    out
}

/// The two-walk flash attention on both matrix edges, in workgroups of
/// one to four subgroups of query rows, key blocks of 16 to 64 and head
/// dims of 64 to 256, in f16 (the shapes `TwoWalkShape::for_adapter`
/// picks from).
pub fn two_walks() -> Vec<Variant> {
    let mut out = Vec::new();
    for (src, edge) in [(FLASH_TWO_WALK16, 16), (FLASH_TWO_WALK8, 8)] {
        for (nsg, bc, hd) in [
            (4, 64, 128),
            (4, 32, 64),
            (2, 64, 80),
            (1, 32, 256),
            (1, 16, 128),
        ] {
            if bc % edge != 0 {
                continue;
            }
            let text = with_f16_activations(&with_two_walk_shape(src, nsg, bc, hd));
            out.push(variant(
                format!("two-walk {edge} nsg {nsg} bc {bc} hd {hd}"),
                text,
            ));
        }
    }
    out
}
