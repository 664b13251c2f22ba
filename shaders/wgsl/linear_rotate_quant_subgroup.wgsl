// linear_rotate_quant.wgsl's fast variant (needs SUBGROUP), after
// linear_rq_subgroup.wgsl and linear_act_codes.wgsl: the same y, scale and
// codes bit for bit, with two barriers instead of one per FHT stage plus
// the absmax's tree (log2(WGS) + 2). One WGS-wide workgroup per row, the
// whole row (K <= ROW_MAX) in workgroup memory:
//   1. each invocation loads blocks of 16 consecutive values (all its loads
//      issued first), does stages 1 and 4 in registers, stores them;
//   2. barrier; (G > 16) each invocation takes 16 values r + 16 j of a block
//      of 256, does stages 16 and 64 in registers, writes them to y and
//      back; its absmax into the workgroup's (subgroupMax + atomicMax);
//   3. barrier; scale and codes from workgroup memory (write_codes).
// G <= 256 (a power of 4, 1 for unrotated layers), K a multiple of G and 4.
//
// needs: qp, rq_amax, rq_at, rq_fht16, rq_max_add, rq_max_init
// needs: rq_stages_16_64, write_codes
// provides: G, WGS, act_value, fht_v, y
//
//

override G: u32 = 256u;
// Invocations per workgroup (a power of two, 64..=1024), with
// ceil(ROW_MAX / (16 · WGS)) <= 4.
override WGS: u32 = 256u;
// The longest row: K <= ROW_MAX.
override ROW_MAX: u32 = 4096u;
// Words of the padded row: ROW_MAX + ROW_MAX / 16 + 1 (naga sizes arrays
// by an override, not an expression).
override FHT_WORDS: u32 = 4353u;

@group(0) @binding(0) var<storage, read> x: array<act>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> fht_v: array<f32, FHT_WORDS>;

fn act_value(row_base: u32, col: u32) -> f32 {
    return fht_v[rq_at(col)];
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x + wid.y * 65535u;
    if row >= qp.rows {
        return;
    }
    let base = row * qp.k;
    let k = qp.k;
    rq_max_init(lid);
    // Blocks of 16 per invocation, and units r + 16 j of blocks of 256.
    let blocks = (ROW_MAX + 16u * WGS - 1u) / (16u * WGS);
    let units = ((ROW_MAX + 255u) / 256u * 16u + WGS - 1u) / WGS;
    var xv: array<f32, 64>;
    for (var u = 0u; u < blocks; u++) {
        for (var c = 0u; c < 16u; c++) {
            let i = (lid + u * WGS) * 16u + c;
            if i < k {
                xv[u * 16u + c] = f32(x[base + i]);
            }
        }
    }
    var m = 0.0;
    for (var u = 0u; u < blocks; u++) {
        var v: array<f32, 16>;
        for (var c = 0u; c < 16u; c++) {
            v[c] = xv[u * 16u + c];
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
    // Orders rq_max_init before every atomicMax, and (G > 16) the blocks'
    // values before the other invocations read them.
    workgroupBarrier();
    if G > 16u {
        m = rq_stages_16_64(lid, units, k, base, m);
    }
    rq_max_add(m);
    workgroupBarrier();
    write_codes(row, lid, WGS, bitcast<f32>(atomicLoad(&rq_amax)));
}
