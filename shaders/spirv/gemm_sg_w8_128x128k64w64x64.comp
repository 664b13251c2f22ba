#version 460
// int8 weights and codes on subgroup-scope matrices: 128 x 128 tiles, 64 K columns a step, subgroups of 64 x 64 each, 128 invocations.
#extension GL_GOOGLE_include_directive : require
#define INT8 1
#define BM 128
#define BN 128
#define BK 64
#define WM 64
#define WN 64
#define WG 128
#include "gemm_sg.glsl"
