//! Figures of one pass: plain data, shared by the pass, the pins that fill
//! in where streamed bytes came from, and the profile built from them; and
//! a device's pipeline compiles, a fixed cost of a process's first work.

use serde::Serialize;

/// Figures of one pass.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassStats {
    /// Weight bytes uploaded during the pass (streamed weights).
    pub streamed_bytes: u64,
    /// Weight bytes made resident at the start of the pass (a model taking
    /// back residency after it yielded to another model).
    pub loaded_bytes: u64,
    /// Wall time of the pass, including the final wait for the GPU.
    pub seconds: f64,
    /// Submits made (one per block, or per part where blocks stream in
    /// parts, plus ring flushes).
    pub submits: u64,
    /// Arena loads: blocks, or parts of blocks, whose streamed weights were
    /// staged (each into the arena the one before it is not using).
    pub staged_units: u64,
    /// Times the ring had to wait for a slot's earlier copy.
    pub ring_stalls: u64,
    /// Where the streamed bytes came from: registered pins, RAM pins, files.
    pub sources: StreamSources,
    /// CPU seconds spent recording the blocks' kernels.
    pub record_seconds: f64,
    /// CPU seconds spent staging weights and submitting.
    pub submit_seconds: f64,
    /// Seconds waiting for the GPU at the pass's end.
    pub wait_seconds: f64,
}

impl PassStats {
    /// Adds `other`'s figures into `self` (each adds up over passes).
    pub fn add(&mut self, other: &PassStats) {
        self.streamed_bytes += other.streamed_bytes;
        self.loaded_bytes += other.loaded_bytes;
        self.seconds += other.seconds;
        self.submits += other.submits;
        self.staged_units += other.staged_units;
        self.ring_stalls += other.ring_stalls;
        self.sources.add(other.sources);
        self.record_seconds += other.record_seconds;
        self.submit_seconds += other.submit_seconds;
        self.wait_seconds += other.wait_seconds;
    }
}

/// Where the bytes of one pass's streamed weights came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StreamSources {
    /// Copied from registered pins (no CPU copy, no file read).
    pub registered_pin_bytes: u64,
    /// Copied from plain-RAM pins through the staging ring (no file read).
    pub ram_pin_bytes: u64,
    /// Read from the model's files.
    pub file_bytes: u64,
}

impl StreamSources {
    /// All bytes.
    pub fn total(&self) -> u64 {
        self.registered_pin_bytes + self.ram_pin_bytes + self.file_bytes
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: Self) {
        self.registered_pin_bytes += other.registered_pin_bytes;
        self.ram_pin_bytes += other.ram_pin_bytes;
        self.file_bytes += other.file_bytes;
    }
}

/// Compute pipelines a device created and the wall seconds that took
/// (translating the module and the driver's compile; the disk cache makes
/// a warm one cheap): the fixed cost a first image or prompt pays inside
/// whatever stage first needs each kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PipelineTime {
    /// Pipelines created.
    pub count: u64,
    /// Seconds spent creating them.
    pub seconds: f64,
}

impl PipelineTime {
    /// What was created since `earlier` (a reading of the same device).
    pub fn since(self, earlier: Self) -> Self {
        Self {
            count: self.count.saturating_sub(earlier.count),
            seconds: (self.seconds - earlier.seconds).max(0.0),
        }
    }
}
