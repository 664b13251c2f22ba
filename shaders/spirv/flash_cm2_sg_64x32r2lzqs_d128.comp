#version 460
// Flash attention on subgroup-scope matrices: 64 query rows (2 subgroups of 2 x 16, Q in shared memory) and 32 keys a block, the lazy rescale, head_dim 128, 64 invocations.
#extension GL_GOOGLE_include_directive : require
#define NW 2
#define RW 2u
#define BR 64
#define BC 32
#define HD 128
#define WG 64
#define LAZY 1
#define QSH 1
#include "flash_cm2_sg.glsl"
