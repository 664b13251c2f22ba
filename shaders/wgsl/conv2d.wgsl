// 2-D convolution over NCHW `act` activations (f32 or f16; sums in f32) as
// an implicit GEMM: M = output pixels of one image, N = output channels,
// K = cin * ksize * ksize. Weights [cout, cin, ksize, ksize] as the
// checkpoint stores them (WDT: 0 = f32, 1 = f16, 2 = bf16), bias f32 [cout].
//
// out[b, o, y, x] = bias[o] + sum_{i, ky, kx} w[o, i, ky, kx] * u[b, i, y*stride + ky - pad_top, x*stride + kx - pad_left]
//                   (+ res[b, o, y, x] where has_res != 0)
// u = the input upsampled `up`× by nearest neighbour (u[y, x] = in[y/up, x/up]),
// zero outside 0..h*up, 0..w*up: padding on the far sides comes from the
// output size the host chose (the encoder's (0, 1, 0, 1) pad is pad_top = 0,
// pad_left = 0 with hout = (h + 1 - 3) / 2 + 1).
//
// One workgroup computes TM pixels x TN channels of one image (16 x 16
// invocations, 4 x 4 outputs each); K is walked TK at a time with both
// operand tiles in workgroup memory. Workgroups: x = pixel tiles,
// y = batch * channel tiles.
//
// needs: stored_value
//

struct Params {
    cin: u32,
    h: u32,
    w: u32,
    cout: u32,
    hout: u32,
    wout: u32,
    ksize: u32,
    stride: u32,
    pad_top: u32,
    pad_left: u32,
    up: u32,
    has_res: u32,
    n_tiles: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;

override WDT: u32 = 0u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> x: array<act>;
@group(0) @binding(2) var<storage, read> wt: array<u32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> res: array<act>;
@group(0) @binding(5) var<storage, read_write> out: array<act>;

var<workgroup> a_tile: array<f32, 1024>; // [TK][TM]
var<workgroup> b_tile: array<f32, 1024>; // [TK][TN]

fn weight(e: u32) -> f32 {
    return stored_value(wt[select(e / 2u, e, WDT == 0u)], e, WDT);
}

@compute @workgroup_size(256)
fn conv2d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let p = params;
    let kk2 = p.ksize * p.ksize;
    let kdim = p.cin * kk2;
    let npix = p.hout * p.wout;
    let b = wid.y / p.n_tiles;
    let n0 = (wid.y % p.n_tiles) * TN;
    let m0 = wid.x * TM;
    let hu = p.h * p.up;
    let wu = p.w * p.up;
    let in_base = b * p.cin * p.h * p.w;
    let tx = lid % 16u;
    let ty = lid / 16u;
    var acc: array<f32, 16>;
    for (var k0 = 0u; k0 < kdim; k0 = k0 + TK) {
        // A: element e = (kk, m), consecutive invocations on consecutive pixels.
        for (var r = 0u; r < 4u; r = r + 1u) {
            let e = lid + 256u * r;
            let kk = e / TM;
            let m = e % TM;
            let k = k0 + kk;
            let pix = m0 + m;
            var v = 0.0;
            if k < kdim && pix < npix {
                let i = k / kk2;
                let rem = k % kk2;
                let ky = rem / p.ksize;
                let kx = rem % p.ksize;
                let oy = pix / p.wout;
                let ox = pix % p.wout;
                // Signed: the padding reaches before row/column 0.
                let iy = i32(oy * p.stride + ky) - i32(p.pad_top);
                let ix = i32(ox * p.stride + kx) - i32(p.pad_left);
                if iy >= 0 && ix >= 0 && u32(iy) < hu && u32(ix) < wu {
                    let sy = u32(iy) / p.up;
                    let sx = u32(ix) / p.up;
                    v = f32(x[in_base + (i * p.h + sy) * p.w + sx]);
                }
            }
            a_tile[e] = v;
        }
        // B: element e = (n, kk), consecutive invocations along a weight row.
        for (var r = 0u; r < 4u; r = r + 1u) {
            let e = lid + 256u * r;
            let kk = e % TK;
            let n = e / TK;
            let k = k0 + kk;
            let o = n0 + n;
            var v = 0.0;
            if k < kdim && o < p.cout {
                v = weight(o * kdim + k);
            }
            b_tile[kk * TN + n] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var j = 0u; j < 4u; j = j + 1u) {
                av[j] = a_tile[kk * TM + tx + 16u * j];
                bv[j] = b_tile[kk * TN + ty + 16u * j];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = acc[i * 4u + j] + bv[i] * av[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let o = n0 + ty + 16u * i;
        if o >= p.cout {
            continue;
        }
        for (var j = 0u; j < 4u; j = j + 1u) {
            let pix = m0 + tx + 16u * j;
            if pix >= npix {
                continue;
            }
            let idx = (b * p.cout + o) * npix + pix;
            var y = acc[i * 4u + j] + bias[o];
            if p.has_res != 0u {
                y = y + f32(res[idx]);
            }
            out[idx] = act(y);
        }
    }
}
