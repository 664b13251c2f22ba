#version 460
// f16 weights, 256 x 256 tiles, 32 K columns a step, 512 invocations; inner tiles unclamped, 4 steps unrolled.
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 0
#define BM 256
#define BN 256
#define BK 32
#define WG 512
#define FAST 1
#define FAST_UNROLL 4u
#include "gemm_cm2.glsl"
