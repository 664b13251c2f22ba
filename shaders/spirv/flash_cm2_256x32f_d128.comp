#version 460
// Flash attention: 256 query rows and 32 keys a block, head_dim 128, 512 invocations; inner key blocks unclamped, 1 a loop iteration.
#extension GL_GOOGLE_include_directive : require
#define BR 256
#define BC 32
#define HD 128
#define WG 512
#define FA_FAST 1
#include "flash_cm2.glsl"
