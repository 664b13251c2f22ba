// Activation codes of small-M rows that linear_rotate_max.wgsl rotated over
// many workgroups, made once over many workgroups: after linear_codes.wgsl
// and linear_act_codes.wgsl. Workgroup (c, row) takes the row's chunk
// maxima (the absmax bits of each of linear_rotate_max.wgsl's chunks: max
// over u32 is the fused kernels' atomicMax, NaN included), the row's scale
// from their max (code_scale, as every quantization kernel), and writes
// code words [c · WGS, (c + 1) · WGS) of the row, one word per invocation,
// in the layout the quantization kernels write (PERM8: the int4 weights'
// even/odd pairing) for the integer GEMVs that read codes
// (linear_gemv_in_codes.wgsl); its first invocation of the first
// workgroup writes the row's scale. The same codes and scales bit for bit
// as linear_rotate_quant.wgsl's: the same rotated values, the same absmax,
// the same code_of. Dispatch (ceil(kw / WGS), rows).
//
// needs: code_scale, qp, scales, write_word
// provides: act_value
//

// Invocations per workgroup.
override WGS: u32 = 64u;
// linear_rotate_max.wgsl's CHUNK: values per absmax.
override QCHUNK: u32 = 1024u;

// The rotated rows (f32) and their chunks' absmax bits.
@group(0) @binding(0) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> pmax: array<u32>;

fn act_value(row_base: u32, col: u32) -> f32 {
    return y[row_base + col];
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    let w = wid.x * WGS + lid;
    if row >= qp.rows {
        return;
    }
    let chunks = (qp.k + QCHUNK - 1u) / QCHUNK;
    var a = 0u;
    for (var c = 0u; c < chunks; c++) {
        a = max(a, pmax[row * chunks + c]);
    }
    let sc = code_scale(bitcast<f32>(a));
    if w == 0u {
        scales[row] = sc.x;
    }
    if w < qp.kw {
        write_word(row, w, sc);
    }
}
