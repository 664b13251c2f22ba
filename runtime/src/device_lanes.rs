//! The device's side of a pass timeline: when the copy queue's batches and
//! wgpu's submits really ran on the GPU, where the host lanes only show when
//! they were recorded and submitted.
//!
//! Traced passes with a copy queue start a [`Sampler`]: a thread reading the
//! copy queue's two timeline semaphores (`TransferQueue::progress`) in a
//! loop while the pass runs, keeping the moments each value was first seen.
//! With what the pass logged at each submit ([`DeviceLog`]: what a batch or
//! unit waited for), a batch ran from the latest of its submit, the batch
//! before it and the kernels it waited for, to the moment its value was
//! seen; a unit likewise. Sampling keeps a core busy (yielding to others),
//! traces only; the ends are late by the sampling period (a few µs).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use dynvram_gpu::device::Gpu;

use crate::trace::{Event, Lane};

/// The two counters at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    us: f64,
    copies: u64,
    kernels: u64,
}

/// The thread sampling the copy queue's semaphores.
pub(crate) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Sample>>>,
}

impl Sampler {
    /// Starts sampling; times are µs since `origin` (the trace's).
    pub fn start(gpu: Arc<Gpu>, origin: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("dynvram-device-lanes".into())
            .spawn(move || {
                let mut samples: Vec<Sample> = Vec::new();
                let Some(q) = gpu.transfer_queue() else {
                    return samples;
                };
                // One last read after the stop: the pass has waited for the
                // device by then, so that read sees every value.
                loop {
                    let stopping = flag.load(Ordering::Acquire);
                    let Ok((copies, kernels)) = q.progress() else {
                        break;
                    };
                    let changed = samples
                        .last()
                        .is_none_or(|s| s.copies != copies || s.kernels != kernels);
                    if changed {
                        let us = origin.elapsed().as_secs_f64() * 1e6;
                        samples.push(Sample {
                            us,
                            copies,
                            kernels,
                        });
                    }
                    if stopping {
                        break;
                    }
                    // Yield: on a busy CPU (lavapipe) the pass needs the core more.
                    std::thread::yield_now();
                }
                samples
            })
            .ok();
        Self { stop, thread }
    }

    /// Stops sampling (after the pass's wait) and returns the samples.
    fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A copy batch or a wgpu submit as submitted: its value on its own
/// timeline, the value of the other timeline it waits for (0: none).
#[derive(Debug, Clone)]
struct Mark {
    value: u64,
    waits: u64,
    submitted_us: f64,
    name: String,
    bytes: u64,
}

/// What a pass submitted, for [`DeviceLog::events`].
#[derive(Debug, Default)]
pub(crate) struct DeviceLog {
    copies: Vec<Mark>,
    kernels: Vec<Mark>,
}

impl DeviceLog {
    /// Copy batch `value`, waiting for kernels value `after_kernels` (0:
    /// none), submitted at `submitted_us`.
    pub fn copy(
        &mut self,
        value: u64,
        after_kernels: u64,
        submitted_us: f64,
        name: String,
        bytes: u64,
    ) {
        self.copies.push(Mark {
            value,
            waits: after_kernels,
            submitted_us,
            name,
            bytes,
        });
    }

    /// The submit signalling kernels value `value`, waiting for copy batch
    /// `waits_copies`.
    pub fn kernels(
        &mut self,
        value: u64,
        waits_copies: Option<u64>,
        submitted_us: f64,
        name: String,
    ) {
        self.kernels.push(Mark {
            value,
            waits: waits_copies.unwrap_or(0),
            submitted_us,
            name,
            bytes: 0,
        });
    }

    /// The device lanes' spans, from the sampler's record. Work whose end
    /// was not seen (a failed pass) is left out.
    pub fn events(&self, sampler: Sampler) -> Vec<Event> {
        let samples = sampler.finish();
        // The first moment a counter was seen at or past `v`.
        let seen = |v: u64, of: fn(&Sample) -> u64| -> Option<f64> {
            let i = samples.partition_point(|s| of(s) < v);
            samples.get(i).map(|s| s.us)
        };
        let copies_at = |v: u64| seen(v, |s| s.copies);
        let kernels_at = |v: u64| seen(v, |s| s.kernels);
        let mut events = spans(
            &self.copies,
            Lane::CopyEngine,
            "copy",
            copies_at,
            kernels_at,
        );
        events.extend(spans(
            &self.kernels,
            Lane::Device,
            "run",
            kernels_at,
            copies_at,
        ));
        events
    }
}

/// One lane's spans: each mark ran from the latest of its submit, the end
/// of the mark before it and the end of what it waited for (`other`), to
/// the moment its own value was seen (`own`).
fn spans(
    marks: &[Mark],
    lane: Lane,
    verb: &str,
    own: impl Fn(u64) -> Option<f64>,
    other: impl Fn(u64) -> Option<f64>,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut last_end = 0.0f64;
    for m in marks {
        let Some(end) = own(m.value) else {
            continue;
        };
        let waited = match m.waits {
            0 => 0.0,
            v => other(v).unwrap_or(0.0),
        };
        let start = m.submitted_us.max(last_end).max(waited).min(end);
        events.push(Event {
            name: format!("{verb} {}", m.name),
            lane,
            start_us: start,
            dur_us: end - start,
            bytes: m.bytes,
        });
        last_end = end;
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(samples: Vec<Sample>) -> Sampler {
        let thread = std::thread::spawn(move || samples);
        Sampler {
            stop: Arc::new(AtomicBool::new(false)),
            thread: Some(thread),
        }
    }

    fn s(us: f64, copies: u64, kernels: u64) -> Sample {
        Sample {
            us,
            copies,
            kernels,
        }
    }

    #[test]
    fn spans_start_at_the_latest_of_submit_predecessor_and_wait() {
        let mut log = DeviceLog::default();
        // Batch 1 at once; batch 2 waits for kernels 1 (unit 0).
        log.copy(1, 0, 0.0, "block 1".into(), 100);
        log.copy(2, 1, 5.0, "block 2".into(), 100);
        // Unit 0 waits for batch 1, unit 1 for nothing.
        log.kernels(1, Some(1), 1.0, "block 1".into());
        log.kernels(2, None, 2.0, "block 0".into());
        let samples = vec![
            s(0.0, 0, 0),
            s(10.0, 1, 0),
            s(30.0, 1, 1),
            s(35.0, 1, 2),
            s(50.0, 2, 2),
        ];
        let ev = log.events(sampler(samples));
        let span = |name: &str| {
            let e = ev.iter().find(|e| e.name == name).unwrap();
            (e.start_us, e.start_us + e.dur_us)
        };
        assert_eq!(span("copy block 1"), (0.0, 10.0));
        // Waited for unit 0's end at 30 (after its own submit and batch 1).
        assert_eq!(span("copy block 2"), (30.0, 50.0));
        // Unit 0 started when batch 1 landed.
        assert_eq!(span("run block 1"), (10.0, 30.0));
        assert_eq!(span("run block 0"), (30.0, 35.0));
        assert!(
            ev.iter()
                .all(|e| e.lane == Lane::CopyEngine || e.lane == Lane::Device)
        );
    }

    #[test]
    fn work_never_seen_to_end_is_left_out() {
        let mut log = DeviceLog::default();
        log.copy(1, 0, 0.0, "block 1".into(), 1);
        log.kernels(1, None, 0.0, "block 0".into());
        let ev = log.events(sampler(vec![s(0.0, 0, 0)]));
        assert!(ev.is_empty());
    }
}
