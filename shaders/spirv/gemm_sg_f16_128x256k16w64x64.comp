#version 460
// f16 weights on subgroup-scope matrices: 128 x 256 tiles, 16 K columns a step, subgroups of 64 x 64 each, 256 invocations.
#extension GL_GOOGLE_include_directive : require
#define BM 128
#define BN 256
#define BK 16
#define WM 64
#define WN 64
#define WG 256
#include "gemm_sg.glsl"
