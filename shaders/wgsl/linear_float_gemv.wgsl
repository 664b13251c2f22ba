// Float GEMV for small M (M <= 8), after linear_reduce_workgroup.wgsl and
// linear_float_common.wgsl. One 64-wide workgroup per weight row n; each
// invocation decodes 4 columns at a time, consecutive invocations reading
// consecutive words. Rows n run over wid.x + 65535 * wid.y.
//
// needs: WG, p, store, weight_quad, wg_sum_f32, x

const MAX_M: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let n = wid.x + wid.y * 65535u;
    if n >= p.n {
        return;
    }
    let kq = p.k / 4u;
    let rows = min(p.m, MAX_M);
    var acc: array<f32, 8>;
    for (var i = 0u; i < MAX_M; i++) {
        acc[i] = 0.0;
    }
    for (var q = lid; q < kq; q += WG) {
        let wq = weight_quad(n, q);
        for (var m = 0u; m < rows; m++) {
            acc[m] += dot(vec4<f32>(x[m * kq + q]), wq);
        }
    }
    for (var m = 0u; m < rows; m++) {
        let total = wg_sum_f32(acc[m], lid);
        if lid == 0u {
            store(m, n, total);
        }
    }
}
