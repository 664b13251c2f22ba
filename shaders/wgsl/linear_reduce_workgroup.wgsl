// Workgroup-wide reductions through workgroup memory: the portable variant
// (no subgroups). Prepended to kernel bodies that call `wg_sum_i32`,
// `wg_sum_f32` or `wg_max_f32`; every invocation of the 64-wide workgroup
// must call them in uniform control flow, and all get the result.
//
// provides: WG, wg_max_f32, wg_sum_f32, wg_sum_i32

const WG: u32 = 64u;

var<workgroup> red_i32: array<i32, 64>;
var<workgroup> red_f32: array<f32, 64>;

fn wg_sum_i32(v: i32, lid: u32) -> i32 {
    red_i32[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if lid < s {
            red_i32[lid] = red_i32[lid] + red_i32[lid + s];
        }
        workgroupBarrier();
    }
    let r = red_i32[0];
    workgroupBarrier();
    return r;
}

fn wg_sum_f32(v: f32, lid: u32) -> f32 {
    red_f32[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if lid < s {
            red_f32[lid] = red_f32[lid] + red_f32[lid + s];
        }
        workgroupBarrier();
    }
    let r = red_f32[0];
    workgroupBarrier();
    return r;
}

// Maximum of non-negative values (absmax).
fn wg_max_f32(v: f32, lid: u32) -> f32 {
    red_f32[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if lid < s {
            red_f32[lid] = max(red_f32[lid], red_f32[lid + s]);
        }
        workgroupBarrier();
    }
    let r = red_f32[0];
    workgroupBarrier();
    return r;
}
