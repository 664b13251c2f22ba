// The global reads of the staged weights (gemm_cm2.glsl's bf16 and
// gemm_cm2_int.glsl's int4, which have no cooperative type): a step's
// BN x BK weights as loads of W_PER columns each (one `W_RAW`), LOADS a
// invocation, for cm2_main.glsl's `fetch_w`; `staged_at` places a load in
// the step's tile for the kernel's `put_w`.
//
// needs: W_PER, W_RAW, w

// Loads of a step, and per invocation.
const uint STEP_LOADS = BN * BK / W_PER;
const uint LOADS = (STEP_LOADS + WG - 1u) / WG;

// The row and first column (of the step) of this invocation's load `i`, or
// false past the step's loads.
bool staged_at(uint i, out uint row, out uint col) {
    uint q = gl_LocalInvocationIndex + i * WG;
    row = q / (BK / W_PER);
    col = W_PER * (q % (BK / W_PER));
    return q < STEP_LOADS;
}

// Load `i` of K step `k0`, zero past the chunk's rows and K (a multiple of
// W_PER, so a load is all in or all out).
W_RAW fetch_w(uint n0, uint k0, uint i) {
    uint row;
    uint col;
    if (staged_at(i, row, col) && n0 + row < p.n && k0 + col < p.k) {
        return w[(n0 + row) * (p.k / W_PER) + (k0 + col) / W_PER];
    }
    return W_RAW(0u);
}
