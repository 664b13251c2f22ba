#version 460
// Flash attention on subgroup-scope matrices: 256 query rows (8 subgroups of 2 x 16) and 32 keys a block, head_dim 128, 256 invocations.
#extension GL_GOOGLE_include_directive : require
#define NW 8
#define RW 2u
#define BR 256
#define BC 32
#define HD 128
#define WG 256
#include "flash_cm2_sg.glsl"
