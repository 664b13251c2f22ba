// Workgroup-wide reductions with subgroup operations: the fast variant (needs
// the SUBGROUP feature; naga 30 rejects `enable subgroups;` and gates the
// operations on its SUBGROUP capability instead). Same contract as linear_reduce_workgroup.wgsl for
// the integer sum and the absmax, which are exact in any order: each subgroup
// reduces in registers, then one lane per subgroup folds its partial into a
// workgroup atomic. The f32 sum keeps the portable tree (its order matters).
//
// provides: WG, wg_max_f32, wg_sum_i32

const WG: u32 = 64u;

var<workgroup> red_i32: atomic<i32>;
var<workgroup> red_u32: atomic<u32>;
var<workgroup> red_f32: array<f32, 64>;

fn wg_sum_i32(v: i32, lid: u32) -> i32 {
    if lid == 0u {
        atomicStore(&red_i32, 0);
    }
    workgroupBarrier();
    let s = subgroupAdd(v);
    if subgroupExclusiveAdd(1u) == 0u {
        atomicAdd(&red_i32, s);
    }
    workgroupBarrier();
    let r = atomicLoad(&red_i32);
    workgroupBarrier();
    return r;
}

// Maximum of non-negative values: their f32 bit patterns order like the values.
fn wg_max_f32(v: f32, lid: u32) -> f32 {
    if lid == 0u {
        atomicStore(&red_u32, 0u);
    }
    workgroupBarrier();
    let s = subgroupMax(v);
    if subgroupExclusiveAdd(1u) == 0u {
        atomicMax(&red_u32, bitcast<u32>(s));
    }
    workgroupBarrier();
    let r = bitcast<f32>(atomicLoad(&red_u32));
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
