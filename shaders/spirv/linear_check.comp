#version 460
// A plain float linear (no cooperative matrices) with the interface of the
// cooperative-matrix-2 GEMMs (gemm_cm2.glsl): the same bindings, push
// constants and output contract, f16 weights. It runs on any device that
// takes raw SPIR-V, so the SPIR-V launch path (explicit layout, push
// constants, weight chunks writing columns of a wider output) is tested
// where the cooperative-matrix-2 kernels cannot run (CI's lavapipe).
// One invocation an output, 16 x 16 tiles.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types : enable
#extension GL_EXT_shader_16bit_storage : enable

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

#include "cm2_params.glsl"
#include "gelu.glsl"

layout(set = 0, binding = 0, std430) readonly buffer Weights { float16_t w[]; };
layout(set = 0, binding = 2, std430) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3, std430) readonly buffer Act { float16_t x[]; };
layout(set = 0, binding = 4, std430) writeonly buffer Out { float16_t y[]; };

void main() {
    uint m = gl_WorkGroupID.y * 16u + gl_LocalInvocationIndex / 16u;
    uint n = gl_WorkGroupID.x * 16u + gl_LocalInvocationIndex % 16u;
    if (m >= p.m || n >= p.n) {
        return;
    }
    float sum = 0.0;
    for (uint k = 0u; k < p.k; k++) {
        sum += float(x[m * p.k + k]) * float(w[n * p.k + k]);
    }
    if ((p.flags & 1u) != 0u) {
        sum += bias[p.n_base + n];
    }
    if ((p.flags & 8u) != 0u) {
        sum = gelu_tanh(sum);
    }
    y[m * p.out_stride + p.n_base + n] = float16_t(sum);
}
