// Workgroup reductions through workgroup memory (portable, no subgroups):
// every invocation holds up to 64 values (u32 bit patterns); `gv_tree`
// combines them across the WGS-wide workgroup with `op` in a fixed tree
// order (deterministic f32 sums) and leaves result v in gv_out[v]. Values go
// through the 4 KiB staging array GV_SLOTS / WGS at a time, so the barrier
// count is ceil(count · WGS / GV_SLOTS) · (log2(WGS) + 2). Every invocation
// must call it in uniform control flow. Needs WGS (the body's workgroup
// size, a power of two in 64..=1024).
//
// needs: WGS
// provides: GV_FADD, GV_IADD, GV_UMAX, gv_out, gv_tree

const GV_SLOTS: u32 = 1024u;
// Ops: wrapping i32/u32 add, f32 add, u32 max (the max of non-negative f32
// values: their bit patterns order like the values).
const GV_IADD: u32 = 0u;
const GV_FADD: u32 = 1u;
const GV_UMAX: u32 = 2u;

var<workgroup> gv_red: array<u32, 1024>;
var<workgroup> gv_out: array<u32, 64>;

fn gv_op(a: u32, b: u32, op: u32) -> u32 {
    switch op {
        case 1u: {
            return bitcast<u32>(bitcast<f32>(a) + bitcast<f32>(b));
        }
        case 2u: {
            return max(a, b);
        }
        default: {
            return a + b;
        }
    }
}

fn gv_tree(vals: ptr<function, array<u32, 64>>, count: u32, lid: u32, op: u32) {
    let per = GV_SLOTS / WGS;
    for (var v0 = 0u; v0 < count; v0 += per) {
        for (var c = 0u; c < per; c++) {
            if v0 + c < count {
                gv_red[c * WGS + lid] = (*vals)[v0 + c];
            }
        }
        workgroupBarrier();
        for (var s = WGS / 2u; s > 0u; s = s >> 1u) {
            if lid < s {
                for (var c = 0u; c < per; c++) {
                    if v0 + c < count {
                        let i = c * WGS + lid;
                        gv_red[i] = gv_op(gv_red[i], gv_red[i + s], op);
                    }
                }
            }
            workgroupBarrier();
        }
        if lid < per && v0 + lid < count {
            gv_out[v0 + lid] = gv_red[lid * WGS];
        }
        workgroupBarrier();
    }
}
