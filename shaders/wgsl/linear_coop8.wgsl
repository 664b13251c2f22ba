// The cooperative-matrix shape of linear_gemm_coop.wgsl: 8 x 8 x 8,
// f16 inputs, f32 accumulators (Mesa's lavapipe).
//
// provides: CM, cm_a, cm_b, cm_c
const CM: u32 = 8u;
alias cm_a = coop_mat8x8<f16, A>;
alias cm_b = coop_mat8x8<f16, B>;
alias cm_c = coop_mat8x8<f32, C>;
