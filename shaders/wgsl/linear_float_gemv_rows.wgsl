// Float-weight GEMV for small M, after linear_gemv_tree.wgsl and
// linear_float_common.wgsl. Same shape as linear_int_gemv_rows.wgsl: a
// WGS-wide workgroup computes ROWS consecutive output rows for all MR
// activation rows; invocation t streams the 16-byte weight quads t, t + WGS,
// … of each of its rows (4 f32, 8 f16/bf16 or 16 fp8 columns per quad),
// issues all ROWS loads before decoding, and reads each activation vec4 once
// per activation row for all ROWS rows. f32 partial sums are added across the
// workgroup in a fixed tree order at the end. A weights fragment
// (linear_gemv_one.wgsl, or linear_gemv_three.wgsl to fuse q/k/v or gate/up
// into one launch) and linear_gemv_rows_common.wgsl say which rows of which
// weight a workgroup takes.
//
// The weight is bound again as vec4<u32> (binding 6; the common fragment's
// u32 view, binding 0, stays unused): rows must start on 16 bytes, i.e.
// K % 4 (f32), K % 8 (f16, bf16) or K % 16 (fp8) == 0 (the host uses
// linear_float_gemv.wgsl otherwise). Rows run over
// (wid.x + 65535 * wid.y) * ROWS; ROWS <= 16, ROWS * MR <= 64
// (twice ROWS with GLU).
//
// Activations come through an input fragment (linear_gemv_in_plain.wgsl as
// stored, linear_gemv_in_norm.wgsl RMS-normalised); RESID adds the result
// to `out` (the residual stream) instead of writing it.
//
// needs: GLU, GV_FADD, HAS_BIAS, WFMT, bf16_pair, f16_pair, fp8_quad, gv_in
// needs: gv_in_begin, gv_out, gv_tree, p, seg_at, seg_bias, seg_col, seg_get
// needs: seg_out, seg_parts, seg_rows, seg_w, silu_mul, w_scale
// provides: MR, ROWS, WGS, wv

override ROWS: u32 = 8u;
override MR: u32 = 1u;
override WGS: u32 = 256u;
// out += the result (a residual add in the epilogue) instead of out = it.
override RESID: bool = false;

@group(0) @binding(6) var<storage, read> wv: array<vec4<u32>>;

// Activation vec4s per 16-byte weight quad.
fn quad_vecs() -> u32 {
    switch WFMT {
        case 0u: {
            return 1u;
        }
        case 1u, 2u: {
            return 2u;
        }
        default: {
            return 4u;
        }
    }
}

// Column group j (4 columns) of a 16-byte weight quad, as f32.
fn decode(raw: vec4<u32>, j: u32) -> vec4<f32> {
    switch WFMT {
        case 0u: {
            return bitcast<vec4<f32>>(raw);
        }
        case 1u: {
            return vec4<f32>(f16_pair(raw[2u * j]), f16_pair(raw[2u * j + 1u]));
        }
        case 2u: {
            return vec4<f32>(bf16_pair(raw[2u * j]), bf16_pair(raw[2u * j + 1u]));
        }
        default: {
            return fp8_quad(raw[j]) * w_scale[0];
        }
    }
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let at = seg_at(wid.x + wid.y * 65535u);
    let seg = at.x;
    let n0 = at.y;
    let rows = seg_rows(seg);
    let parts = seg_parts();
    let nv = quad_vecs();
    // vec4s per activation row; 16-byte quads per weight row.
    let kq = p.k / 4u;
    let wq_row = kq / nv;
    var acc: array<f32, 64>;
    for (var i = 0u; i < parts * ROWS * MR; i++) {
        acc[i] = 0.0;
    }
    gv_in_begin(lid);
    for (var q = lid; q < wq_row; q += WGS) {
        // Weight h's row r is raw[h * ROWS + r].
        var raw: array<vec4<u32>, 16>;
        for (var h = 0u; h < parts; h++) {
            for (var r = 0u; r < ROWS; r++) {
                let row = min(n0 + r, rows - 1u);
                raw[h * ROWS + r] = seg_w(seg + h, row * wq_row + q);
            }
        }
        for (var m = 0u; m < MR; m++) {
            for (var j = 0u; j < nv; j++) {
                let a = gv_in(m, nv * q + j);
                for (var r = 0u; r < parts * ROWS; r++) {
                    acc[r * MR + m] += dot(a, decode(raw[r], j));
                }
            }
        }
    }
    var bits: array<u32, 64>;
    for (var i = 0u; i < parts * ROWS * MR; i++) {
        bits[i] = bitcast<u32>(acc[i]);
    }
    gv_tree(&bits, parts * ROWS * MR, lid, GV_FADD);
    if lid < ROWS * MR {
        let r = lid / MR;
        let m = lid % MR;
        if n0 + r < rows {
            let col = seg_col(seg, n0 + r);
            let v = act(with_bias(seg, col, bitcast<f32>(gv_out[lid])));
            if GLU {
                let up = act(with_bias(1u, col, bitcast<f32>(gv_out[ROWS * MR + lid])));
                seg_out(0u, m, col, silu_mul(v, up));
            } else if RESID {
                // The residual add as elementwise.wgsl makes it after the
                // linear's rounded output.
                seg_out(seg, m, col, act(f32(seg_get(seg, m, col)) + f32(v)));
            } else {
                seg_out(seg, m, col, v);
            }
        }
    }
}

fn with_bias(seg: u32, col: u32, v: f32) -> f32 {
    if HAS_BIAS {
        return v + seg_bias(seg, col);
    }
    return v;
}
