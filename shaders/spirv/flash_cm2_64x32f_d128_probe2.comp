#version 460
// A probe, not attention (FA_PROBE 2 in flash_cm2.glsl): flash_cm2_64x32f_d128 without the output rescale.
#extension GL_GOOGLE_include_directive : require
#define BR 64
#define BC 32
#define HD 128
#define WG 128
#define FA_FAST 1
#define FA_PROBE 2
#include "flash_cm2.glsl"
