// Building blocks of the fast fused rotation + quantization kernels
// (linear_rotate_quant_subgroup.wgsl, linear_add_norm_quant_subgroup.wgsl;
// need SUBGROUP). The row lives in workgroup memory, padded with one word
// after every 16 values (rq_at), and the radix-4 transform of
// linear_fht.wgsl runs in registers, two stages at a time, on 16 values an
// invocation holds: stages 1 and 4 on a block of 16 consecutive values,
// stages 16 and 64 on the 16 values r + 16 j of a block of 256. Each
// butterfly is linear_fht.wgsl's on the same inputs, so every value is the
// same bit for bit; one barrier between the two halves instead of one per
// stage. The padding keeps both access patterns free of bank conflicts
// (16 invocations × 17 words, and 16 consecutive r of two blocks of 256).
// The absmax: subgroupMax, then one workgroup atomicMax per subgroup
// (exact in any order).
//
// needs: G, WGS, fht_v, y
// provides: rq_amax, rq_at, rq_fht16, rq_max_add, rq_max_init, rq_stages_16_64
//

var<workgroup> rq_amax: atomic<u32>;

// Where row value i lives in the padded workgroup array.
fn rq_at(i: u32) -> u32 {
    return i + (i >> 4u);
}

// linear_fht.wgsl's butterfly on v[i], v[i + s], v[i + 2s], v[i + 3s].
fn rq_bfly(v: ptr<function, array<f32, 16>>, i: u32, s: u32) {
    let a = (*v)[i];
    let b = (*v)[i + s];
    let c = (*v)[i + 2u * s];
    let d = (*v)[i + 3u * s];
    (*v)[i] = 0.5 * (((a + b) + c) - d);
    (*v)[i + s] = 0.5 * (((a + b) - c) + d);
    (*v)[i + 2u * s] = 0.5 * (((a - b) + c) + d);
    (*v)[i + 3u * s] = 0.5 * (((-a + b) + c) + d);
}

// The stages of strides `unit` and 4 · unit (those below G) on 16 row
// values at stride `unit`, v[j] = value first + unit · j.
fn rq_fht16(v: ptr<function, array<f32, 16>>, unit: u32) {
    if unit < G {
        for (var t = 0u; t < 4u; t++) {
            rq_bfly(v, 4u * t, 1u);
        }
    }
    if 4u * unit < G {
        for (var t = 0u; t < 4u; t++) {
            rq_bfly(v, t, 4u);
        }
    }
}

// Resets the absmax; before a barrier that precedes every rq_max_add.
fn rq_max_init(lid: u32) {
    if lid == 0u {
        atomicStore(&rq_amax, 0u);
    }
}

// Folds this invocation's absmax `m` (>= 0) into the workgroup's; read it
// with atomicLoad(&rq_amax) after a barrier.
fn rq_max_add(m: f32) {
    let s = subgroupMax(m);
    if subgroupExclusiveAdd(1u) == 0u {
        atomicMax(&rq_amax, bitcast<u32>(s));
    }
}

// Stages 16 and 64 of every 256-block of the row in workgroup memory, on
// the 16 values r + 16j of each block this invocation's `units` take; the
// rotated values go back to workgroup memory and to y (from `base`), and
// the running absmax `m` is returned updated.
fn rq_stages_16_64(lid: u32, units: u32, k: u32, base: u32, m_in: f32) -> f32 {
    var m = m_in;
    for (var u = 0u; u < units; u++) {
        let unit = lid + u * WGS;
        let first = (unit / 16u) * 256u + unit % 16u;
        var v: array<f32, 16>;
        for (var j = 0u; j < 16u; j++) {
            let i = first + 16u * j;
            if i < k {
                v[j] = fht_v[rq_at(i)];
            }
        }
        rq_fht16(&v, 16u);
        for (var j = 0u; j < 16u; j++) {
            let i = first + 16u * j;
            if i < k {
                fht_v[rq_at(i)] = v[j];
                y[base + i] = v[j];
                m = max(m, abs(v[j]));
            }
        }
    }
    return m;
}
