// Row norms over `act` activations [rows, cols] (f32 or f16; sums, the
// scale and the f32 weights in f32): one workgroup per row, the
// row's sums reduced in workgroup memory (portable: no subgroups). Rows are
// laid over a 2-D grid of workgroups.
//
// rms_norm:   out = w * (x * 1/sqrt(mean(x^2) + eps))   (HF Llama order)
// layer_norm: out = (x - mean) * 1/sqrt(var + eps) * w + b   (b when has_bias != 0)
//
// 1/sqrt instead of inverseSqrt: sqrt and division are correctly rounded on
// common drivers, inverseSqrt only to a few ulp.
//
// needs: workgroup_sum
// provides: WG

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    has_bias: u32,
}

// Invocations per row: the host picks 1024 where there are few rows (a
// decode step's one row is latency-bound: more loads in flight), else 256.
override WG: u32 = 256u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> x: array<act>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;
// add_rms_norm: the residual stream (updated in place) and what is added.
@group(0) @binding(5) var<storage, read_write> xs: array<act>;
@group(0) @binding(6) var<storage, read> delta: array<act>;

// Row elements each invocation loads before using any (a constant count:
// the loads are issued together, not one memory latency per element).
const UNROLL: u32 = 4u;

// The row workgroup `wid` normalises (>= params.rows past the end).
fn norm_row(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// 1/sqrt(mean square + eps) of a row whose invocations hold partial sums of
// squares `ss`; every invocation gets it.
fn rms_factor(lid: u32, ss: f32) -> f32 {
    return 1.0 / sqrt(workgroup_sum(lid, ss) / f32(params.cols) + params.eps);
}

@compute @workgroup_size(WG)
fn rms_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let row = norm_row(wid, nwg);
    if row >= params.rows {
        return;
    }
    let base = row * params.cols;
    var ss = 0.0;
    for (var c0 = 0u; c0 < params.cols; c0 = c0 + UNROLL * WG) {
        var v: array<f32, UNROLL>;
        for (var u = 0u; u < UNROLL; u = u + 1u) {
            let i = min(c0 + lid + u * WG, params.cols - 1u);
            v[u] = f32(x[base + i]);
        }
        for (var u = 0u; u < UNROLL; u = u + 1u) {
            if c0 + lid + u * WG < params.cols {
                ss = ss + v[u] * v[u];
            }
        }
    }
    let r = rms_factor(lid, ss);
    for (var c0 = 0u; c0 < params.cols; c0 = c0 + UNROLL * WG) {
        var v: array<f32, UNROLL>;
        for (var u = 0u; u < UNROLL; u = u + 1u) {
            v[u] = f32(x[base + min(c0 + lid + u * WG, params.cols - 1u)]);
        }
        store_scaled(lid, base, c0, r, v);
    }
}

// out = w * (v * r) for the chunk of the row at `base` that starts at
// column c0, `v` its inputs as this invocation loaded them.
fn store_scaled(lid: u32, base: u32, c0: u32, r: f32, v: array<f32, UNROLL>) {
    var wv: array<f32, UNROLL>;
    for (var u = 0u; u < UNROLL; u = u + 1u) {
        wv[u] = w[min(c0 + lid + u * WG, params.cols - 1u)];
    }
    for (var u = 0u; u < UNROLL; u = u + 1u) {
        let i = c0 + lid + u * WG;
        if i < params.cols {
            out[base + i] = act(wv[u] * (v[u] * r));
        }
    }
}

// xs += delta (rounded to `act` and stored, as the separate add would),
// then out = rms_norm(xs): the residual add before a norm in one launch.
@compute @workgroup_size(WG)
fn add_rms_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let row = norm_row(wid, nwg);
    if row >= params.rows {
        return;
    }
    let base = row * params.cols;
    var ss = 0.0;
    for (var c0 = 0u; c0 < params.cols; c0 = c0 + UNROLL * WG) {
        var v: array<act, UNROLL>;
        for (var u = 0u; u < UNROLL; u = u + 1u) {
            let i = min(c0 + lid + u * WG, params.cols - 1u);
            v[u] = act(f32(xs[base + i]) + f32(delta[base + i]));
        }
        for (var u = 0u; u < UNROLL; u = u + 1u) {
            let i = c0 + lid + u * WG;
            if i < params.cols {
                xs[base + i] = v[u];
                ss = ss + f32(v[u]) * f32(v[u]);
            }
        }
    }
    let r = rms_factor(lid, ss);
    for (var c0 = 0u; c0 < params.cols; c0 = c0 + UNROLL * WG) {
        var v: array<f32, UNROLL>;
        for (var u = 0u; u < UNROLL; u = u + 1u) {
            v[u] = f32(xs[base + min(c0 + lid + u * WG, params.cols - 1u)]);
        }
        store_scaled(lid, base, c0, r, v);
    }
}

@compute @workgroup_size(WG)
fn layer_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let row = norm_row(wid, nwg);
    if row >= params.rows {
        return;
    }
    let cols = params.cols;
    let base = row * cols;
    var s = 0.0;
    for (var i = lid; i < cols; i = i + WG) {
        s = s + f32(x[base + i]);
    }
    let mean = workgroup_sum(lid, s) / f32(cols);
    var sq = 0.0;
    for (var i = lid; i < cols; i = i + WG) {
        let d = f32(x[base + i]) - mean;
        sq = sq + d * d;
    }
    let var_ = workgroup_sum(lid, sq) / f32(cols);
    let r = 1.0 / sqrt(var_ + params.eps);
    for (var i = lid; i < cols; i = i + WG) {
        var y = (f32(x[base + i]) - mean) * r * w[i];
        if params.has_bias != 0u {
            y = y + bias[i];
        }
        out[base + i] = act(y);
    }
}
