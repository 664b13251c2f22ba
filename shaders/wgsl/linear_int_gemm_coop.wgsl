// Integer linear through f16 cooperative matrices (tensor cores), after
// linear_int_common.wgsl and a shape fragment (linear_coop8.wgsl or
// linear_coop16.wgsl: CM and the cm_a/cm_b/cm_c types). Codes and weights
// are small integers, exact in f16; their products are exact and so is an
// f32 sum while it stays within 2^24, which the host checks
// (max|a| · max|w| · K <= 2^24) before choosing this kernel: the result
// equals the dot4 GEMM's bit for bit.
//
// Activation codes come in natural column order (act quant PERM8 = false).
// A workgroup is SG_M x SG_N subgroups of exactly SG invocations (the host
// picks this kernel only where the subgroup size is fixed) and computes a
// TILE_M x TILE_N output tile, each subgroup 2 x 2 accumulators of CM x CM.
// Each K step stages BK columns of the tile's activations and weights as f16.
// Dispatch: (ceil(N / TILE_N), ceil(M / TILE_M), 1).

override SG: u32 = 32u;
// Subgroups along M and N; each computes 2 x 2 matrices of CM x CM.
override SG_M: u32 = 2u;
override SG_N: u32 = 2u;
// K columns staged per step (a multiple of 32).
override BK: u32 = 32u;

override NSG: u32 = SG_M * SG_N;
override TILE_M: u32 = 2u * CM * SG_M;
override TILE_N: u32 = 2u * CM * SG_N;
// Row pitch of the staged tiles in f16: 16-byte aligned rows, skewed by 16
// bytes to spread rows over memory banks.
override PITCH: u32 = BK + 8u;

var<workgroup> a_sh: array<f16, TILE_M * PITCH>;
var<workgroup> b_sh: array<f16, TILE_N * PITCH>;
// One accumulator per subgroup on its way to the epilogue.
var<workgroup> c_sh: array<f32, NSG * CM * CM>;

fn i8_at(word: u32, i: u32) -> f16 {
    return f16(bitcast<i32>(word << (24u - 8u * i)) >> 24u);
}

fn i4_at(word: u32, i: u32) -> f16 {
    return f16(bitcast<i32>(word << (28u - 4u * i)) >> 28u);
}

// Stages the K slice [kt, kt + BK) of the tile's activation rows and weight
// rows as f16 (zeros past M, N and K).
fn stage(lid: u32, m0: u32, n0: u32, kt: u32) {
    let kw = p.k / 4u;
    for (var idx = lid; idx < TILE_M * BK / 4u; idx += SG * NSG) {
        let r = idx / (BK / 4u);
        let c = idx % (BK / 4u);
        var word = 0u;
        if m0 + r < p.m && kt / 4u + c < kw {
            word = xq[(m0 + r) * kw + kt / 4u + c];
        }
        for (var i = 0u; i < 4u; i++) {
            a_sh[r * PITCH + 4u * c + i] = i8_at(word, i);
        }
    }
    if W4 {
        let wpr = p.k / 8u;
        for (var idx = lid; idx < TILE_N * BK / 8u; idx += SG * NSG) {
            let r = idx / (BK / 8u);
            let c = idx % (BK / 8u);
            var word = 0u;
            if n0 + r < p.n && kt / 8u + c < wpr {
                word = w[(n0 + r) * wpr + kt / 8u + c];
            }
            for (var i = 0u; i < 8u; i++) {
                b_sh[r * PITCH + 8u * c + i] = i4_at(word, i);
            }
        }
    } else {
        for (var idx = lid; idx < TILE_N * BK / 4u; idx += SG * NSG) {
            let r = idx / (BK / 4u);
            let c = idx % (BK / 4u);
            var word = 0u;
            if n0 + r < p.n && kt / 4u + c < kw {
                word = w[(n0 + r) * kw + kt / 4u + c];
            }
            for (var i = 0u; i < 4u; i++) {
                b_sh[r * PITCH + 4u * c + i] = i8_at(word, i);
            }
        }
    }
}

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
                store(mm, nn, i32(c_sh[sq * CM * CM + e]));
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
    let sm = 2u * CM * (sq / SG_N);
    let sn = 2u * CM * (sq % SG_N);
    var acc00 = cm_c();
    var acc01 = cm_c();
    var acc10 = cm_c();
    var acc11 = cm_c();
    for (var kt = 0u; kt < p.k; kt += BK) {
        stage(lid, m0, n0, kt);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += CM) {
            let a0 = coopLoadT<cm_a>(&a_sh[sm * PITCH + kk], PITCH);
            let a1 = coopLoadT<cm_a>(&a_sh[(sm + CM) * PITCH + kk], PITCH);
            // Weight rows are output columns: B[k][n] = b_sh[n * PITCH + k],
            // column-major.
            let b0 = coopLoad<cm_b>(&b_sh[sn * PITCH + kk], PITCH);
            let b1 = coopLoad<cm_b>(&b_sh[(sn + CM) * PITCH + kk], PITCH);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
        }
        workgroupBarrier();
    }
    drain(acc00, sq, lane, ok, m0 + sm, n0 + sn);
    drain(acc01, sq, lane, ok, m0 + sm, n0 + sn + CM);
    drain(acc10, sq, lane, ok, m0 + sm + CM, n0 + sn);
    drain(acc11, sq, lane, ok, m0 + sm + CM, n0 + sn + CM);
}
