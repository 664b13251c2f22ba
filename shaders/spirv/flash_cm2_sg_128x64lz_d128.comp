#version 460
// Flash attention on subgroup-scope matrices: 128 query rows (8 subgroups of 16) and 64 keys a block, the lazy rescale, head_dim 128, 256 invocations.
#extension GL_GOOGLE_include_directive : require
#define NW 8
#define BR 128
#define BC 64
#define HD 128
#define WG 256
#define LAZY 1
#include "flash_cm2_sg.glsl"
