// The float staging of linear_gemm_coop.wgsl, after linear_float_common.wgsl:
// activations (f16: the host picks this only for f16 activations, so they
// stage exactly) and decoded weights as f16. f16 and fp8 weights are exact
// in f16 (fp8 without its scale, which multiplies the sum); bf16 ones are
// too within f16's normal range (beyond it they round, or overflow to inf:
// loud, never silent). Products are exact in f32, sums are f32.

// Stages the K slice [kt, kt + BK) of the tile's activation rows and weight
// rows as f16 (zeros past M, N and K).
fn stage(lid: u32, m0: u32, n0: u32, kt: u32) {
    let kq = p.k / 4u;
    for (var idx = lid; idx < TILE_M * BK / 4u; idx += SG * NSG) {
        let r = idx / (BK / 4u);
        let c = idx % (BK / 4u);
        var v = vec4<f16>();
        if m0 + r < p.m && kt / 4u + c < kq {
            v = vec4<f16>(x[(m0 + r) * kq + kt / 4u + c]);
        }
        for (var i = 0u; i < 4u; i++) {
            a_sh[r * PITCH + 4u * c + i] = v[i];
        }
    }
    for (var idx = lid; idx < TILE_N * BK / 4u; idx += SG * NSG) {
        let r = idx / (BK / 4u);
        let c = idx % (BK / 4u);
        var v = vec4<f16>();
        if n0 + r < p.n && kt / 4u + c < kq {
            v = vec4<f16>(weight_quad_unscaled(n0 + r, kt / 4u + c));
        }
        for (var i = 0u; i < 4u; i++) {
            b_sh[r * PITCH + 4u * c + i] = v[i];
        }
    }
}

fn emit(m: u32, n: u32, v: f32) {
    store(m, n, v * weight_scale());
}
