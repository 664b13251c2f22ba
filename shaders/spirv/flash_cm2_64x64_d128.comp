#version 460
// Flash attention: 64 query rows and 64 keys a block, head_dim 128, 128 invocations, the softmax of FA_SIMPLE.
#extension GL_GOOGLE_include_directive : require
#define BR 64
#define BC 64
#define HD 128
#define WG 128
#define FA_SIMPLE 1
#include "flash_cm2.glsl"
