// Rotation and activation codes of small-M rows in one dispatch over many
// workgroups, after linear_fht.wgsl, linear_rotate_chunk.wgsl,
// linear_codes.wgsl and linear_act_codes.wgsl: workgroup (c, row) rotates
// chunk c of the row as linear_rotate_max.wgsl does (y, its absmax to
// pmax), then counts itself in arrived[row]; the row's last workgroup to
// arrive codes the whole row as linear_rotated_codes.wgsl would (the same
// codes and scales bit for bit) and sets the count back to 0 for the next
// dispatch. One launch where the rotation and the coding took two: no
// workgroup waits for another (no grid-wide barrier), the last one sees the
// others' values through the device-scope release and acquire of
// storageBarrier around the count.
// Dispatch (ceil(k / CHUNK), rows); arrived[row] 0 before it.
//
// needs: CHUNK, WGS, qp, rotate_chunk, write_codes
// provides: act_value, norm_w, x, y

@group(0) @binding(0) var<storage, read> x: array<act>;
@group(0) @binding(3) var<storage, read> norm_w: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> pmax: array<u32>;
@group(0) @binding(6) var<storage, read_write> arrived: array<atomic<u32>>;

// 1 in the workgroup that arrived last at its row.
var<workgroup> last: u32;

fn act_value(row_base: u32, col: u32) -> f32 {
    return y[row_base + col];
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    let c0 = wid.x * CHUNK;
    if row >= qp.rows || c0 >= qp.k {
        return;
    }
    let chunks = (qp.k + CHUNK - 1u) / CHUNK;
    let m = rotate_chunk(lid, row * qp.k, c0, qp.k, qp.eps_bits);
    if lid == 0u {
        pmax[row * chunks + wid.x] = m;
    }
    // Release: this workgroup's values and maximum before its count.
    storageBarrier();
    if lid == 0u {
        last = select(0u, 1u, atomicAdd(&arrived[row], 1u) == chunks - 1u);
    }
    if workgroupUniformLoad(&last) == 1u {
        // Acquire: the other workgroups' values and maxima after their counts.
        storageBarrier();
        var a = 0u;
        for (var c = 0u; c < chunks; c++) {
            a = max(a, pmax[row * chunks + c]);
        }
        write_codes(row, lid, WGS, bitcast<f32>(a));
        if lid == 0u {
            atomicStore(&arrived[row], 0u);
        }
    }
}
