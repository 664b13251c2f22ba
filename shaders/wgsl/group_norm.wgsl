// GroupNorm over NCHW `act` activations [batch, channels, hw] (statistics
// in f32, weights f32), optionally followed by SiLU, in three launches so a
// large image spreads over the whole GPU:
//
// group_stats: workgroup (c, bg) takes chunk c (`chunk` values) of group bg
//              (batch b = bg / groups, channels g*cpg .. (g+1)*cpg, contiguous
//              in NCHW) and writes its mean and sum of squared deviations
//              into `part` [groups_total, n_chunks, 2].
// group_merge: one workgroup per group merges its chunks (Chan et al.:
//              M2 = sum m2_i + n_i (mean_i - mean)^2) into `stats`
//              [groups_total, 2] = (mean, 1 / sqrt(var + eps)) (biased
//              variance, as torch.nn.GroupNorm).
// group_apply: out = (x - mean) * rstd * w[c] + bias[c], then x * sigmoid(x)
//              where silu != 0; one invocation per element.
//
// Each chunk's deviations are summed around its own mean (two reads of the
// chunk): one pass of sums and squares would cancel badly on large images.
//
// needs: workgroup_sum
// provides: WG

struct Params {
    channels: u32,
    hw: u32,
    groups: u32,
    cpg: u32,
    chunk: u32,
    n_chunks: u32,
    total: u32,
    eps: f32,
    silu: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const WG: u32 = 256u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> x: array<act>;
@group(0) @binding(2) var<storage, read_write> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> stats: array<f32>;
@group(0) @binding(4) var<storage, read> rstats: array<f32>;
@group(0) @binding(5) var<storage, read> w: array<f32>;
@group(0) @binding(6) var<storage, read> bias: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<act>;

// Values in chunk c of a group of `len` values.
fn chunk_len(c: u32, len: u32) -> u32 {
    return min(params.chunk, len - c * params.chunk);
}

@compute @workgroup_size(WG)
fn group_stats(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let len = params.cpg * params.hw;
    let bg = wid.y;
    let c = wid.x;
    let n = chunk_len(c, len);
    let base = bg * len + c * params.chunk;
    var s = 0.0;
    for (var i = lid; i < n; i = i + WG) {
        s = s + f32(x[base + i]);
    }
    let mean = workgroup_sum(lid, s) / f32(n);
    var sq = 0.0;
    for (var i = lid; i < n; i = i + WG) {
        let d = f32(x[base + i]) - mean;
        sq = sq + d * d;
    }
    let m2 = workgroup_sum(lid, sq);
    if lid == 0u {
        let at = (bg * params.n_chunks + c) * 2u;
        part[at] = mean;
        part[at + 1u] = m2;
    }
}

@compute @workgroup_size(WG)
fn group_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let len = params.cpg * params.hw;
    let bg = wid.x;
    let first = bg * params.n_chunks * 2u;
    var s = 0.0;
    for (var c = lid; c < params.n_chunks; c = c + WG) {
        s = s + f32(chunk_len(c, len)) * part[first + c * 2u];
    }
    let mean = workgroup_sum(lid, s) / f32(len);
    var m2 = 0.0;
    for (var c = lid; c < params.n_chunks; c = c + WG) {
        let d = part[first + c * 2u] - mean;
        m2 = m2 + part[first + c * 2u + 1u] + f32(chunk_len(c, len)) * d * d;
    }
    let total = workgroup_sum(lid, m2);
    if lid == 0u {
        stats[bg * 2u] = mean;
        stats[bg * 2u + 1u] = 1.0 / sqrt(total / f32(len) + params.eps);
    }
}

@compute @workgroup_size(WG)
fn group_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    if idx >= params.total {
        return;
    }
    let ch = (idx / params.hw) % params.channels;
    let b = idx / (params.hw * params.channels);
    let bg = b * params.groups + ch / params.cpg;
    var y = (f32(x[idx]) - rstats[bg * 2u]) * rstats[bg * 2u + 1u] * w[ch] + bias[ch];
    if params.silu != 0u {
        y = y / (1.0 + exp(-y));
    }
    out[idx] = act(y);
}
