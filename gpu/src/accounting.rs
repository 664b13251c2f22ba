//! GPU buffers recorded in the budget's ledger with their owner class. The
//! ledger entry is freed when the buffer is dropped, so tracked usage always
//! equals what the workspace holds.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use dynvram_memory::{AllocId, Budget, OwnerClass};

use crate::device::{Gpu, GpuError};

/// The shared budget (one per runtime, over every model).
pub type SharedBudget = Arc<Mutex<Budget>>;

/// Why a [`TrackedBuffer`] could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The budget refused the buffer (the deficit rule); names the buffer.
    #[error("buffer `{label}`: {source}")]
    BudgetRefused {
        /// Buffer label.
        label: String,
        /// Why the budget refused.
        source: dynvram_memory::BudgetError,
    },
    /// The GPU refused the allocation.
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// A GPU buffer counted in the ledger.
#[derive(Debug)]
pub struct TrackedBuffer {
    /// The buffer.
    pub buffer: Arc<wgpu::Buffer>,
    /// Its size in bytes.
    pub size: u64,
    /// What it holds.
    pub class: OwnerClass,
    id: AllocId,
    budget: SharedBudget,
}

impl TrackedBuffer {
    /// Allocates `size` bytes of `class` after checking the budget's deficit
    /// rule, then creates the buffer inside an out-of-memory scope.
    pub fn new(
        gpu: &Gpu,
        budget: &SharedBudget,
        class: OwnerClass,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<Self, BufferError> {
        Self::new_with(budget, class, label, size, |size| {
            gpu.create_buffer(label, size, usage)
        })
    }

    /// [`Self::new`] with the buffer made by `make` (given the rounded size).
    pub fn new_with(
        budget: &SharedBudget,
        class: OwnerClass,
        label: &str,
        size: u64,
        make: impl FnOnce(u64) -> Result<wgpu::Buffer, GpuError>,
    ) -> Result<Self, BufferError> {
        let size = size.max(4).next_multiple_of(4);
        let id = lock(budget)
            .allocate(class, size, Instant::now())
            .map_err(|source| BufferError::BudgetRefused {
                label: label.to_owned(),
                source,
            })?;
        match make(size) {
            Ok(buffer) => Ok(Self {
                buffer: Arc::new(buffer),
                size,
                class,
                id,
                budget: budget.clone(),
            }),
            Err(e) => {
                let _ = lock(budget).free(id);
                Err(e.into())
            }
        }
    }
}

impl Drop for TrackedBuffer {
    fn drop(&mut self) {
        let _ = lock(&self.budget).free(self.id);
        FREED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Tracked buffers freed so far in this process.
static FREED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many tracked buffers were freed so far: caches that hold buffers
/// (bind groups) start over when it changes, so no freed buffer is kept
/// alive past the next launch.
pub(crate) fn buffers_freed() -> u64 {
    FREED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Locks the budget, recovering from a poisoned lock (the ledger stays
/// consistent: every mutation is a single call).
pub fn lock(budget: &SharedBudget) -> std::sync::MutexGuard<'_, Budget> {
    budget.lock().unwrap_or_else(|e| e.into_inner())
}
