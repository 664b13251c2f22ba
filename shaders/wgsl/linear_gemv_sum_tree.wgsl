// Integer GEMV sums, portable variant (after linear_gemv_tree.wgsl): exact
// wrapping i32 adds in the tree order. Same contract as
// linear_gemv_sum_subgroup.wgsl: afterwards gv_result(v) is total v.
//
// needs: GV_IADD, gv_out, gv_tree
// provides: gemv_sum_i32, gv_result

fn gemv_sum_i32(acc: ptr<function, array<i32, 64>>, count: u32, lid: u32) {
    var bits: array<u32, 64>;
    for (var v = 0u; v < count; v++) {
        bits[v] = bitcast<u32>((*acc)[v]);
    }
    gv_tree(&bits, count, lid, GV_IADD);
}

fn gv_result(v: u32) -> i32 {
    return bitcast<i32>(gv_out[v]);
}
