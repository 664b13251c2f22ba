// The weights of a fused multi-row GEMV launch (linear_*_gemv_rows.wgsl): up
// to three weights of one input (q/k/v, or gate/up), each with its own
// scale, bias and output. Weight 0 is the body's `wv`, `w_scale`, `bias`,
// `out` (p.n rows, output stride p.out_stride, p.n_base = 0); weights 1 and 2
// are bound at 10..17 (p.n1, p.n2 rows, outputs of row stride p.n1, p.n2).
// Unused weights are bound to weight 0's buffers. Same functions as
// linear_gemv_one.wgsl.
//
// needs: bias, out, p, w_scale, wv
// provides: SEGS, seg_bias, seg_col, seg_get, seg_out, seg_rows, seg_scale
// provides: seg_w

const SEGS: u32 = 3u;

@group(0) @binding(10) var<storage, read> wv1: array<vec4<u32>>;
@group(0) @binding(11) var<storage, read> wv2: array<vec4<u32>>;
@group(0) @binding(12) var<storage, read> w_scale1: array<f32>;
@group(0) @binding(13) var<storage, read> w_scale2: array<f32>;
@group(0) @binding(14) var<storage, read> bias1: array<f32>;
@group(0) @binding(15) var<storage, read> bias2: array<f32>;
@group(0) @binding(16) var<storage, read_write> out1: array<act>;
@group(0) @binding(17) var<storage, read_write> out2: array<act>;

fn seg_rows(s: u32) -> u32 {
    switch s {
        case 0u: {
            return p.n;
        }
        case 1u: {
            return p.n1;
        }
        default: {
            return p.n2;
        }
    }
}

fn seg_w(s: u32, i: u32) -> vec4<u32> {
    switch s {
        case 0u: {
            return wv[i];
        }
        case 1u: {
            return wv1[i];
        }
        default: {
            return wv2[i];
        }
    }
}

fn seg_col(s: u32, n: u32) -> u32 {
    return n;
}

fn seg_scale(s: u32, i: u32) -> f32 {
    switch s {
        case 0u: {
            return w_scale[i];
        }
        case 1u: {
            return w_scale1[i];
        }
        default: {
            return w_scale2[i];
        }
    }
}

fn seg_bias(s: u32, col: u32) -> f32 {
    switch s {
        case 0u: {
            return bias[col];
        }
        case 1u: {
            return bias1[col];
        }
        default: {
            return bias2[col];
        }
    }
}

fn seg_out(s: u32, m: u32, col: u32, v: act) {
    switch s {
        case 0u: {
            out[m * p.out_stride + col] = v;
        }
        case 1u: {
            out1[m * p.n1 + col] = v;
        }
        default: {
            out2[m * p.n2 + col] = v;
        }
    }
}

fn seg_get(s: u32, m: u32, col: u32) -> act {
    switch s {
        case 0u: {
            return out[m * p.out_stride + col];
        }
        case 1u: {
            return out1[m * p.n1 + col];
        }
        default: {
            return out2[m * p.n2 + col];
        }
    }
}
