// What the cooperative-matrix-2 flash kernels (flash_cm2.glsl, workgroup
// scope; flash_cm2_sg.glsl, subgroup scope) share: the extensions, the
// two-walk kernel's push constants, the per-element functions of the
// online softmax and the start of main (FLASH_START). The bindings are
// each kernel's.
#include "cm2_extensions.glsl"

layout(push_constant) uniform Params {
    uint sq;
    uint n_heads;
    uint n_kv;
    uint skv;
    uint kv_len;
    uint pos0;
    // The scores' scale times log2(e): the softmax runs on exp2.
    float scale2;
    // 1: query row r sees keys 0..=pos0 + r; 0: every key 0..kv_len.
    uint causal;
} p;

#define CLAMP gl_CooperativeMatrixClampModeConstantNV

// A masked score: exp2 of it minus any finite maximum is 0.
const float NEG_BIG = -3.0e38;

float max_of(const in float a, const in float b) {
    return max(a, b);
}

float sum_of(const in float a, const in float b) {
    return a + b;
}

// Score (row, col) of the block whose first key is `key0`, or NEG_BIG where
// the key is past kv_len or, causal, past the row's position (`edge0` is
// the last key the block's first row sees).
float masked(const in uint row, const in uint col, const in float s, const in uint key0,
             const in uint kv_len, const in uint causal, const in uint edge0) {
    uint j = key0 + col;
    bool seen = j < kv_len && (causal == 0u || j <= edge0 + row);
    return seen ? s : NEG_BIG;
}

float larger(const in uint row, const in uint col, const in float a, const in float b) {
    return max(a, b);
}

// exp2((s - m) · scale2): a probability, or the rescale α of m -> m'.
float exp_from(const in uint row, const in uint col, const in float s, const in float m,
               const in float scale2) {
    return exp2((s - m) * scale2);
}

// The start of a flash kernel's main: the workgroup's head h, batch
// element b and first query row r0 (causal: the blocks that see the most
// keys first), the kv head kvh, the row strides of q and of k and v, the
// keys the block's last row sees, and q's clamped layout t_q (out's too).
#define FLASH_START                                                           \
    uint h = gl_WorkGroupID.x;                                                \
    uint q_blocks = (p.sq + BR - 1u) / BR;                                    \
    uint b = gl_WorkGroupID.y / q_blocks;                                     \
    uint qb = gl_WorkGroupID.y % q_blocks;                                    \
    if (p.causal != 0u) {                                                     \
        qb = q_blocks - 1u - qb;                                              \
    }                                                                         \
    uint r0 = qb * BR;                                                        \
    uint kvh = h / (p.n_heads / p.n_kv);                                      \
    uint q_stride = p.n_heads * HD;                                           \
    uint kv_stride = p.n_kv * HD;                                             \
    uint keys = p.kv_len;                                                     \
    if (p.causal != 0u) {                                                     \
        keys = min(keys, p.pos0 + min(r0 + BR, p.sq));                        \
    }                                                                         \
    tensorLayoutNV<2, CLAMP> t_q = createTensorLayoutNV(2, CLAMP);            \
    t_q = setTensorLayoutDimensionNV(t_q, p.sq, q_stride);                    \
    t_q = setTensorLayoutClampValueNV(t_q, 0u);
