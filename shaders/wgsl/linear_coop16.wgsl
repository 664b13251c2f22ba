// The cooperative-matrix shape of linear_gemm_coop.wgsl: 16 x 16 x 16,
// f16 inputs, f32 accumulators (NVIDIA tensor cores).
//
// provides: CM, cm_a, cm_b, cm_c
const CM: u32 = 16u;
alias cm_a = coop_mat16x16<f16, A>;
alias cm_b = coop_mat16x16<f16, B>;
alias cm_c = coop_mat16x16<f32, C>;
