#version 460
// gemm_cm2_f16_k32_fast_stack with its tiles taken in groups of 8 row tiles (Cm2Stack::Grouped).
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 0
#define BM 128
#define BN 256
#define BK 32
#define WG 256
#define FAST 1
#define GROUP_M 8
#define FAST_UNROLL 4u
#define STACK 3
#include "gemm_cm2.glsl"
