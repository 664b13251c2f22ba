// Integer GEMV sums with subgroup operations (needs SUBGROUP): each subgroup
// adds a value in registers, then one lane per subgroup adds it into a
// workgroup atomic. Integer sums are exact in any order, so nothing assumes
// a subgroup size or layout. Every invocation of the WGS-wide workgroup
// (WGS >= 64) calls it in uniform control flow; afterwards gv_result(v) is
// total v.
//
// provides: gemv_sum_i32, gv_result

var<workgroup> gv_atomic: array<atomic<i32>, 64>;

fn gemv_sum_i32(acc: ptr<function, array<i32, 64>>, count: u32, lid: u32) {
    if lid < count {
        atomicStore(&gv_atomic[lid], 0);
    }
    workgroupBarrier();
    let leader = subgroupExclusiveAdd(1u) == 0u;
    for (var v = 0u; v < count; v++) {
        let s = subgroupAdd((*acc)[v]);
        if leader {
            atomicAdd(&gv_atomic[v], s);
        }
    }
    workgroupBarrier();
}

fn gv_result(v: u32) -> i32 {
    return atomicLoad(&gv_atomic[v]);
}
