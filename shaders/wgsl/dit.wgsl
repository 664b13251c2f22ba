// Diffusion-transformer (Flux / DiT) kernels over `act` activations (f32 or
// f16; statistics and arithmetic in f32). Batched rows: row r of a
// [batch * per_batch, cols] tensor belongs to batch element r / per_batch,
// whose modulation row of `modv` [batch, mod_cols] it uses.
//
// ada_norm:   out = (1 + modv[b, scale0 + c]) * LayerNorm(x)[r, c] + modv[b, shift0 + c]
//             (LayerNorm without affine weights, biased variance, eps;
//             one workgroup per row; ada_norm_vec as vectors of four)
// gated_add:  xs[r, c] += modv[b, gate0 + c] * y[r, c]   (one invocation per
//             element; gated_add_vec VECS vectors of four)
// qk_place:   q or k of one head, RMS-normed over head_dim (times `w`), then
//             rotated by interleaved RoPE pairs (x[2i], x[2i+1]) with the
//             (cos, sin) table `pe` [dst rows, head_dim / 2], read from
//             columns src_col0.. of `src` and written to its row of the
//             joint sequence in `dst` (QK_WG invocations per (row, head);
//             qk_place_vec: per QV_ITEMS of them)
// gather:     a block of rows and columns of `src` copied into `dst`,
//             optionally through GELU (tanh), batch by batch (one
//             invocation per element)
//
// Each entry reads its own immediates struct (an entry point uses one).
//
// needs: gelu_tanh, workgroup_sum
// provides: WG
//

// ada_norm's.
struct AdaNormParams {
    rows: u32,
    cols: u32,
    // Rows of one batch element.
    per_batch: u32,
    // Columns of one modulation row (chunks * cols).
    mod_cols: u32,
    // Columns of the shift and scale chunks within a modulation row.
    shift0: u32,
    scale0: u32,
    eps: f32,
    _pad0: u32,
}

// gated_add's.
struct GatedAddParams {
    rows: u32,
    cols: u32,
    per_batch: u32,
    mod_cols: u32,
    // Column of the gate chunk within a modulation row.
    gate0: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// qk_place's.
struct QkPlaceParams {
    // Rows of `src`.
    rows: u32,
    // heads * head_dim: the width of `dst` and of the columns read.
    cols: u32,
    // Rows of one batch element in `src`.
    src_per_batch: u32,
    // Width of `src` and the first column read.
    src_width: u32,
    src_col0: u32,
    head_dim: u32,
    eps: f32,
    // Rows of one batch element in `dst`, and this stream's first one.
    dst_per_batch: u32,
    dst_row0: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// gather's: the block is rows x cols of each of `batch` elements, each side
// `[batch * per_batch, width]` with the block at (row0, col0).
struct GatherParams {
    rows: u32,
    cols: u32,
    batch: u32,
    src_per_batch: u32,
    src_row0: u32,
    src_width: u32,
    src_col0: u32,
    dst_per_batch: u32,
    dst_row0: u32,
    dst_width: u32,
    dst_col0: u32,
    // 0 = copy, 1 = GELU (tanh).
    op: u32,
}

const WG: u32 = 256u;

// Vectors of four each invocation of the vector copies (gather_vec,
// gated_add_vec) moves: WG apart in the workgroup's run of them, so each
// load is one coalesced row of the workgroup, and every load issued before
// the first store. With one vector in flight at a time an invocation had
// ~8 bytes in flight, and the copies ran at ~1.8 TB/s on the H100, bound
// by latency, not bytes (`dit.rs`' VECS).
const VECS: u32 = 4u;

var<immediate> ada: AdaNormParams;
var<immediate> gated: GatedAddParams;
var<immediate> qk: QkPlaceParams;
var<immediate> gat: GatherParams;
@group(0) @binding(1) var<storage, read> x: array<act>;
@group(0) @binding(2) var<storage, read> modv: array<act>;
@group(0) @binding(3) var<storage, read_write> out: array<act>;
@group(0) @binding(5) var<storage, read> pe: array<vec2<f32>>;
// The vector views of qk_place (pairs), gather_vec, gated_add_vec and
// qk_place_vec (fours): one load or store where the scalar forms took two
// or four of 2 bytes each (~0.6 of the copy rate on the H100).
@group(0) @binding(6) var<storage, read> x2: array<vec2<act>>;
@group(0) @binding(7) var<storage, read_write> out2: array<vec2<act>>;
@group(0) @binding(8) var<storage, read> w2: array<vec2<f32>>;
@group(0) @binding(9) var<storage, read> x4: array<vec4<act>>;
@group(0) @binding(10) var<storage, read_write> out4: array<vec4<act>>;
@group(0) @binding(11) var<storage, read> modv4: array<vec4<act>>;
// qk_place_vec's weight and (cos, sin) table, two pairs a vector.
@group(0) @binding(12) var<storage, read> w4: array<vec4<f32>>;
@group(0) @binding(13) var<storage, read> pe4: array<vec4<f32>>;

// This workgroup's index in the host's 2-D grid (`kernel::grid`).
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

fn element(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return group_index(wid, nwg) * WG + lid;
}

// The first vector of the vector copies' invocation `lid` (VECS of them,
// WG apart).
fn first_vec(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return group_index(wid, nwg) * WG * VECS + lid;
}

// Columns of a row ada_norm holds in registers, ADA_REGS an invocation
// (FLUX.1's 3,072 whole): the row is read once, not once for the mean, once
// for the variance and once for the output. Columns past them are read
// again from `x`; every invocation sums its columns in the same order
// either way.
const ADA_REGS: u32 = 16u;

@compute @workgroup_size(256)
fn ada_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let row = group_index(wid, nwg);
    if row >= ada.rows {
        return;
    }
    let cols = ada.cols;
    let base = row * cols;
    let mbase = (row / ada.per_batch) * ada.mod_cols;
    let held = WG * ADA_REGS;
    var v: array<f32, ADA_REGS>;
    var s = 0.0;
    for (var j = 0u; j < ADA_REGS; j++) {
        let i = lid + j * WG;
        if i < cols {
            v[j] = f32(x[base + i]);
            s = s + v[j];
        }
    }
    for (var i = lid + held; i < cols; i = i + WG) {
        s = s + f32(x[base + i]);
    }
    let mean = workgroup_sum(lid, s) / f32(cols);
    var sq = 0.0;
    for (var j = 0u; j < ADA_REGS; j++) {
        if lid + j * WG < cols {
            let d = v[j] - mean;
            sq = sq + d * d;
        }
    }
    for (var i = lid + held; i < cols; i = i + WG) {
        let d = f32(x[base + i]) - mean;
        sq = sq + d * d;
    }
    let r = 1.0 / sqrt(workgroup_sum(lid, sq) / f32(cols) + ada.eps);
    for (var j = 0u; j < ADA_REGS; j++) {
        let i = lid + j * WG;
        if i < cols {
            ada_store(base, mbase, i, (v[j] - mean) * r);
        }
    }
    for (var i = lid + held; i < cols; i = i + WG) {
        ada_store(base, mbase, i, (f32(x[base + i]) - mean) * r);
    }
}

// ada_norm's output column `i` of the row at `base` from its normalized
// value.
fn ada_store(base: u32, mbase: u32, i: u32, n: f32) {
    let shift = f32(modv[mbase + ada.shift0 + i]);
    let scale = f32(modv[mbase + ada.scale0 + i]);
    out[base + i] = act((1.0 + scale) * n + shift);
}

// ada_norm where a row holds whole fours and at most 4 · WG · ADA_VECS
// columns (`dit::record_ada_norm`): the row as vectors of four, ADA_VECS
// an invocation, its shift and scale loaded with it (one round trip to
// memory, not one for the row and one for the modulation), and each sum
// in three barriers (`row_sum`) where workgroup_sum's tree took ten.
const ADA_VECS: u32 = 4u;
var<workgroup> red_ada: array<f32, WG>;
var<workgroup> red_ada16: array<f32, 16>;

// The sum of every invocation's `v`, the same in each invocation and in
// one fixed order: sixteen sums of sixteen, then their sum.
fn row_sum(lid: u32, v: f32) -> f32 {
    red_ada[lid] = v;
    workgroupBarrier();
    if lid < WG / 16u {
        var t = 0.0;
        for (var l = 0u; l < 16u; l++) {
            t = t + red_ada[lid * 16u + l];
        }
        red_ada16[lid] = t;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var l = 0u; l < WG / 16u; l++) {
        total = total + red_ada16[l];
    }
    return total;
}

@compute @workgroup_size(256)
fn ada_norm_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let row = group_index(wid, nwg);
    if row >= ada.rows {
        return;
    }
    let units = ada.cols / 4u;
    let base = row * units;
    let mbase = (row / ada.per_batch) * (ada.mod_cols / 4u);
    let shift0 = mbase + ada.shift0 / 4u;
    let scale0 = mbase + ada.scale0 / 4u;
    var v: array<vec4<f32>, ADA_VECS>;
    var sh: array<vec4<act>, ADA_VECS>;
    var sc: array<vec4<act>, ADA_VECS>;
    for (var j = 0u; j < ADA_VECS; j++) {
        let i = lid + j * WG;
        if i < units {
            v[j] = vec4<f32>(x4[base + i]);
            sh[j] = modv4[shift0 + i];
            sc[j] = modv4[scale0 + i];
        }
    }
    var s = 0.0;
    for (var j = 0u; j < ADA_VECS; j++) {
        if lid + j * WG < units {
            s = s + dot(v[j], vec4<f32>(1.0));
        }
    }
    let mean = row_sum(lid, s) / f32(ada.cols);
    var sq = 0.0;
    for (var j = 0u; j < ADA_VECS; j++) {
        if lid + j * WG < units {
            let d = v[j] - mean;
            sq = sq + dot(d, d);
        }
    }
    let r = 1.0 / sqrt(row_sum(lid, sq) / f32(ada.cols) + ada.eps);
    for (var j = 0u; j < ADA_VECS; j++) {
        let i = lid + j * WG;
        if i < units {
            out4[base + i] = vec4<act>((1.0 + vec4<f32>(sc[j])) * ((v[j] - mean) * r) + vec4<f32>(sh[j]));
        }
    }
}

// Columns an invocation of gather takes of rows `cols` wide:
// four where a row holds whole fours, else one (the host's grid counts them
// so: `dit::four_or_one`). One a invocation, the index arithmetic (its
// divisions) cost more than the bytes it moved.
fn four_or_one(cols: u32) -> u32 {
    return select(1u, 4u, cols % 4u == 0u);
}

@compute @workgroup_size(256)
fn gated_add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = element(wid, nwg, lid);
    if i >= gated.rows * gated.cols {
        return;
    }
    let row = i / gated.cols;
    let m = (row / gated.per_batch) * gated.mod_cols + gated.gate0 + i % gated.cols;
    out[i] = act(f32(out[i]) + f32(modv[m]) * f32(x[i]));
}

// gated_add where a row holds whole fours (`dit::record_gated_add`): VECS
// vectors of four an invocation.
@compute @workgroup_size(256)
fn gated_add_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let units = gated.cols / 4u;
    let total = gated.rows * units;
    let first = first_vec(wid, nwg, lid);
    var res: array<vec4<act>, VECS>;
    var ys: array<vec4<act>, VECS>;
    var gs: array<vec4<act>, VECS>;
    for (var e = 0u; e < VECS; e++) {
        let q = first + e * WG;
        if q < total {
            let row = q / units;
            let m = (row / gated.per_batch) * (gated.mod_cols / 4u) + (gated.gate0 / 4u) + q % units;
            res[e] = out4[q];
            ys[e] = x4[q];
            gs[e] = modv4[m];
        }
    }
    for (var e = 0u; e < VECS; e++) {
        let q = first + e * WG;
        if q < total {
            out4[q] = vec4<act>(vec4<f32>(res[e]) + vec4<f32>(gs[e]) * vec4<f32>(ys[e]));
        }
    }
}

// Invocations per (row, head) of qk_place: each takes pairs lid, lid +
// QK_WG, ... (at most QK_PAIRS of them, held in registers between the sum
// of squares and the writes: head_dim up to 2 · QK_WG · QK_PAIRS, `dit.rs`
// checks).
const QK_WG: u32 = 32u;
const QK_PAIRS: u32 = 4u;
// (row, head) items a workgroup, each its own QK_WG invocations (`dit.rs`'s
// QK_ITEMS): a workgroup of one item spent its time starting and in
// barriers, not moving bytes.
const QK_ITEMS: u32 = 8u;
var<workgroup> red_qk: array<f32, QK_WG * QK_ITEMS>;

// The joint row of `dst` that qk_place's src row `row` goes to.
fn qk_dst_row(row: u32) -> u32 {
    return (row / qk.src_per_batch) * qk.dst_per_batch + qk.dst_row0 + row % qk.src_per_batch;
}

// The pair (x0, x1) rotated by (cos, sin) `cs`.
fn rope_pair(cs: vec2<f32>, x0: f32, x1: f32) -> vec2<f32> {
    return vec2<f32>(cs.x * x0 - cs.y * x1, cs.y * x0 + cs.x * x1);
}

@compute @workgroup_size(QK_WG * QK_ITEMS)
fn qk_place(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid_wg: u32) {
    let hd = qk.head_dim;
    let heads = qk.cols / hd;
    // Item `idx` (src row, head) of QK_WG invocations, `lid` the one's
    // place in it; past the last item an invocation only meets the
    // barrier.
    let lid = lid_wg % QK_WG;
    let seg = lid_wg - lid;
    let idx = group_index(wid, nwg) * QK_ITEMS + lid_wg / QK_WG;
    let live = idx < qk.rows * heads;
    let h = idx % heads;
    let row = idx / heads;
    // In pairs: widths, first columns and head_dim are even (`dit.rs`).
    let src = (row * qk.src_width + qk.src_col0 + h * hd) / 2u;
    let dst_row = qk_dst_row(row);
    let dst = (dst_row * qk.cols + h * hd) / 2u;
    // No pairs past the last item.
    let npairs = select(0u, hd / 2u, live);
    var xs: array<vec2<f32>, QK_PAIRS>;
    var ss = 0.0;
    for (var j = 0u; j < QK_PAIRS; j++) {
        let i = lid + j * QK_WG;
        if i < npairs {
            let v = vec2<f32>(x2[src + i]);
            xs[j] = v;
            ss = ss + v.x * v.x + v.y * v.y;
        }
    }
    red_qk[seg + lid] = ss;
    workgroupBarrier();
    // Each invocation adds its item's partial sums itself, in one order:
    // one barrier where a tree took log2(QK_WG).
    var t = 0.0;
    for (var l = 0u; l < QK_WG; l++) {
        t = t + red_qk[seg + l];
    }
    let r = 1.0 / sqrt(t / f32(hd) + qk.eps);
    for (var j = 0u; j < QK_PAIRS; j++) {
        let i = lid + j * QK_WG;
        if i < npairs {
            let wi = w2[i];
            let x0 = xs[j].x * r * wi.x;
            let x1 = xs[j].y * r * wi.y;
            let cs = pe[dst_row * npairs + i];
            out2[dst + i] = vec2<act>(rope_pair(cs, x0, x1));
        }
    }
}

// qk_place where head_dim, src's width and first column are multiples of
// four and head_dim is at most 4 · QK_WG · QV_QUADS: each invocation moves
// quads (two pairs) as vectors of four, and each QK_WG invocations take
// QV_ITEMS consecutive (row, head) items, every load issued before the
// first sum (one item a group left each invocation one load in flight,
// the kernel at ~0.45 of the copy rate on the H100).
const QV_QUADS: u32 = 2u;
const QV_ITEMS: u32 = 4u;
var<workgroup> red_qv: array<f32, QK_WG * QK_ITEMS * QV_ITEMS>;
var<workgroup> rms_qv: array<f32, QK_ITEMS * QV_ITEMS>;

@compute @workgroup_size(QK_WG * QK_ITEMS)
fn qk_place_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid_wg: u32) {
    let hd = qk.head_dim;
    let heads = qk.cols / hd;
    let nquads = hd / 4u;
    let lid = lid_wg % QK_WG;
    let group = lid_wg / QK_WG;
    let idx0 = (group_index(wid, nwg) * QK_ITEMS + group) * QV_ITEMS;
    let items = qk.rows * heads;
    var xs: array<vec4<f32>, QV_ITEMS * QV_QUADS>;
    for (var k = 0u; k < QV_ITEMS; k++) {
        let idx = idx0 + k;
        // No quads past the last item.
        let nq = select(0u, nquads, idx < items);
        let src = ((idx / heads) * qk.src_width + qk.src_col0 + (idx % heads) * hd) / 4u;
        for (var j = 0u; j < QV_QUADS; j++) {
            let i = lid + j * QK_WG;
            if i < nq {
                xs[k * QV_QUADS + j] = vec4<f32>(x4[src + i]);
            }
        }
    }
    for (var k = 0u; k < QV_ITEMS; k++) {
        var t = 0.0;
        for (var j = 0u; j < QV_QUADS; j++) {
            if lid + j * QK_WG < nquads {
                let v = xs[k * QV_QUADS + j];
                t = t + dot(v, v);
            }
        }
        red_qv[(group * QV_ITEMS + k) * QK_WG + lid] = t;
    }
    workgroupBarrier();
    // Invocation k of a group adds item k's partial sums, in one order.
    if lid < QV_ITEMS {
        let at = (group * QV_ITEMS + lid) * QK_WG;
        var t = 0.0;
        for (var l = 0u; l < QK_WG; l++) {
            t = t + red_qv[at + l];
        }
        rms_qv[group * QV_ITEMS + lid] = 1.0 / sqrt(t / f32(hd) + qk.eps);
    }
    workgroupBarrier();
    for (var k = 0u; k < QV_ITEMS; k++) {
        let idx = idx0 + k;
        if idx >= items {
            break;
        }
        let r = rms_qv[group * QV_ITEMS + k];
        let dst_row = qk_dst_row(idx / heads);
        let dst = (dst_row * qk.cols + (idx % heads) * hd) / 4u;
        for (var j = 0u; j < QV_QUADS; j++) {
            let i = lid + j * QK_WG;
            if i < nquads {
                let x = xs[k * QV_QUADS + j] * r * w4[i];
                let cs = pe4[dst_row * nquads + i];
                out4[dst + i] = vec4<act>(vec4<f32>(rope_pair(cs.xy, x.x, x.y), rope_pair(cs.zw, x.z, x.w)));
            }
        }
    }
}

// The (src, dst) element index of gather's item `i`, of `units` items a
// block row of `run` columns each.
fn gather_at(i: u32, units: u32, run: u32) -> vec2<u32> {
    let per = gat.rows * units;
    let bt = i / per;
    let s = (i % per) / units;
    let c = (i % units) * run;
    let src_i = (bt * gat.src_per_batch + gat.src_row0 + s) * gat.src_width + gat.src_col0 + c;
    let dst_i = (bt * gat.dst_per_batch + gat.dst_row0 + s) * gat.dst_width + gat.dst_col0 + c;
    return vec2<u32>(src_i, dst_i);
}

fn gather_op(v: f32) -> f32 {
    if gat.op == 1u {
        return gelu_tanh(v);
    }
    return v;
}

@compute @workgroup_size(256)
fn gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let run = four_or_one(gat.cols);
    let units = gat.cols / run;
    let i = element(wid, nwg, lid);
    if i >= gat.batch * gat.rows * units {
        return;
    }
    let at = gather_at(i, units, run);
    for (var e = 0u; e < run; e++) {
        out[at.y + e] = act(gather_op(f32(x[at.x + e])));
    }
}

// gather where both sides' widths and first columns and the block's
// columns are multiples of four (`dit::record_gather`): VECS vectors of
// four an invocation, as gated_add_vec.
@compute @workgroup_size(256)
fn gather_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let units = gat.cols / 4u;
    let total = gat.batch * gat.rows * units;
    let first = first_vec(wid, nwg, lid);
    var v: array<vec4<act>, VECS>;
    var at: array<vec2<u32>, VECS>;
    for (var e = 0u; e < VECS; e++) {
        let q = first + e * WG;
        if q < total {
            at[e] = gather_at(q, units, 4u) / 4u;
            v[e] = x4[at[e].x];
        }
    }
    for (var e = 0u; e < VECS; e++) {
        if first + e * WG < total {
            let r = vec4<f32>(v[e]);
            out4[at[e].y] = vec4<act>(vec4<f32>(gather_op(r.x), gather_op(r.y), gather_op(r.z), gather_op(r.w)));
        }
    }
}
