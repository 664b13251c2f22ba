// Integer GEMV for small M (M <= 8), after a reduction fragment and
// linear_int_common.wgsl. One 64-wide workgroup per weight row n streams the
// row with consecutive invocations reading consecutive u32 words (coalesced),
// keeps one i32 accumulator per activation row, and reduces them across the
// workgroup. Rows n run over wid.x + 65535 * wid.y.
//
// needs: W4, WG, p, store, unscale_acc, w, w4_even, w4_odd, wg_sum_i32, xq

const MAX_M: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let n = wid.x + wid.y * 65535u;
    if n >= p.n {
        return;
    }
    let kw = p.k / 4u;
    let rows = min(p.m, MAX_M);
    var acc: array<i32, 8>;
    for (var i = 0u; i < MAX_M; i++) {
        acc[i] = 0;
    }
    if W4 {
        let wpr = p.k / 8u;
        for (var j = lid; j < wpr; j += WG) {
            let raw = w[n * wpr + j];
            let e = w4_even(raw);
            let o = w4_odd(raw);
            for (var m = 0u; m < rows; m++) {
                let a = m * kw + 2u * j;
                acc[m] += dot4I8Packed(xq[a], e) + dot4I8Packed(xq[a + 1u], o);
            }
        }
    } else {
        for (var j = lid; j < kw; j += WG) {
            let ww = w[n * kw + j];
            for (var m = 0u; m < rows; m++) {
                acc[m] += dot4I8Packed(xq[m * kw + j], ww);
            }
        }
    }
    for (var m = 0u; m < rows; m++) {
        let total = wg_sum_i32(unscale_acc(acc[m]), lid);
        if lid == 0u {
            store(m, n, total);
        }
    }
}
