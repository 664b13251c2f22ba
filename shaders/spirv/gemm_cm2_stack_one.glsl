// One weight of a STACK kernel (gemm_cm2.glsl): its epilogue and its tile
// function, for the macros the includer set (STORE_FN, Y_BUF, Y_N_BASE,
// Y_N, Y_STRIDE, BIAS_FN, BIAS_BUF, FINISH, TILE_FN, W_BUF, N_ROWS), which
// it then clears for the next weight.
#include "gemm_cm2_finish.glsl"
#include "cm2_main.glsl"
#undef STORE_FN
#undef Y_BUF
#undef Y_N_BASE
#undef Y_N
#undef Y_STRIDE
#undef BIAS_FN
#undef BIAS_BUF
#undef FINISH
#undef TILE_FN
#undef W_BUF
#undef N_ROWS
