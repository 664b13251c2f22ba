// Decode attention over a KV cache (flash-decoding), coalesced: workgroup
// s·W + w (W = n_heads / HPW per split) takes keys s·chunk.. of kv head
// g = w·HPW / group for HPW of the query heads that read it, times the sq
// rows (QG = HPW·sq <= MAX_QG queries). With HPW = group each key row is
// read once however many heads share it; with fewer (grouped heads spread
// over workgroups: more of them, fewer queries each) the heads of a group
// read it from the cache in turn. Fused RoPE (`rope_new_keys`) writes the
// new key rows in place, so it needs HPW = group: one workgroup per key.
//
// The WG invocations form KP = WG / LPK key groups of LPK lanes. A key
// group takes U keys a step; its lanes span the head's dimensions in vec4s
// (lane, lane + LPK: SLOTS of them), so one key row is one coalesced load.
// Each lane dots its vec4s of the key with the queries (held in registers),
// the LPK lanes' partial dots are summed (`group_sum`: subgroup shuffles
// or workgroup memory, the fragment before this file), and every lane
// keeps an online softmax (running max m, sum l) and the unnormalised
// output of its own dimensions, the values read as coalesced as the keys.
// No barrier in the loop on the subgroup path. At the end the key groups
// are merged in workgroup memory; with one split the result is the
// output, else the partial (m, l, acc) goes to `part` as attention.wgsl's
// attend_split writes it, for attend_combine.
//
// WG, MAX_KP, ACC4 and MERGE size the workgroup and its arrays, so they are
// text the host writes in (`with_consts`): WG invocations (a power of two,
// at least LPK), MAX_KP = WG / LPK key groups, MERGE key groups merged per
// round (1: one at a time; up to MAX_KP: all in one), ACC4 = MERGE · QG ·
// HD / 4 vec4s of partial outputs. The defaults below are one valid set.
//
// The fragment before this file also binds k (read-only, or read-write
// where RoPE is fused) and defines `load_q`, which rotates the queries as
// it loads them, and `rope_new_keys`, which rotates the new key rows of the
// workgroup's range in the cache (both as rope.wgsl does, f32 arithmetic,
// rounded to act).
//
// q, k, v, out as attention.wgsl declares them (head_dim a multiple of 4;
// q, k and v read as vec4), Params in attention_params.wgsl.
//
// needs: Params, group_sum, k, load_q, rope_new_keys
// provides: HD, LPK, MAX_KP, MAX_QG, QG, WG, params, q

const WG: u32 = 128u;
const MAX_QG: u32 = 8u;
// Key groups (WG / LPK), those merged per round, and the vec4s they hold.
const MAX_KP: u32 = 4u;
const MERGE: u32 = 1u;
const ACC4: u32 = 32u;
// vec4s a lane holds of a head row: head_dim <= 256 = 2 · 32 lanes · 4.
const MAX_SLOTS: u32 = 2u;
// Most keys a key group takes per step (U).
const MAX_U: u32 = 8u;
const NEG_BIG: f32 = -3.0e38;

// Head dimension, lanes per key (8, 16 or 32), queries per workgroup
// (HPW · sq, 1..=MAX_QG): constants so that the loops over
// them unroll and the arrays below stay in registers.
override HD: u32 = 128u;
override LPK: u32 = 32u;
override QG: u32 = 1u;
// Keys a key group takes per step, their loads issued together (8 where
// the registers allow, else 4).
override U: u32 = 4u;
// Query heads per workgroup: a divisor of the group (n_heads / n_kv).
override HPW: u32 = 1u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<act>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<act>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<act>>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

// The merge of the key groups: their maxima and sums, then the outputs.
var<workgroup> dec_m: array<f32, MAX_KP * MAX_QG>;
var<workgroup> dec_l: array<f32, MAX_KP * MAX_QG>;
var<workgroup> dec_acc: array<vec4<f32>, ACC4>;

// Keys 0..limit are visible to query row r (causal, within kv_len).
fn dec_visible(r: u32) -> u32 {
    if params.causal == 0u {
        return params.kv_len;
    }
    return min(params.kv_len, params.pos0 + r + 1u);
}

// The largest of the key groups' maxima of query qi.
fn dec_max(qi: u32, kp: u32) -> f32 {
    var mx = NEG_BIG;
    for (var t = 0u; t < kp; t++) {
        mx = max(mx, dec_m[t * MAX_QG + qi]);
    }
    return mx;
}

@compute @workgroup_size(WG)
fn attend_decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n_kv = params.n_kv;
    let group = params.n_heads / n_kv;
    let per_split = params.n_heads / HPW;
    let w = wid.x % per_split;
    let s = wid.x / per_split;
    let h0 = w * HPW;
    let g = h0 / group;
    let hd4 = HD / 4u;
    let row4 = n_kv * hd4;
    let kp = WG / LPK;
    let kg = lid / LPK;
    let lane = lid % LPK;
    let slots = (hd4 + LPK - 1u) / LPK;
    let last = dec_visible(params.sq - 1u);
    let lo = min(s * params.chunk, last);
    let hi = min(lo + params.chunk, last);
    rope_new_keys(g, lo, hi, lid);

    // Query qi is row qi / HPW, head h0 + qi % HPW.
    var qv: array<vec4<f32>, MAX_QG * MAX_SLOTS>;
    for (var qi = 0u; qi < QG; qi++) {
        let r = qi / HPW;
        let base = (r * params.n_heads + h0 + qi % HPW) * hd4;
        for (var sl = 0u; sl < slots; sl++) {
            let d4 = lane + sl * LPK;
            var x = vec4<f32>();
            if d4 < hd4 {
                x = load_q(base, d4, params.pos0 + r);
            }
            qv[qi * MAX_SLOTS + sl] = x;
        }
    }

    var m: array<f32, MAX_QG>;
    var l: array<f32, MAX_QG>;
    var acc: array<vec4<f32>, MAX_QG * MAX_SLOTS>;
    for (var qi = 0u; qi < QG; qi++) {
        m[qi] = NEG_BIG;
    }
    let steps = (hi - lo + kp * U - 1u) / (kp * U);
    for (var step = 0u; step < steps; step++) {
        // Key u of this group: lo + (step·U + u)·kp + kg.
        var kv4: array<vec4<f32>, MAX_U * MAX_SLOTS>;
        var vv4: array<vec4<f32>, MAX_U * MAX_SLOTS>;
        for (var u = 0u; u < U; u++) {
            let j = lo + (step * U + u) * kp + kg;
            for (var sl = 0u; sl < slots; sl++) {
                let d4 = lane + sl * LPK;
                var kx = vec4<f32>();
                var vx = vec4<f32>();
                if j < hi && d4 < hd4 {
                    let at = j * row4 + g * hd4 + d4;
                    kx = vec4<f32>(k[at]);
                    vx = vec4<f32>(v[at]);
                }
                kv4[u * MAX_SLOTS + sl] = kx;
                vv4[u * MAX_SLOTS + sl] = vx;
            }
        }
        var sc: array<f32, MAX_U * MAX_QG>;
        for (var u = 0u; u < U; u++) {
            var dots: array<f32, MAX_QG>;
            for (var qi = 0u; qi < QG; qi++) {
                var d = 0.0;
                for (var sl = 0u; sl < slots; sl++) {
                    d += dot(qv[qi * MAX_SLOTS + sl], kv4[u * MAX_SLOTS + sl]);
                }
                dots[qi] = d;
            }
            let sums = group_sum(lid, dots);
            let j = lo + (step * U + u) * kp + kg;
            for (var qi = 0u; qi < QG; qi++) {
                var x = NEG_BIG;
                if j < hi && j < dec_visible(qi / HPW) {
                    x = sums[qi] * params.scale;
                }
                sc[u * MAX_QG + qi] = x;
            }
        }
        for (var qi = 0u; qi < QG; qi++) {
            var mx = m[qi];
            for (var u = 0u; u < U; u++) {
                mx = max(mx, sc[u * MAX_QG + qi]);
            }
            let correction = exp(m[qi] - mx);
            var lsum = l[qi] * correction;
            var a = array<vec4<f32>, MAX_SLOTS>();
            for (var sl = 0u; sl < slots; sl++) {
                a[sl] = acc[qi * MAX_SLOTS + sl] * correction;
            }
            for (var u = 0u; u < U; u++) {
                let x = sc[u * MAX_QG + qi];
                var p = 0.0;
                if x > NEG_BIG {
                    p = exp(x - mx);
                }
                lsum += p;
                for (var sl = 0u; sl < slots; sl++) {
                    a[sl] += p * vv4[u * MAX_SLOTS + sl];
                }
            }
            for (var sl = 0u; sl < slots; sl++) {
                acc[qi * MAX_SLOTS + sl] = a[sl];
            }
            l[qi] = lsum;
            m[qi] = mx;
        }
    }

    // Merge the key groups: rescale each to the workgroup's max, then sum
    // their sums and outputs in group order.
    if lane == 0u {
        for (var qi = 0u; qi < QG; qi++) {
            dec_m[kg * MAX_QG + qi] = m[qi];
        }
    }
    workgroupBarrier();
    for (var qi = 0u; qi < QG; qi++) {
        let f = exp(m[qi] - dec_max(qi, kp));
        for (var sl = 0u; sl < slots; sl++) {
            acc[qi * MAX_SLOTS + sl] *= f;
        }
        if lane == 0u {
            dec_l[kg * MAX_QG + qi] = l[qi] * f;
        }
    }
    // In rounds of MERGE key groups: each writes its outputs to a region of
    // dec_acc, the first region adding to the sum so far, then the regions
    // are added to the first in group order (the same sums, in the same
    // order, whatever MERGE).
    let span = QG * hd4;
    for (var t0 = 0u; t0 < kp; t0 += MERGE) {
        let region = kg - t0;
        if kg >= t0 && region < MERGE {
            for (var qi = 0u; qi < QG; qi++) {
                for (var sl = 0u; sl < slots; sl++) {
                    let d4 = lane + sl * LPK;
                    if d4 < hd4 {
                        let at = qi * hd4 + d4;
                        var a = acc[qi * MAX_SLOTS + sl];
                        if region == 0u && t0 > 0u {
                            a = dec_acc[at] + a;
                        }
                        dec_acc[region * span + at] = a;
                    }
                }
            }
        }
        workgroupBarrier();
        let regions = min(MERGE, kp - t0);
        if regions > 1u {
            for (var e = lid; e < span; e += WG) {
                var a = dec_acc[e];
                for (var i = 1u; i < regions; i++) {
                    a += dec_acc[i * span + e];
                }
                dec_acc[e] = a;
            }
            workgroupBarrier();
        }
    }
    // Outputs (or partials), consecutive invocations on consecutive vec4s.
    for (var e = lid; e < QG * hd4; e += WG) {
        let qi = e / hd4;
        let d4 = e % hd4;
        var lw = 0.0;
        for (var t = 0u; t < kp; t++) {
            lw += dec_l[t * MAX_QG + qi];
        }
        let mw = dec_max(qi, kp);
        let r = qi / HPW;
        let h = h0 + qi % HPW;
        let a = dec_acc[e];
        if params.splits == 1u {
            out[(r * params.n_heads + h) * hd4 + d4] = vec4<act>(a / lw);
        } else {
            let base = ((r * params.n_heads + h) * params.splits + s) * (HD + 2u);
            if d4 == 0u {
                part[base] = mw;
                part[base + 1u] = lw;
            }
            let at = base + 2u + 4u * d4;
            part[at] = a.x;
            part[at + 1u] = a.y;
            part[at + 2u] = a.z;
            part[at + 3u] = a.w;
        }
    }
}
