// Rotation of small-M rows spread over many workgroups, with each chunk's
// absmax: the input of the integer GEMVs that make their activation codes
// themselves (linear_gemv_in_rotated.wgsl) or of linear_rotated_codes.wgsl,
// after linear_fht.wgsl and linear_rotate_chunk.wgsl. The fused kernels
// (linear_rotate_quant*.wgsl) give a row one workgroup, so a decode step
// paid ~15 µs of one busy SM per quantized linear; here workgroup (c, row)
// rotates values [c · CHUNK, (c + 1) · CHUNK) of the row (rotate_chunk)
// and writes its absmax's bits to pmax[row · chunks + c].
// Dispatch (chunks, rows).
//
// needs: CHUNK, rotate_chunk
// provides: norm_w, x, y

struct Params {
    rows: u32,
    k: u32,
    // Workgroups per row: ceil(k / CHUNK).
    chunks: u32,
    // The RMS norm's epsilon as f32 bits.
    eps_bits: u32,
    // The linear kernels' 32-byte immediates are shared by every module.
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<storage, read> x: array<act>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> pmax: array<u32>;
@group(0) @binding(3) var<storage, read> norm_w: array<f32>;
var<immediate> p: Params;

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    let c0 = wid.x * CHUNK;
    if row >= p.rows || c0 >= p.k {
        return;
    }
    let m = rotate_chunk(lid, row * p.k, c0, p.k, p.eps_bits);
    if lid == 0u {
        pmax[row * p.chunks + wid.x] = m;
    }
}
