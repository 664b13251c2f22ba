//! The ledger: every GPU buffer the workspace creates, by owner class.
//!
//! wgpu cannot say what a buffer is for, so the runtime records each
//! allocation here (docs/behaviour.md, Budget). `loaded_vram` counts only the model proper.

use std::collections::HashMap;
use std::fmt;

/// What a GPU allocation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerClass {
    /// The model proper (resident weight pages).
    Weights,
    /// Live LoRA and other per-run additions; never part of `loaded_vram`.
    Patches,
    /// Streamed-weight arenas.
    Transient,
    /// Activations and other per-pass buffers.
    Scratch,
}

impl OwnerClass {
    /// Every class, in ledger order.
    pub const ALL: [OwnerClass; 4] = [
        OwnerClass::Weights,
        OwnerClass::Patches,
        OwnerClass::Transient,
        OwnerClass::Scratch,
    ];

    fn slot(self) -> usize {
        self as usize
    }
}

impl fmt::Display for OwnerClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OwnerClass::Weights => "weights",
            OwnerClass::Patches => "patches",
            OwnerClass::Transient => "transient",
            OwnerClass::Scratch => "scratch",
        })
    }
}

/// Handle of one recorded allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocId(pub u64);

impl fmt::Display for AllocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Ledger errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// Freeing an id that was never recorded or was already freed.
    #[error("allocation {id} is not in the ledger (never recorded or already freed)")]
    UnknownAllocation {
        /// The id passed in.
        id: AllocId,
    },
}

/// Bytes per owner class, their total and its peak.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    entries: HashMap<AllocId, (OwnerClass, u64)>,
    per_class: [u64; 4],
    total: u64,
    peak: u64,
    next: u64,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an allocation of `bytes` for `class`.
    pub fn allocate(&mut self, class: OwnerClass, bytes: u64) -> AllocId {
        let id = AllocId(self.next);
        self.next += 1;
        self.entries.insert(id, (class, bytes));
        self.per_class[class.slot()] = self.per_class[class.slot()].saturating_add(bytes);
        self.total = self.total.saturating_add(bytes);
        self.peak = self.peak.max(self.total);
        id
    }

    /// Forgets an allocation; returns its class and size.
    pub fn free(&mut self, id: AllocId) -> Result<(OwnerClass, u64), LedgerError> {
        let (class, bytes) = self
            .entries
            .remove(&id)
            .ok_or(LedgerError::UnknownAllocation { id })?;
        self.per_class[class.slot()] -= bytes;
        self.total -= bytes;
        Ok((class, bytes))
    }

    /// Size and class of a live allocation.
    pub fn get(&self, id: AllocId) -> Option<(OwnerClass, u64)> {
        self.entries.get(&id).copied()
    }

    /// Bytes currently held by `class`.
    pub fn bytes(&self, class: OwnerClass) -> u64 {
        self.per_class[class.slot()]
    }

    /// Bytes currently held by every class (the `tracked_usage` of docs/behaviour.md, Budget).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Highest `total` reached since the ledger began or [`Self::reset_peak`].
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Starts a new peak from the bytes held now (a pipeline's stages each
    /// report their own).
    pub fn reset_peak(&mut self) {
        self.peak = self.total;
    }

    /// Live allocations.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// VRAM held by the model proper: `weights` only, never patches.
    pub fn loaded_vram(&self) -> u64 {
        self.bytes(OwnerClass::Weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_total_peak_and_loaded_vram() {
        let mut l = Ledger::new();
        let w = l.allocate(OwnerClass::Weights, 100);
        let p = l.allocate(OwnerClass::Patches, 30);
        let s = l.allocate(OwnerClass::Scratch, 50);
        assert_eq!(l.total(), 180);
        assert_eq!(l.loaded_vram(), 100, "patches never count as loaded");
        assert_eq!(l.free(s), Ok((OwnerClass::Scratch, 50)));
        l.allocate(OwnerClass::Transient, 10);
        assert_eq!(l.total(), 140);
        assert_eq!(l.peak(), 180);
        l.reset_peak();
        assert_eq!(l.peak(), 140, "a new peak starts from the bytes held");
        let t = l.allocate(OwnerClass::Transient, 5);
        assert_eq!(l.free(t), Ok((OwnerClass::Transient, 5)));
        assert_eq!(l.peak(), 145);
        assert_eq!(l.bytes(OwnerClass::Patches), 30);
        assert_eq!(
            l.free(s),
            Err(LedgerError::UnknownAllocation { id: s }),
            "double free is an error, not a panic"
        );
        l.free(w).unwrap();
        l.free(p).unwrap();
        assert_eq!(l.loaded_vram(), 0);
        assert_eq!(l.len(), 1);
    }
}
