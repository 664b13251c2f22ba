// Linear through f16 cooperative matrices (tensor cores) with f32 sums,
// after a common fragment (linear_int_common.wgsl or
// linear_float_common.wgsl), its staging fragment (linear_coop_int.wgsl or
// linear_coop_float.wgsl: `fetch_a`/`put_a`, `fetch_b`/`put_b` and `emit`)
// and a shape fragment (linear_coop8.wgsl or linear_coop16.wgsl: CM and the
// cm_a/cm_b/cm_c types).
//
// A workgroup is SG_M x SG_N subgroups of exactly SG invocations (the host
// picks this kernel only where the subgroup size is fixed) and computes a
// TILE_M x TILE_N output tile, each subgroup WM x WN accumulators of
// CM x CM: every staged A matrix serves WN products and every B matrix WM,
// so more accumulators mean fewer workgroup-memory loads per product (the
// ceiling `dynvram bench coop` measures). Each K step stages BK columns of
// the tile's activations and weights as f16; the next step's global reads
// are issued into registers before this step's products, so their latency
// hides behind the matrix work.
// Dispatch: (ceil(N / TILE_N), ceil(M / TILE_M), 1).
//
// needs: CM, cm_a, cm_b, cm_c, drain, fetch_a, fetch_b, p, put_a, put_b
// provides: A_SLOTS, B_SLOTS, NSG, PITCH, SG, a_sh, a_slot, b_sh, b_slot
//

override SG: u32 = 32u;
// The workgroup shape. Constants, not overrides, because they size
// workgroup arrays and the unrolled body of `main`: the host writes them
// into these lines and generates `main` between the markers for its shape
// (`dynvram_shaders::linear::coop_gemm`); the `main` below is the one for
// this file's own shape.
const SG_M: u32 = 2u;
const SG_N: u32 = 2u;
const WM: u32 = 2u;
const WN: u32 = 2u;
const BK: u32 = 32u;

const NSG: u32 = SG_M * SG_N;
const TILE_M: u32 = WM * CM * SG_M;
const TILE_N: u32 = WN * CM * SG_N;
// Row pitch of the staged tiles in f16: 16-byte aligned rows, skewed by 16
// bytes to spread rows over memory banks.
const PITCH: u32 = BK + 8u;
// Staging slots of a K step: 4 activation columns or 8 weight columns of
// one row each.
const A_SLOTS: u32 = TILE_M * BK / 4u;
const B_SLOTS: u32 = TILE_N * BK / 8u;

var<workgroup> a_sh: array<f16, TILE_M * PITCH>;
var<workgroup> b_sh: array<f16, TILE_N * PITCH>;

// Row and first column of activation slot `slot` in the staged tile.
fn a_slot(slot: u32) -> vec2<u32> {
    return vec2<u32>(slot / (BK / 4u), 4u * (slot % (BK / 4u)));
}

// Row and first column of weight slot `slot` in the staged tile.
fn b_slot(slot: u32) -> vec2<u32> {
    return vec2<u32>(slot / (BK / 8u), 8u * (slot % (BK / 8u)));
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
    var ra_2 = fetch_a(m0, 0u, lid + 2u * SG * NSG);
    var ra_3 = fetch_a(m0, 0u, lid + 3u * SG * NSG);
    var rb_0 = fetch_b(n0, 0u, lid + 0u * SG * NSG);
    var rb_1 = fetch_b(n0, 0u, lid + 1u * SG * NSG);
    for (var kt = 0u; kt < p.k; kt += BK) {
        put_a(lid + 0u * SG * NSG, ra_0);
        put_a(lid + 1u * SG * NSG, ra_1);
        put_a(lid + 2u * SG * NSG, ra_2);
        put_a(lid + 3u * SG * NSG, ra_3);
        put_b(lid + 0u * SG * NSG, rb_0);
        put_b(lid + 1u * SG * NSG, rb_1);
        workgroupBarrier();
        if kt + BK < p.k {
            ra_0 = fetch_a(m0, kt + BK, lid + 0u * SG * NSG);
            ra_1 = fetch_a(m0, kt + BK, lid + 1u * SG * NSG);
            ra_2 = fetch_a(m0, kt + BK, lid + 2u * SG * NSG);
            ra_3 = fetch_a(m0, kt + BK, lid + 3u * SG * NSG);
            rb_0 = fetch_b(n0, kt + BK, lid + 0u * SG * NSG);
            rb_1 = fetch_b(n0, kt + BK, lid + 1u * SG * NSG);
        }
        for (var kk = 0u; kk < BK; kk += CM) {
            let a_0 = coopLoadT<cm_a>(&a_sh[(sm + 0u * CM) * PITCH + kk], PITCH);
            let a_1 = coopLoadT<cm_a>(&a_sh[(sm + 1u * CM) * PITCH + kk], PITCH);
            // Weight rows are output columns: B[k][n] = b_sh[n * PITCH + k],
            // column-major.
            let b_0 = coopLoad<cm_b>(&b_sh[(sn + 0u * CM) * PITCH + kk], PITCH);
            let b_1 = coopLoad<cm_b>(&b_sh[(sn + 1u * CM) * PITCH + kk], PITCH);
            acc_0_0 = coopMultiplyAdd(a_0, b_0, acc_0_0);
            acc_0_1 = coopMultiplyAdd(a_0, b_1, acc_0_1);
            acc_1_0 = coopMultiplyAdd(a_1, b_0, acc_1_0);
            acc_1_1 = coopMultiplyAdd(a_1, b_1, acc_1_1);
        }
        workgroupBarrier();
    }
    drain(acc_0_0, sq, lane, ok, m0 + sm + 0u * CM, n0 + sn + 0u * CM);
    drain(acc_0_1, sq, lane, ok, m0 + sm + 0u * CM, n0 + sn + 1u * CM);
    drain(acc_1_0, sq, lane, ok, m0 + sm + 1u * CM, n0 + sn + 0u * CM);
    drain(acc_1_1, sq, lane, ok, m0 + sm + 1u * CM, n0 + sn + 1u * CM);
}
// END main
