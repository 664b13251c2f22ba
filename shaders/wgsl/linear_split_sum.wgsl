// The split-K SPIR-V GEMM's last step (gemm_cm2.glsl built with SPLIT):
// `splits` tiles of f32 partial sums, [m, n] each one after another in
// `part`, added in split order, the bias added in f32 (flags bit 0), GELU
// (tanh) on that (flags bit 3, as the unsplit kernel's epilogue), and
// rounded once to the output's `act` at (row0 + row, n_base + col) of the
// layer's [*, out_stride] output — the one rounding the unsplit kernel
// makes. `m` rows: those of the tiles that split (the last ones where the
// GEMM took the first tiles whole). A
// grid-stride loop over 256-invocation workgroups; where n is a multiple
// of 4 (QUADS) each step reads four columns with 16-byte loads (scalar
// loads ran at 1.3 TB/s on the H100).

//
// needs: gelu_tanh

override QUADS: bool = false;

struct Params {
    m: u32,
    // Weight rows of the chunk (the partial tiles' width).
    n: u32,
    n_base: u32,
    out_stride: u32,
    splits: u32,
    flags: u32,
    // The output row of the partial sums' first.
    row0: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> part: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> bias: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<act>;
var<immediate> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let total = p.m * p.n;
    let stride = groups.x * 256u;
    let has_bias = (p.flags & 1u) != 0u;
    let gelu = (p.flags & 8u) != 0u;
    if QUADS {
        let quads = total / 4u;
        for (var q = gid.x; q < quads; q += stride) {
            var s = part[q];
            for (var z = 1u; z < p.splits; z++) {
                s += part[z * quads + q];
            }
            // n % 4 == 0: the four columns share a row.
            let row = (4u * q) / p.n;
            let col = (4u * q) % p.n;
            if has_bias {
                let b = p.n_base + col;
                s += vec4<f32>(bias[b], bias[b + 1u], bias[b + 2u], bias[b + 3u]);
            }
            if gelu {
                s = vec4<f32>(gelu_tanh(s.x), gelu_tanh(s.y), gelu_tanh(s.z), gelu_tanh(s.w));
            }
            let o = (p.row0 + row) * p.out_stride + p.n_base + col;
            y[o] = act(s.x);
            y[o + 1u] = act(s.y);
            y[o + 2u] = act(s.z);
            y[o + 3u] = act(s.w);
        }
        return;
    }
    for (var i = gid.x; i < total; i += stride) {
        var s = part[i / 4u][i % 4u];
        for (var z = 1u; z < p.splits; z++) {
            let e = z * total + i;
            s += part[e / 4u][e % 4u];
        }
        let row = i / p.n;
        let col = i % p.n;
        if has_bias {
            s += bias[p.n_base + col];
        }
        if gelu {
            s = gelu_tanh(s);
        }
        y[(p.row0 + row) * p.out_stride + p.n_base + col] = act(s);
    }
}
