#version 460
// bf16 weights, 128 x 128 tiles, 32 K columns a step, 256 invocations (10 KiB of shared weights).
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_BF16 1
#define BM 128
#define BN 128
#define BK 32
#define WG 256
#include "gemm_cm2.glsl"
