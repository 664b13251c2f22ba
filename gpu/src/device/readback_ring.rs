//! A few `u32` values read back a pass behind: a ring of small `MAP_READ`
//! buffers that a pass copies into (greedy decoding's token ids), each
//! mapped once the submit holding its copy is made. Reading a slot waits for
//! that submit only, not for the passes queued after it, so the CPU can
//! record step t+1 before it learns step t's token.

use std::sync::mpsc;

use super::{Gpu, GpuError};

type MapResult = Result<(), wgpu::BufferAsyncError>;

/// A slot of a [`ReadbackRing`] that a copy was recorded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadbackSlot(usize);

#[derive(Debug)]
enum State {
    Free,
    /// A copy into it is recorded, its submit not yet made.
    Recorded,
    /// Mapping once `submission` is done; the callback sends its result.
    Mapping {
        submission: wgpu::SubmissionIndex,
        done: mpsc::Receiver<MapResult>,
    },
}

#[derive(Debug)]
struct Slot {
    buffer: wgpu::Buffer,
    state: State,
}

/// Slots of `words` `u32` values each (see the module docs).
#[derive(Debug)]
pub struct ReadbackRing {
    slots: Vec<Slot>,
    words: u64,
    next: usize,
}

impl ReadbackRing {
    /// `slots` buffers of `words` values (outside the budget: a few bytes).
    pub fn new(gpu: &Gpu, slots: usize, words: u64) -> Result<Self, GpuError> {
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let slots = (0..slots.max(1))
            .map(|_| {
                Ok(Slot {
                    buffer: gpu.create_buffer("readback ring", words.max(1) * 4, usage)?,
                    state: State::Free,
                })
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Self {
            slots,
            words: words.max(1),
            next: 0,
        })
    }

    /// Records a copy of the slot's words from `src` at byte `offset` into
    /// the next free slot. Make the submit holding `enc`, then
    /// [`Self::submitted`].
    pub fn record(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        offset: u64,
    ) -> Result<ReadbackSlot, GpuError> {
        let n = self.slots.len();
        let i = (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| matches!(self.slots[i].state, State::Free))
            .ok_or_else(|| GpuError::BadOperands {
                op: "readback ring",
                detail: format!("all {n} slots are in use"),
            })?;
        let slot = &mut self.slots[i];
        enc.copy_buffer_to_buffer(src, offset, &slot.buffer, 0, self.words * 4);
        slot.state = State::Recorded;
        self.next = (i + 1) % n;
        Ok(ReadbackSlot(i))
    }

    /// The copy into `slot` was submitted as `submission`: starts its map.
    pub fn submitted(&mut self, slot: ReadbackSlot, submission: wgpu::SubmissionIndex) {
        let s = &mut self.slots[slot.0];
        let (tx, done) = mpsc::channel();
        s.buffer.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        s.state = State::Mapping { submission, done };
    }

    /// Waits for `slot`'s submit (only that one) and returns its values;
    /// the slot is free again.
    pub fn read(&mut self, gpu: &Gpu, slot: ReadbackSlot) -> Result<Vec<u32>, GpuError> {
        let s = &mut self.slots[slot.0];
        let State::Mapping { submission, done } = std::mem::replace(&mut s.state, State::Free)
        else {
            return Err(GpuError::BadOperands {
                op: "readback ring",
                detail: format!("slot {} was not submitted", slot.0),
            });
        };
        let poll_err = |e: wgpu::PollError| GpuError::Poll {
            message: e.to_string(),
        };
        super::wait(&gpu.device, Some(submission), "read-back")?;
        // The map callback runs inside that poll once the submit is done.
        let mapped = match done.try_recv() {
            Ok(r) => r,
            Err(_) => {
                gpu.device.poll(wgpu::PollType::Poll).map_err(poll_err)?;
                done.try_recv().map_err(|_| GpuError::Map {
                    message: "the read-back map never completed".into(),
                })?
            }
        };
        gpu.check_health()?;
        mapped.map_err(|e| GpuError::Map {
            message: e.to_string(),
        })?;
        let words = {
            let view = s
                .buffer
                .slice(..)
                .get_mapped_range()
                .map_err(|e| GpuError::Map {
                    message: e.to_string(),
                })?;
            bytemuck::pod_collect_to_vec(&view)
        };
        s.buffer.unmap();
        Ok(words)
    }
}
