#version 460
// int8 codes x int4 weights, 128 x 256 tiles, 64 K columns a step, 256 invocations (20 KiB of shared weights).
#extension GL_GOOGLE_include_directive : require
#define WEIGHT_INT4 1
#define BM 128
#define BN 256
#define BK 64
#define WG 256
#include "gemm_cm2_int.glsl"
