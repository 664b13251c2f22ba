//! Linear-layer kernels: rotation, activation quantization, integer and float GEMV/GEMM.
//!
//! Kernel bodies share fragments (reductions, bindings, decoding, epilogues)
//! by concatenation: each public constant below is one complete module. A
//! fast variant takes the subgroup reduction fragment (naga 30 gates subgroup
//! operations on its capability, not on `enable subgroups;`). Every file of `wgsl/` is registered in [`ALL`]; a
//! body file is registered as its portable composition.

/// Group rotation (radix-4 fast Hadamard transform), dispatch `(K/G, rows)`.
pub const ROTATE: &str = wgsl!("linear_fht.wgsl", "linear_rotate.wgsl");

/// Rotation (with an optional RMS norm before it) of small-M rows over many
/// workgroups, each chunk's absmax beside: the input of [`INT_GEMV_ROWS_ROT`].
/// Dispatch `(chunks, rows)`.
pub const ROTATE_MAX: &str = wgsl!(
    "linear_fht.wgsl",
    "linear_rotate_chunk.wgsl",
    "linear_rotate_max.wgsl"
);

/// The activation codes and per-row scales of the rows [`ROTATE_MAX`]
/// rotated (binding 0 rows, 3 chunk maxima; 1 codes, 2 scales as
/// [`ACT_QUANT`] writes them), one code word per invocation over many
/// workgroups: the input of [`INT_GEMV_ROWS`]. Dispatch `(ceil(kw / WGS),
/// rows)`.
pub const ROTATED_CODES: &str = wgsl!(
    "linear_codes.wgsl",
    "linear_act_codes.wgsl",
    "linear_rotated_codes.wgsl"
);

/// [`ROTATE_MAX`] and [`ROTATED_CODES`] in one dispatch of [`ROTATE_MAX`]'s
/// shape: the last workgroup of a row to finish codes it (binding 0 x, 3
/// norm weight, 4 rows, 5 chunk maxima, 6 the rows' counts, 0 before;
/// 1 codes, 2 scales as [`ACT_QUANT`] writes them).
pub const ROTATE_CODES: &str = wgsl!(
    "linear_fht.wgsl",
    "linear_rotate_chunk.wgsl",
    "linear_codes.wgsl",
    "linear_act_codes.wgsl",
    "linear_rotate_codes.wgsl"
);

/// Rotation and activation quantization in one dispatch (one workgroup per
/// row, for small M; G <= 1024).
pub const ROTATE_QUANT: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_fht.wgsl",
    "linear_codes.wgsl",
    "linear_act_codes.wgsl",
    "linear_rotate_quant.wgsl"
);

/// The residual add and RMS norm before integer linears, with their rotation
/// and quantization, in one dispatch (one workgroup per row, K in its
/// workgroup memory).
pub const ADD_NORM_QUANT: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_fht.wgsl",
    "linear_codes.wgsl",
    "linear_act_codes.wgsl",
    "linear_add_norm_quant.wgsl"
);

/// [`ROTATE_QUANT`]'s fast variant (needs `SUBGROUP`): the FHT in registers,
/// two stages per barrier, and the absmax by subgroupMax + atomicMax; the
/// same outputs bit for bit (G <= 256, the whole row in workgroup memory).
pub const ROTATE_QUANT_SUBGROUP: &str = wgsl!(
    "linear_rq_subgroup.wgsl",
    "linear_codes.wgsl",
    "linear_act_codes.wgsl",
    "linear_rotate_quant_subgroup.wgsl"
);

/// [`ADD_NORM_QUANT`]'s fast variant (needs `SUBGROUP`): the norm's sum of
/// squares in its order with one barrier, the rotation as
/// [`ROTATE_QUANT_SUBGROUP`]'s; the same outputs bit for bit.
pub const ADD_NORM_QUANT_SUBGROUP: &str = wgsl!(
    "linear_rq_subgroup.wgsl",
    "linear_codes.wgsl",
    "linear_act_codes.wgsl",
    "linear_add_norm_quant_subgroup.wgsl"
);

/// Per-row activation quantization with workgroup-memory reductions.
pub const ACT_QUANT: &str = wgsl!(
    "linear_reduce_workgroup.wgsl",
    "linear_codes.wgsl",
    "linear_act_codes.wgsl",
    "linear_act_quant.wgsl"
);
/// Per-row activation quantization with subgroup reductions (needs `SUBGROUP`).
pub const ACT_QUANT_SUBGROUP: &str = wgsl!(
    "linear_reduce_subgroup.wgsl",
    "linear_codes.wgsl",
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
    "linear_coop_codes.wgsl",
    "linear_coop_int.wgsl",
    "linear_coop16.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop.wgsl"
);
/// [`INT_GEMM_COOP16`] on 8×8×8 matrices.
pub const INT_GEMM_COOP8: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_int_common.wgsl",
    "linear_coop_codes.wgsl",
    "linear_coop_int.wgsl",
    "linear_coop8.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop.wgsl"
);
/// Float-weight GEMM on 16×16×16 f16 cooperative matrices (f16 activations).
pub const FLOAT_GEMM_COOP16: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_coop_pairs.wgsl",
    "linear_coop_float.wgsl",
    "linear_coop16.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop.wgsl"
);
/// [`FLOAT_GEMM_COOP16`] on 8×8×8 matrices.
pub const FLOAT_GEMM_COOP8: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_coop_pairs.wgsl",
    "linear_coop_float.wgsl",
    "linear_coop8.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop.wgsl"
);
/// [`INT_GEMM_COOP16`] double-buffered with 16-byte loads
/// (`linear_gemm_coop_db.wgsl`, [`CoopGemmKernel::Double`]).
pub const INT_GEMM_COOP16_DB: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_int_common.wgsl",
    "linear_coop_codes.wgsl",
    "linear_coop_int_v4.wgsl",
    "linear_coop16.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop_db.wgsl"
);
/// [`INT_GEMM_COOP16_DB`] on 8×8×8 matrices.
pub const INT_GEMM_COOP8_DB: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_int_common.wgsl",
    "linear_coop_codes.wgsl",
    "linear_coop_int_v4.wgsl",
    "linear_coop8.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop_db.wgsl"
);
/// [`FLOAT_GEMM_COOP16`] double-buffered with 16-byte loads (f16 and bf16
/// weights).
pub const FLOAT_GEMM_COOP16_DB: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_coop_pairs.wgsl",
    "linear_coop_float_v4.wgsl",
    "linear_coop16.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop_db.wgsl"
);
/// [`FLOAT_GEMM_COOP16_DB`] on 8×8×8 matrices.
pub const FLOAT_GEMM_COOP8_DB: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_coop_pairs.wgsl",
    "linear_coop_float_v4.wgsl",
    "linear_coop8.wgsl",
    "linear_coop_drain.wgsl",
    "linear_gemm_coop_db.wgsl"
);

/// bf16 weight rows as f16 (`bf16_to_f16.wgsl`), for the SPIR-V f16 GEMM;
/// launched with f16 activations.
pub const BF16_TO_F16: &str = wgsl!("weight_convert.wgsl", "bf16_to_f16.wgsl");

/// int4 weight rows widened to int8 (`int4_to_int8.wgsl`), for the SPIR-V
/// int8 GEMM.
pub const INT4_TO_INT8: &str = wgsl!("weight_convert.wgsl", "int4_to_int8.wgsl");

/// bf16 weights rewritten as f16 in place (`bf16_to_f16_in_place.wgsl`),
/// a resident layer's once at upload; launched with f16 activations.
pub const BF16_TO_F16_IN_PLACE: &str = wgsl!("bf16_to_f16_in_place.wgsl");

/// The split-K SPIR-V GEMM's partial sums added, the bias added and the
/// sum rounded to the output (`linear_split_sum.wgsl`).
pub const SPLIT_SUM: &str = wgsl!("gelu.wgsl", "linear_split_sum.wgsl");

/// The split-K integer SPIR-V GEMM's exact partial sums added and the
/// integer epilogue applied (`linear_int_split_sum.wgsl`).
pub const INT_SPLIT_SUM: &str = wgsl!("linear_int_common.wgsl", "linear_int_split_sum.wgsl");

/// Which cooperative-matrix GEMM kernel runs the layers that take one
/// (`GpuOptions::coop_gemm`, `DYNVRAM_COOP_GEMM`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CoopGemmKernel {
    /// `linear_gemm_coop.wgsl`: one stage of staged tiles, two barriers a
    /// K step, 4- and 8-byte global loads. The default (the measured one).
    #[default]
    Single,
    /// `linear_gemm_coop_db.wgsl`: two stages, one barrier a K step, the
    /// next step's loads stored after this step's products, 16-byte
    /// global loads; needs K a multiple of its slots' columns (else the
    /// layer takes [`Self::Single`]). Not measured yet (BENCHMARKS.md).
    Double,
}

impl CoopGemmKernel {
    /// Columns of one activation and one weight staging slot for integer
    /// (`float` false) or float layers: the `A_COLS`/`B_COLS` of the
    /// staging fragment (4 and 8 for [`Self::Single`], whose fragments
    /// read 4- and 8-column words).
    pub fn slot_columns(self, float: bool) -> (u32, u32) {
        match (self, float) {
            (Self::Single, _) => (4, 8),
            (Self::Double, false) => (16, 32),
            (Self::Double, true) => (8, 8),
        }
    }

    /// Copies of the staged tiles in workgroup memory.
    pub fn stages(self) -> u32 {
        match self {
            Self::Single => 1,
            Self::Double => 2,
        }
    }
}

impl std::fmt::Display for CoopGemmKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single => "single",
            Self::Double => "double",
        })
    }
}

/// `single` or `double`.
impl std::str::FromStr for CoopGemmKernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "single" => Ok(Self::Single),
            "double" => Ok(Self::Double),
            other => Err(format!(
                "cooperative GEMM kernel `{other}`: want single or double"
            )),
        }
    }
}

/// The workgroup shape of a cooperative-matrix GEMM: `sg_m × sg_n`
/// subgroups of `sg` invocations, each holding `wm × wn` accumulators, `bk`
/// staged K columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopGemmShape {
    /// Invocations per subgroup (`SG`).
    pub sg: u32,
    /// Subgroups along M and N (`SG_M`, `SG_N`).
    pub sg_m: u32,
    /// See `sg_m`.
    pub sg_n: u32,
    /// Accumulators per subgroup along M and N (`WM`, `WN`).
    pub wm: u32,
    /// See `wm`.
    pub wn: u32,
    /// K columns staged per step (`BK`).
    pub bk: u32,
}

impl CoopGemmShape {
    /// The shape `linear_gemm_coop.wgsl` is written for.
    pub const FILE: Self = Self {
        sg: 32,
        sg_m: 2,
        sg_n: 2,
        wm: 2,
        wn: 2,
        bk: 32,
    };
}

const MAIN_BEGIN: &str = "// BEGIN main";
const MAIN_END: &str = "// END main\n";

/// A cooperative-matrix GEMM module (`*_GEMM_COOP*`) of `kernel`, integer
/// or `float`, for `shape`, on matrices of edge `edge`: the shape's
/// constants written in and `main` generated with one variable per
/// accumulator and staging register (array sizes cannot be `override`
/// expressions through naga 30's constant processing, and NVIDIA's
/// compiler runs arrays of cooperative matrices at half the speed of
/// separate variables — BENCHMARKS.md, run G).
pub fn coop_gemm(
    source: &str,
    edge: u32,
    shape: CoopGemmShape,
    kernel: CoopGemmKernel,
    float: bool,
) -> String {
    let f = CoopGemmShape::FILE;
    let with = crate::with_consts(
        source,
        &[
            ("SG_M", f.sg_m, shape.sg_m),
            ("SG_N", f.sg_n, shape.sg_n),
            ("WM", f.wm, shape.wm),
            ("WN", f.wn, shape.wn),
            ("BK", f.bk, shape.bk),
        ],
    );
    let (a_cols, b_cols) = kernel.slot_columns(float);
    if kernel == CoopGemmKernel::Double {
        // The generated loops and the fragment's slots must agree.
        for (name, cols) in [("A_COLS", a_cols), ("B_COLS", b_cols)] {
            let line = format!("const {name}: u32 = {cols}u;");
            assert!(with.contains(&line), "the staging fragment lacks `{line}`");
        }
    }
    let begin = with.find(MAIN_BEGIN).expect("the module marks its main");
    let end = with
        .find(MAIN_END)
        .expect("the module marks its main's end")
        + MAIN_END.len();
    let head = with[begin..].lines().next().unwrap_or_default();
    format!(
        "{}{head}\n{}{}",
        &with[..begin],
        coop_gemm_main(edge, shape, kernel, (a_cols, b_cols)),
        &with[end..]
    )
}

/// `main` of `linear_gemm_coop.wgsl` (or, double-buffered,
/// `linear_gemm_coop_db.wgsl`) for `shape` with staging slots of `cols`
/// (activation, weight) columns; ends with the END marker.
fn coop_gemm_main(edge: u32, s: CoopGemmShape, kernel: CoopGemmKernel, cols: (u32, u32)) -> String {
    use std::fmt::Write;
    let threads = s.sg * s.sg_m * s.sg_n;
    let a_per = (s.wm * edge * s.sg_m * s.bk / cols.0).div_ceil(threads);
    let b_per = (s.wn * edge * s.sg_n * s.bk / cols.1).div_ceil(threads);
    let double = kernel == CoopGemmKernel::Double;
    let (wm, wn) = (s.wm, s.wn);
    let mut t = String::from(
        "@compute @workgroup_size(SG * NSG)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let n0 = wid.x * TILE_N;
    let m0 = wid.y * TILE_M;
    // Subgroups of another size than the host assumed would compute a
    // wrong tile: every store becomes NaN instead (control flow stays
    // uniform, as the cooperative operations require).
    let ok = nsg == NSG;
    let sq = min(sg, NSG - 1u);
    let sm = WM * CM * (sq / SG_N);
    let sn = WN * CM * (sq % SG_N);
",
    );
    let slot = |i: u32| format!("lid + {i}u * SG * NSG");
    for i in 0..wm {
        for j in 0..wn {
            let _ = writeln!(t, "    var acc_{i}_{j} = cm_c();");
        }
    }
    let fetch = |t: &mut String, indent: &str, kt: &str| {
        for i in 0..a_per {
            let _ = writeln!(t, "{indent}ra_{i} = fetch_a(m0, {kt}, {});", slot(i));
        }
        for i in 0..b_per {
            let _ = writeln!(t, "{indent}rb_{i} = fetch_b(n0, {kt}, {});", slot(i));
        }
    };
    // The stores of the fetched slots (into the stage at `base`, if double).
    let put = |t: &mut String, indent: &str, base: Option<(&str, &str)>| {
        let at = |b: Option<&str>| b.map(|b| format!("{b}, ")).unwrap_or_default();
        for i in 0..a_per {
            let _ = writeln!(
                t,
                "{indent}put_a({}{}, ra_{i});",
                at(base.map(|b| b.0)),
                slot(i)
            );
        }
        for i in 0..b_per {
            let _ = writeln!(
                t,
                "{indent}put_b({}{}, rb_{i});",
                at(base.map(|b| b.1)),
                slot(i)
            );
        }
    };
    let mut first = String::new();
    fetch(&mut first, "    var ", "0u");
    t.push_str(&first);
    let (sa, sb) = if double {
        put(&mut t, "    ", Some(("0u", "0u")));
        t.push_str("    workgroupBarrier();\n    var stage = 0u;\n");
        t.push_str("    for (var kt = 0u; kt < p.k; kt += BK) {\n");
        t.push_str("        let more = kt + BK < p.k;\n        if more {\n");
        fetch(&mut t, "            ", "kt + BK");
        t.push_str(
            "        }\n        let sa = stage * A_STAGE;\n        let sb = stage * B_STAGE;\n",
        );
        ("sa + ", "sb + ")
    } else {
        t.push_str("    for (var kt = 0u; kt < p.k; kt += BK) {\n");
        put(&mut t, "        ", None);
        t.push_str("        workgroupBarrier();\n        if kt + BK < p.k {\n");
        fetch(&mut t, "            ", "kt + BK");
        t.push_str("        }\n");
        ("", "")
    };
    t.push_str("        for (var kk = 0u; kk < BK; kk += CM) {\n");
    for i in 0..wm {
        let _ = writeln!(
            t,
            "            let a_{i} = coopLoadT<cm_a>(&a_sh[{sa}(sm + {i}u * CM) * PITCH + kk], PITCH);"
        );
    }
    t.push_str(
        "            // Weight rows are output columns: B[k][n] = b_sh[n * PITCH + k],
            // column-major.
",
    );
    for j in 0..wn {
        let _ = writeln!(
            t,
            "            let b_{j} = coopLoad<cm_b>(&b_sh[{sb}(sn + {j}u * CM) * PITCH + kk], PITCH);"
        );
    }
    for i in 0..wm {
        for j in 0..wn {
            let _ = writeln!(
                t,
                "            acc_{i}_{j} = coopMultiplyAdd(a_{i}, b_{j}, acc_{i}_{j});"
            );
        }
    }
    t.push_str("        }\n");
    if double {
        t.push_str("        // The other stage was last read before the previous barrier.\n");
        t.push_str("        stage = 1u - stage;\n        if more {\n");
        put(
            &mut t,
            "            ",
            Some(("stage * A_STAGE", "stage * B_STAGE")),
        );
        t.push_str("        }\n");
    }
    t.push_str("        workgroupBarrier();\n    }\n");
    for i in 0..wm {
        for j in 0..wn {
            let _ = writeln!(
                t,
                "    drain(acc_{i}_{j}, sq, lane, ok, m0 + sm + {i}u * CM, n0 + sn + {j}u * CM);"
            );
        }
    }
    t.push_str("}\n");
    t.push_str(MAIN_END);
    t
}

/// Float-weight GEMV (M <= 8).
pub const FLOAT_GEMV: &str = wgsl!(
    "linear_reduce_workgroup.wgsl",
    "f16_words.wgsl",
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
    "linear_gemv_in_codes.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS`] with subgroup sums (needs `SUBGROUP`).
pub const INT_GEMV_ROWS_SUBGROUP: &str = wgsl!(
    "linear_gemv_sum_subgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_gemv_in_codes.wgsl",
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
    "linear_gemv_in_codes.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS3`] with subgroup sums (needs `SUBGROUP`).
pub const INT_GEMV_ROWS3_SUBGROUP: &str = wgsl!(
    "linear_gemv_sum_subgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_gemv_in_codes.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS`] making its activation codes itself from the rotated
/// rows and chunk maxima [`ROTATE_MAX`] left (binding 8 rows, 9 maxima).
pub const INT_GEMV_ROWS_ROT: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_gemv_sum_tree.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_codes.wgsl",
    "linear_gemv_in_rotated.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS_ROT`] with subgroup sums (needs `SUBGROUP`).
pub const INT_GEMV_ROWS_ROT_SUBGROUP: &str = wgsl!(
    "linear_gemv_sum_subgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_codes.wgsl",
    "linear_gemv_in_rotated.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS3`] making its activation codes itself.
pub const INT_GEMV_ROWS3_ROT: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "linear_gemv_sum_tree.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_codes.wgsl",
    "linear_gemv_in_rotated.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// [`INT_GEMV_ROWS3_ROT`] with subgroup sums (needs `SUBGROUP`).
pub const INT_GEMV_ROWS3_ROT_SUBGROUP: &str = wgsl!(
    "linear_gemv_sum_subgroup.wgsl",
    "linear_int_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_codes.wgsl",
    "linear_gemv_in_rotated.wgsl",
    "linear_int_gemv_rows.wgsl"
);
/// Float-weight GEMV (M <= 8), ROWS rows per workgroup with 16-byte loads
/// (rows must start on 16 bytes).
pub const FLOAT_GEMV_ROWS: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_gemv_in_plain.wgsl",
    "linear_float_gemv_rows.wgsl"
);
/// [`FLOAT_GEMV_ROWS`] RMS-normalising its activation rows on the way in
/// (the norm weight at binding 7, eps in the params).
pub const FLOAT_GEMV_ROWS_NORM: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_gemv_one.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_gemv_in_norm.wgsl",
    "linear_float_gemv_rows.wgsl"
);
/// [`FLOAT_GEMV_ROWS`] over up to three weights of one input in one launch
/// (q/k/v; gate/up with SwiGLU).
pub const FLOAT_GEMV_ROWS3: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_gemv_in_plain.wgsl",
    "linear_float_gemv_rows.wgsl"
);
/// [`FLOAT_GEMV_ROWS3`] RMS-normalising its activation rows on the way in.
pub const FLOAT_GEMV_ROWS3_NORM: &str = wgsl!(
    "linear_gemv_tree.wgsl",
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_gemv_three.wgsl",
    "linear_gemv_rows_common.wgsl",
    "linear_gemv_in_norm.wgsl",
    "linear_float_gemv_rows.wgsl"
);
/// Float-weight tiled GEMM.
pub const FLOAT_GEMM: &str = wgsl!(
    "f16_words.wgsl",
    "linear_float_common.wgsl",
    "linear_float_gemm.wgsl"
);

/// Every linear shader file, as (file name, complete module source). Fragments
/// are listed as themselves (each is a valid module without entry points);
/// bodies as their composition; fast variants under `name [subgroup]`.
pub const ALL: &[(&str, &str)] = &[
    ("bf16_to_f16.wgsl", BF16_TO_F16),
    ("f16_words.wgsl", wgsl!("f16_words.wgsl")),
    ("f16_words_unpack.wgsl", wgsl!("f16_words_unpack.wgsl")),
    ("int4_to_int8.wgsl", INT4_TO_INT8),
    ("linear_split_sum.wgsl", SPLIT_SUM),
    ("linear_int_split_sum.wgsl", INT_SPLIT_SUM),
    ("bf16_to_f16_in_place.wgsl", BF16_TO_F16_IN_PLACE),
    ("weight_convert.wgsl", wgsl!("weight_convert.wgsl")),
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
        wgsl!("f16_words.wgsl", "linear_float_common.wgsl"),
    ),
    ("linear_rotate.wgsl", ROTATE),
    ("linear_rotate_max.wgsl", ROTATE_MAX),
    ("linear_rotate_chunk.wgsl", ROTATE_MAX),
    ("linear_rotate_codes.wgsl", ROTATE_CODES),
    ("linear_rotated_codes.wgsl", ROTATED_CODES),
    ("linear_codes.wgsl", wgsl!("linear_codes.wgsl")),
    ("linear_gemv_in_codes.wgsl", INT_GEMV_ROWS),
    ("linear_gemv_in_rotated.wgsl", INT_GEMV_ROWS_ROT),
    (
        "linear_int_gemv_rows.wgsl [rotated, subgroup]",
        INT_GEMV_ROWS_ROT_SUBGROUP,
    ),
    (
        "linear_int_gemv_rows.wgsl [fused, rotated]",
        INT_GEMV_ROWS3_ROT,
    ),
    (
        "linear_int_gemv_rows.wgsl [fused, rotated, subgroup]",
        INT_GEMV_ROWS3_ROT_SUBGROUP,
    ),
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
    ("linear_coop_codes.wgsl", INT_GEMM_COOP16),
    ("linear_coop_pairs.wgsl", FLOAT_GEMM_COOP16),
    ("linear_coop_drain.wgsl", INT_GEMM_COOP8),
    ("linear_gemm_coop_db.wgsl", INT_GEMM_COOP16_DB),
    ("linear_coop_int_v4.wgsl", INT_GEMM_COOP8_DB),
    ("linear_coop_float_v4.wgsl", FLOAT_GEMM_COOP16_DB),
    ("linear_gemm_coop_db.wgsl [float, 8x8]", FLOAT_GEMM_COOP8_DB),
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
    ("linear_float_gemv_rows.wgsl [norm]", FLOAT_GEMV_ROWS_NORM),
    (
        "linear_float_gemv_rows.wgsl [fused, norm]",
        FLOAT_GEMV_ROWS3_NORM,
    ),
    // The input fragments need a body: listed as their compositions.
    ("linear_gemv_in_plain.wgsl", FLOAT_GEMV_ROWS),
    ("linear_gemv_in_norm.wgsl", FLOAT_GEMV_ROWS_NORM),
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
    ("linear_rq_subgroup.wgsl", ROTATE_QUANT_SUBGROUP),
    ("linear_rotate_quant_subgroup.wgsl", ROTATE_QUANT_SUBGROUP),
    (
        "linear_add_norm_quant_subgroup.wgsl",
        ADD_NORM_QUANT_SUBGROUP,
    ),
];
