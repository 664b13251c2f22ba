//! SPIR-V kernels for what WGSL cannot express: NVIDIA's cooperative
//! matrices 2 (workgroup-scope matrices, tensor addressing). Written in GLSL
//! under `spirv/` and compiled by `scripts/spirv.sh` (trixie's glslc) to the
//! committed `.spv` files included here; `scripts/spirv.sh --check` (CI)
//! validates each with `spirv-val` and checks it equals a fresh compile.
//! wgpu passes them to the driver unvalidated: the GPU tests against CPU
//! references are their only check of behaviour.

/// The weights a [`Cm2Gemm`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cm2Weights {
    /// f16 (`gemm_cm2.glsl`, f16 activations).
    F16,
    /// bf16, converted to f16 in shared memory (`gemm_cm2.glsl`).
    Bf16,
    /// int8 (`gemm_cm2_int.glsl`, int8 activation codes).
    Int8,
    /// int4 nibbles, widened to int8 in shared memory (`gemm_cm2_int.glsl`).
    Int4,
}

impl Cm2Weights {
    /// Integer weights (int8 codes, s32 sums, the integer epilogue and
    /// bindings) rather than float ones (f16 activations, f32 sums).
    pub fn integer(self) -> bool {
        matches!(self, Self::Int8 | Self::Int4)
    }
}

/// A GEMM on workgroup-scope cooperative matrices with an f16 output. Float
/// ones (`spirv/gemm_cm2.glsl`): f16 activations, f16 or bf16 weights, f32
/// sums; the bindings and immediates of the WGSL float linears. Integer
/// ones (`spirv/gemm_cm2_int.glsl`): int8 activation codes, int8 or int4
/// weights, exact s32 sums; the integer linears' bindings, their epilogue
/// chosen by flags.
#[derive(Debug)]
pub struct Cm2Gemm {
    /// The profile's name of the kernel.
    pub name: &'static str,
    /// The module (SPIR-V 1.6, entry point `main`).
    pub spirv: &'static [u8],
    /// The weights it reads.
    pub weights: Cm2Weights,
    /// Output tile rows (of M) of a workgroup.
    pub tile_m: u32,
    /// Output tile columns (of N) of a workgroup.
    pub tile_n: u32,
    /// K columns a step.
    pub tile_k: u32,
    /// Invocations of a workgroup.
    pub invocations: u32,
    /// Shared memory the kernel declares itself (besides the driver's
    /// staging for workgroup-scope matrices).
    pub shared_bytes: u32,
    /// A kernel for grids where the preferred kernel's tiles fill at most
    /// half the multiprocessors (prefill's 512 rows): chosen only there,
    /// where the device says how many it has.
    pub small_grids: bool,
    /// Subgroup-scope matrices staged by the kernel itself
    /// (`spirv/gemm_sg.glsl`: 16 x 16 x 16 f16 or 16 x 16 x 32 int8
    /// products, 32-invocation subgroups) rather than workgroup-scope ones
    /// staged by the driver.
    pub subgroup: bool,
    /// 0, or the row tiles of a group in which the workgroups take their
    /// tiles (`GROUP_M` in `cm2_header.glsl`): chosen over the same kernel
    /// ungrouped on grids of many column tiles (`linear` decides).
    pub group_m: u32,
    /// One workgroup a multiprocessor, each taking tile after tile of the
    /// grid (`PERSIST` in `cm2_header.glsl`): the host launches at most
    /// as many workgroups as the device has multiprocessors.
    pub persistent: bool,
}

/// A [`Cm2Gemm`] of 128-row tiles and 256 invocations (or of `tile_m` rows
/// and `invocations`), its module `spirv/NAME.spv`; `small` marks a
/// kernel for small grids ([`Cm2Gemm::small_grids`]).
macro_rules! cm2_gemm {
    ($name:literal, $weights:ident, $tile_n:literal, $tile_k:literal, $shared:expr) => {
        cm2_gemm!($name, $weights, 128, $tile_n, $tile_k, 256, $shared)
    };
    ($name:literal, $weights:ident, $tile_m:literal, $tile_n:literal, $tile_k:literal, $wg:literal, $shared:expr) => {
        cm2_gemm!(@ $name, $weights, $tile_m, $tile_n, $tile_k, $wg, $shared, false)
    };
    (small $name:literal, $weights:ident, $tile_m:literal, $tile_n:literal, $tile_k:literal, $wg:literal) => {
        cm2_gemm!(@ $name, $weights, $tile_m, $tile_n, $tile_k, $wg, 0, true, false)
    };
    (sg $name:literal, $tile_m:literal, $tile_n:literal, $tile_k:literal, $wg:literal) => {
        // Two buffers of padded rows (16 bytes a row more) of both tiles.
        cm2_gemm!(@ $name, F16, $tile_m, $tile_n, $tile_k, $wg,
            2 * ($tile_m + $tile_n) * ($tile_k * 2 + 16), false, true)
    };
    // int8 codes and weights (`INT8 1`).
    (sg8 $name:literal, $tile_m:literal, $tile_n:literal, $tile_k:literal, $wg:literal) => {
        cm2_gemm!(@ $name, Int8, $tile_m, $tile_n, $tile_k, $wg,
            2 * ($tile_m + $tile_n) * ($tile_k + 16), false, true)
    };
    (@ $name:literal, $weights:ident, $tile_m:literal, $tile_n:literal, $tile_k:literal, $wg:literal, $shared:expr, $small:literal) => {
        cm2_gemm!(@ $name, $weights, $tile_m, $tile_n, $tile_k, $wg, $shared, $small, false)
    };
    // Tiles taken in groups of $group row tiles.
    (grouped $name:literal, $weights:ident, $tile_n:literal, $tile_k:literal, $group:literal) => {
        Cm2Gemm {
            group_m: $group,
            ..cm2_gemm!($name, $weights, $tile_n, $tile_k, 0)
        }
    };
    // As grouped, by persistent workgroups.
    (persistent $name:literal, $weights:ident, $tile_n:literal, $tile_k:literal, $group:literal) => {
        Cm2Gemm {
            persistent: true,
            ..cm2_gemm!(grouped $name, $weights, $tile_n, $tile_k, $group)
        }
    };
    (@ $name:literal, $weights:ident, $tile_m:literal, $tile_n:literal, $tile_k:literal, $wg:literal, $shared:expr, $small:literal, $sg:literal) => {
        Cm2Gemm {
            name: $name,
            spirv: include_bytes!(concat!("../spirv/", $name, ".spv")),
            weights: Cm2Weights::$weights,
            tile_m: $tile_m,
            tile_n: $tile_n,
            tile_k: $tile_k,
            invocations: $wg,
            shared_bytes: $shared,
            small_grids: $small,
            subgroup: $sg,
            group_m: 0,
            persistent: false,
        }
    };
}

/// Every cooperative-matrix-2 GEMM, in the order they are preferred for
/// their weights, as measured on the H100 (BENCHMARKS.md, session 24):
/// f16 weights through the unclamped, unrolled inner loop first (219-240
/// TFLOP/s at FLUX.1's shapes against 122-142 for the plain loop; the
/// 128-wide tile is for small grids, 159 against 128 at 512 x 4096 x 4096,
/// taken where the first kernel's tiles fill at most half the device's
/// multiprocessors), integer ones 64 K columns a step before 32
/// (int4 187-196 against 173-179 on the H200 and H100), bf16 below;
/// smaller shared tiles serve drivers that reserve more shared memory.
pub static CM2_GEMMS: [Cm2Gemm; 27] = [
    cm2_gemm!("gemm_cm2_f16_k32_fast", F16, 256, 32, 0),
    cm2_gemm!("gemm_cm2_f16_k32", F16, 256, 32, 0),
    // By name only: subgroup-scope matrices staged by the kernel
    // (`gemm_sg.glsl`), named for tile, K step and subgroup piece; 35-85
    // TFLOP/s at FLUX.1's shapes on the H100 (session 33), a third of the
    // first kernel's.
    cm2_gemm!(sg "gemm_sg_f16_128x128k32w64x64", 128, 128, 32, 128),
    cm2_gemm!(sg "gemm_sg_f16_128x256k16w64x64", 128, 256, 16, 256),
    cm2_gemm!(sg "gemm_sg_f16_128x128k32w64x32", 128, 128, 32, 256),
    cm2_gemm!(sg "gemm_sg_f16_256x128k16w64x64", 256, 128, 16, 256),
    cm2_gemm!(sg "gemm_sg_f16_128x128k16w64x64", 128, 128, 16, 128),
    cm2_gemm!(small "gemm_cm2_f16_n128_fast", F16, 128, 128, 32, 256),
    // Not measured yet, by name only: the same with 4 steps unrolled (4
    // beat 8 on the 128 x 256 tiles, 227 against 200 TFLOP/s).
    cm2_gemm!("gemm_cm2_f16_n128u4_fast", F16, 128, 128, 32, 256, 0),
    // The first kernel with its tiles taken in groups of 8 row tiles
    // (`GROUP_M`: the workgroups resident at once share panels of the
    // weights in L2), on grids of many column tiles: on the H100 (session
    // 34) 249-254 TFLOP/s against 221-223 at 4608 x 21504 x 3072 (84
    // column tiles), 244-245 against 235-237 at 4096 x 12288 x 3072 (48),
    // 242-244 against 239-241 at 4096 x 9216 x 3072 (36); 204-206 against
    // 206-208 at 4608 x 3072 x 3072 (12). 16 row tiles by name only (no
    // better).
    cm2_gemm!(grouped "gemm_cm2_f16_k32_fast_g8", F16, 256, 32, 8),
    cm2_gemm!(grouped "gemm_cm2_f16_k32_fast_g16", F16, 256, 32, 16),
    // Shared weights: rows of the step's f16 and 16 bytes. 32 K columns a
    // step first: on the H200 (2026-12-06) 132-137 TFLOP/s at FLUX.1's
    // shapes against 88 for the 128-wide tile and 43 for 64 columns (36 KiB
    // of staging beside the driver's).
    cm2_gemm!("gemm_cm2_bf16_k32", Bf16, 256, 32, 256 * (64 + 16)),
    cm2_gemm!("gemm_cm2_bf16_n128", Bf16, 128, 32, 128 * (64 + 16)),
    cm2_gemm!("gemm_cm2_bf16_k64", Bf16, 256, 64, 256 * (128 + 16)),
    // int8 weights (and int4 ones widened to int8, `Cm2Int4::ViaInt8`): the
    // fast loop first, on the H100 (2026-12-06) 260-326 TOPS at FLUX.1's
    // shapes and K3 against 130-158 for the plain loop, 64 K columns a step
    // ahead of 32 (187-259).
    cm2_gemm!("gemm_cm2_w8_k64_fast", Int8, 256, 64, 0),
    // As gemm_cm2_f16_k32_fast_g8 (int4 widened, the same session): 307-309
    // TOPS against 276-279 at 4608 x 21504 x 3072, 303-305 against 292-294
    // at 4096 x 12288 x 3072, 246 against 216-235 at 4096 x 9216 x 3072;
    // 129-164 against 162-163 at 4608 x 3072 x 3072.
    cm2_gemm!(grouped "gemm_cm2_w8_k64_fast_g8", Int8, 256, 64, 8),
    cm2_gemm!("gemm_cm2_w8_k32_fast", Int8, 256, 32, 0),
    cm2_gemm!("gemm_cm2_w8_k64", Int8, 256, 64, 0),
    cm2_gemm!("gemm_cm2_w8_k32", Int8, 256, 32, 0),
    // By name only: subgroup-scope int8 (`gemm_sg.glsl` with INT8), 49-148
    // TOPS at FLUX.1's shapes on the H100 (session 33).
    cm2_gemm!(sg8 "gemm_sg_w8_128x128k64w64x64", 128, 128, 64, 128),
    cm2_gemm!(sg8 "gemm_sg_w8_128x256k32w64x64", 128, 256, 32, 256),
    // For small grids: 233-243 TOPS at 512 x 4096 x 4096 and x 11008
    // against 177-200 on 128 x 256 tiles (H100, 2026-12-06).
    cm2_gemm!(small "gemm_cm2_w8_n128_fast", Int8, 128, 128, 64, 256),
    // Rows of the step's int8 and 16 bytes.
    cm2_gemm!("gemm_cm2_w4_k64", Int4, 256, 64, 256 * (64 + 16)),
    cm2_gemm!("gemm_cm2_w4_k32", Int4, 256, 32, 256 * (32 + 16)),
    // Not measured yet, by name only: the grouped kernels by persistent
    // workgroups (whether a tile's start and end, exposed at one
    // workgroup a multiprocessor, cost the K = 3,072 GEMMs their ~10 %).
    cm2_gemm!(persistent "gemm_cm2_f16_k32_fast_g8_persist", F16, 256, 32, 8),
    // Not measured yet, by name only: the grouped f16 kernel 64 K columns
    // a step (half the steps a tile).
    cm2_gemm!(grouped "gemm_cm2_f16_k64_fast_g8", F16, 256, 64, 8),
    cm2_gemm!(persistent "gemm_cm2_w8_k64_fast_g8_persist", Int8, 256, 64, 8),
];

/// The kernels of [`CM2_GEMMS`] with K split across workgroups
/// (`SPLIT 1`), each the same tile and loop as the kernel of its weights and
/// tile there: for grids whose tiles fill at most half the GPU (prefill's
/// 512 rows on 4096-wide layers, 64 tiles of 128 x 256 on 132
/// multiprocessors), as llama.cpp splits K in that case, and for the row
/// tiles of a last wave at most half full, after the whole ones (push
/// constant `whole`). The push constant `k_span` gives the K columns a
/// split sums; each split writes its partial sums (f32, or the integer
/// kernels' exact i32) to its own block of the binding after the output,
/// and `linear::SPLIT_SUM` (`linear::INT_SPLIT_SUM`) adds them up and
/// applies the epilogue.
pub static CM2_SPLIT_GEMMS: [Cm2Gemm; 2] = [
    cm2_gemm!("gemm_cm2_f16_k32_fast_split", F16, 256, 32, 0),
    cm2_gemm!("gemm_cm2_w8_k64_fast_split", Int8, 256, 64, 0),
];

/// The kernels of [`CM2_GEMMS`] over up to three weights of one input in
/// one launch (`STACK 3`): q/k/v and gate/up at prefill, whose grids each
/// fill little of the GPU (512 rows: 64 tiles of 128 x 256 a 4096-wide
/// layer, 172 an 11008-wide one, on 132 multiprocessors). The same tile
/// and loop as the kernel of its weights and tile there; the second and
/// third weights (with their bias and output) at bindings 5-7 and 8-10,
/// their rows in the push constants where the others have `k_span`, and
/// the first weight's tiles first along x.
pub static CM2_STACK_GEMMS: [Cm2Gemm; 2] = [
    cm2_gemm!("gemm_cm2_f16_k32_fast_stack", F16, 256, 32, 0),
    // The same, its tiles in groups of 8 row tiles: `Cm2Stack::Grouped`
    // only (not measured yet).
    cm2_gemm!(grouped "gemm_cm2_f16_k32_fast_stack_g8", F16, 256, 32, 8),
];

/// A plain float linear with the interface of [`CM2_GEMMS`] (the same
/// bindings, push constants and output contract; f16 weights, 16 x 16
/// tiles) and no cooperative matrices (`spirv/linear_check.comp`): never
/// chosen for a layer, it lets the tests check the SPIR-V launch path on
/// devices that take raw SPIR-V but cannot run the GEMMs (CI's lavapipe).
pub static LINEAR_CHECK: Cm2Gemm = Cm2Gemm {
    name: "linear_check",
    spirv: include_bytes!("../spirv/linear_check.spv"),
    weights: Cm2Weights::F16,
    tile_m: 16,
    tile_n: 16,
    tile_k: 1,
    invocations: 256,
    shared_bytes: 0,
    small_grids: false,
    subgroup: false,
    group_m: 0,
    persistent: false,
};

/// Flash attention on workgroup-scope cooperative matrices
/// (`spirv/flash_cm2.glsl`): f16 q, k, v and output, f32 scores and sums,
/// the bindings of the WGSL flash kernels and the two-walk kernel's
/// `Params`. One module per block shape and head dimension (the matrices'
/// sizes are compile-time constants).
#[derive(Debug)]
pub struct Cm2Flash {
    /// The module's name (`spirv/NAME.spv`), the profile's label.
    pub name: &'static str,
    /// The module (SPIR-V 1.6, entry point `main`).
    pub spirv: &'static [u8],
    /// Query rows a workgroup.
    pub rows: u32,
    /// Keys a block.
    pub keys: u32,
    /// The head dimension it is built for.
    pub head_dim: u32,
    /// Invocations of a workgroup.
    pub invocations: u32,
    /// Key blocks an iteration of the unclamped inner loop (`FA_FAST`; 0:
    /// every load clamped).
    pub fast: u32,
    /// 0, or a probe that is not attention (`FA_PROBE`,
    /// [`crate::flash::Cm2Block::probe`]): never chosen, never checked
    /// against a reference.
    pub probe: u32,
    /// 0: workgroup-scope matrices. n > 0: subgroup-scope ones
    /// (`flash_cm2_sg.glsl`: `NW` subgroups of n · 16 query rows, K and V
    /// staged in `shared_bytes` of shared memory).
    pub subgroup: u32,
    /// Shared memory the kernel declares itself.
    pub shared_bytes: u32,
    /// Subgroup-scope kernels: K and V in two buffers, one barrier a block
    /// (`DB 1`).
    pub double_buffer: bool,
    /// Subgroup-scope kernels: the lazy rescale (`LAZY 1`).
    pub lazy: bool,
    /// Subgroup-scope kernels: Q in shared memory (`QSH 1`).
    pub q_shared: bool,
}

impl Cm2Flash {
    /// Its block, as `FlashKernel::Cm2` names it.
    pub const fn block(&self) -> crate::flash::Cm2Block {
        crate::flash::Cm2Block {
            rows: self.rows,
            keys: self.keys,
            fast: self.fast,
            probe: self.probe,
            subgroup: self.subgroup,
            double_buffer: self.double_buffer,
            lazy: self.lazy,
            q_shared: self.q_shared,
        }
    }
}

/// A [`Cm2Flash`] of `rows` x `keys` blocks, module `spirv/NAME.spv`.
macro_rules! cm2_flash {
    ($name:literal, $rows:literal, $keys:literal, $hd:literal, $wg:literal) => {
        cm2_flash!($name, $rows, $keys, $hd, $wg, 0)
    };
    ($name:literal, $rows:literal, $keys:literal, $hd:literal, $wg:literal, $fast:literal) => {
        cm2_flash!($name, $rows, $keys, $hd, $wg, $fast, 0)
    };
    ($name:literal, $rows:literal, $keys:literal, $hd:literal, $wg:literal, $fast:literal, $probe:literal) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, $wg, $fast, $probe, 0, 0)
    };
    // Subgroup scope, one row fragment a subgroup: K and V, rows of HD f16
    // values and 16 bytes, in shared memory.
    (sg $name:literal, $rows:literal, $keys:literal, $hd:literal) => {
        cm2_flash!(sg $name, $rows, $keys, $hd, 1)
    };
    // $rw row fragments a subgroup.
    (sg $name:literal, $rows:literal, $keys:literal, $hd:literal, $rw:literal) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, 2 * $rows / $rw, 0, 0, $rw, 2 * $keys * ($hd * 2 + 16), false)
    };
    // The lazy rescale.
    (sg_lz $name:literal, $rows:literal, $keys:literal, $hd:literal) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, 2 * $rows, 0, 0, 1, 2 * $keys * ($hd * 2 + 16), false, true)
    };
    // The lazy rescale, $rw row fragments a subgroup and the workgroup's Q
    // rows (as K's) in shared memory.
    (sg_lz_qs $name:literal, $rows:literal, $keys:literal, $hd:literal, $rw:literal) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, 2 * $rows / $rw, 0, 0, $rw,
                   2 * $keys * ($hd * 2 + 16) + $rows * ($hd * 2 + 16), false, true, true)
    };
    // Two buffers of each.
    (sg_db $name:literal, $rows:literal, $keys:literal, $hd:literal, $rw:literal) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, 2 * $rows / $rw, 0, 0, $rw, 4 * $keys * ($hd * 2 + 16), true)
    };
    (@ $name:literal, $rows:literal, $keys:literal, $hd:literal, $wg:expr, $fast:literal,
     $probe:literal, $subgroup:literal, $shared:expr) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, $wg, $fast, $probe, $subgroup, $shared, false, false)
    };
    (@ $name:literal, $rows:literal, $keys:literal, $hd:literal, $wg:expr, $fast:literal,
     $probe:literal, $subgroup:literal, $shared:expr, $db:literal) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, $wg, $fast, $probe, $subgroup, $shared, $db, false)
    };
    (@ $name:literal, $rows:literal, $keys:literal, $hd:literal, $wg:expr, $fast:literal,
     $probe:literal, $subgroup:literal, $shared:expr, $db:literal, $lazy:literal) => {
        cm2_flash!(@ $name, $rows, $keys, $hd, $wg, $fast, $probe, $subgroup, $shared, $db, $lazy, false)
    };
    (@ $name:literal, $rows:literal, $keys:literal, $hd:literal, $wg:expr, $fast:literal,
     $probe:literal, $subgroup:literal, $shared:expr, $db:literal, $lazy:literal, $qs:literal) => {
        Cm2Flash {
            name: $name,
            spirv: include_bytes!(concat!("../spirv/", $name, ".spv")),
            rows: $rows,
            keys: $keys,
            head_dim: $hd,
            invocations: $wg,
            fast: $fast,
            probe: $probe,
            subgroup: $subgroup,
            shared_bytes: $shared,
            double_buffer: $db,
            lazy: $lazy,
            q_shared: $qs,
        }
    };
}

/// Every cooperative-matrix-2 flash kernel, in the order they are
/// preferred, as measured at FLUX.1's attention (24 heads x 4608 x 128) on
/// the H100 (2026-12-06, three interleaved runs each): 64 rows with the
/// unclamped inner loop 143-144 TFLOP/s, then 128 x 32 132-135, 64 x 32
/// 117, 128 x 64 95, 64 x 64 67 (the WGSL kernel 69-72); the other
/// unclamped ones (115-123) are chosen only by name (`cm2-128x32f`, ...),
/// as are the probes, then the subgroup-scope kernels (`cm2-…-sg`; the
/// first of them on large grids, [`CM2_FLASH_LARGE`]). The last two, with
/// Q in shared memory (`-qs`, session 38), have not run on a GPU yet.
pub static CM2_FLASH: [Cm2Flash; 22] = [
    cm2_flash!("flash_cm2_64x32f_d128", 64, 32, 128, 128, 1),
    cm2_flash!("flash_cm2_128x32_d128", 128, 32, 128, 256),
    cm2_flash!("flash_cm2_64x32_d128", 64, 32, 128, 128),
    cm2_flash!("flash_cm2_128x64_d128", 128, 64, 128, 256),
    cm2_flash!("flash_cm2_64x64_d128", 64, 64, 128, 128),
    cm2_flash!("flash_cm2_128x32f_d128", 128, 32, 128, 256, 1),
    cm2_flash!("flash_cm2_128x32f2_d128", 128, 32, 128, 256, 2),
    cm2_flash!("flash_cm2_64x32f2_d128", 64, 32, 128, 128, 2),
    cm2_flash!("flash_cm2_64x32f_d128_probe1", 64, 32, 128, 128, 1, 1),
    cm2_flash!("flash_cm2_64x32f_d128_probe2", 64, 32, 128, 128, 1, 2),
    cm2_flash!(sg "flash_cm2_sg_128x64_d128", 128, 64, 128),
    cm2_flash!(sg "flash_cm2_sg_64x64_d128", 64, 64, 128),
    cm2_flash!(sg "flash_cm2_sg_128x32_d128", 128, 32, 128),
    cm2_flash!(sg "flash_cm2_sg_128x32r2_d128", 128, 32, 128, 2),
    cm2_flash!(sg "flash_cm2_sg_256x32r2_d128", 256, 32, 128, 2),
    cm2_flash!(sg "flash_cm2_sg_128x64r2_d128", 128, 64, 128, 2),
    cm2_flash!(sg_db "flash_cm2_sg_128x32r2db_d128", 128, 32, 128, 2),
    cm2_flash!(sg_db "flash_cm2_sg_128x32db_d128", 128, 32, 128, 1),
    cm2_flash!(sg_lz "flash_cm2_sg_128x64lz_d128", 128, 64, 128),
    cm2_flash!(sg_lz "flash_cm2_sg_128x32lz_d128", 128, 32, 128),
    cm2_flash!(sg_lz_qs "flash_cm2_sg_128x16r2lzqs_d128", 128, 16, 128, 2),
    cm2_flash!(sg_lz_qs "flash_cm2_sg_64x32r2lzqs_d128", 64, 32, 128, 2),
];

/// The flash kernels preferred over the first of [`CM2_FLASH`] where their
/// workgroups fill at least [`CM2_FLASH_LARGE_WAVES`] waves of the
/// device's multiprocessors (in [`CM2_FLASH`]'s order). Measured on the H100 (session
/// 33, two interleaved rounds): `cm2-128x64-sg` at FLUX.1's attention (24
/// heads x 4608, 864 workgroups) 185.8-186.2 TFLOP/s against `cm2-64x32f`'s
/// 141.3-142.6, causal 32 heads x 4096 (1024) 182.0-182.6 against
/// 152.1-153.2; at 32 heads x 512 causal (128 workgroups) 35.0 us against
/// 33.0. Its lazy rescale (`-lz`, session 34, same call) 189.2 against
/// 183.8 at FLUX.1's attention and 181.6-182.4 against 179.9-181.0 causal;
/// 81.0-81.3 ms of a FLUX.1 step against 81.8-81.9.
pub static CM2_FLASH_LARGE: [&str; 1] = ["flash_cm2_sg_128x64lz_d128"];

/// Waves of workgroups from which [`CM2_FLASH_LARGE`] is preferred.
pub const CM2_FLASH_LARGE_WAVES: u64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the `#define NAME value` lines of a variant's `.comp`.
    fn define(comp: &str, name: &str) -> u32 {
        comp.lines()
            .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no #define {name} in the .comp"))
    }

    /// Every GEMM module: the plain, split and stacked ones.
    fn all_gemms() -> impl Iterator<Item = &'static Cm2Gemm> {
        CM2_GEMMS
            .iter()
            .chain(&CM2_SPLIT_GEMMS)
            .chain(&CM2_STACK_GEMMS)
    }

    #[test]
    fn every_module_is_spirv_built_from_its_comp_with_the_listed_shape() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/spirv");
        let mut comps = 0;
        for entry in std::fs::read_dir(dir).expect("spirv/") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "comp") {
                comps += 1;
                let stem = path.file_stem().and_then(|s| s.to_str()).expect("name");
                assert!(
                    all_gemms().any(|g| g.name == stem)
                        || CM2_FLASH.iter().any(|f| f.name == stem)
                        || stem == LINEAR_CHECK.name,
                    "{stem}.comp is not listed in CM2_GEMMS or CM2_FLASH"
                );
            }
        }
        assert_eq!(comps, all_gemms().count() + CM2_FLASH.len() + 1);
        let modules = all_gemms()
            .chain([&LINEAR_CHECK])
            .map(|g| (g.name, g.spirv));
        for (name, spv) in modules.chain(CM2_FLASH.iter().map(|f| (f.name, f.spirv))) {
            assert!(spv.len() > 20 && spv.len().is_multiple_of(4), "{name}");
            assert_eq!(&spv[..4], &0x0723_0203u32.to_le_bytes(), "{name}");
            // SPIR-V 1.6, which SPV_NV_cooperative_matrix2 requires.
            assert_eq!(&spv[4..8], &0x0001_0600u32.to_le_bytes(), "{name}");
        }
        for f in &CM2_FLASH {
            let comp = std::fs::read_to_string(format!("{dir}/{}.comp", f.name)).expect("comp");
            assert_eq!(define(&comp, "BR"), f.rows, "{}", f.name);
            assert_eq!(define(&comp, "BC"), f.keys, "{}", f.name);
            assert_eq!(define(&comp, "HD"), f.head_dim, "{}", f.name);
            let fast = comp
                .lines()
                .find_map(|l| l.strip_prefix("#define FA_FAST "))
                .map_or(0, |v| v.trim().parse().expect("FA_FAST"));
            assert_eq!(fast, f.fast, "{}", f.name);
            let probe = comp
                .lines()
                .find_map(|l| l.strip_prefix("#define FA_PROBE "))
                .map_or(0, |v| v.trim().parse().expect("FA_PROBE"));
            assert_eq!(probe, f.probe, "{}", f.name);
            assert_eq!(define(&comp, "WG"), f.invocations, "{}", f.name);
            let sg = comp.lines().any(|l| l.starts_with("#define NW "));
            assert_eq!(sg, f.subgroup > 0, "{}", f.name);
            if sg {
                let rw = comp
                    .lines()
                    .find_map(|l| l.strip_prefix("#define RW "))
                    .map_or(1, |v| v.trim().trim_end_matches('u').parse().expect("RW"));
                assert_eq!(rw, f.subgroup, "{}", f.name);
                let db = comp.lines().any(|l| l == "#define DB 1");
                assert_eq!(db, f.double_buffer, "{}", f.name);
                let lazy = comp.lines().any(|l| l == "#define LAZY 1");
                assert_eq!(lazy, f.lazy, "{}", f.name);
                let qs = comp.lines().any(|l| l == "#define QSH 1");
                assert_eq!(qs, f.q_shared, "{}", f.name);
                let buffers = if db { 2 } else { 1 };
                let q_rows = if qs { f.rows } else { 0 };
                assert_eq!(
                    f.shared_bytes,
                    (buffers * 2 * f.keys + q_rows) * (f.head_dim * 2 + 16),
                    "{}",
                    f.name
                );
                assert_eq!(define(&comp, "NW") * 16 * rw, f.rows, "{}", f.name);
                assert_eq!(define(&comp, "NW") * 32, f.invocations, "{}", f.name);
                assert!(comp.contains("flash_cm2_sg.glsl"), "{}", f.name);
            }
        }
        for g in all_gemms() {
            let comp = std::fs::read_to_string(format!("{dir}/{}.comp", g.name)).expect("comp");
            let split = comp.lines().any(|l| l == "#define SPLIT 1");
            assert_eq!(
                split,
                CM2_SPLIT_GEMMS.iter().any(|s| s.name == g.name),
                "{}",
                g.name
            );
            let stack = comp.lines().any(|l| l == "#define STACK 3");
            assert_eq!(
                stack,
                CM2_STACK_GEMMS.iter().any(|s| s.name == g.name),
                "{}",
                g.name
            );
            let (flag, set) = match g.weights {
                Cm2Weights::F16 => ("WEIGHT_BF16", false),
                Cm2Weights::Bf16 => ("WEIGHT_BF16", true),
                Cm2Weights::Int8 => ("WEIGHT_INT4", false),
                Cm2Weights::Int4 => ("WEIGHT_INT4", true),
            };
            let sg = comp.contains("gemm_sg.glsl");
            assert_eq!(sg, g.subgroup, "{}", g.name);
            if sg {
                // f16 weights, or int8 with INT8; WG invocations of WM x WN
                // subgroup pieces.
                let int8 = comp.lines().any(|l| l == "#define INT8 1");
                let want = if int8 {
                    Cm2Weights::Int8
                } else {
                    Cm2Weights::F16
                };
                assert_eq!(g.weights, want, "{}", g.name);
                let pieces = (g.tile_m / define(&comp, "WM")) * (g.tile_n / define(&comp, "WN"));
                assert_eq!(pieces * 32, g.invocations, "{}", g.name);
            } else {
                assert_eq!(define(&comp, flag) == 1, set, "{}", g.name);
            }
            let group_m = comp
                .lines()
                .find_map(|l| l.strip_prefix("#define GROUP_M "))
                .map_or(0, |v| v.trim().parse().expect("GROUP_M"));
            assert_eq!(group_m, g.group_m, "{}", g.name);
            assert_eq!(define(&comp, "BM"), g.tile_m, "{}", g.name);
            assert_eq!(define(&comp, "BN"), g.tile_n, "{}", g.name);
            assert_eq!(define(&comp, "BK"), g.tile_k, "{}", g.name);
            assert_eq!(define(&comp, "WG"), g.invocations, "{}", g.name);
            // Rows of 16 bytes more than the step's weights.
            let shared = match g.weights {
                // Both tiles, two buffers.
                Cm2Weights::Int8 if sg => 2 * (g.tile_m + g.tile_n) * (g.tile_k + 16),
                _ if sg => 2 * (g.tile_m + g.tile_n) * (g.tile_k * 2 + 16),
                Cm2Weights::Bf16 => g.tile_n * (g.tile_k * 2 + 16),
                Cm2Weights::Int4 => g.tile_n * (g.tile_k + 16),
                Cm2Weights::F16 | Cm2Weights::Int8 => 0,
            };
            assert_eq!(g.shared_bytes, shared, "{}", g.name);
        }
    }
}
