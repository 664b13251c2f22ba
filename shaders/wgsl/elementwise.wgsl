// Elementwise kernels over `act` activations (f32 or f16), computed in f32. One thread per element; the
// grid is 2-D (x * y workgroups) so tensors past 65535 * 256 elements fit.
// The op is an override constant, so each (entry, OP) pair is its own
// pipeline with no branch at run time.
//
// Unary OP:  0 = GELU (tanh approximation), 1 = SiLU, 2 = scale by `params.scale`,
//            3 = quick GELU x * sigmoid(1.702 x) (CLIP).
// Binary OP: 0 = a + b, 1 = silu(a) * b (SwiGLU), 2 = a * b,
//            3 = gelu_tanh(a) * b (GEGLU, T5 v1.1).
//
// needs: gelu_tanh

struct Params {
    n: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

const WG: u32 = 256u;

override OP: u32 = 0u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> a: array<act>;
@group(0) @binding(2) var<storage, read> b: array<act>;
@group(0) @binding(3) var<storage, read_write> out: array<act>;

fn element(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

fn unary(x: f32) -> f32 {
    if OP == 0u {
        return gelu_tanh(x);
    } else if OP == 1u {
        return silu(x);
    } else if OP == 3u {
        return x / (1.0 + exp(-1.702 * x));
    }
    return x * params.scale;
}

fn binary(x: f32, y: f32) -> f32 {
    if OP == 0u {
        return x + y;
    } else if OP == 1u {
        return silu(x) * y;
    } else if OP == 3u {
        return gelu_tanh(x) * y;
    }
    return x * y;
}

@compute @workgroup_size(256)
fn unary_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = element(wid, nwg, lid);
    if i < params.n {
        out[i] = act(unary(f32(a[i])));
    }
}

@compute @workgroup_size(256)
fn unary_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = element(wid, nwg, lid);
    if i < params.n {
        out[i] = act(unary(f32(out[i])));
    }
}

@compute @workgroup_size(256)
fn binary_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = element(wid, nwg, lid);
    if i < params.n {
        out[i] = act(binary(f32(a[i]), f32(b[i])));
    }
}

@compute @workgroup_size(256)
fn binary_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = element(wid, nwg, lid);
    if i < params.n {
        out[i] = act(binary(f32(out[i]), f32(b[i])));
    }
}
