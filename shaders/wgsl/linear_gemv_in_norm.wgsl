// The float multi-row GEMV's activations RMS-normalised on the way in
// (linear_float_gemv_rows.wgsl): `x` is the residual stream and every
// workgroup computes each row's 1/sqrt(mean(x²) + eps) itself before its
// weight stream, so the norm's own launch (and the barrier before the
// GEMV) goes away. Vec4 i of row m is then
//   act(norm_w · (x · r_m))
// rounded to `act` as norm.wgsl's rms_norm stores it (the sum of squares in
// this workgroup's order: within an ulp or so of the norm kernel's, not
// bit-equal). eps is the Params' last word (f32 bits).
//
// needs: GV_FADD, MR, WGS, gv_out, gv_tree, p, x
// provides: gv_in, gv_in_begin

@group(0) @binding(7) var<storage, read> norm_w: array<vec4<f32>>;

// 1/sqrt(mean(x²) + eps) of each activation row.
var<workgroup> gv_rs: array<f32, 32>;

fn gv_in_begin(lid: u32) {
    let kq = p.k / 4u;
    var ss: array<u32, 64>;
    for (var m = 0u; m < MR; m++) {
        var s = 0.0;
        for (var i = lid; i < kq; i += WGS) {
            let v = vec4<f32>(x[m * kq + i]);
            s += dot(v, v);
        }
        ss[m] = bitcast<u32>(s);
    }
    gv_tree(&ss, MR, lid, GV_FADD);
    if lid < MR {
        gv_rs[lid] = 1.0 / sqrt(bitcast<f32>(gv_out[lid]) / f32(p.k) + bitcast<f32>(p.eps_bits));
    }
    workgroupBarrier();
}

fn gv_in(m: u32, i: u32) -> vec4<f32> {
    let v = vec4<f32>(x[m * (p.k / 4u) + i]);
    return vec4<f32>(vec4<act>(norm_w[i] * (v * gv_rs[m])));
}
