// The matrix units' own rate through WGSL cooperative matrices, after a
// shape fragment (linear_coop16.wgsl: CM and cm_a/cm_b/cm_c): what any GEMM
// or attention kernel on this path can reach at best. Each subgroup runs
// ITERS rounds of CHAINS independent multiply-adds (so the units' latency
// is hidden), with its operands
// - `mma_registers`: loaded once (the arithmetic alone),
// - `mma_shared`: loaded from workgroup memory every round, two A and two
//   B tiles per four products, as the GEMM's inner loop does.
// The sums are stored, so nothing can be dropped.
// Dispatch: any number of workgroups of SG * NSG invocations.
//
// needs: CM, cm_a, cm_b, cm_c

override SG: u32 = 32u;
override ITERS: u32 = 4096u;
const NSG: u32 = 4u;
// One 16 x 64 f16 panel per subgroup for each of A and B.
const PANEL: u32 = CM * 4u * CM;

@group(0) @binding(0) var<storage, read_write> sums: array<f32>;

var<workgroup> a_sh: array<f16, NSG * PANEL>;
var<workgroup> b_sh: array<f16, NSG * PANEL>;

fn fill(lid: u32) {
    for (var e = lid; e < NSG * PANEL; e += SG * NSG) {
        a_sh[e] = f16(f32(e % 7u) * 0.001);
        b_sh[e] = f16(f32(e % 5u) * 0.001);
    }
    workgroupBarrier();
}

fn drain(wid: u32, sg: u32, acc: cm_c, i: u32) {
    let base = ((wid * NSG + sg) * 4u + i) * CM * CM;
    coopStore(acc, &sums[base], CM);
}

@compute @workgroup_size(SG * NSG)
fn mma_registers(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
) {
    fill(lid);
    let sg = min(sg_id, NSG - 1u);
    let a0 = coopLoadT<cm_a>(&a_sh[sg * PANEL], 4u * CM);
    let a1 = coopLoadT<cm_a>(&a_sh[sg * PANEL + CM], 4u * CM);
    let b0 = coopLoad<cm_b>(&b_sh[sg * PANEL], 4u * CM);
    let b1 = coopLoad<cm_b>(&b_sh[sg * PANEL + CM], 4u * CM);
    var c0 = cm_c();
    var c1 = cm_c();
    var c2 = cm_c();
    var c3 = cm_c();
    for (var i = 0u; i < ITERS; i++) {
        c0 = coopMultiplyAdd(a0, b0, c0);
        c1 = coopMultiplyAdd(a0, b1, c1);
        c2 = coopMultiplyAdd(a1, b0, c2);
        c3 = coopMultiplyAdd(a1, b1, c3);
    }
    drain(wid.x, sg, c0, 0u);
    drain(wid.x, sg, c1, 1u);
    drain(wid.x, sg, c2, 2u);
    drain(wid.x, sg, c3, 3u);
}

@compute @workgroup_size(SG * NSG)
fn mma_shared(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
) {
    fill(lid);
    let sg = min(sg_id, NSG - 1u);
    var c0 = cm_c();
    var c1 = cm_c();
    var c2 = cm_c();
    var c3 = cm_c();
    for (var i = 0u; i < ITERS; i++) {
        // Walk the panel's four K steps as the GEMM walks its staged columns.
        let kk = (i % 4u) * CM;
        let a0 = coopLoadT<cm_a>(&a_sh[sg * PANEL + kk], 4u * CM);
        let a1 = coopLoadT<cm_a>(&a_sh[((sg + 1u) % NSG) * PANEL + kk], 4u * CM);
        let b0 = coopLoad<cm_b>(&b_sh[sg * PANEL + kk], 4u * CM);
        let b1 = coopLoad<cm_b>(&b_sh[((sg + 1u) % NSG) * PANEL + kk], 4u * CM);
        c0 = coopMultiplyAdd(a0, b0, c0);
        c1 = coopMultiplyAdd(a0, b1, c1);
        c2 = coopMultiplyAdd(a1, b0, c2);
        c3 = coopMultiplyAdd(a1, b1, c3);
    }
    drain(wid.x, sg, c0, 0u);
    drain(wid.x, sg, c1, 1u);
    drain(wid.x, sg, c2, 2u);
    drain(wid.x, sg, c3, 3u);
}
