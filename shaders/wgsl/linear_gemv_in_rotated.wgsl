// The integer multi-row GEMV making its activation codes itself
// (linear_int_gemv_rows.wgsl), after linear_codes.wgsl: from the rotated
// rows (f32, binding 8) and their chunks' absmax bits (binding 9) that
// linear_rotate_max.wgsl left, every workgroup takes each row's scale in a
// prologue and codes each 16-value quad as it reads it — the same codes bit
// for bit as linear_act_codes.wgsl writes (the int4 weights' even/odd
// order where W4), with no single-workgroup quantization launch before the
// GEMV. Each quad is coded once per workgroup.
//
// needs: MR, W4, code_of_inv, code_scale, p
// provides: gv_code_scale, gv_codes, gv_codes_begin
//
//

// linear_rotate_max.wgsl's CHUNK: values per absmax.
override QCHUNK: u32 = 1024u;

@group(0) @binding(8) var<storage, read> yv: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read> pmax: array<u32>;

// (scale, lowest code, highest code, 1 / scale) of each activation row.
var<workgroup> gv_sc: array<vec4<f32>, 8>;

// Every invocation calls it first, in uniform control flow.
fn gv_codes_begin(lid: u32) {
    if lid < MR {
        let chunks = (p.k + QCHUNK - 1u) / QCHUNK;
        var a = 0u;
        for (var c = 0u; c < chunks; c++) {
            a = max(a, pmax[lid * chunks + c]);
        }
        let sc = code_scale(bitcast<f32>(a));
        gv_sc[lid] = vec4<f32>(sc, 1.0 / sc.x);
    }
    workgroupBarrier();
}

fn codes4(v: vec4<f32>, sc: vec4<f32>) -> vec4<i32> {
    return vec4<i32>(
        code_of_inv(v.x, sc.x, sc.w, sc.y, sc.z),
        code_of_inv(v.y, sc.x, sc.w, sc.y, sc.z),
        code_of_inv(v.z, sc.x, sc.w, sc.y, sc.z),
        code_of_inv(v.w, sc.x, sc.w, sc.y, sc.z),
    );
}

// Code quad j (columns 16j..16j+15) of activation row m.
fn gv_codes(m: u32, j: u32) -> vec4<u32> {
    let sc = gv_sc[m];
    let at = m * (p.k / 4u) + 4u * j;
    let c0 = codes4(yv[at], sc);
    let c1 = codes4(yv[at + 1u], sc);
    let c2 = codes4(yv[at + 2u], sc);
    let c3 = codes4(yv[at + 3u], sc);
    if W4 {
        // Per block of 8 columns: the even columns' word, then the odd ones'.
        return vec4<u32>(
            pack4xI8(vec4<i32>(c0.x, c0.z, c1.x, c1.z)),
            pack4xI8(vec4<i32>(c0.y, c0.w, c1.y, c1.w)),
            pack4xI8(vec4<i32>(c2.x, c2.z, c3.x, c3.z)),
            pack4xI8(vec4<i32>(c2.y, c2.w, c3.y, c3.w)),
        );
    }
    return vec4<u32>(pack4xI8(c0), pack4xI8(c1), pack4xI8(c2), pack4xI8(c3));
}

fn gv_code_scale(m: u32) -> f32 {
    return gv_sc[m].x;
}
