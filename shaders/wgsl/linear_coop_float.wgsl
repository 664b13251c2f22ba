// The float staging of linear_gemm_coop.wgsl, after linear_float_common.wgsl:
// activations (f16: the host picks this only for f16 activations, so they
// stage exactly) and decoded weights as f16. f16 and fp8 weights are exact
// in f16 (fp8 without its scale, which multiplies the sum); bf16 ones are
// too within f16's normal range (beyond it they round, or overflow to inf:
// loud, never silent). Products are exact in f32, sums are f32.
//
// A slot's global reads (`fetch_*`) return raw values, decoded only when
// stored (`put_*`), so that the reads of the next K step stay in flight
// while this step multiplies.
//
// needs: A_SLOTS, B_SLOTS, PITCH, WFMT, a_sh, a_slot, b_sh, b_slot, fp8_quad
// needs: p, pair_quad, store, w, weight_scale, x
// provides: emit, fetch_a, fetch_b, put_a, put_b
//

// Four activation columns.
alias a_raw = vec4<f16>;
// Eight weight columns: four words of f16 or bf16 pairs, or two of fp8
// quads (x, y).
alias b_raw = vec4<u32>;

// Activation slot `slot` of K step `kt` (zeros past M, K and the slots).
fn fetch_a(m0: u32, kt: u32, slot: u32) -> a_raw {
    let at = a_slot(slot);
    let kq = p.k / 4u;
    if slot < A_SLOTS && m0 + at.x < p.m && kt + at.y < p.k {
        return vec4<f16>(x[(m0 + at.x) * kq + (kt + at.y) / 4u]);
    }
    return a_raw();
}

fn put_a(slot: u32, v: a_raw) {
    if slot < A_SLOTS {
        let at = a_slot(slot);
        let i = at.x * PITCH + at.y;
        a_sh[i] = v.x;
        a_sh[i + 1u] = v.y;
        a_sh[i + 2u] = v.z;
        a_sh[i + 3u] = v.w;
    }
}

// Weight slot `slot` of K step `kt` (zeros past N, K and the slots; K is a
// multiple of 4, so a slot is all in, half in or all out).
fn fetch_b(n0: u32, kt: u32, slot: u32) -> b_raw {
    let at = b_slot(slot);
    let n = n0 + at.x;
    let col = kt + at.y;
    var v = b_raw();
    if slot < B_SLOTS && n < p.n && col < p.k {
        let both = col + 4u < p.k;
        if WFMT >= 3u {
            let b = n * (p.k / 4u) + col / 4u;
            v.x = w[b];
            if both {
                v.y = w[b + 1u];
            }
        } else {
            let b = n * (p.k / 2u) + col / 2u;
            v.x = w[b];
            v.y = w[b + 1u];
            if both {
                v.z = w[b + 2u];
                v.w = w[b + 3u];
            }
        }
    }
    return v;
}

fn put_b(slot: u32, v: b_raw) {
    if slot < B_SLOTS {
        let at = b_slot(slot);
        var q0: vec4<f16>;
        var q1: vec4<f16>;
        if WFMT >= 3u {
            q0 = vec4<f16>(fp8_quad(v.x));
            q1 = vec4<f16>(fp8_quad(v.y));
        } else {
            q0 = pair_quad(v.x, v.y);
            q1 = pair_quad(v.z, v.w);
        }
        let i = at.x * PITCH + at.y;
        b_sh[i] = q0.x;
        b_sh[i + 1u] = q0.y;
        b_sh[i + 2u] = q0.z;
        b_sh[i + 3u] = q0.w;
        b_sh[i + 4u] = q1.x;
        b_sh[i + 5u] = q1.y;
        b_sh[i + 6u] = q1.z;
        b_sh[i + 7u] = q1.w;
    }
}

fn emit(m: u32, n: u32, v: f32) {
    store(m, n, v * weight_scale());
}
