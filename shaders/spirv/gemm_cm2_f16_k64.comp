#version 460
// f16 weights, 128 x 256 tiles, 64 K columns a step, 256 invocations.
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 0
#define BM 128
#define BN 256
#define BK 64
#define WG 256
#include "gemm_cm2.glsl"
