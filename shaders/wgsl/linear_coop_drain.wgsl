// The cooperative GEMMs' output (linear_gemm_coop.wgsl,
// linear_gemm_coop_db.wgsl): each accumulator through workgroup memory to
// the epilogue (`emit`), element by element, so partial tiles and the
// epilogue's per-column scales and bias need no matrix store to global
// memory.
//
// needs: CM, NSG, SG, cm_c, emit, out, p
// provides: drain
//

// One accumulator per subgroup on its way to the epilogue.
var<workgroup> c_sh: array<f32, NSG * CM * CM>;

// Writes one accumulator whose first element is output (m, n), or NaN
// where `ok` is false. Called by the whole workgroup (it holds barriers).
fn drain(acc: cm_c, sq: u32, lane: u32, ok: bool, m: u32, n: u32) {
    coopStoreT(acc, &c_sh[sq * CM * CM], CM);
    workgroupBarrier();
    for (var e = lane; e < CM * CM; e += SG) {
        let mm = m + e / CM;
        let nn = n + e % CM;
        if mm < p.m && nn < p.n {
            if ok {
                emit(mm, nn, c_sh[sq * CM * CM + e]);
            } else {
                out[mm * p.out_stride + p.n_base + nn] = act(bitcast<f32>(0x7FC00000u));
            }
        }
    }
    workgroupBarrier();
}
