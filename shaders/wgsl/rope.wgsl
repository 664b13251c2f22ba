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
    // k's heads, and the row of k that is row 0 (rope_qk: k may be a whole
    // cache, its rows k_row0.. rotated).
    n_kv: u32,
    k_row0: u32,
    _pad1: u32,
    _pad2: u32,
}

const WG: u32 = 256u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> table: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> x: array<act>;
// rope_qk: k, rotated after x's (q's) pairs.
@group(0) @binding(3) var<storage, read_write> k: array<act>;

// Pair `idx` of a [rows, heads * 2 * half_dim] tensor: the offset of its
// first element (the second is half_dim on) and its (cos, sin).
struct Pair {
    at: u32,
    cs: vec2<f32>,
}

fn pair(idx: u32, heads: u32) -> Pair {
    let half_dim = params.half_dim;
    let i = idx % half_dim;
    let t = idx / half_dim;
    let h = t % heads;
    let s = t / heads;
    let base = (s * heads + h) * 2u * half_dim;
    return Pair(base + i, table[(params.pos0 + s) * half_dim + i]);
}

fn element(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

@compute @workgroup_size(256)
fn rope_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let idx = element(wid, nwg, lid);
    if idx >= params.rows * params.n_heads * params.half_dim {
        return;
    }
    let p = pair(idx, params.n_heads);
    let x1 = f32(x[p.at]);
    let x2 = f32(x[p.at + params.half_dim]);
    x[p.at] = act(x1 * p.cs.x - x2 * p.cs.y);
    x[p.at + params.half_dim] = act(x2 * p.cs.x + x1 * p.cs.y);
}

// q (x, n_heads) and k (n_kv heads) of the same rows in one launch.
@compute @workgroup_size(256)
fn rope_qk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let idx = element(wid, nwg, lid);
    let nq = params.rows * params.n_heads * params.half_dim;
    if idx < nq {
        let p = pair(idx, params.n_heads);
        let x1 = f32(x[p.at]);
        let x2 = f32(x[p.at + params.half_dim]);
        x[p.at] = act(x1 * p.cs.x - x2 * p.cs.y);
        x[p.at + params.half_dim] = act(x2 * p.cs.x + x1 * p.cs.y);
    } else if idx < nq + params.rows * params.n_kv * params.half_dim {
        let p = pair(idx - nq, params.n_kv);
        let at = p.at + params.k_row0 * params.n_kv * 2u * params.half_dim;
        let x1 = f32(k[at]);
        let x2 = f32(k[at + params.half_dim]);
        k[at] = act(x1 * p.cs.x - x2 * p.cs.y);
        k[at + params.half_dim] = act(x2 * p.cs.x + x1 * p.cs.y);
    }
}
