// Linear through f16 cooperative matrices (tensor cores) with f32 sums,
// after a common fragment (linear_int_common.wgsl or
// linear_float_common.wgsl), its staging fragment (linear_coop_int.wgsl or
// linear_coop_float.wgsl: `stage` and `emit`) and a shape fragment
// (linear_coop8.wgsl or linear_coop16.wgsl: CM and the cm_a/cm_b/cm_c types).
//
// A workgroup is SG_M x SG_N subgroups of exactly SG invocations (the host
// picks this kernel only where the subgroup size is fixed) and computes a
// TILE_M x TILE_N output tile, each subgroup WM x WN accumulators of CM x CM
// (more per subgroup: fewer workgroup-memory loads per product — each A
// tile loaded serves WN products, each B tile WM).
// Each K step stages BK columns of the tile's activations and weights as f16.
// Dispatch: (ceil(N / TILE_N), ceil(M / TILE_M), 1).

override SG: u32 = 32u;
// The workgroup shape: subgroups along M and N, the accumulators of each
// along M and N, and K columns staged per step (a multiple of 8 and of
// CM). Constants, not overrides, because they size workgroup arrays: the
// host writes its shape into these five lines
// (`dynvram_shaders::linear::with_coop_shape`).
const SG_M: u32 = 2u;
const SG_N: u32 = 2u;
const BK: u32 = 32u;
const WM: u32 = 2u;
const WN: u32 = 2u;

const NSG: u32 = SG_M * SG_N;
const TILE_M: u32 = WM * CM * SG_M;
const TILE_N: u32 = WN * CM * SG_N;
// Row pitch of the staged tiles in f16: 16-byte aligned rows, skewed by 16
// bytes to spread rows over memory banks.
const PITCH: u32 = BK + 8u;

var<workgroup> a_sh: array<f16, TILE_M * PITCH>;
var<workgroup> b_sh: array<f16, TILE_N * PITCH>;
// One accumulator per subgroup on its way to the epilogue.
var<workgroup> c_sh: array<f32, NSG * CM * CM>;

// Writes one accumulator whose first element is output (m, n), or NaN
// where `ok` is false. Called by the whole workgroup (it holds barriers).
fn drain(acc: cm_c, sq: u32, lane: u32, ok: bool, m: u32, n: u32) {
    coopStoreT(acc, &c_sh[sq * CM * CM], CM);
    workgroupBarrier();
    for (var e = lane; e < CM * CM; e += SG) {
        let mm = m + e / CM;
        let nn = n + e % CM;
        if mm < p.m && nn < p.n {
            if ok {
                emit(mm, nn, c_sh[sq * CM * CM + e]);
            } else {
                out[mm * p.out_stride + p.n_base + nn] = act(bitcast<f32>(0x7FC00000u));
            }
        }
    }
    workgroupBarrier();
}

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
    // Constant trip counts throughout: the compiler unrolls the loops over
    // accumulators and keeps them in registers.
    var acc: array<cm_c, WM * WN>;
    for (var i = 0u; i < WM * WN; i++) {
        acc[i] = cm_c();
    }
    for (var kt = 0u; kt < p.k; kt += BK) {
        stage(lid, m0, n0, kt);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += CM) {
            var a: array<cm_a, WM>;
            for (var i = 0u; i < WM; i++) {
                a[i] = coopLoadT<cm_a>(&a_sh[(sm + i * CM) * PITCH + kk], PITCH);
            }
            for (var j = 0u; j < WN; j++) {
                // Weight rows are output columns: B[k][n] = b_sh[n * PITCH + k],
                // column-major.
                let b = coopLoad<cm_b>(&b_sh[(sn + j * CM) * PITCH + kk], PITCH);
                for (var i = 0u; i < WM; i++) {
                    acc[i * WN + j] = coopMultiplyAdd(a[i], b, acc[i * WN + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < WM; i++) {
        for (var j = 0u; j < WN; j++) {
            drain(acc[i * WN + j], sq, lane, ok, m0 + sm + i * CM, n0 + sn + j * CM);
        }
    }
}
