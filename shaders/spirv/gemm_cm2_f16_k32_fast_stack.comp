#version 460
// gemm_cm2_f16_k32_fast over up to three weights of one input in one launch (q/k/v, gate/up).
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 0
#define BM 128
#define BN 256
#define BK 32
#define WG 256
#define FAST 1
#define FAST_UNROLL 4u
#define STACK 3
#include "gemm_cm2.glsl"
