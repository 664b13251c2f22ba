// The matrix units' own rate through WGSL cooperative matrices, after a
// shape fragment (linear_coop16.wgsl: CM and cm_a/cm_b/cm_c): what any GEMM
// or attention kernel on this path can reach at best. Each subgroup runs
// ITERS rounds of CHAINS independent multiply-adds (so the units' latency
// is hidden), with its operands
// - `mma_registers`: loaded once (the arithmetic alone),
// - `mma_shared`: loaded from workgroup memory every round, two A and two
//   B tiles per four products, as the GEMM's inner loop does, from panels
//   of 4 * CM f16 a row (128 bytes on 16 x 16 matrices: every row of a
//   tile starts on the same memory banks),
// - `mma_shared_padded`: the same from rows padded by 8 f16 (16 bytes:
//   eight consecutive rows start on eight different 16-byte bank groups,
//   as the GEMM's staged tiles are laid out),
// - `mma_shared_double`: padded, and the next round's four tiles loaded
//   before this round's products (operands double-buffered in registers),
//   so a load's latency can hide behind the previous products.
// The sums are stored, so nothing can be dropped.
// Dispatch: any number of workgroups of SG * NSG invocations.
//
// needs: CM, cm_a, cm_b, cm_c

override SG: u32 = 32u;
override ITERS: u32 = 4096u;
const NSG: u32 = 4u;
// Row pitches of a subgroup's 16 x 64 f16 panels (on 16 x 16 matrices).
const PLAIN: u32 = 4u * CM;
const PADDED: u32 = 4u * CM + 8u;
// One panel per subgroup for each of A and B, sized for the padded rows.
const PANEL: u32 = CM * PADDED;

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

// The A (or B) tile of subgroup panel `sg` at K step `kk` for rows of `pitch`.
fn tile_a(sg: u32, kk: u32, pitch: u32) -> cm_a {
    return coopLoadT<cm_a>(&a_sh[(sg % NSG) * PANEL + kk], pitch);
}

fn tile_b(sg: u32, kk: u32, pitch: u32) -> cm_b {
    return coopLoad<cm_b>(&b_sh[(sg % NSG) * PANEL + kk], pitch);
}

@compute @workgroup_size(SG * NSG)
fn mma_registers(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
) {
    fill(lid);
    let sg = min(sg_id, NSG - 1u);
    let a0 = tile_a(sg, 0u, PLAIN);
    let a1 = tile_a(sg, CM, PLAIN);
    let b0 = tile_b(sg, 0u, PLAIN);
    let b1 = tile_b(sg, CM, PLAIN);
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

// Every round loads its four tiles from rows of `pitch`, walking the
// panel's four K steps as the GEMM walks its staged columns.
fn shared_rounds(wid: u32, sg: u32, pitch: u32) {
    var c0 = cm_c();
    var c1 = cm_c();
    var c2 = cm_c();
    var c3 = cm_c();
    for (var i = 0u; i < ITERS; i++) {
        let kk = (i % 4u) * CM;
        let a0 = tile_a(sg, kk, pitch);
        let a1 = tile_a(sg + 1u, kk, pitch);
        let b0 = tile_b(sg, kk, pitch);
        let b1 = tile_b(sg + 1u, kk, pitch);
        c0 = coopMultiplyAdd(a0, b0, c0);
        c1 = coopMultiplyAdd(a0, b1, c1);
        c2 = coopMultiplyAdd(a1, b0, c2);
        c3 = coopMultiplyAdd(a1, b1, c3);
    }
    drain(wid, sg, c0, 0u);
    drain(wid, sg, c1, 1u);
    drain(wid, sg, c2, 2u);
    drain(wid, sg, c3, 3u);
}

@compute @workgroup_size(SG * NSG)
fn mma_shared(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
) {
    fill(lid);
    shared_rounds(wid.x, min(sg_id, NSG - 1u), PLAIN);
}

@compute @workgroup_size(SG * NSG)
fn mma_shared_padded(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
) {
    fill(lid);
    shared_rounds(wid.x, min(sg_id, NSG - 1u), PADDED);
}

@compute @workgroup_size(SG * NSG)
fn mma_shared_double(
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
    var a0 = tile_a(sg, 0u, PADDED);
    var a1 = tile_a(sg + 1u, 0u, PADDED);
    var b0 = tile_b(sg, 0u, PADDED);
    var b1 = tile_b(sg + 1u, 0u, PADDED);
    for (var i = 0u; i < ITERS; i++) {
        let kk = ((i + 1u) % 4u) * CM;
        let na0 = tile_a(sg, kk, PADDED);
        let na1 = tile_a(sg + 1u, kk, PADDED);
        let nb0 = tile_b(sg, kk, PADDED);
        let nb1 = tile_b(sg + 1u, kk, PADDED);
        c0 = coopMultiplyAdd(a0, b0, c0);
        c1 = coopMultiplyAdd(a0, b1, c1);
        c2 = coopMultiplyAdd(a1, b0, c2);
        c3 = coopMultiplyAdd(a1, b1, c3);
        a0 = na0;
        a1 = na1;
        b0 = nb0;
        b1 = nb1;
    }
    drain(wid.x, sg, c0, 0u);
    drain(wid.x, sg, c1, 1u);
    drain(wid.x, sg, c2, 2u);
    drain(wid.x, sg, c3, 3u);
}
