// The integer staging of linear_gemm_coop.wgsl, after linear_int_common.wgsl.
// Codes and weights are small integers, exact in f16; their products are
// exact and so is an f32 sum while it stays within 2^24, which the host
// checks (max|a| · max|w| · K <= 2^24) before choosing this kernel: the
// result equals the dot4 GEMM's bit for bit. Activation codes come in
// natural column order (act quant PERM8 = false).

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

// The exact integer sum through the integer epilogue.
fn emit(m: u32, n: u32, v: f32) {
    store(m, n, i32(v));
}
