// The weights of a multi-row GEMV launch (linear_*_gemv_rows.wgsl): one
// weight, bound as the body's `wv`, `w_scale`, `bias` and `out` (a chunk of
// a layer's rows: output column n_base + n, row stride out_stride).
// linear_gemv_three.wgsl is the fused variant with the same functions.
//
// needs: bias, out, p, w_scale, wv
// provides: SEGS, seg_bias, seg_col, seg_get, seg_out, seg_rows, seg_scale
// provides: seg_w

const SEGS: u32 = 1u;

fn seg_rows(s: u32) -> u32 {
    return p.n;
}

fn seg_w(s: u32, i: u32) -> vec4<u32> {
    return wv[i];
}

// Output (and scale, bias) column of row n.
fn seg_col(s: u32, n: u32) -> u32 {
    return p.n_base + n;
}

fn seg_scale(s: u32, i: u32) -> f32 {
    return w_scale[i];
}

fn seg_bias(s: u32, col: u32) -> f32 {
    return bias[col];
}

fn seg_out(s: u32, m: u32, col: u32, v: act) {
    out[m * p.out_stride + col] = v;
}

fn seg_get(s: u32, m: u32, col: u32) -> act {
    return out[m * p.out_stride + col];
}
