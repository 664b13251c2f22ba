// Linear through f16 cooperative matrices with f32 sums, double-buffered:
// the tensor-core GEMM of linear_gemm_coop.wgsl rebuilt so that staging and
// products overlap. After a common fragment (linear_int_common.wgsl or
// linear_float_common.wgsl), its wide staging fragment
// (linear_coop_int_v4.wgsl or linear_coop_float_v4.wgsl: 16-byte global
// loads, `A_COLS`/`B_COLS` columns a slot, `fetch_*`/`put_*` into a given
// stage, `emit`), linear_coop_drain.wgsl and a shape fragment
// (linear_coop8.wgsl or linear_coop16.wgsl).
//
// Differences from linear_gemm_coop.wgsl:
// - two stages of staged tiles: while the subgroups multiply from one, the
//   next K step's global reads (issued before the products) are converted
//   and stored into the other after them, so a K step costs one barrier
//   instead of two and no subgroup waits for another's stores before its
//   products;
// - rows padded by 8 f16 (16 bytes) as before: eight consecutive rows of a
//   tile start on different bank groups (BK = 32: pitch 80 bytes);
// - a staging slot is 16 bytes of global memory (one vec4<u32>: 8 f16/bf16
//   values, 16 codes, 32 int4 weights), so K must be a multiple of the
//   slot's columns (the host checks; other layers take the single-stage
//   kernel).
// A workgroup is SG_M x SG_N subgroups of exactly SG invocations computing
// a TILE_M x TILE_N output tile, each subgroup WM x WN accumulators.
// Dispatch: (ceil(N / TILE_N), ceil(M / TILE_M), 1).
//
// needs: A_COLS, B_COLS, CM, cm_a, cm_b, cm_c, drain, fetch_a, fetch_b, p
// needs: put_a, put_b
// provides: A_SLOTS, B_SLOTS, NSG, PITCH, SG, a_sh, a_slot, b_sh, b_slot
//

override SG: u32 = 32u;
// The workgroup shape: constants written by the host
// (`dynvram_shaders::linear::coop_gemm`), which also generates `main`
// between the markers; the `main` below is the one for this file's shape.
const SG_M: u32 = 2u;
const SG_N: u32 = 2u;
const WM: u32 = 2u;
const WN: u32 = 2u;
const BK: u32 = 32u;

const NSG: u32 = SG_M * SG_N;
const TILE_M: u32 = WM * CM * SG_M;
const TILE_N: u32 = WN * CM * SG_N;
// Row pitch of the staged tiles in f16: rows on 16 bytes, padded by 16.
const PITCH: u32 = BK + 8u;
// One stage of each tile; the arrays hold two.
const A_STAGE: u32 = TILE_M * PITCH;
const B_STAGE: u32 = TILE_N * PITCH;
// Staging slots of a K step: A_COLS activation or B_COLS weight columns of
// one row each.
const A_SLOTS: u32 = TILE_M * BK / A_COLS;
const B_SLOTS: u32 = TILE_N * BK / B_COLS;

var<workgroup> a_sh: array<f16, 2u * A_STAGE>;
var<workgroup> b_sh: array<f16, 2u * B_STAGE>;

// Row and first column of activation slot `slot` in a staged tile.
fn a_slot(slot: u32) -> vec2<u32> {
    return vec2<u32>(slot / (BK / A_COLS), A_COLS * (slot % (BK / A_COLS)));
}

// Row and first column of weight slot `slot` in a staged tile.
fn b_slot(slot: u32) -> vec2<u32> {
    return vec2<u32>(slot / (BK / B_COLS), B_COLS * (slot % (BK / B_COLS)));
}

// BEGIN main (generated for other shapes by dynvram_shaders::linear::coop_gemm)
@compute @workgroup_size(SG * NSG)
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
    var acc_0_0 = cm_c();
    var acc_0_1 = cm_c();
    var acc_1_0 = cm_c();
    var acc_1_1 = cm_c();
    var ra_0 = fetch_a(m0, 0u, lid + 0u * SG * NSG);
    var ra_1 = fetch_a(m0, 0u, lid + 1u * SG * NSG);
    var rb_0 = fetch_b(n0, 0u, lid + 0u * SG * NSG);
    var rb_1 = fetch_b(n0, 0u, lid + 1u * SG * NSG);
    put_a(0u, lid + 0u * SG * NSG, ra_0);
    put_a(0u, lid + 1u * SG * NSG, ra_1);
    put_b(0u, lid + 0u * SG * NSG, rb_0);
    put_b(0u, lid + 1u * SG * NSG, rb_1);
    workgroupBarrier();
    var stage = 0u;
    for (var kt = 0u; kt < p.k; kt += BK) {
        let more = kt + BK < p.k;
        if more {
            ra_0 = fetch_a(m0, kt + BK, lid + 0u * SG * NSG);
            ra_1 = fetch_a(m0, kt + BK, lid + 1u * SG * NSG);
            rb_0 = fetch_b(n0, kt + BK, lid + 0u * SG * NSG);
            rb_1 = fetch_b(n0, kt + BK, lid + 1u * SG * NSG);
        }
        let sa = stage * A_STAGE;
        let sb = stage * B_STAGE;
        for (var kk = 0u; kk < BK; kk += CM) {
            let a_0 = coopLoadT<cm_a>(&a_sh[sa + (sm + 0u * CM) * PITCH + kk], PITCH);
            let a_1 = coopLoadT<cm_a>(&a_sh[sa + (sm + 1u * CM) * PITCH + kk], PITCH);
            // Weight rows are output columns: B[k][n] = b_sh[n * PITCH + k],
            // column-major.
            let b_0 = coopLoad<cm_b>(&b_sh[sb + (sn + 0u * CM) * PITCH + kk], PITCH);
            let b_1 = coopLoad<cm_b>(&b_sh[sb + (sn + 1u * CM) * PITCH + kk], PITCH);
            acc_0_0 = coopMultiplyAdd(a_0, b_0, acc_0_0);
            acc_0_1 = coopMultiplyAdd(a_0, b_1, acc_0_1);
            acc_1_0 = coopMultiplyAdd(a_1, b_0, acc_1_0);
            acc_1_1 = coopMultiplyAdd(a_1, b_1, acc_1_1);
        }
        // The other stage was last read before the previous barrier.
        stage = 1u - stage;
        if more {
            put_a(stage * A_STAGE, lid + 0u * SG * NSG, ra_0);
            put_a(stage * A_STAGE, lid + 1u * SG * NSG, ra_1);
            put_b(stage * B_STAGE, lid + 0u * SG * NSG, rb_0);
            put_b(stage * B_STAGE, lid + 1u * SG * NSG, rb_1);
        }
        workgroupBarrier();
    }
    drain(acc_0_0, sq, lane, ok, m0 + sm + 0u * CM, n0 + sn + 0u * CM);
    drain(acc_0_1, sq, lane, ok, m0 + sm + 0u * CM, n0 + sn + 1u * CM);
    drain(acc_1_0, sq, lane, ok, m0 + sm + 1u * CM, n0 + sn + 0u * CM);
    drain(acc_1_1, sq, lane, ok, m0 + sm + 1u * CM, n0 + sn + 1u * CM);
}
// END main
