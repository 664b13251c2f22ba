// What every cooperative-matrix-2 kernel (the GEMMs, flash attention)
// starts with: its extensions and a workgroup of WG invocations.
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_cooperative_matrix : enable
#extension GL_NV_cooperative_matrix2 : enable
#extension GL_EXT_shader_explicit_arithmetic_types : enable
#extension GL_EXT_shader_16bit_storage : enable
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;
