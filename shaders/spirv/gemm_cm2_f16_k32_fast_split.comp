#version 460
// gemm_cm2_f16_k32_fast with K split across workgroups (f32 partial sums out).
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 0
#define BM 128
#define BN 256
#define BK 32
#define WG 256
#define FAST 1
#define FAST_UNROLL 4u
#define SPLIT 1
#include "gemm_cm2.glsl"
