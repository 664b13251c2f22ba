// Per-row activation quantization, after a reduction fragment
// (linear_reduce_*.wgsl) and linear_act_codes.wgsl. One 64-wide workgroup
// per row: absmax, then the row's scale and codes. Rows run over
// wid.x + 65535 * wid.y. The input is `act` (f32 or f16); the scale and
// codes are computed in f32.
//
// needs: WG, qp, wg_max_f32, write_codes
// provides: act_value

@group(0) @binding(0) var<storage, read> x: array<act>;

fn act_value(row_base: u32, col: u32) -> f32 {
    return f32(x[row_base + col]);
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x + wid.y * 65535u;
    if row >= qp.rows {
        return;
    }
    let row_base = row * qp.k;
    var m = 0.0;
    for (var c = lid; c < qp.k; c += WG) {
        m = max(m, abs(act_value(row_base, c)));
    }
    write_codes(row, lid, WG, wg_max_f32(m, lid));
}
