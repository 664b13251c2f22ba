#version 460
// Flash attention on subgroup-scope matrices: 128 query rows (4 subgroups of 2 x 16) and 64 keys a block, head_dim 128, 128 invocations.
#extension GL_GOOGLE_include_directive : require
#define NW 4
#define RW 2u
#define BR 128
#define BC 64
#define HD 128
#define WG 128
#include "flash_cm2_sg.glsl"
