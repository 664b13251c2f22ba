// The start of the cooperative-matrix-2 GEMMs (gemm_cm2.glsl,
// gemm_cm2_int.glsl): the extensions and workgroup every such kernel has,
// and the GEMMs' push constants.
#include "cm2_extensions.glsl"

#include "cm2_params.glsl"
