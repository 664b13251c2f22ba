// linear_add_norm_quant.wgsl's fast variant (needs SUBGROUP), after
// linear_rq_subgroup.wgsl and linear_act_codes.wgsl: the same residual,
// norm output, y, scale and codes bit for bit, with four barriers instead
// of two workgroup trees (log2(WGS) + 2 each), one per FHT stage and one
// more. One WGS-wide workgroup per row, the whole row (K <= ROW_MAX) in
// workgroup memory:
//   1. xs += delta and the sums of squares in norm.wgsl's order for a
//      workgroup of NW invocations: logical invocation L = lid + WGS · r
//      (r < NW / WGS) sums columns L, L + NW, … in order; the tree's stages
//      of stride >= WGS in registers (all loads, the norm weight's too,
//      issued first); barrier;
//   2. every subgroup finishes the tree from workgroup memory (rq_tree_sum:
//      the same pairs, in registers and subgroupShuffleXor), so no second
//      barrier to broadcast it; h = act(w · (xs · r)) stored, and into
//      workgroup memory; barrier;
//   3. the rotation as linear_rotate_quant_subgroup.wgsl does it (stages 1
//      and 4; barrier; stages 16 and 64, y, absmax; barrier), then codes.
// G <= 256, K a multiple of G and 4; NW, WGS powers of two, WGS <= NW,
// NW / WGS <= 16, (NW / WGS) · ceil(ROW_MAX / NW) <= 64, WGS / SG <= 32.
//
// needs: qp, rq_amax, rq_at, rq_fht16, rq_max_add, rq_max_init
// needs: rq_stages_16_64, write_codes
// provides: G, WGS, act_value, fht_v, y
//
//

override G: u32 = 256u;
// Invocations per workgroup (a power of two, 64..=1024).
override WGS: u32 = 256u;
// The longest row: K <= ROW_MAX.
override ROW_MAX: u32 = 4096u;
// Words of the padded row: ROW_MAX + ROW_MAX / 16 + 1 (naga sizes arrays
// by an override, not an expression).
override FHT_WORDS: u32 = 4353u;
// The workgroup size of norm.wgsl whose sums of squares these reproduce.
override NW: u32 = 1024u;
// The subgroup size the host expects; other sizes (or partial subgroups)
// take a slower path with the same result.
override SG: u32 = 32u;

@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> xs: array<act>;
@group(0) @binding(6) var<storage, read> delta: array<act>;
@group(0) @binding(7) var<storage, read> norm_w: array<f32>;
@group(0) @binding(8) var<storage, read_write> h: array<act>;

var<workgroup> fht_v: array<f32, FHT_WORDS>;
var<workgroup> rq_red: array<f32, WGS>;

fn act_value(row_base: u32, col: u32) -> f32 {
    return fht_v[rq_at(col)];
}

// The sum of rq_red[0..WGS) in norm.wgsl's tree order (rq_red[i] +=
// rq_red[i + s] for s = WGS / 2, …, 1), for every invocation. Lane l of a
// full subgroup of SG lanes sums rq_red[l + SG · j] over j by the tree's
// stages s >= SG, then the stages s < SG pair lanes l and l ^ s (f32 sums
// commute, so every lane ends with the same bits). Any other subgroup
// walks the tree alone.
fn rq_tree_sum(sg_size: u32, lane: u32) -> f32 {
    let n = WGS / SG;
    if sg_size == SG && n <= 32u && subgroupAdd(1u) == SG {
        var t: array<f32, 32>;
        for (var j = 0u; j < n; j++) {
            t[j] = rq_red[lane + SG * j];
        }
        for (var s = n / 2u; s > 0u; s = s >> 1u) {
            for (var j = 0u; j < s; j++) {
                t[j] = t[j] + t[j + s];
            }
        }
        var v = t[0];
        for (var s = SG / 2u; s > 0u; s = s >> 1u) {
            v = v + subgroupShuffleXor(v, s);
        }
        return v;
    }
    // The tree's pairs are neighbours in bit-reversed order: sum the
    // leaves in that order, merging equal-sized subtrees on a stack.
    var stack: array<f32, 12>;
    var top = 0u;
    let bits = countTrailingZeros(WGS);
    for (var c = 0u; c < WGS; c++) {
        var v = rq_red[reverseBits(c) >> (32u - bits)];
        for (var q = c; (q & 1u) == 1u; q = q >> 1u) {
            top = top - 1u;
            v = stack[top] + v;
        }
        stack[top] = v;
        top = top + 1u;
    }
    return stack[0];
}

@compute @workgroup_size(WGS)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let row = wid.x + wid.y * 65535u;
    if row >= qp.rows {
        return;
    }
    let base = row * qp.k;
    let k = qp.k;
    rq_max_init(lid);
    // Logical invocations per invocation, and columns per logical one.
    let per = NW / WGS;
    let cols = (ROW_MAX + NW - 1u) / NW;
    var xa: array<f32, 64>;
    var da: array<f32, 64>;
    var wa: array<f32, 64>;
    for (var u = 0u; u < cols; u++) {
        for (var r = 0u; r < per; r++) {
            let i = lid + WGS * r + NW * u;
            if i < k {
                let e = u * per + r;
                xa[e] = f32(xs[base + i]);
                da[e] = f32(delta[base + i]);
                wa[e] = norm_w[i];
            }
        }
    }
    var ss: array<f32, 16>;
    for (var u = 0u; u < cols; u++) {
        for (var r = 0u; r < per; r++) {
            let i = lid + WGS * r + NW * u;
            if i < k {
                let e = u * per + r;
                let v = act(xa[e] + da[e]);
                xs[base + i] = v;
                xa[e] = f32(v);
                ss[r] = ss[r] + f32(v) * f32(v);
            }
        }
    }
    // The norm's stages of stride NW / 2, …, WGS pair logical invocations
    // of this invocation.
    for (var s = per / 2u; s > 0u; s = s >> 1u) {
        for (var r = 0u; r < s; r++) {
            ss[r] = ss[r] + ss[r + s];
        }
    }
    rq_red[lid] = ss[0];
    workgroupBarrier();
    let total = rq_tree_sum(sg_size, lane);
    let rs = 1.0 / sqrt(total / f32(k) + bitcast<f32>(qp.eps_bits));
    for (var u = 0u; u < cols; u++) {
        for (var r = 0u; r < per; r++) {
            let i = lid + WGS * r + NW * u;
            if i < k {
                let e = u * per + r;
                let hv = act(wa[e] * (xa[e] * rs));
                h[base + i] = hv;
                fht_v[rq_at(i)] = f32(hv);
            }
        }
    }
    workgroupBarrier();
    // The rotation: linear_rotate_quant_subgroup.wgsl's, from workgroup memory.
    let blocks = (ROW_MAX + 16u * WGS - 1u) / (16u * WGS);
    let units = ((ROW_MAX + 255u) / 256u * 16u + WGS - 1u) / WGS;
    var m = 0.0;
    for (var u = 0u; u < blocks; u++) {
        var v: array<f32, 16>;
        for (var c = 0u; c < 16u; c++) {
            let i = (lid + u * WGS) * 16u + c;
            if i < k {
                v[c] = fht_v[rq_at(i)];
            }
        }
        rq_fht16(&v, 1u);
        for (var c = 0u; c < 16u; c++) {
            let i = (lid + u * WGS) * 16u + c;
            if i < k {
                fht_v[rq_at(i)] = v[c];
                if G <= 16u {
                    y[base + i] = v[c];
                    m = max(m, abs(v[c]));
                }
            }
        }
    }
    if G > 16u {
        workgroupBarrier();
        m = rq_stages_16_64(lid, units, k, base, m);
    }
    rq_max_add(m);
    workgroupBarrier();
    write_codes(row, lid, WGS, bitcast<f32>(atomicLoad(&rq_amax)));
}
