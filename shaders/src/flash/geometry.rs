//! The sizes a [`FlashTuning`] gives a module: its checks against the
//! matrices, subgroups and head dimension, and the workgroup memory and
//! registers that follow.

use super::tuning::{FlashTuning, KvStaging};

impl FlashTuning {
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
