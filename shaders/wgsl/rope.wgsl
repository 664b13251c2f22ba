// Rotary position embedding, Hugging Face `rotate_half` form (NeoX,
// non-interleaved): dimension i of a head is paired with i + head_dim/2.
// Applied in place to x [rows, n_heads * head_dim] of `act` (f32 or f16,
// rotated in f32); row s has position
// pos0 + s. cos/sin come from a host-computed table [positions, head_dim/2]
// of (cos, sin) pairs, computed in f32 exactly as torch does, so the GPU's
// sin/cos accuracy (loose for large angles) never enters.
//
//   x1' = x1 * cos - x2 * sin
//   x2' = x2 * cos + x1 * sin

struct Params {
    rows: u32,
    n_heads: u32,
    half_dim: u32,
    pos0: u32,
}

const WG: u32 = 256u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> table: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> x: array<act>;

@compute @workgroup_size(256)
fn rope_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    let half_dim = params.half_dim;
    if idx >= params.rows * params.n_heads * half_dim {
        return;
    }
    let i = idx % half_dim;
    let t = idx / half_dim;
    let h = t % params.n_heads;
    let s = t / params.n_heads;
    let base = (s * params.n_heads + h) * 2u * half_dim;
    let cs = table[(params.pos0 + s) * half_dim + i];
    let x1 = f32(x[base + i]);
    let x2 = f32(x[base + i + half_dim]);
    x[base + i] = act(x1 * cs.x - x2 * cs.y);
    x[base + i + half_dim] = act(x2 * cs.x + x1 * cs.y);
}
