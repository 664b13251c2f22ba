// attention_decode.wgsl's sum over the LPK lanes of a key group through
// workgroup memory (any adapter): the lanes store their values, the first
// QG lanes of each group (LPK >= MAX_QG) add one query's LPK values, and
// every lane reads the sums back. Called by every invocation in uniform
// control flow.
//
// needs: LPK, MAX_KP, MAX_QG, QG, WG
// provides: group_sum

// Queries gs_in holds per invocation (QG, written in by the host as text:
// it sizes the array).
const GS_QG: u32 = 8u;

var<workgroup> gs_in: array<f32, WG * GS_QG>;
var<workgroup> gs_out: array<f32, MAX_KP * MAX_QG>;

fn group_sum(lid: u32, x: array<f32, MAX_QG>) -> array<f32, MAX_QG> {
    for (var qi = 0u; qi < QG; qi++) {
        gs_in[qi * WG + lid] = x[qi];
    }
    workgroupBarrier();
    let kg = lid / LPK;
    let lane = lid % LPK;
    if lane < QG {
        var t = 0.0;
        for (var i = 0u; i < LPK; i++) {
            t += gs_in[lane * WG + kg * LPK + i];
        }
        gs_out[kg * MAX_QG + lane] = t;
    }
    workgroupBarrier();
    var y: array<f32, MAX_QG>;
    for (var qi = 0u; qi < QG; qi++) {
        y[qi] = gs_out[kg * MAX_QG + qi];
    }
    return y;
}
