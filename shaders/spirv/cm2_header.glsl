// The start of the cooperative-matrix-2 GEMMs (gemm_cm2.glsl,
// gemm_cm2_int.glsl): the extensions and workgroup every such kernel has,
// the GEMMs' push constants and the tile a workgroup computes.
#include "cm2_extensions.glsl"

#include "cm2_params.glsl"

// GROUP_M > 0: the grid's workgroups, counted x first, take their output
// tiles in groups of GROUP_M row tiles, down a group's column tiles one
// column at a time, so that the workgroups resident at once share GROUP_M
// panels of A and a few of B in L2; 0: tile (x, y) of the grid. The grid is
// (column tiles, row tiles) either way.
#ifndef GROUP_M
#define GROUP_M 0
#endif

// This workgroup's (column tile, row tile).
uvec2 tile_of() {
#if GROUP_M
    uint pid = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint per_group = uint(GROUP_M) * gl_NumWorkGroups.x;
    uint first = (pid / per_group) * uint(GROUP_M);
    uint rows = min(gl_NumWorkGroups.y - first, uint(GROUP_M));
    uint at = pid % per_group;
    return uvec2(at / rows, first + at % rows);
#else
    return gl_WorkGroupID.xy;
#endif
}

#include "gelu.glsl"

// gelu_tanh as a per-element function of an epilogue.
float gelu_tanh_of(const in uint row, const in uint col, const in float v) {
    return gelu_tanh(v);
}
