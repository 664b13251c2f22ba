// The split-K integer SPIR-V GEMM's last step (gemm_cm2_int.glsl built with
// SPLIT), after linear_int_common.wgsl: `p.k` splits' exact i32 partial
// sums of the tail rows ([p.m, p.n] each, one after another, in the
// activation-code binding `xq` as their bits), added in i32 — the unsplit
// kernel's accumulator exactly — then the integer epilogue (`store`) at
// output row p.n1 + row, the tail's first row p.n1: bit for bit the unsplit
// output. A grid-stride loop over 256-invocation workgroups.
//
// needs: p, store, xq

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let total = p.m * p.n;
    let stride = groups.x * 256u;
    for (var i = gid.x; i < total; i += stride) {
        var s = bitcast<i32>(xq[i]);
        for (var z = 1u; z < p.k; z++) {
            s += bitcast<i32>(xq[z * total + i]);
        }
        store(p.n1 + i / p.n, i % p.n, s);
    }
}
