#version 460
// Flash attention: 128 query rows and 32 keys a block, head_dim 128, 256 invocations; inner key blocks unclamped, 2 a loop iteration.
#extension GL_GOOGLE_include_directive : require
#define BR 128
#define BC 32
#define HD 128
#define WG 256
#define FA_FAST 2
#include "flash_cm2.glsl"
