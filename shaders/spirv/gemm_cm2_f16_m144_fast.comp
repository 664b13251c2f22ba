#version 460
// f16 weights, 144 x 256 tiles (whole waves at 4608 rows and 12 column tiles), 32 K columns a step, 256 invocations; inner tiles unclamped, 4 steps unrolled.
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 0
#define BM 144
#define BN 256
#define BK 32
#define WG 256
#define FAST 1
#define FAST_UNROLL 4u
#include "gemm_cm2.glsl"
