// Integer GEMV for small M, after a GEMV sum fragment (linear_gemv_sum_*.wgsl,
// with linear_gemv_tree.wgsl for the portable one) and linear_int_common.wgsl.
//
// A WGS-wide workgroup computes ROWS consecutive output rows for all MR
// activation rows. Invocation t takes the 16-byte weight quads t, t + WGS, …
// of every one of its ROWS rows (consecutive invocations read consecutive
// 16 bytes: each row streams coalesced, ROWS loads in flight per invocation),
// loads the activation codes of that quad once per activation row and reuses
// them for all ROWS weight rows. The ROWS · MR exact i32 partials are summed
// across the workgroup once at the end. A weights fragment
// (linear_gemv_one.wgsl, or linear_gemv_three.wgsl to fuse q/k/v or gate/up
// into one launch) and linear_gemv_rows_common.wgsl say which rows of which
// weight a workgroup takes.
//
// The activation codes come through an input fragment
// (linear_gemv_in_codes.wgsl as a quantization kernel left them,
// linear_gemv_in_rotated.wgsl made here from rotated rows); RESID adds the
// result to `out` (the residual stream) instead of writing it.
//
// The weight is bound again as vec4<u32> (binding 7; the common fragment's
// u32 views, bindings 0 and 3, stay unused): every weight
// row must start on 16 bytes, i.e. K % 32 == 0 for int4 and K % 16 == 0 for
// int8 (the host uses linear_int_gemv.wgsl otherwise).
// Rows run over (wid.x + 65535 * wid.y) * ROWS; ROWS <= 16 and ROWS * MR <= 64
// (twice ROWS with GLU; fixed-size arrays the compiler keeps in registers once the loops over
// the override constants unroll).
//
// needs: EPI, GLU, HAS_BIAS, W4, gemv_sum_i32, gv_code_scale, gv_codes
// needs: gv_codes_begin, gv_result, int_value_sx, p, scale_at, seg_at
// needs: seg_bias, seg_col, seg_get, seg_out, seg_parts, seg_rows, seg_scale
// needs: seg_w, silu_mul, unscale_acc, w4_even, w4_odd
// provides: MR, ROWS, WGS, wv
//

// Output rows per workgroup.
override ROWS: u32 = 8u;
// Activation rows (the layer's M, 1..=8): a constant so the loops unroll and
// the accumulators stay in registers.
override MR: u32 = 1u;
// Invocations per workgroup (a power of two, 64..=1024).
override WGS: u32 = 256u;

// out += the result (a residual add in the epilogue) instead of out = it.
override RESID: bool = false;

@group(0) @binding(7) var<storage, read> wv: array<vec4<u32>>;

fn dot_w4(a: vec4<u32>, b: vec4<u32>, raw: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, w4_even(raw.x)) + dot4I8Packed(a.y, w4_odd(raw.x))
        + dot4I8Packed(a.z, w4_even(raw.y)) + dot4I8Packed(a.w, w4_odd(raw.y))
        + dot4I8Packed(b.x, w4_even(raw.z)) + dot4I8Packed(b.y, w4_odd(raw.z))
        + dot4I8Packed(b.z, w4_even(raw.w)) + dot4I8Packed(b.w, w4_odd(raw.w));
}

fn dot_w8(a: vec4<u32>, raw: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, raw.x) + dot4I8Packed(a.y, raw.y)
        + dot4I8Packed(a.z, raw.z) + dot4I8Packed(a.w, raw.w);
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let at = seg_at(wid.x + wid.y * 65535u);
    let seg = at.x;
    let n0 = at.y;
    let rows = seg_rows(seg);
    let parts = seg_parts();
    gv_codes_begin(lid);
    // 16-byte quads per weight row.
    var wq_row = p.k / 16u;
    if W4 {
        wq_row = p.k / 32u;
    }
    var acc: array<i32, 64>;
    for (var i = 0u; i < parts * ROWS * MR; i++) {
        acc[i] = 0;
    }
    for (var q = lid; q < wq_row; q += WGS) {
        // Issue every row's load first: parts · ROWS independent 16-byte
        // loads (weight h's row r is raw[h * ROWS + r]).
        var raw: array<vec4<u32>, 16>;
        for (var h = 0u; h < parts; h++) {
            for (var r = 0u; r < ROWS; r++) {
                let row = min(n0 + r, rows - 1u);
                raw[h * ROWS + r] = seg_w(seg + h, row * wq_row + q);
            }
        }
        for (var m = 0u; m < MR; m++) {
            if W4 {
                // Weight quad q holds columns 32q..32q+31: code quads 2q, 2q+1.
                let a = gv_codes(m, 2u * q);
                let b = gv_codes(m, 2u * q + 1u);
                for (var r = 0u; r < parts * ROWS; r++) {
                    acc[r * MR + m] += dot_w4(a, b, raw[r]);
                }
            } else {
                let a = gv_codes(m, q);
                for (var r = 0u; r < parts * ROWS; r++) {
                    acc[r * MR + m] += dot_w8(a, raw[r]);
                }
            }
        }
    }
    for (var i = 0u; i < parts * ROWS * MR; i++) {
        acc[i] = unscale_acc(acc[i]);
    }
    gemv_sum_i32(&acc, parts * ROWS * MR, lid);
    if lid < ROWS * MR {
        let r = lid / MR;
        let m = lid % MR;
        if n0 + r < rows {
            let col = seg_col(seg, n0 + r);
            let v = act(seg_value(seg, m, col, gv_result(lid)));
            if GLU {
                let up = act(seg_value(1u, m, col, gv_result(ROWS * MR + lid)));
                seg_out(0u, m, col, silu_mul(v, up));
            } else if RESID {
                // The residual add as elementwise.wgsl makes it after the
                // linear's rounded output; the product by a runtime 1 keeps
                // a compiler from fusing the epilogue's last product into
                // the add (one rounding fewer than the separate add).
                let one = bitcast<f32>(p.one_bits);
                seg_out(seg, m, col, act(f32(seg_get(seg, m, col)) + f32(v) * one));
            } else {
                seg_out(seg, m, col, v);
            }
        }
    }
}

// The epilogue of weight `seg`'s output column `col`.
fn seg_value(seg: u32, m: u32, col: u32, acc: i32) -> f32 {
    var b = 0.0;
    if HAS_BIAS && EPI != 2u {
        b = seg_bias(seg, col);
    }
    return int_value_sx(gv_code_scale(m), acc, seg_scale(seg, scale_at(col)), b);
}
