// The float staging of linear_gemm_coop_db.wgsl, after
// linear_float_common.wgsl and linear_coop_pairs.wgsl: f16 activations and
// f16 or bf16 weights (WFMT 1 or 2) read 16 bytes at a time (eight
// columns: one vec4<u32>) through their own bindings of the same regions
// (`xv`, `wv`), converted to f16 when stored into a stage. The host picks
// this only for f16 activations and K a multiple of 8 (rows on 16 bytes).
// bf16 is exact within f16's normal range, as in linear_coop_float.wgsl.
//
// needs: A_SLOTS, B_SLOTS, PITCH, a_sh, a_slot, b_sh, b_slot, f16_pair, p
// needs: pair_quad, store, weight_scale
// provides: A_COLS, B_COLS, emit, fetch_a, fetch_b, put_a, put_b
//

const A_COLS: u32 = 8u;
const B_COLS: u32 = 8u;

// The weight chunk and the activations as 16-byte words (bindings 0 and 3
// are the same regions as u32 words; this kernel does not use them).
@group(0) @binding(5) var<storage, read> wv: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> xv: array<vec4<u32>>;

// Eight activation columns: four words of f16 pairs.
alias a_raw = vec4<u32>;
// Eight weight columns: four words of f16 or bf16 pairs.
alias b_raw = vec4<u32>;

// Activation slot `slot` of K step `kt` (zeros past M, K and the slots).
fn fetch_a(m0: u32, kt: u32, slot: u32) -> a_raw {
    let at = a_slot(slot);
    if slot < A_SLOTS && m0 + at.x < p.m && kt + at.y < p.k {
        return xv[(m0 + at.x) * (p.k / 8u) + (kt + at.y) / 8u];
    }
    return a_raw();
}

// Stores eight f16 from `lo` and `hi` at `i` (16-byte aligned).
fn put8(i: u32, lo: vec4<f16>, hi: vec4<f16>, into_a: bool) {
    if into_a {
        a_sh[i] = lo.x;
        a_sh[i + 1u] = lo.y;
        a_sh[i + 2u] = lo.z;
        a_sh[i + 3u] = lo.w;
        a_sh[i + 4u] = hi.x;
        a_sh[i + 5u] = hi.y;
        a_sh[i + 6u] = hi.z;
        a_sh[i + 7u] = hi.w;
    } else {
        b_sh[i] = lo.x;
        b_sh[i + 1u] = lo.y;
        b_sh[i + 2u] = lo.z;
        b_sh[i + 3u] = lo.w;
        b_sh[i + 4u] = hi.x;
        b_sh[i + 5u] = hi.y;
        b_sh[i + 6u] = hi.z;
        b_sh[i + 7u] = hi.w;
    }
}

// Activation slot `slot` into the stage at `base`.
fn put_a(base: u32, slot: u32, v: a_raw) {
    if slot < A_SLOTS {
        let at = a_slot(slot);
        let lo = vec4<f16>(vec4<f32>(f16_pair(v.x), f16_pair(v.y)));
        let hi = vec4<f16>(vec4<f32>(f16_pair(v.z), f16_pair(v.w)));
        put8(base + at.x * PITCH + at.y, lo, hi, true);
    }
}

// Weight slot `slot` of K step `kt` (zeros past N, K and the slots).
fn fetch_b(n0: u32, kt: u32, slot: u32) -> b_raw {
    let at = b_slot(slot);
    let n = n0 + at.x;
    if slot < B_SLOTS && n < p.n && kt + at.y < p.k {
        return wv[n * (p.k / 8u) + (kt + at.y) / 8u];
    }
    return b_raw();
}

// Weight slot `slot` into the stage at `base`.
fn put_b(base: u32, slot: u32, v: b_raw) {
    if slot < B_SLOTS {
        let at = b_slot(slot);
        put8(base + at.x * PITCH + at.y, pair_quad(v.x, v.y), pair_quad(v.z, v.w), false);
    }
}

fn emit(m: u32, n: u32, v: f32) {
    store(m, n, v * weight_scale());
}
