#version 460
// f16 weights, 128 x 256 tiles, 64 K columns a step, 256 invocations, tiles taken in groups of 8 row tiles; inner tiles unclamped, 4 steps unrolled.
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 0
#define BM 128
#define BN 256
#define BK 64
#define WG 256
#define FAST 1
#define GROUP_M 8
#define FAST_UNROLL 4u
#include "gemm_cm2.glsl"
