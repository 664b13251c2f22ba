#version 460
// Flash attention on subgroup-scope matrices: 128 query rows (4 subgroups of 2 x 16, Q in shared memory) and 16 keys a block, the lazy rescale, head_dim 128, 128 invocations.
#extension GL_GOOGLE_include_directive : require
#define NW 4
#define RW 2u
#define BR 128
#define BC 16
#define HD 128
#define WG 128
#define LAZY 1
#define QSH 1
#include "flash_cm2_sg.glsl"
