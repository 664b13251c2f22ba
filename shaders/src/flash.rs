//! Flash attention's shapes (`flash_attention.wgsl`): the [`FlashTuning`]
//! a launch runs with, its text form, and the module generated for it
//! ([`flash_attention`]). The shape is text, not `override` constants: it
//! sizes workgroup arrays, and every cooperative matrix is a variable of
//! its own (NVIDIA's compiler runs arrays of them at half speed,
//! BENCHMARKS.md run G).

use std::fmt::{self, Write};
use std::str::FromStr;

/// How a block's keys and values reach the matrix loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvStaging {
    /// One workgroup-memory buffer: the keys, then the values over them
    /// once the scores are out (four barriers a block; the least memory).
    Serial,
    /// Keys and values in buffers of their own, both staged before the
    /// scores (three barriers a block).
    Paired,
    /// No staging: the matrices load straight from k and v (two barriers a
    /// block; a block's partial last tile of keys goes through workgroup
    /// memory, zero past the last key). Needs one key group.
    Global,
    /// Keys and values paired, in two stages: the next block's, read into
    /// registers at the top of a block (`r`, which it needs), are stored
    /// into the other stage once this block's scores are out, so they are
    /// never waited for (two barriers a block; twice the memory of
    /// [`Self::Paired`]).
    Double,
}

/// A flash-attention workgroup's shape (see `flash_attention.wgsl`).
///
/// Text form ([`FromStr`], [`fmt::Display`]):
/// `BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m]` — `BR` query rows per workgroup and
/// `BC` keys per block (multiples of the matrix edge, `BR` a power of two);
/// `wNSG` subgroups (a power of two, default 4); `kKG` key groups: the
/// subgroups sharing a row block's scores split its keys (default 1);
/// `cCG` column groups: the subgroups sharing an output row block split its
/// head columns (default 1); the staging of keys and values, `s` serial
/// (default), `p` paired, `g` global or `d` double ([`KvStaging`]); `r`:
/// the next block's keys and values read into registers while this block
/// computes (serial, paired, and double, which needs it); `t`: scores and probabilities column-major in
/// workgroup memory (default row-major); `m`: the queries' matrices
/// materialized in registers as loaded. E.g. `64x64w4c2`, `128x32w8c2pr`,
/// `64x64w4gt`, `128x16w8c2dr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlashTuning {
    /// Query rows per workgroup (`BR`).
    pub rows: u32,
    /// Keys per block (`BC`).
    pub keys: u32,
    /// Subgroups per workgroup (`NSG`).
    pub subgroups: u32,
    /// Subgroups that split one row block's keys in the scores product.
    pub key_groups: u32,
    /// Subgroups that split one output row block's head columns.
    pub col_groups: u32,
    /// How keys and values are staged.
    pub staging: KvStaging,
    /// The next block's keys and values read into registers during this
    /// block (serial and paired staging).
    pub prefetch: bool,
    /// Scores and probabilities column-major in workgroup memory (the
    /// softmax's consecutive lanes on consecutive rows: no bank conflicts)
    /// instead of row-major (the layout the two-walk kernel ran on NVIDIA).
    pub column_major: bool,
    /// The queries' matrices held in variables, each multiplied by a
    /// runtime 1 as loaded: forces them into registers at the load (a
    /// compiler that re-reads a loaded matrix from workgroup memory where
    /// it is used would read keys or probabilities by then).
    pub materialize: bool,
}

impl FlashTuning {
    /// The shape `flash_attention.wgsl`'s generated region is written for
    /// (16 × 16 matrices, subgroups of 32, head_dim 128).
    pub const FILE: Self = Self {
        rows: 64,
        keys: 64,
        subgroups: 4,
        key_groups: 1,
        col_groups: 2,
        staging: KvStaging::Serial,
        prefetch: false,
        column_major: false,
        materialize: false,
    };

    /// The sizes of this tuning's module on matrices of edge `edge`,
    /// subgroups of `sg` and head dimension `hd`, or why it has none.
    pub fn geometry(&self, edge: u32, sg: u32, hd: u32) -> Result<FlashGeometry, String> {
        let s = *self;
        let pow2 = |x: u32| x.is_power_of_two();
        if !matches!(edge, 8 | 16) {
            return Err(format!("matrices of edge {edge} (want 8 or 16)"));
        }
        if !pow2(sg) || sg < 4 {
            return Err(format!(
                "subgroups of {sg} (want a power of two, at least 4)"
            ));
        }
        if hd == 0 || !hd.is_multiple_of(edge) {
            return Err(format!(
                "head_dim {hd} is not a multiple of the matrix edge {edge}"
            ));
        }
        if !pow2(s.rows) || !s.rows.is_multiple_of(edge) {
            return Err(format!(
                "{} rows (want a power of two, a multiple of the matrix edge {edge})",
                s.rows
            ));
        }
        if s.keys == 0 || !s.keys.is_multiple_of(edge) || s.keys > 512 {
            return Err(format!(
                "{} keys a block (want a multiple of the matrix edge {edge}, at most 512)",
                s.keys
            ));
        }
        if !pow2(s.subgroups) || s.subgroups > 32 {
            return Err(format!(
                "{} subgroups (want a power of two, at most 32)",
                s.subgroups
            ));
        }
        let (rb, kt, dm) = (s.rows / edge, s.keys / edge, hd / edge);
        let groups = |what: &str, g: u32, split: u32, over: &str| -> Result<(u32, u32), String> {
            if g == 0 || !s.subgroups.is_multiple_of(g) {
                return Err(format!(
                    "{g} {what} do not divide {} subgroups",
                    s.subgroups
                ));
            }
            let row_groups = s.subgroups / g;
            if !rb.is_multiple_of(row_groups) {
                return Err(format!(
                    "{rb} row blocks of {edge} do not split over {row_groups} subgroups"
                ));
            }
            if !split.is_multiple_of(g) {
                return Err(format!(
                    "{split} {over} of {edge} do not split into {g} {what}"
                ));
            }
            Ok((rb / row_groups, split / g))
        };
        let (s_rows, s_tiles) = groups("key groups", s.key_groups, kt, "key tiles")?;
        let (o_rows, o_cols) = groups("column groups", s.col_groups, dm, "head column tiles")?;
        match s.staging {
            KvStaging::Global if s.key_groups != 1 => {
                return Err("global staging takes one key group".into());
            }
            KvStaging::Global if s.prefetch => {
                return Err("global staging has nothing to prefetch (no `r`)".into());
            }
            KvStaging::Double if !s.prefetch => {
                return Err("double staging stores the next block from registers (add `r`)".into());
            }
            _ => {}
        }
        let wg = s.subgroups * sg;
        // Invocations per query row in the softmax, and rows per invocation.
        let t = (wg / s.rows).max(1);
        if t > sg {
            return Err(format!(
                "{wg} invocations over {} rows leave {t} per row, more than a subgroup",
                s.rows
            ));
        }
        let rows_per_lane = (s.rows / wg).max(1);
        // Column-major pitches: a subgroup's SG / T consecutive rows on
        // consecutive banks, its T column offsets on other banks. Row-major:
        // rows skewed by 16 bytes.
        let (sp, pp) = if s.column_major {
            (s.rows + if t > 1 { (sg / t).max(4) } else { 4 }, s.rows + 8)
        } else {
            (s.keys + 4, s.keys + 8)
        };
        let kp = hd + 8;
        let kv_halves = match s.staging {
            KvStaging::Serial => s.keys * kp,
            KvStaging::Paired => 2 * s.keys * kp,
            KvStaging::Global => 2 * edge * kp,
            KvStaging::Double => 4 * s.keys * kp,
        };
        let lines = if s.column_major { s.keys } else { s.rows };
        let p_halves = lines * pp;
        let s_floats = (lines * sp).max(s.subgroups * edge * edge);
        // The queries are staged through all of the f16 memory, as many
        // head column tiles a round as fit.
        let halves = kv_halves + p_halves;
        let q_tiles = ((halves / s.rows).saturating_sub(8) / edge).min(dm);
        if q_tiles == 0 {
            return Err(format!(
                "{halves} f16 elements of staging cannot take a round of {} query rows",
                s.rows
            ));
        }
        let chunks = (s.keys * hd / 4).div_ceil(wg);
        Ok(FlashGeometry {
            edge,
            sg,
            hd,
            tuning: s,
            dm,
            s_rows,
            s_tiles,
            o_rows,
            o_cols,
            lanes_per_row: t,
            rows_per_lane,
            sp,
            pp,
            kp,
            kv_halves,
            p_halves,
            s_floats,
            q_tiles,
            chunks,
        })
    }
}

impl fmt::Display for KvStaging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Serial => "serial",
            Self::Paired => "paired",
            Self::Global => "global",
            Self::Double => "double",
        })
    }
}

impl fmt::Display for FlashTuning {
    /// The [`FromStr`] syntax, defaults left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}w{}", self.rows, self.keys, self.subgroups)?;
        if self.key_groups != 1 {
            write!(f, "k{}", self.key_groups)?;
        }
        if self.col_groups != 1 {
            write!(f, "c{}", self.col_groups)?;
        }
        match self.staging {
            KvStaging::Serial => {}
            KvStaging::Paired => f.write_str("p")?,
            KvStaging::Global => f.write_str("g")?,
            KvStaging::Double => f.write_str("d")?,
        }
        if self.prefetch {
            f.write_str("r")?;
        }
        if self.column_major {
            f.write_str("t")?;
        }
        if self.materialize {
            f.write_str("m")?;
        }
        Ok(())
    }
}

impl FromStr for FlashTuning {
    type Err = String;

    /// `BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m]`, see [`FlashTuning`]; the shape's
    /// own limits are checked by [`FlashTuning::geometry`].
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "bad flash tuning `{text}`: {why} (want BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m], e.g. 64x64w4c2, 128x32w8c2pr)"
            )
        };
        let mut rest = text.trim();
        let number = |rest: &mut &str| -> Result<u32, String> {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (digits, tail) = rest.split_at(end);
            *rest = tail;
            match digits.parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                Ok(_) => Err(bad("a number is 0")),
                Err(_) if digits.is_empty() => Err(bad("a number is missing")),
                Err(_) => Err(bad("a number is out of range")),
            }
        };
        let rows = number(&mut rest)?;
        rest = rest
            .strip_prefix(['x', 'X'])
            .ok_or_else(|| bad("`x` must follow the rows"))?;
        let keys = number(&mut rest)?;
        let mut t = Self {
            rows,
            keys,
            subgroups: 4,
            key_groups: 1,
            col_groups: 1,
            staging: KvStaging::Serial,
            prefetch: false,
            column_major: false,
            materialize: false,
        };
        // Tags in this order, each at most once.
        let mut seen = 0;
        while let Some(c) = rest.chars().next() {
            let rank = match c {
                'w' => 1,
                'k' => 2,
                'c' => 3,
                's' | 'p' | 'g' | 'd' => 4,
                'r' => 5,
                't' => 6,
                'm' => 7,
                other => return Err(bad(&format!("unknown tag `{other}`"))),
            };
            if rank <= seen {
                return Err(bad(&format!("`{c}` repeated or out of order")));
            }
            seen = rank;
            rest = &rest[1..];
            match c {
                'w' => t.subgroups = number(&mut rest)?,
                'k' => t.key_groups = number(&mut rest)?,
                'c' => t.col_groups = number(&mut rest)?,
                's' => t.staging = KvStaging::Serial,
                'p' => t.staging = KvStaging::Paired,
                'g' => t.staging = KvStaging::Global,
                'd' => t.staging = KvStaging::Double,
                'r' => t.prefetch = true,
                't' => t.column_major = true,
                _ => t.materialize = true,
            }
        }
        Ok(t)
    }
}

/// Which flash-attention kernel a launch runs: the two-walk kernel
/// (`flash_attention_two_walk.wgsl`, its shape chosen per adapter: the
/// runtime's default) or the one-walk kernel with a [`FlashTuning`].
///
/// Text form: `two-walk`, or a [`FlashTuning`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlashKernel {
    /// Two walks over the keys: the softmax statistics, then the outputs
    /// (a third more products, no output rescaling).
    TwoWalk,
    /// One walk with an online softmax, shaped by the tuning.
    OneWalk(FlashTuning),
}

impl fmt::Display for FlashKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TwoWalk => f.write_str("two-walk"),
            Self::OneWalk(t) => t.fmt(f),
        }
    }
}

impl FromStr for FlashKernel {
    type Err = String;

    /// `two-walk` or a [`FlashTuning`].
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "two-walk" => Ok(Self::TwoWalk),
            t => t.parse().map(Self::OneWalk),
        }
    }
}

/// The sizes of one flash-attention module ([`FlashTuning::geometry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashGeometry {
    /// Matrix edge (`CM`).
    pub edge: u32,
    /// Invocations per subgroup (`SG`).
    pub sg: u32,
    /// Head dimension (`HD`).
    pub hd: u32,
    /// The tuning.
    pub tuning: FlashTuning,
    /// Head column tiles (`HD / CM`).
    pub dm: u32,
    /// Row blocks a subgroup holds queries and scores of.
    pub s_rows: u32,
    /// Key tiles of a subgroup's scores.
    pub s_tiles: u32,
    /// Row blocks of a subgroup's outputs.
    pub o_rows: u32,
    /// Head column tiles of a subgroup's outputs.
    pub o_cols: u32,
    /// Invocations per query row in the softmax (`T`).
    pub lanes_per_row: u32,
    /// Query rows per invocation in the softmax.
    pub rows_per_lane: u32,
    /// Pitch of the scores (f32 elements, `SP`): of a key's column
    /// (column-major) or a row's keys (row-major).
    pub sp: u32,
    /// Pitch of the probabilities (f16, `PP`), likewise.
    pub pp: u32,
    /// Row pitch of the staged keys, values and queries' rounds (f16, `KP`).
    pub kp: u32,
    /// f16 elements of the key/value staging.
    pub kv_halves: u32,
    /// f16 elements of the probabilities.
    pub p_halves: u32,
    /// f32 elements of the scores (also the scratch of the rescale and the
    /// final division: a CM × CM matrix per subgroup).
    pub s_floats: u32,
    /// Head column tiles of the queries staged per round.
    pub q_tiles: u32,
    /// Four-value chunks of a block's keys (or values) per invocation.
    pub chunks: u32,
}

impl FlashGeometry {
    /// Workgroup memory in bytes.
    pub fn workgroup_bytes(&self) -> u32 {
        (self.kv_halves + self.p_halves) * 2 + (self.s_floats + self.tuning.rows + 4) * 4
    }

    /// 32-bit registers per invocation that the cooperative matrices take
    /// (queries, scores, outputs) and the prefetched keys and values: an
    /// estimate of what the shape asks of a register file (NVIDIA's holds
    /// 255 per invocation; the compiler spills beyond).
    pub fn registers(&self) -> u32 {
        let e2 = self.edge * self.edge;
        let f16_matrix = (e2 / 2).div_ceil(self.sg);
        let f32_matrix = e2.div_ceil(self.sg);
        let prefetch = if self.tuning.prefetch {
            4 * self.chunks
        } else {
            0
        };
        self.s_rows * self.dm * f16_matrix
            + (self.s_rows * self.s_tiles + self.o_rows * self.o_cols) * f32_matrix
            + prefetch
    }

    /// Invocations per workgroup.
    pub fn invocations(&self) -> u32 {
        self.tuning.subgroups * self.sg
    }
}

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
