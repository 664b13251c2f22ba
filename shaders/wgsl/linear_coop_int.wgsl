// The integer staging of linear_gemm_coop.wgsl, after linear_int_common.wgsl.
// Codes and weights are small integers, exact in f16; their products are
// exact and so is an f32 sum while it stays within 2^24, which the host
// checks (max|a| · max|w| · K <= 2^24) before choosing this kernel: the
// result equals the dot4 GEMM's bit for bit. Activation codes come in
// natural column order (act quant PERM8 = false).
//
// A slot's global reads (`fetch_*`) return raw words, unpacked only when
// stored (`put_*`), so that the reads of the next K step stay in flight
// while this step multiplies.
//
// needs: A_SLOTS, B_SLOTS, PITCH, W4, a_sh, a_slot, b_sh, b_slot, i4_at, i8_at
// needs: p, store, w, xq
// provides: emit, fetch_a, fetch_b, put_a, put_b
//

// Four activation codes.
alias a_raw = u32;
// Eight weight columns: one word of int4 nibbles (x), or two of int8 (x, y).
alias b_raw = vec2<u32>;

// Activation slot `slot` of K step `kt` (zero past M, K and the slots).
fn fetch_a(m0: u32, kt: u32, slot: u32) -> a_raw {
    let at = a_slot(slot);
    if slot < A_SLOTS && m0 + at.x < p.m && kt + at.y < p.k {
        return xq[(m0 + at.x) * (p.k / 4u) + (kt + at.y) / 4u];
    }
    return 0u;
}

fn put_a(slot: u32, v: a_raw) {
    if slot < A_SLOTS {
        let at = a_slot(slot);
        let i = at.x * PITCH + at.y;
        a_sh[i] = i8_at(v, 0u);
        a_sh[i + 1u] = i8_at(v, 1u);
        a_sh[i + 2u] = i8_at(v, 2u);
        a_sh[i + 3u] = i8_at(v, 3u);
    }
}

// Weight slot `slot` of K step `kt` (zeros past N, K and the slots; K is a
// multiple of 8 for int4 and of 4 for int8).
fn fetch_b(n0: u32, kt: u32, slot: u32) -> b_raw {
    let at = b_slot(slot);
    let n = n0 + at.x;
    let col = kt + at.y;
    var v = b_raw();
    if slot < B_SLOTS && n < p.n && col < p.k {
        if W4 {
            v.x = w[n * (p.k / 8u) + col / 8u];
        } else {
            let b = n * (p.k / 4u) + col / 4u;
            v.x = w[b];
            if col + 4u < p.k {
                v.y = w[b + 1u];
            }
        }
    }
    return v;
}

fn put_b(slot: u32, v: b_raw) {
    if slot < B_SLOTS {
        let at = b_slot(slot);
        let i = at.x * PITCH + at.y;
        if W4 {
            for (var e = 0u; e < 8u; e++) {
                b_sh[i + e] = i4_at(v.x, e);
            }
        } else {
            for (var e = 0u; e < 4u; e++) {
                b_sh[i + e] = i8_at(v.x, e);
                b_sh[i + 4u + e] = i8_at(v.y, e);
            }
        }
    }
}

// The exact integer sum through the integer epilogue.
fn emit(m: u32, n: u32, v: f32) {
    store(m, n, i32(v));
}
