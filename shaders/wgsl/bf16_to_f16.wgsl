// bf16 weights as f16, for the SPIR-V f16 GEMM (gpu's float linear, with
// `DYNVRAM_CM2_BF16=f16`): `words` words of `src` from word `src_word0` on,
// two bf16 values a word (little-endian, the low half first), to the same
// values as f16 in `dst` from element 0. Each value goes bf16 → f32 (exact)
// → f16 (the conversion the bf16 kernels make in their staging), so the
// product sees what the staged bf16 GEMM would. Launched with `act` = f16;
// a grid-stride loop over 256-invocation workgroups.
//
// needs: p, src

@group(0) @binding(1) var<storage, read_write> dst: array<act>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = gid.x; i < p.words; i += stride) {
        let w = src[p.src_word0 + i];
        dst[2u * i] = act(bitcast<f32>(w << 16u));
        dst[2u * i + 1u] = act(bitcast<f32>(w & 0xffff0000u));
    }
}
