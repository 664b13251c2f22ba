//! Linear-layer kernels: rotation, activation quantization, integer and float GEMV/GEMM.
//!
//! Kernel bodies share fragments (reductions, bindings, decoding, epilogues)
//! by concatenation: each public constant below is one complete module. A
//! fast variant takes the subgroup reduction fragment (naga 30 gates subgroup
//! operations on its capability, not on `enable subgroups;`). Every file of `wgsl/` is registered in [`ALL`]; a
//! body file is registered as its portable composition.

/// Group rotation (radix-4 fast Hadamard transform), dispatch `(K/G, rows)`.
pub const ROTATE: &str = wgsl!("linear_fht.wgsl", "linear_rotate.wgsl");

/// Rotation and activation quantization in one dispatch (one workgroup per
/// row, for small M; G <= 1024).
pub const ROTATE_QUANT: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_fht.wgsl",
    "linear_act_codes.wgsl",
    "linear_rotate_quant.wgsl"
);

/// The residual add and RMS norm before integer linears, with their rotation
/// and quantization, in one dispatch (one workgroup per row, K in its
/// workgroup memory).
pub const ADD_NORM_QUANT: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_fht.wgsl",
    "linear_act_codes.wgsl",
    "linear_add_norm_quant.wgsl"
);

/// Per-row activation quantization with workgroup-memory reductions.
pub const ACT_QUANT: &str = wgsl!(
    "linear_reduce_workgroup.wgsl",
    "linear_act_codes.wgsl",
    "linear_act_quant.wgsl"
);
/// Per-row activation quantization with subgroup reductions (needs `SUBGROUP`).
pub const ACT_QUANT_SUBGROUP: &str = wgsl!(
    "linear_reduce_subgroup.wgsl",
    "linear_act_codes.wgsl",
    "linear_act_quant.wgsl"
);

/// Integer GEMV (M <= 8), portable reductions.
pub const INT_GEMV: &str = wgsl!(
    "linear_reduce_workgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_int_gemv.wgsl"
);
/// Integer GEMV (M <= 8), subgroup reductions (needs `SUBGROUP`).
pub const INT_GEMV_SUBGROUP: &str = wgsl!(
    "linear_reduce_subgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_int_gemv.wgsl"
);
/// Integer tiled GEMM (workgroup memory).
pub const INT_GEMM: &str = wgsl!("linear_int_common.wgsl", "linear_int_gemm.wgsl");
/// Integer GEMM on 16×16×16 f16 cooperative matrices with f32 sums (needs
/// `SHADER_F16`, `SUBGROUP` and that `EXPERIMENTAL_COOPERATIVE_MATRIX`
/// configuration).
pub const INT_GEMM_COOP16: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_int_common.wgsl",
    "linear_coop_int.wgsl",
    "linear_coop16.wgsl",
    "linear_gemm_coop.wgsl"
);
/// [`INT_GEMM_COOP16`] on 8×8×8 matrices.
pub const INT_GEMM_COOP8: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_int_common.wgsl",
    "linear_coop_int.wgsl",
    "linear_coop8.wgsl",
    "linear_gemm_coop.wgsl"
);
/// Float-weight GEMM on 16×16×16 f16 cooperative matrices (f16 activations).
pub const FLOAT_GEMM_COOP16: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_float_common.wgsl",
    "linear_coop_float.wgsl",
    "linear_coop16.wgsl",
    "linear_gemm_coop.wgsl"
);
/// [`FLOAT_GEMM_COOP16`] on 8×8×8 matrices.
pub const FLOAT_GEMM_COOP8: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_float_common.wgsl",
    "linear_coop_float.wgsl",
    "linear_coop8.wgsl",
    "linear_gemm_coop.wgsl"
);

/// A cooperative-matrix GEMM module (`*_GEMM_COOP*`) with its workgroup
/// shape written in: `sg_m × sg_n` subgroups of `wm × wn` accumulators
/// each, `bk` staged K columns (they size workgroup arrays, so they are
/// text, like the activation type).
pub fn with_coop_shape(source: &str, sg_m: u32, sg_n: u32, bk: u32, wm: u32, wn: u32) -> String {
    crate::with_consts(
        source,
        &[
            ("SG_M", 2, sg_m),
            ("SG_N", 2, sg_n),
            ("BK", 32, bk),
            ("WM", 2, wm),
            ("WN", 2, wn),
        ],
    )
}

/// Float-weight GEMV (M <= 8).
pub const FLOAT_GEMV: &str = wgsl!(
    "linear_reduce_workgroup.wgsl",
    "linear_float_common.wgsl",
    "linear_float_gemv.wgsl"
);
/// Integer GEMV (M <= 8), ROWS rows per workgroup with 16-byte loads,
/// portable tree sums (rows must start on 16 bytes).
pub const INT_GEMV_ROWS: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_gemv_sum_tree.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS`] with subgroup sums (needs `SUBGROUP`).
pub const INT_GEMV_ROWS_SUBGROUP: &str = wgsl!(
    "linear_gemv_sum_subgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS`] over up to three weights of one input in one launch
/// (q/k/v; gate/up with SwiGLU), portable tree sums.
pub const INT_GEMV_ROWS3: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_gemv_sum_tree.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS3`] with subgroup sums (needs `SUBGROUP`).
pub const INT_GEMV_ROWS3_SUBGROUP: &str = wgsl!(
    "linear_gemv_sum_subgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// Float-weight GEMV (M <= 8), ROWS rows per workgroup with 16-byte loads
/// (rows must start on 16 bytes).
pub const FLOAT_GEMV_ROWS: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_float_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_float_gemv_rows.wgsl"
);
/// [`FLOAT_GEMV_ROWS`] over up to three weights of one input in one launch
/// (q/k/v; gate/up with SwiGLU).
pub const FLOAT_GEMV_ROWS3: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_float_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_float_gemv_rows.wgsl"
);
/// Float-weight tiled GEMM.
pub const FLOAT_GEMM: &str = wgsl!("linear_float_common.wgsl", "linear_float_gemm.wgsl");

/// Every linear shader file, as (file name, complete module source). Fragments
/// are listed as themselves (each is a valid module without entry points);
/// bodies as their composition; fast variants under `name [subgroup]`.
pub const ALL: &[(&str, &str)] = &[
    (
        "linear_reduce_workgroup.wgsl",
        wgsl!("linear_reduce_workgroup.wgsl"),
    ),
    (
        "linear_reduce_subgroup.wgsl",
        wgsl!("linear_reduce_subgroup.wgsl"),
    ),
    ("linear_int_common.wgsl", wgsl!("linear_int_common.wgsl")),
    (
        "linear_float_common.wgsl",
        wgsl!("linear_float_common.wgsl"),
    ),
    ("linear_rotate.wgsl", ROTATE),
    ("linear_act_quant.wgsl", ACT_QUANT),
    ("linear_act_quant.wgsl [subgroup]", ACT_QUANT_SUBGROUP),
    ("linear_int_gemv.wgsl", INT_GEMV),
    ("linear_int_gemv.wgsl [subgroup]", INT_GEMV_SUBGROUP),
    ("linear_int_gemm.wgsl", INT_GEMM),
    // The cooperative-matrix fragments need each other: listed as their
    // compositions.
    ("linear_gemm_coop.wgsl", INT_GEMM_COOP16),
    ("linear_coop_int.wgsl", INT_GEMM_COOP8),
    ("linear_coop_float.wgsl", FLOAT_GEMM_COOP16),
    ("linear_coop16.wgsl", FLOAT_GEMM_COOP16),
    ("linear_coop8.wgsl", FLOAT_GEMM_COOP8),
    ("linear_float_gemv.wgsl", FLOAT_GEMV),
    ("linear_float_gemm.wgsl", FLOAT_GEMM),
    // The tree fragments need a body's WGS: listed as their composition.
    ("linear_gemv_tree.wgsl", FLOAT_GEMV_ROWS),
    ("linear_gemv_sum_tree.wgsl", INT_GEMV_ROWS),
    (
        "linear_gemv_sum_subgroup.wgsl",
        wgsl!("linear_gemv_sum_subgroup.wgsl"),
    ),
    ("linear_int_gemv_rows.wgsl", INT_GEMV_ROWS),
    (
        "linear_int_gemv_rows.wgsl [subgroup]",
        INT_GEMV_ROWS_SUBGROUP,
    ),
    ("linear_float_gemv_rows.wgsl", FLOAT_GEMV_ROWS),
    // The weights fragments need a body: listed as their compositions.
    ("linear_gemv_one.wgsl", FLOAT_GEMV_ROWS),
    ("linear_gemv_three.wgsl", FLOAT_GEMV_ROWS3),
    ("linear_gemv_rows_common.wgsl", INT_GEMV_ROWS3),
    (
        "linear_int_gemv_rows.wgsl [fused, subgroup]",
        INT_GEMV_ROWS3_SUBGROUP,
    ),
    // Fragments that need a body's declarations: listed as their composition.
    ("linear_fht.wgsl", ROTATE),
    ("linear_act_codes.wgsl", ACT_QUANT),
    ("linear_rotate_quant.wgsl", ROTATE_QUANT),
    ("linear_add_norm_quant.wgsl", ADD_NORM_QUANT),
];
