#version 460
// gemm_cm2_w8_k64_fast with K split across workgroups (exact s32 partial sums out).
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_INT4 0
#define BM 128
#define BN 256
#define BK 64
#define WG 256
#define FAST 1
#define FAST_UNROLL 4u
#define SPLIT 1
#include "gemm_cm2_int.glsl"
