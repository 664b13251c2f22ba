// Shared by the multi-row GEMV bodies (linear_*_gemv_rows.wgsl), after a
// weights fragment (linear_gemv_one.wgsl or linear_gemv_three.wgsl): which
// weight and rows a workgroup takes, and the fused SwiGLU output.
//
// needs: ROWS, SEGS, p
// provides: GLU, seg_at, seg_parts, silu_mul

// Fused gate/up: every workgroup reads the same ROWS rows of weight 0 (gate)
// and weight 1 (up) and writes silu(gate) · up to weight 0's output.
override GLU: bool = false;

// Weights each workgroup reads rows of: 2 with GLU.
fn seg_parts() -> u32 {
    return select(1u, 2u, GLU);
}

// (weight, first row) of workgroup g: the workgroups run over weight 0's
// groups of ROWS rows, then weight 1's, then weight 2's (GLU: weight 0's).
fn seg_at(g: u32) -> vec2<u32> {
    let g0 = (p.n + ROWS - 1u) / ROWS;
    if GLU || SEGS == 1u || g < g0 {
        return vec2<u32>(0u, g * ROWS);
    }
    let g1 = (p.n1 + ROWS - 1u) / ROWS;
    if g - g0 < g1 {
        return vec2<u32>(1u, (g - g0) * ROWS);
    }
    return vec2<u32>(2u, (g - g0 - g1) * ROWS);
}

// SwiGLU of the two outputs as elementwise.wgsl computes it from the rounded
// gate and up activations, so fused and unfused layers give the same values.
fn silu_mul(gate: act, up: act) -> act {
    let x = f32(gate);
    return act(x / (1.0 + exp(-x)) * f32(up));
}
