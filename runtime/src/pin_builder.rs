//! Registered pins built off the pass's thread.
//!
//! A new registered pin is filled from its file at a few GB/s (the pages
//! are faulted in and the memory imported as it is filled), several times
//! slower than the staging ring streams the same bytes from the page cache.
//! Built at the submit boundary, the pins would hold the GPU idle through a
//! model's whole first pass; here one worker thread, with reader threads of
//! its own, builds them while the passes stream those weights through the
//! ring, and [`crate::pins::Pins`] takes each pin in when it is done.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

use dynvram_gpu::device::{PinnedBuffer, UploadError};
use dynvram_loader::{ModelFiles, ReaderConfig, ReaderPool};
use dynvram_memory::{ModelId, WeightKey};

/// One pin to build: tensor `name` of `files`, unless `wanted` was cleared
/// before the worker reached it.
struct Job {
    key: WeightKey,
    name: String,
    files: Arc<ModelFiles>,
    wanted: Arc<AtomicBool>,
}

/// A finished job: the pin, or why it could not be made.
pub(crate) struct Built {
    pub key: WeightKey,
    pub pin: std::result::Result<PinnedBuffer, UploadError>,
}

/// The worker and the jobs it has not reported yet.
pub(crate) struct PinBuilder {
    jobs: Option<Sender<Job>>,
    done: Receiver<Option<Built>>,
    worker: Option<JoinHandle<()>>,
    /// Jobs sent and not yet reported, with the flag that cancels them.
    pending: HashMap<WeightKey, Arc<AtomicBool>>,
}

impl std::fmt::Debug for PinBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinBuilder")
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl PinBuilder {
    /// Starts the worker, with `threads` reader threads of its own (the
    /// ring's keep theirs for the pass). `None` if no thread could start.
    pub fn start(device: wgpu::Device, threads: usize) -> Option<Self> {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("dynvram-pins".into())
            .spawn(move || work(&device, threads, &job_rx, &done_tx));
        match worker {
            Ok(worker) => Some(Self {
                jobs: Some(jobs),
                done,
                worker: Some(worker),
                pending: HashMap::new(),
            }),
            Err(e) => {
                tracing::warn!(%e, "cannot start the pin builder: pins are built in the pass");
                None
            }
        }
    }

    /// Queues tensor `name` of `files` as the registered pin of `key`;
    /// false if the worker is gone (the caller builds it itself).
    pub fn queue(&mut self, key: WeightKey, name: &str, files: &Arc<ModelFiles>) -> bool {
        if self.pending.contains_key(&key) {
            return true;
        }
        let wanted = Arc::new(AtomicBool::new(true));
        let job = Job {
            key,
            name: name.to_owned(),
            files: files.clone(),
            wanted: wanted.clone(),
        };
        let sent = self.jobs.as_ref().is_some_and(|tx| tx.send(job).is_ok());
        if sent {
            self.pending.insert(key, wanted);
        }
        sent
    }

    /// Whether `key`'s pin is being built.
    pub fn is_pending(&self, key: WeightKey) -> bool {
        self.pending.contains_key(&key)
    }

    /// Whether any pin is being built.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Drops `key`'s job: not started, it is skipped; finished, its pin is
    /// freed when reported.
    pub fn cancel(&mut self, key: WeightKey) {
        if let Some(wanted) = self.pending.remove(&key) {
            wanted.store(false, Ordering::Relaxed);
        }
    }

    /// Drops the jobs of `model`.
    pub fn cancel_model(&mut self, model: ModelId) {
        self.pending.retain(|k, wanted| {
            let keep = k.model != model;
            if !keep {
                wanted.store(false, Ordering::Relaxed);
            }
            keep
        });
    }

    /// The jobs finished since the last call (`wait`: blocks until none is
    /// pending). Cancelled ones are left out.
    pub fn finished(&mut self, wait: bool) -> Vec<Built> {
        let mut out = Vec::new();
        loop {
            let next = if wait && !self.pending.is_empty() {
                self.done.recv().ok()
            } else {
                self.done.try_recv().ok()
            };
            let Some(report) = next else {
                break;
            };
            // `None`: a cancelled job the worker skipped.
            if let Some(built) = report
                && self.pending.remove(&built.key).is_some()
            {
                out.push(built);
            }
        }
        if wait && !self.pending.is_empty() {
            // The worker died (a panic): what it had left is built in the pass.
            tracing::warn!(jobs = self.pending.len(), "the pin builder stopped");
            self.pending.clear();
            self.jobs = None;
        }
        out
    }
}

impl Drop for PinBuilder {
    fn drop(&mut self) {
        for wanted in self.pending.values() {
            wanted.store(false, Ordering::Relaxed);
        }
        self.jobs = None;
        if let Some(worker) = self.worker.take() {
            // At most the job under way is finished; the rest are skipped.
            let _ = worker.join();
        }
    }
}

fn work(device: &wgpu::Device, threads: usize, jobs: &Receiver<Job>, done: &Sender<Option<Built>>) {
    let pool = match ReaderPool::new(ReaderConfig {
        threads,
        ..ReaderConfig::default()
    }) {
        Ok(pool) => pool,
        Err(e) => {
            tracing::warn!(%e, "the pin builder has no reader threads: pins are built in the pass");
            return;
        }
    };
    for job in jobs {
        if !job.wanted.load(Ordering::Relaxed) {
            if done.send(None).is_err() {
                return;
            }
            continue;
        }
        let _span = tracing::debug_span!("pin_build", tensor = %job.name).entered();
        let pin = job
            .files
            .source(&job.name)
            .map_err(UploadError::from)
            .and_then(|source| PinnedBuffer::create(device, &job.name, &pool, &source));
        if done.send(Some(Built { key: job.key, pin })).is_err() {
            return;
        }
    }
}
