//! The text of a flash-attention module's generated region for a
//! [`FlashGeometry`]: its constants and `main`, one variable per
//! cooperative matrix.

use std::fmt::Write;

use super::geometry::FlashGeometry;
use super::tuning::{FlashTuning, KvStaging};

const BEGIN: &str = "// BEGIN generated\n";
const END: &str = "// END generated\n";

/// The flash-attention module `source` (`FLASH_ATTENTION16` or `8`, matrices
/// of edge `edge`) with its generated region for `tuning`, subgroups of
/// `sg` and head dimension `hd`, or why the tuning has no module there.
pub fn flash_attention(
    source: &str,
    edge: u32,
    sg: u32,
    hd: u32,
    tuning: FlashTuning,
) -> Result<String, String> {
    let g = tuning.geometry(edge, sg, hd)?;
    let begin = source.find(BEGIN).expect("the module marks its region") + BEGIN.len();
    let end = source.find(END).expect("the module marks its region's end");
    Ok(format!(
        "{}{}{}",
        &source[..begin],
        region(&g),
        &source[end..]
    ))
}

/// The generated region: the shape's constants, the bindings, the
/// workgroup memory and `main`.
fn region(g: &FlashGeometry) -> String {
    let t = g.tuning;
    let global = t.staging == KvStaging::Global;
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(
        w,
        "// {t} on {e}x{e} matrices, subgroups of {sg}, head_dim {hd}.",
        e = g.edge,
        sg = g.sg,
        hd = g.hd
    );
    let _ = writeln!(
        w,
        "const SG: u32 = {}u;
const NSG: u32 = {}u;
const BR: u32 = {}u;
const BC: u32 = {}u;
const HD: u32 = {}u;
// Invocations per query row in the softmax.
const T: u32 = {}u;
// Pitches of the scores (f32) and the probabilities (f16), {layout}: score
// (row, key) at row * S_ROW + key * S_KEY; and the f16 row pitch of the
// staged keys, values and queries.
const SP: u32 = {}u;
const PP: u32 = {}u;
const S_ROW: u32 = {s_row};
const S_KEY: u32 = {s_key};
const P_ROW: u32 = {p_row};
const P_KEY: u32 = {p_key};
const KP: u32 = {}u;
// The f16 staging: keys and values from 0, the probabilities from P_AT.
const V_AT: u32 = {}u;
const P_AT: u32 = {}u;
",
        g.sg,
        t.subgroups,
        t.rows,
        t.keys,
        g.hd,
        g.lanes_per_row,
        g.sp,
        g.pp,
        g.kp,
        match t.staging {
            KvStaging::Serial => 0,
            KvStaging::Paired | KvStaging::Double => t.keys * g.kp,
            KvStaging::Global => g.edge * g.kp,
        },
        g.kv_halves,
        layout = if t.column_major {
            "column-major"
        } else {
            "row-major"
        },
        s_row = if t.column_major { "1u" } else { "SP" },
        s_key = if t.column_major { "SP" } else { "1u" },
        p_row = if t.column_major { "1u" } else { "PP" },
        p_key = if t.column_major { "PP" } else { "1u" },
    );
    if t.staging == KvStaging::Double {
        let _ = writeln!(
            w,
            "// The second stage of keys and values.\nconst KV_STAGE: u32 = {}u;",
            2 * t.keys * g.kp
        );
    }
    let kv_ty = if global { "act" } else { "vec4<act>" };
    let _ = writeln!(
        w,
        "@group(0) @binding(1) var<storage, read> q: array<vec4<act>>;
@group(0) @binding(2) var<storage, read> k: array<{kv_ty}>;
@group(0) @binding(3) var<storage, read> v: array<{kv_ty}>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;

var<workgroup> hs: array<f16, {}>;
var<workgroup> s_sh: array<f32, {}>;
var<workgroup> alpha_sh: array<f32, BR>;
// One u32 in 16 bytes: every workgroup variable is a multiple of 16 bytes,
// so that wherever the driver places them (NVIDIA's compiler need not keep
// this order) hs and s_sh start 16-byte aligned, as cooperative loads and
// stores require.
var<workgroup> flag_sh: array<u32, 4>;
",
        g.kv_halves + g.p_halves,
        g.s_floats
    );
    if global {
        w.push_str(GLOBAL_HELPERS);
    } else {
        w.push_str(STAGED_HELPERS);
    }
    main(w, g);
    s
}

/// Staging helpers of the serial and paired modes (k and v read as vec4).
const STAGED_HELPERS: &str = "
// Chunk e (four values) of the keys of block j, zero past kv_len.
fn fetch_k(e: u32, j: u32, at: KvAt) -> vec4<f16> {
    let row = e / (HD / 4u);
    var x = vec4<f16>();
    if e < BC * HD / 4u && j + row < params.kv_len {
        x = vec4<f16>(k[(at.base + (j + row) * at.stride) / 4u + e % (HD / 4u)]);
    }
    return x;
}

// Chunk e of the values of block j, zero past kv_len.
fn fetch_v(e: u32, j: u32, at: KvAt) -> vec4<f16> {
    let row = e / (HD / 4u);
    var x = vec4<f16>();
    if e < BC * HD / 4u && j + row < params.kv_len {
        x = vec4<f16>(v[(at.base + (j + row) * at.stride) / 4u + e % (HD / 4u)]);
    }
    return x;
}

// Chunk e into the staging from `off`.
fn put(off: u32, e: u32, x: vec4<f16>) {
    if e < BC * HD / 4u {
        put4(off + (e / (HD / 4u)) * KP + 4u * (e % (HD / 4u)), x);
    }
}
";

/// Staging helpers of the global mode (k and v read as scalars).
const GLOBAL_HELPERS: &str = "
// Keys (at 0) and values (at V_AT) of rows j..j + CM into the staging,
// zero from kv_len on: a block's partial last tile.
fn stage_tail(lid: u32, j: u32, at: KvAt) {
    for (var e = lid; e < CM * HD; e += SG * NSG) {
        let row = e / HD;
        var kx = f16(0.0);
        var vx = f16(0.0);
        if j + row < params.kv_len {
            let i = at.base + (j + row) * at.stride + e % HD;
            kx = f16(k[i]);
            vx = f16(v[i]);
        }
        hs[row * KP + e % HD] = kx;
        hs[V_AT + row * KP + e % HD] = vx;
    }
}
";

/// `main` for geometry `g`.
fn main(w: &mut String, g: &FlashGeometry) {
    let t = g.tuning;
    let wg = g.invocations();
    let _ = writeln!(
        w,
        "
// The key loop's index is uniform, which naga's analysis cannot see (a
// loop variable): branches on it hold cooperative operations.
@diagnostic(off, derivative_uniformity)
@compute @workgroup_size(SG * NSG)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {{
    let h = wid.x;
    let q_blocks = (params.sq + BR - 1u) / BR;
    let b = wid.y / q_blocks;
    var qb = wid.y % q_blocks;
    if params.causal != 0u {{
        // The blocks that see the most keys first.
        qb = q_blocks - 1u - qb;
    }}
    let r0 = qb * BR;
    let q_stride = params.n_heads * HD;
    let q_at = (b * params.sq + r0) * q_stride + h * HD;
    let kv_stride = params.n_kv * HD;
    let kv = KvAt(b * params.skv * kv_stride + (h / (params.n_heads / params.n_kv)) * HD, kv_stride);
    // Subgroups of another size than the host assumed would compute wrong
    // rows: every output becomes NaN instead (control flow stays uniform,
    // as the cooperative operations require).
    let ok = nsg == NSG;
    let sg = min(sg_id, NSG - 1u);
    // The subgroup's rows and keys of the scores, rows and head columns of
    // the outputs.
    let s_row0 = (sg / {kg}u) * {sr}u * CM;
    let s_key0 = (sg % {kg}u) * {nt}u * CM;
    let o_row0 = (sg / {cg}u) * {ro}u * CM;
    let o_col0 = (sg % {cg}u) * {dc}u * CM;
    // This invocation's query rows in the softmax (row_i = lr + i * {pass})
    // and its share t of their columns.
    let lr = sg * (SG / T) + lane % (SG / T);
    let t = lane / (SG / T);
    if lid == 0u {{
        flag_sh[0] = 0u;
    }}",
        kg = t.key_groups,
        sr = g.s_rows,
        nt = g.s_tiles,
        cg = t.col_groups,
        ro = g.o_rows,
        dc = g.o_cols,
        pass = wg / g.lanes_per_row,
    );
    for i in 0..g.rows_per_lane {
        let _ = writeln!(
            w,
            "    let vis_{i} = visible(r0 + lr + {i}u * {pass}u);
    var m_{i} = NEG_BIG;
    var l_{i} = 0.0;",
            pass = wg / g.lanes_per_row
        );
    }
    queries(w, g);
    for i in 0..g.o_rows {
        for j in 0..g.o_cols {
            let _ = writeln!(w, "    var o_{i}_{j} = cm_c();");
        }
    }
    w.push_str(
        "    // Keys any row of the block sees.
    var block_keys = params.kv_len;
    if params.causal != 0u {
        block_keys = min(params.kv_len, params.pos0 + min(params.sq, r0 + BR));
    }
",
    );
    if t.prefetch {
        for c in 0..g.chunks {
            let _ = writeln!(
                w,
                "    var rk_{c} = fetch_k(lid + {}u, 0u, kv);
    var rv_{c} = fetch_v(lid + {}u, 0u, kv);",
                c * wg,
                c * wg
            );
        }
    }
    if t.staging == KvStaging::Double {
        // Block 0 into the first stage (the queries' staging is done).
        stage(w, g, "k", "0u");
        stage(w, g, "v", "V_AT");
        w.push_str("    workgroupBarrier();\n    var st = 0u;\n");
    }
    w.push_str("    for (var j0 = 0u; j0 < block_keys; j0 += BC) {\n");
    match t.staging {
        KvStaging::Serial => {
            w.push_str("        workgroupBarrier();\n");
            stage(w, g, "k", "0u");
            w.push_str("        workgroupBarrier();\n");
            prefetch(w, g, "k");
            scores(w, g);
            w.push_str("        workgroupBarrier();\n        // The values over the keys.\n");
            stage(w, g, "v", "V_AT");
            prefetch(w, g, "v");
        }
        KvStaging::Paired => {
            stage(w, g, "k", "0u");
            w.push_str("        workgroupBarrier();\n");
            stage(w, g, "v", "V_AT");
            prefetch(w, g, "k");
            prefetch(w, g, "v");
            scores(w, g);
            w.push_str("        workgroupBarrier();\n");
        }
        KvStaging::Double => {
            prefetch(w, g, "k");
            prefetch(w, g, "v");
            scores(w, g);
            w.push_str(
                "        workgroupBarrier();
        // The next block into the other stage: its last reader, the
        // previous block's values, is behind the barrier.
        if j0 + BC < block_keys {
",
            );
            stage(w, g, "k", "KV_STAGE - st");
            stage(w, g, "v", "KV_STAGE - st + V_AT");
            w.push_str("        }\n");
        }
        KvStaging::Global => {
            w.push_str(
                "        let tail = (params.kv_len - j0) / CM * CM;
        if tail < BC && tail < params.kv_len - j0 {
            // This block's partial last tile of keys and values.
            stage_tail(lid, j0 + tail, kv);
            workgroupBarrier();
        }
",
            );
            scores(w, g);
            w.push_str("        workgroupBarrier();\n");
        }
    }
    for i in 0..g.rows_per_lane {
        let _ = writeln!(
            w,
            "        softmax_row(lr + {i}u * {pass}u, t, j0, vis_{i}, &m_{i}, &l_{i});",
            pass = wg / g.lanes_per_row
        );
    }
    w.push_str("        workgroupBarrier();\n        if flag_sh[0] == j0 + 1u {\n");
    for i in 0..g.o_rows {
        for j in 0..g.o_cols {
            let _ = writeln!(
                w,
                "            o_{i}_{j} = rescale(o_{i}_{j}, sg, lane, o_row0 + {i}u * CM);"
            );
        }
    }
    if matches!(t.staging, KvStaging::Global | KvStaging::Double) {
        // The next block's scores overwrite the scratch without a barrier
        // in between otherwise.
        w.push_str("            workgroupBarrier();\n");
    }
    w.push_str("        }\n");
    values(w, g);
    if t.staging == KvStaging::Double {
        w.push_str("        st = KV_STAGE - st;\n");
    }
    w.push_str("    }\n    // Each row's 1 / sum.\n");
    for i in 0..g.rows_per_lane {
        let _ = writeln!(
            w,
            "    let inv_{i} = inverse_sum(l_{i});
    if t == 0u {{
        alpha_sh[lr + {i}u * {pass}u] = inv_{i};
    }}",
            pass = wg / g.lanes_per_row
        );
    }
    w.push_str("    let rows = params.sq - min(r0, params.sq);\n");
    for i in 0..g.o_rows {
        for j in 0..g.o_cols {
            let _ = writeln!(
                w,
                "    drain(o_{i}_{j}, sg, lane, ok, o_row0 + {i}u * CM, o_col0 + {j}u * CM, q_at, rows);"
            );
        }
    }
    w.push_str("}\n");
}

/// The queries' A matrices, staged through all of hs a round of head
/// column tiles at a time (zero past sq).
fn queries(w: &mut String, g: &FlashGeometry) {
    let mut d0 = 0;
    while d0 < g.dm {
        let n = g.q_tiles.min(g.dm - d0);
        let qp = n * g.edge + 8;
        let _ = writeln!(
            w,
            "    // Queries, head columns {d0} * CM ..
    workgroupBarrier();
    for (var e = lid; e < BR * {n}u * CM / 4u; e += SG * NSG) {{
        let row = e / ({n}u * CM / 4u);
        let c = 4u * (e % ({n}u * CM / 4u));
        var x = vec4<f16>();
        if r0 + row < params.sq {{
            x = vec4<f16>(q[(q_at + row * q_stride + {d0}u * CM + c) / 4u]);
        }}
        put4(row * {qp}u + c, x);
    }}
    workgroupBarrier();"
        );
        for a in 0..g.s_rows {
            for d in d0..d0 + n {
                let (bind, one) = if g.tuning.materialize {
                    ("var", "f16(params.one) * ")
                } else {
                    ("let", "")
                };
                let _ = writeln!(
                    w,
                    "    {bind} q_{a}_{d} = {one}coopLoadT<cm_a>(&hs[(s_row0 + {a}u * CM) * {qp}u + {}u * CM], {qp}u);",
                    d - d0
                );
            }
        }
        d0 += n;
    }
    w.push_str("    workgroupBarrier();\n");
}

/// Stages block j0's keys (`what` "k") or values ("v") at `off`: from the
/// registers the previous block read them into, or straight from memory.
fn stage(w: &mut String, g: &FlashGeometry, what: &str, off: &str) {
    let wg = g.invocations();
    if g.tuning.prefetch {
        for c in 0..g.chunks {
            let _ = writeln!(w, "        put({off}, lid + {}u, r{what}_{c});", c * wg);
        }
    } else {
        let _ = writeln!(
            w,
            "        for (var e = lid; e < BC * HD / 4u; e += SG * NSG) {{
            put({off}, e, fetch_{what}(e, j0, kv));
        }}"
        );
    }
}

/// With prefetch, reads the next block's keys or values into registers.
fn prefetch(w: &mut String, g: &FlashGeometry, what: &str) {
    if !g.tuning.prefetch {
        return;
    }
    let wg = g.invocations();
    w.push_str("        if j0 + BC < block_keys {\n");
    for c in 0..g.chunks {
        let _ = writeln!(
            w,
            "            r{what}_{c} = fetch_{what}(lid + {}u, j0 + BC, kv);",
            c * wg
        );
    }
    w.push_str("        }\n");
}

/// S = Q Kᵀ for the subgroup's rows and keys, into s_sh.
fn scores(w: &mut String, g: &FlashGeometry) {
    for a in 0..g.s_rows {
        for n in 0..g.s_tiles {
            let _ = writeln!(w, "        var s_{a}_{n} = cm_c();");
        }
    }
    let st = if g.tuning.staging == KvStaging::Double {
        "st + "
    } else {
        ""
    };
    let staged = |n: u32, d: u32| {
        format!("coopLoad<cm_b>(&hs[{st}(s_key0 + {n}u * CM) * KP + {d}u * CM], KP)")
    };
    let global = |n: u32, d: u32| {
        format!("coopLoad<cm_b>(&k[kv.base + (j0 + {n}u * CM) * kv.stride + {d}u * CM], kv.stride)")
    };
    // B[d][key] = key's dimension d: column-major in the staging and in k.
    let product = |w: &mut String, indent: &str, n: u32, d: u32, load: String| {
        let _ = writeln!(w, "{indent}let kb_{d}_{n} = {load};");
        for a in 0..g.s_rows {
            let _ = writeln!(
                w,
                "{indent}s_{a}_{n} = coopMultiplyAdd(q_{a}_{d}, kb_{d}_{n}, s_{a}_{n});"
            );
        }
    };
    if g.tuning.staging == KvStaging::Global {
        // Whole blocks straight from k; the partial last block tile by
        // tile: whole tiles from k, the partial one from the staging,
        // none past kv_len (their scores are never read).
        w.push_str("        if j0 + BC <= params.kv_len {\n");
        for d in 0..g.dm {
            for n in 0..g.s_tiles {
                product(w, "            ", n, d, global(n, d));
            }
        }
        w.push_str("        } else {\n");
        for n in 0..g.s_tiles {
            let _ = writeln!(w, "            if j0 + {n}u * CM + CM <= params.kv_len {{");
            for d in 0..g.dm {
                product(w, "                ", n, d, global(n, d));
            }
            let _ = writeln!(
                w,
                "            }} else if j0 + {n}u * CM < params.kv_len {{"
            );
            for d in 0..g.dm {
                product(
                    w,
                    "                ",
                    n,
                    d,
                    format!("coopLoad<cm_b>(&hs[{d}u * CM], KP)"),
                );
            }
            w.push_str("            }\n");
        }
        w.push_str("        }\n");
    } else {
        for d in 0..g.dm {
            for n in 0..g.s_tiles {
                product(w, "        ", n, d, staged(n, d));
            }
        }
    }
    let store = if g.tuning.column_major {
        "coopStore"
    } else {
        "coopStoreT"
    };
    for a in 0..g.s_rows {
        for n in 0..g.s_tiles {
            let _ = writeln!(
                w,
                "        {store}(s_{a}_{n}, &s_sh[(s_row0 + {a}u * CM) * S_ROW + (s_key0 + {n}u * CM) * S_KEY], SP);"
            );
        }
    }
}

/// O += P V for the subgroup's output rows and head columns, over the
/// block's key tiles that any row sees.
fn values(w: &mut String, g: &FlashGeometry) {
    w.push_str(
        "        let kt_end = min(BC, (block_keys - j0 + CM - 1u) / CM * CM);
        for (var kt = 0u; kt < kt_end; kt += CM) {
",
    );
    let load = if g.tuning.column_major {
        "coopLoad"
    } else {
        "coopLoadT"
    };
    for i in 0..g.o_rows {
        let _ = writeln!(
            w,
            "            let pa_{i} = {load}<cm_a>(&hs[P_AT + (o_row0 + {i}u * CM) * P_ROW + kt * P_KEY], PP);"
        );
    }
    // B[key][d] = the value's dimension d: row-major.
    let product = |w: &mut String, indent: &str, load: &dyn Fn(u32) -> String| {
        for j in 0..g.o_cols {
            let _ = writeln!(w, "{indent}let vb_{j} = {};", load(j));
            for i in 0..g.o_rows {
                let _ = writeln!(
                    w,
                    "{indent}o_{i}_{j} = coopMultiplyAdd(pa_{i}, vb_{j}, o_{i}_{j});"
                );
            }
        }
    };
    if g.tuning.staging == KvStaging::Global {
        w.push_str("            if j0 + kt + CM <= params.kv_len {\n");
        product(w, "                ", &|j| {
            format!(
                "coopLoadT<cm_b>(&v[kv.base + (j0 + kt) * kv.stride + o_col0 + {j}u * CM], kv.stride)"
            )
        });
        w.push_str("            } else if j0 + kt < params.kv_len {\n");
        product(w, "                ", &|j| {
            format!("coopLoadT<cm_b>(&hs[V_AT + o_col0 + {j}u * CM], KP)")
        });
        w.push_str("            }\n");
    } else {
        let st = if g.tuning.staging == KvStaging::Double {
            "st + "
        } else {
            ""
        };
        product(w, "            ", &|j| {
            format!("coopLoadT<cm_b>(&hs[{st}V_AT + kt * KP + o_col0 + {j}u * CM], KP)")
        });
    }
    w.push_str("        }\n");
}
