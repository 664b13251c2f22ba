#version 460
// f16 weights on subgroup-scope matrices: 128 x 128 tiles, 32 K columns a step, subgroups of 64 x 32 each, 256 invocations.
#extension GL_GOOGLE_include_directive : require
#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 32
#define WG 256
#include "gemm_sg.glsl"
