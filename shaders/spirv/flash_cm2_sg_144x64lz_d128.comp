#version 460
// Flash attention on subgroup-scope matrices: 144 query rows (9 subgroups of 16) and 64 keys a block, the lazy rescale, head_dim 128, 288 invocations (FLUX.1's 4608 rows: 32 row blocks a head).
#extension GL_GOOGLE_include_directive : require
#define NW 9
#define BR 144
#define BC 64
#define HD 128
#define WG 288
#define LAZY 1
#include "flash_cm2_sg.glsl"
