// The start of the cooperative-matrix-2 GEMMs (gemm_cm2.glsl,
// gemm_cm2_int.glsl): their extensions, workgroup (WG invocations) and
// push constants.
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_cooperative_matrix : enable
#extension GL_NV_cooperative_matrix2 : enable
#extension GL_EXT_shader_explicit_arithmetic_types : enable
#extension GL_EXT_shader_16bit_storage : enable

layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

#include "cm2_params.glsl"
