#version 460
// Flash attention on subgroup-scope matrices: 96 query rows (6 subgroups of 16) and 64 keys a block, the lazy rescale, head_dim 128, 192 invocations (FLUX.1's 4608 rows: 48 row blocks a head).
#extension GL_GOOGLE_include_directive : require
#define NW 6
#define BR 96
#define BC 64
#define HD 128
#define WG 192
#define LAZY 1
#include "flash_cm2_sg.glsl"
