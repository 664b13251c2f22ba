#version 460
// Flash attention: 64 query rows and 32 keys a block, head_dim 128, 128 invocations; inner key blocks unclamped, 1 a loop iteration.
#extension GL_GOOGLE_include_directive : require
#define BR 64
#define BC 32
#define HD 128
#define WG 128
#define FA_FAST 1
#include "flash_cm2.glsl"
