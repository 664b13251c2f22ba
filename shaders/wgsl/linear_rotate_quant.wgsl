// Rotation and activation quantization in one dispatch, for few rows: after
// linear_gemv_tree.wgsl, linear_fht.wgsl and linear_act_codes.wgsl. One
// WGS-wide workgroup per row: the row passes through workgroup memory
// FHT_CHUNK values (whole groups) at a time, is rotated, written to y (the
// rotated input, f32, the same values linear_rotate.wgsl writes) and its
// absmax tracked; then the scale and codes as linear_act_quant.wgsl makes
// them, read back from y. Saves the rotation's dispatch (and its pipeline
// drain) for M <= 8. Rows run over wid.x + 65535 * wid.y.
//
// With M <= 8 only M workgroups run, so the kernel is latency-bound: the
// host gives it the adapter's largest workgroup and as much workgroup memory
// as it has (FHT_CHUNK), so each chunk's loads are all in flight at once.
//
// needs: GV_UMAX, fht, gv_out, gv_tree, qp, write_codes
// provides: G, WGS, act_value, fht_v

// The group size: a power of 4, G <= FHT_CHUNK; G = 1 (no stage) copies x
// to y unrotated, for unrotated layers.
override G: u32 = 256u;
// Invocations per workgroup (a power of two, 64..=1024).
override WGS: u32 = 256u;
// Values per pass through workgroup memory: a power of two >= G.
override FHT_CHUNK: u32 = 2048u;

@group(0) @binding(0) var<storage, read> x: array<act>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> fht_v: array<f32, FHT_CHUNK>;

// A row that fits one chunk is still in workgroup memory when the codes are
// made: read there, not back from y.
fn act_value(row_base: u32, col: u32) -> f32 {
    if qp.k <= FHT_CHUNK {
        return fht_v[col];
    }
    return y[row_base + col];
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x + wid.y * 65535u;
    if row >= qp.rows {
        return;
    }
    let base = row * qp.k;
    var m = 0.0;
    for (var c0 = 0u; c0 < qp.k; c0 += FHT_CHUNK) {
        let len = min(FHT_CHUNK, qp.k - c0);
        // A constant trip count: every load of the chunk issued together.
        for (var u = 0u; u < FHT_CHUNK / WGS; u++) {
            let i = lid + u * WGS;
            if i < len {
                fht_v[i] = f32(x[base + c0 + i]);
            }
        }
        workgroupBarrier();
        fht(lid, WGS, len);
        for (var u = 0u; u < FHT_CHUNK / WGS; u++) {
            let i = lid + u * WGS;
            if i < len {
                let v = fht_v[i];
                y[base + c0 + i] = v;
                m = max(m, abs(v));
            }
        }
        if c0 + FHT_CHUNK < qp.k {
            // The next chunk overwrites fht_v.
            workgroupBarrier();
        }
    }
    // Other invocations of this workgroup read y back for the codes.
    storageBarrier();
    var mv: array<u32, 64>;
    mv[0] = bitcast<u32>(m);
    gv_tree(&mv, 1u, lid, GV_UMAX);
    write_codes(row, lid, WGS, bitcast<f32>(gv_out[0]));
}
