// attention_decode.wgsl's sum over the LPK lanes of a key group with
// subgroup shuffles (needs SUBGROUP, subgroups of at least LPK
// invocations, laid out along local_invocation_index as every driver does
// for a one-dimensional workgroup). A butterfly: every lane ends with the
// same bits (each step adds the same two values, in either order).
//
// needs: LPK, MAX_QG, QG
// provides: group_sum

fn group_sum(lid: u32, x: array<f32, MAX_QG>) -> array<f32, MAX_QG> {
    var y = x;
    for (var mask = LPK / 2u; mask > 0u; mask = mask >> 1u) {
        for (var qi = 0u; qi < QG; qi++) {
            y[qi] += subgroupShuffleXor(y[qi], mask);
        }
    }
    return y;
}
