// Integer tiled GEMM for larger M, after linear_int_common.wgsl. A 64-wide
// workgroup computes a 32 x 32 output tile (4 x 4 per invocation); each step
// stages 32 rows x 32 words (128 columns) of activations and of weights
// (int4 words already split into even/odd i8 words) in workgroup memory.
// Dispatch: (ceil(N / 32), ceil(M / 32), 1).
//
// needs: W4, p, store, unscale_acc, w, w4_even, w4_odd, xq

const TILE: u32 = 32u;
const TKW: u32 = 32u;

var<workgroup> a_tile: array<u32, 1024>;
var<workgroup> b_tile: array<u32, 1024>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let n0 = wid.x * TILE;
    let m0 = wid.y * TILE;
    let tx = lid % 8u;
    let ty = lid / 8u;
    let kw = p.k / 4u;
    var acc: array<array<i32, 4>, 4>;
    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            acc[i][j] = 0;
        }
    }
    for (var kt = 0u; kt < kw; kt += TKW) {
        for (var t = 0u; t < 16u; t++) {
            let idx = lid + 64u * t;
            let r = idx / TKW;
            let c = kt + idx % TKW;
            var a = 0u;
            if m0 + r < p.m && c < kw {
                a = xq[(m0 + r) * kw + c];
            }
            a_tile[idx] = a;
        }
        if W4 {
            let wpr = p.k / 8u;
            for (var t = 0u; t < 8u; t++) {
                let idx = lid + 64u * t;
                let r = idx / (TKW / 2u);
                let c = idx % (TKW / 2u);
                let j = kt / 2u + c;
                var raw = 0u;
                if n0 + r < p.n && j < wpr {
                    raw = w[(n0 + r) * wpr + j];
                }
                b_tile[r * TKW + 2u * c] = w4_even(raw);
                b_tile[r * TKW + 2u * c + 1u] = w4_odd(raw);
            }
        } else {
            for (var t = 0u; t < 16u; t++) {
                let idx = lid + 64u * t;
                let r = idx / TKW;
                let c = kt + idx % TKW;
                var b = 0u;
                if n0 + r < p.n && c < kw {
                    b = w[(n0 + r) * kw + c];
                }
                b_tile[idx] = b;
            }
        }
        workgroupBarrier();
        for (var c = 0u; c < TKW; c++) {
            var a: array<u32, 4>;
            var b: array<u32, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = a_tile[(ty * 4u + i) * TKW + c];
                b[i] = b_tile[(tx * 4u + i) * TKW + c];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] += dot4I8Packed(a[i], b[j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + ty * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + tx * 4u + j;
            if m < p.m && n < p.n {
                store(m, n, unscale_acc(acc[i][j]));
            }
        }
    }
}
