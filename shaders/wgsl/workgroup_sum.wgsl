// The sum of one f32 per invocation over a workgroup of WG invocations (a
// power of two, at most 1024), reduced as a tree in workgroup memory
// (portable: no subgroups); every invocation gets the total.
//
// needs: WG
// provides: workgroup_sum

var<workgroup> red: array<f32, 1024>;

fn workgroup_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if lid < s {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}
