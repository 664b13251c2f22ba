// The integer staging of linear_gemm_coop_db.wgsl, after
// linear_int_common.wgsl and linear_coop_codes.wgsl: activation codes and
// int4 or int8 weights read 16 bytes at a time through their own bindings
// of the same regions (`xqv`, `wv`) and converted to f16 when stored into a
// stage; sums exact as in linear_coop_int.wgsl (the host checks the 2^24
// bound), so the result equals the dot4 GEMM's bit for bit. A slot is 16
// codes (one vec4<u32>) or 32 weight columns (one vec4<u32> of int4, two of
// int8); the host picks this for K a multiple of 32 (int4 weights) or 16
// (int8) and BK a multiple of 32. Codes come in natural column order (act
// quant PERM8 = false).
//
// needs: A_SLOTS, B_SLOTS, PITCH, W4, a_sh, a_slot, b_sh, b_slot, i4_at, i8_at
// needs: p, store
// provides: A_COLS, B_COLS, emit, fetch_a, fetch_b, put_a, put_b
//

const A_COLS: u32 = 16u;
const B_COLS: u32 = 32u;

// The weight chunk and the codes as 16-byte words (bindings 0 and 3 are
// the same regions as u32 words; this kernel does not use them).
@group(0) @binding(6) var<storage, read> wv: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> xqv: array<vec4<u32>>;

// Sixteen activation codes.
alias a_raw = vec4<u32>;
// Thirty-two weight columns: int4 in `lo`, or int8 in `lo` then `hi`.
struct WideB {
    lo: vec4<u32>,
    hi: vec4<u32>,
}
alias b_raw = WideB;

// Activation slot `slot` of K step `kt` (zeros past M, K and the slots).
fn fetch_a(m0: u32, kt: u32, slot: u32) -> a_raw {
    let at = a_slot(slot);
    if slot < A_SLOTS && m0 + at.x < p.m && kt + at.y < p.k {
        return xqv[(m0 + at.x) * (p.k / 16u) + (kt + at.y) / 16u];
    }
    return a_raw();
}

// Activation slot `slot` into the stage at `base`.
fn put_a(base: u32, slot: u32, v: a_raw) {
    if slot < A_SLOTS {
        let at = a_slot(slot);
        let i = base + at.x * PITCH + at.y;
        for (var q = 0u; q < 4u; q++) {
            for (var e = 0u; e < 4u; e++) {
                a_sh[i + 4u * q + e] = i8_at(v[q], e);
            }
        }
    }
}

// Weight slot `slot` of K step `kt` (zeros past N, K and the slots; an
// int8 slot's second half past K stays zero).
fn fetch_b(n0: u32, kt: u32, slot: u32) -> b_raw {
    let at = b_slot(slot);
    let n = n0 + at.x;
    let col = kt + at.y;
    var v = b_raw();
    if slot < B_SLOTS && n < p.n && col < p.k {
        if W4 {
            v.lo = wv[n * (p.k / 32u) + col / 32u];
        } else {
            let b = n * (p.k / 16u) + col / 16u;
            v.lo = wv[b];
            if col + 16u < p.k {
                v.hi = wv[b + 1u];
            }
        }
    }
    return v;
}

// Weight slot `slot` into the stage at `base`.
fn put_b(base: u32, slot: u32, v: b_raw) {
    if slot < B_SLOTS {
        let at = b_slot(slot);
        let i = base + at.x * PITCH + at.y;
        if W4 {
            for (var q = 0u; q < 4u; q++) {
                for (var e = 0u; e < 8u; e++) {
                    b_sh[i + 8u * q + e] = i4_at(v.lo[q], e);
                }
            }
        } else {
            for (var q = 0u; q < 4u; q++) {
                for (var e = 0u; e < 4u; e++) {
                    b_sh[i + 4u * q + e] = i8_at(v.lo[q], e);
                    b_sh[i + 16u + 4u * q + e] = i8_at(v.hi[q], e);
                }
            }
        }
    }
}

// The exact integer sum through the integer epilogue.
fn emit(m: u32, n: u32, v: f32) {
    store(m, n, i32(v));
}
