// Float tiled GEMM for larger M, after linear_float_common.wgsl. A 64-wide
// workgroup computes a 32 x 32 output tile (4 x 4 per invocation), staging 32
// rows x 32 columns of activations and decoded weights per step.
// Dispatch: (ceil(N / 32), ceil(M / 32), 1).
//
// needs: p, store, weight_quad, x

const TILE: u32 = 32u;
const TKQ: u32 = 8u;

var<workgroup> a_tile: array<vec4<f32>, 256>;
var<workgroup> b_tile: array<vec4<f32>, 256>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let n0 = wid.x * TILE;
    let m0 = wid.y * TILE;
    let tx = lid % 8u;
    let ty = lid / 8u;
    let kq = p.k / 4u;
    var acc: array<array<f32, 4>, 4>;
    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            acc[i][j] = 0.0;
        }
    }
    for (var kt = 0u; kt < kq; kt += TKQ) {
        for (var t = 0u; t < 4u; t++) {
            let idx = lid + 64u * t;
            let r = idx / TKQ;
            let c = kt + idx % TKQ;
            var a = vec4<f32>();
            if m0 + r < p.m && c < kq {
                a = vec4<f32>(x[(m0 + r) * kq + c]);
            }
            a_tile[idx] = a;
            var b = vec4<f32>();
            if n0 + r < p.n && c < kq {
                b = weight_quad(n0 + r, c);
            }
            b_tile[idx] = b;
        }
        workgroupBarrier();
        for (var c = 0u; c < TKQ; c++) {
            var a: array<vec4<f32>, 4>;
            var b: array<vec4<f32>, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = a_tile[(ty * 4u + i) * TKQ + c];
                b[i] = b_tile[(tx * 4u + i) * TKQ + c];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] += dot(a[i], b[j]);
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
                store(m, n, acc[i][j]);
            }
        }
    }
}
