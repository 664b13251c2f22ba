//! What every attention kernel is told: the head layout and which rows
//! and keys it covers.

use crate::device::GpuError;
use crate::ops::kernel::{self, bad};
use crate::tensor::GpuTensor;

/// Largest head dimension the kernel holds in workgroup memory.
pub const MAX_HEAD_DIM: u64 = 256;

/// Head layout of one attention layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub n_heads: u64,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: u64,
    /// Dimension of each head (≤ [`MAX_HEAD_DIM`]).
    pub head_dim: u64,
}

impl Heads {
    /// Query heads per kv head (their group; 1 without grouped heads).
    pub fn group(self) -> u64 {
        self.n_heads / self.n_kv_heads.max(1)
    }

    pub(super) fn check(self, op: &'static str) -> Result<(), GpuError> {
        let Self {
            n_heads,
            n_kv_heads,
            head_dim,
        } = self;
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(bad(
                op,
                format!("n_heads {n_heads} must be a non-zero multiple of n_kv_heads {n_kv_heads}"),
            ));
        }
        if head_dim == 0 || head_dim > MAX_HEAD_DIM {
            return Err(bad(
                op,
                format!("head_dim {head_dim} must be in 1..={MAX_HEAD_DIM}"),
            ));
        }
        Ok(())
    }
}

/// The rows and keys of one attention: `batch` elements of `sq` query rows
/// each, over `kv_len` keys of `kv_rows` k/v rows per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub batch: u64,
    pub sq: u64,
    /// k/v rows per batch element (a cache's capacity; `kv_len` for a
    /// plain k/v).
    pub kv_rows: u64,
    /// Keys each element has (rows `0..kv_len` of its k/v).
    pub kv_len: u64,
    /// Position of query row 0 (the causal mask's reference).
    pub pos0: u64,
    /// Query row r sees keys `0..=pos0 + r`; otherwise all `kv_len`.
    pub causal: bool,
}

/// The query rows of one flash launch, which decide how many workgroups a
/// kernel of some rows each fills: `heads` query heads times batch elements
/// of `rows` query rows each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashGrid {
    pub heads: u64,
    pub rows: u64,
}

impl FlashGrid {
    /// The grid of `span` with `heads`.
    pub(super) fn of(heads: Heads, span: Span) -> Self {
        Self {
            heads: heads.n_heads * span.batch,
            rows: span.sq,
        }
    }

    /// Workgroups of a kernel of `rows` query rows each over this grid.
    pub fn workgroups(self, rows: u32) -> u64 {
        self.heads * self.rows.div_ceil(u64::from(rows))
    }
}

impl Span {
    /// Keys the last query row sees (every key without the mask).
    pub fn keys(self) -> u64 {
        if self.causal {
            (self.pos0 + self.sq).min(self.kv_len)
        } else {
            self.kv_len
        }
    }

    /// Keys the query rows see, summed over rows and batch elements.
    pub fn visible_pairs(self) -> u64 {
        let per_element = if self.causal {
            // Rows at pos0 + r see min(pos0 + r + 1, kv_len) keys.
            (0..self.sq)
                .map(|r| (self.pos0 + r + 1).min(self.kv_len))
                .sum()
        } else {
            self.sq * self.kv_len
        };
        self.batch * per_element
    }
}

/// Bytes (q, out, and the visible k/v rows once per kv head) and FLOPs
/// (q·k and p·v over the keys each query row sees) of one attention.
pub(super) fn cost(q: &GpuTensor, heads: Heads, span: Span) -> kernel::Cost {
    let row = heads.n_kv_heads * heads.head_dim * q.dtype.size();
    kernel::Cost::new(
        q.bytes() + 2 * span.batch * span.kv_len * row,
        q.bytes(),
        4 * heads.n_heads * heads.head_dim * span.visible_pairs(),
    )
}
