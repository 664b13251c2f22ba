// The split-K SPIR-V GEMM's last step (gemm_cm2.glsl built with SPLIT):
// `splits` tiles of f32 partial sums, [m, n] each one after another in
// `part`, added in split order, the bias added in f32 (flags bit 0), and
// rounded once to the output's `act` at (row, n_base + col) of the layer's
// [m, out_stride] output — the one rounding the unsplit kernel makes. A
// grid-stride loop over 256-invocation workgroups.

struct Params {
    m: u32,
    // Weight rows of the chunk (the partial tiles' width).
    n: u32,
    n_base: u32,
    out_stride: u32,
    splits: u32,
    flags: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read> bias: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<act>;
var<immediate> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let total = p.m * p.n;
    let stride = groups.x * 256u;
    for (var i = gid.x; i < total; i += stride) {
        var s = part[i];
        for (var z = 1u; z < p.splits; z++) {
            s += part[z * total + i];
        }
        let row = i / p.n;
        let col = i % p.n;
        if ((p.flags & 1u) != 0u) {
            s += bias[p.n_base + col];
        }
        y[row * p.out_stride + p.n_base + col] = act(s);
    }
}
