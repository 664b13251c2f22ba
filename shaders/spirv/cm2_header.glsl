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
// PERSIST 1: a grid of one workgroup a multiprocessor (the host's), each
// taking tiles pid, pid + workgroups, ... in tile_at's order until the
// grid's tiles are done (cm2_main.glsl), so that no workgroup starts or
// ends between tiles.
#ifndef PERSIST
#define PERSIST 0
#endif

// Tile `pid` of a grid of `tx` column tiles and `ty` row tiles, counted x
// first, as GROUP_M orders them.
uvec2 tile_at(uint pid, uint tx, uint ty) {
#if GROUP_M
    uint per_group = uint(GROUP_M) * tx;
    uint first = (pid / per_group) * uint(GROUP_M);
    uint rows = min(ty - first, uint(GROUP_M));
    uint at = pid % per_group;
    return uvec2(at / rows, first + at % rows);
#else
    return uvec2(pid % tx, pid / tx);
#endif
}

// This workgroup's (column tile, row tile).
uvec2 tile_of() {
#if GROUP_M
    return tile_at(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x, gl_NumWorkGroups.x,
                   gl_NumWorkGroups.y);
#else
    return gl_WorkGroupID.xy;
#endif
}

#include "gelu.glsl"

// gelu_tanh as a per-element function of an epilogue.
float gelu_tanh_of(const in uint row, const in uint col, const in float v) {
    return gelu_tanh(v);
}
