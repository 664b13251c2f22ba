//! A pool of reader threads: one read is split into fixed-size tasks (2 MiB by
//! default) that fill disjoint parts of the destination in parallel. One
//! thread copying into mapped memory tops out near 10 GB/s; PCIe carries 5×
//! that, so several readers are needed.

use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crate::write_only::WriteOnlyBytes;
use crossbeam_channel::{Receiver, Sender};

use crate::error::{LoadError, Result};
use crate::source::ByteSource;

/// Default task size: 2 MiB *(aimdo)*.
pub const DEFAULT_TASK_SIZE: usize = 2 << 20;
/// Default number of reader threads *(aimdo)*.
pub const DEFAULT_THREADS: usize = 8;

/// How the pool reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderConfig {
    /// Reader threads (0: read on the calling thread).
    pub threads: usize,
    /// Bytes per task.
    pub task_size: usize,
    /// After each task, tell the OS the bytes are not needed again
    /// (`posix_fadvise(DONTNEED)`), for streaming models larger than RAM.
    pub drop_behind: bool,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        Self {
            threads: DEFAULT_THREADS,
            task_size: DEFAULT_TASK_SIZE,
            drop_behind: false,
        }
    }
}

/// One task: read `len` bytes of `source` at `offset` into `dst`.
struct Task {
    /// The caller's source with its lifetime erased; valid until the caller
    /// has received this task's completion (see [`ReaderPool::read`]).
    source: NonNull<dyn ByteSource>,
    offset: u64,
    dst: NonNull<u8>,
    len: usize,
    drop_behind: bool,
    /// Index of the earliest failed task so far (`usize::MAX`: none); later
    /// tasks are skipped, earlier ones still run so the reported error is
    /// always the earliest.
    failed: Arc<AtomicUsize>,
    index: usize,
    done: Sender<(usize, Result<()>)>,
}

// SAFETY: `source` is `Sync` (a `ByteSource` bound) and `dst` is a disjoint,
// exclusively owned part of the caller's destination; both outlive the task
// because `ReaderPool::read` waits for every task's completion message.
unsafe impl Send for Task {}

impl Task {
    fn run(self) {
        let result = if self.failed.load(Ordering::Relaxed) < self.index {
            Ok(())
        } else {
            // SAFETY: see `unsafe impl Send for Task`: the source is alive
            // until `done` is sent below.
            let source = unsafe { self.source.as_ref() };
            let run = || {
                // SAFETY: `dst` is valid for `len` writes, disjoint from every
                // other task's part, and the caller does not touch it until
                // this task reports completion.
                let dst = unsafe {
                    WriteOnlyBytes::new(NonNull::slice_from_raw_parts(self.dst, self.len))
                };
                let r = source.read_at(self.offset, dst);
                if r.is_ok() && self.drop_behind {
                    source.drop_behind(self.offset, self.len as u64);
                }
                r
            };
            std::panic::catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
                Err(LoadError::ReaderPanicked {
                    what: source.describe(),
                })
            })
        };
        if result.is_err() {
            self.failed.fetch_min(self.index, Ordering::Relaxed);
        }
        // The caller may have stopped listening only if it is unwinding; then
        // nothing is left to tell.
        let _ = self.done.send((self.index, result));
    }
}

/// Reader threads fed through a channel of 2 MiB tasks.
#[derive(Debug)]
pub struct ReaderPool {
    config: ReaderConfig,
    tasks: Option<Sender<Task>>,
    workers: Vec<JoinHandle<()>>,
}

impl ReaderPool {
    /// Starts `config.threads` reader threads.
    pub fn new(config: ReaderConfig) -> Result<Self> {
        let config = ReaderConfig {
            task_size: config.task_size.max(4096),
            ..config
        };
        let (tx, rx) = crossbeam_channel::unbounded::<Task>();
        let workers = (0..config.threads)
            .map(|i| {
                let rx: Receiver<Task> = rx.clone();
                std::thread::Builder::new()
                    .name(format!("dynvram-reader-{i}"))
                    .spawn(move || {
                        for task in rx {
                            task.run();
                        }
                    })
                    .map_err(|source| LoadError::Io {
                        path: "<reader thread>".into(),
                        op: "spawn",
                        source,
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            config,
            tasks: Some(tx),
            workers,
        })
    }

    /// The pool's configuration.
    pub fn config(&self) -> ReaderConfig {
        self.config
    }

    /// Fills `dst` with bytes `[src_offset, src_offset + dst.len())` of
    /// `source`, split into tasks over the pool. Returns the error of the
    /// earliest failing part (deterministic whatever the thread timing);
    /// tasks not yet started are skipped after an error. Always waits for
    /// every task before returning.
    pub fn read(
        &self,
        source: &dyn ByteSource,
        src_offset: u64,
        mut dst: WriteOnlyBytes<'_>,
    ) -> Result<()> {
        let len = dst.len();
        let task_size = self.config.task_size;
        let tasks = match &self.tasks {
            Some(tx) if len > task_size && !self.workers.is_empty() => tx,
            _ => return self.read_inline(source, src_offset, dst),
        };
        let _span = tracing::trace_span!("pool_read", bytes = len).entered();
        // SAFETY: only the lifetime is erased; `source` stays borrowed (and
        // alive) until every task has reported below.
        let erased: NonNull<dyn ByteSource> = unsafe {
            std::mem::transmute::<NonNull<dyn ByteSource + '_>, NonNull<dyn ByteSource + 'static>>(
                NonNull::from(source),
            )
        };
        let base = dst.as_raw_ptr();
        let failed = Arc::new(AtomicUsize::new(usize::MAX));
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let mut sent = 0usize;
        let mut first_error: Option<(usize, LoadError)> = None;
        for (index, start) in (0..len).step_by(task_size).enumerate() {
            let task = Task {
                source: erased,
                offset: src_offset + start as u64,
                // SAFETY: `start < len`, so the pointer stays inside `dst`.
                dst: unsafe { base.add(start) },
                len: task_size.min(len - start),
                drop_behind: self.config.drop_behind,
                failed: failed.clone(),
                index,
                done: done_tx.clone(),
            };
            if tasks.send(task).is_err() {
                first_error = Some((index, LoadError::PoolShutDown));
                break;
            }
            sent += 1;
        }
        for _ in 0..sent {
            let (index, error) = match done_rx.recv() {
                Ok((_, Ok(()))) => continue,
                Ok((index, Err(e))) => (index, e),
                // Unreachable while `done_tx` lives; treat as a dead pool.
                Err(_) => (usize::MAX, LoadError::PoolShutDown),
            };
            if first_error.as_ref().is_none_or(|(i, _)| index < *i) {
                first_error = Some((index, error));
            }
        }
        first_error.map_or(Ok(()), |(_, e)| Err(e))
    }

    /// [`Self::read`] into ordinary memory.
    pub fn read_into(
        &self,
        source: &dyn ByteSource,
        src_offset: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        self.read(source, src_offset, WriteOnlyBytes::from_mut(dst))
    }

    fn read_inline(
        &self,
        source: &dyn ByteSource,
        src_offset: u64,
        mut dst: WriteOnlyBytes<'_>,
    ) -> Result<()> {
        let len = dst.len();
        for start in (0..len).step_by(self.config.task_size) {
            let n = self.config.task_size.min(len - start);
            source.read_at(src_offset + start as u64, dst.slice(start..start + n))?;
            if self.config.drop_behind {
                source.drop_behind(src_offset + start as u64, n as u64);
            }
        }
        Ok(())
    }
}

impl Drop for ReaderPool {
    fn drop(&mut self) {
        self.tasks = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
