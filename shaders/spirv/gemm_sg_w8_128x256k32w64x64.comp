#version 460
// int8 weights and codes on subgroup-scope matrices: 128 x 256 tiles, 32 K columns a step, subgroups of 64 x 64 each, 256 invocations.
#extension GL_GOOGLE_include_directive : require
#define INT8 1
#define BM 128
#define BN 256
#define BK 32
#define WM 64
#define WN 64
#define WG 256
#include "gemm_sg.glsl"
