//! The staging ring's bookkeeping: which slot is filled, recorded, in flight
//! or ready, where the next bytes go in the slot being filled, and what the
//! ring has done ([`RingCounters`]). Pure: the slots' memory, the copies and
//! the waits are the GPU side's (`dynvram_gpu::device::StagingRing`), which
//! asks [`RingSlots`] what to do and tells it what happened. Default
//! 3 × 64 MiB *(aimdo)*; docs/behaviour.md, Staging ring.
//!
//! # Protocol
//!
//! A slot is [`Ready`](SlotState::Ready) (mapped, empty),
//! [`Filling`](SlotState::Filling) (mapped, the current slot),
//! [`Recorded`](SlotState::Recorded) (unmapped, its copies sit in an encoder
//! that is not yet submitted) or [`InFlight`](SlotState::InFlight)
//! (submitted, waiting to be writable again).
//!
//! 1. Without a current slot, the GPU side looks at [`RingSlots::next`]: a
//!    `Recorded` one means every slot's copies are in the caller's encoder,
//!    which is submitted first (a *flush*, [`RingSlots::count_flush`]); an
//!    `InFlight` one is waited for (a *stall*, [`RingSlots::count_stall`])
//!    and marked [`ready`](RingSlots::ready); then [`RingSlots::take`] makes
//!    it the current slot.
//! 2. [`RingSlots::place`] says where the next bytes of an upload go in the
//!    current slot; [`RingSlots::record`] books them once copied and says
//!    whether the slot has passed ¾ full, when it is retired
//!    ([`RingSlots::retire_current`]); larger uploads continue in the next.
//! 3. Before a submit the current slot is retired (a new submit always
//!    starts a new slot); after it, [`RingSlots::submit_recorded`] puts every
//!    recorded slot in flight.
//!
//! Uploads are padded to 4 bytes (the GPU's copy alignment): each placement
//! carries its padded length, and the padding bytes are zeros.

use std::time::Duration;

/// Default slot count *(aimdo)*.
pub const DEFAULT_SLOTS: usize = 3;
/// Default slot size: 64 MiB *(aimdo)*.
pub const DEFAULT_SLOT_SIZE: u64 = 64 << 20;

/// The smallest slot: smaller sizes are rounded up to it.
const MIN_SLOT_SIZE: u64 = 4096;

/// What the ring has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Source bytes staged (without padding).
    pub bytes_staged: u64,
    /// Copy commands recorded.
    pub copies: u64,
    /// Times a slot was taken for filling.
    pub slots_used: u64,
    /// Times taking a slot had to wait for its previous copy.
    pub stalls: u64,
    /// Total time spent in those waits.
    pub stall_time: Duration,
    /// Times the caller's encoder had to be submitted early because every
    /// slot was recorded in it.
    pub flushes: u64,
}

impl RingCounters {
    /// What was done between `earlier` and `self` (counters are cumulative).
    pub fn since(&self, earlier: &RingCounters) -> RingCounters {
        RingCounters {
            bytes_staged: self.bytes_staged - earlier.bytes_staged,
            copies: self.copies - earlier.copies,
            slots_used: self.slots_used - earlier.slots_used,
            stalls: self.stalls - earlier.stalls,
            stall_time: self.stall_time - earlier.stall_time,
            flushes: self.flushes - earlier.flushes,
        }
    }
}

/// Where one slot is in the protocol (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Writable and empty.
    Ready,
    /// The current slot, being written.
    Filling,
    /// Holds bytes whose copies are recorded but not submitted.
    Recorded,
    /// Its copies are submitted; writable again once they have run.
    InFlight,
}

/// Where the next bytes of an upload go: `len` bytes at `offset` of slot
/// `slot`, copied as `padded` bytes (`len` rounded up to 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The slot (the current one).
    pub slot: usize,
    /// Byte offset in the slot.
    pub offset: u64,
    /// Source bytes that go there.
    pub len: u64,
    /// Bytes copied: `len` rounded up to 4 (the tail is zeros).
    pub padded: u64,
}

/// Why a slot cannot be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("staging slot {slot} to fill is {state:?}, not ready")]
pub struct NotReady {
    /// The slot.
    pub slot: usize,
    /// Its state.
    pub state: SlotState,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    fill: u64,
}

/// The state of every slot of a staging ring (module docs).
#[derive(Debug, Clone)]
pub struct RingSlots {
    slot_size: u64,
    slots: Vec<Slot>,
    current: Option<usize>,
    next: usize,
    counters: RingCounters,
}

impl RingSlots {
    /// `slots` ready slots (at least 1) of `slot_size` bytes (rounded up to
    /// 4, at least 4 KiB).
    pub fn new(slots: usize, slot_size: u64) -> Self {
        let slot = Slot {
            state: SlotState::Ready,
            fill: 0,
        };
        Self {
            slot_size: align4(slot_size.max(MIN_SLOT_SIZE)),
            slots: vec![slot; slots.max(1)],
            current: None,
            next: 0,
            counters: RingCounters::default(),
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always false: a ring has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes per slot (after rounding).
    pub fn slot_size(&self) -> u64 {
        self.slot_size
    }

    /// The state of slot `i`.
    pub fn state(&self, i: usize) -> SlotState {
        self.slots[i].state
    }

    /// Counters since creation.
    pub fn counters(&self) -> RingCounters {
        self.counters
    }

    /// The slot being filled, if any.
    pub fn current(&self) -> Option<usize> {
        self.current
    }

    /// The slot [`Self::take`] takes next.
    pub fn next(&self) -> usize {
        self.next
    }

    /// Makes the next slot the current one (empty, filling). It must be
    /// ready: flushing a recorded slot or waiting for one in flight is the
    /// caller's, before.
    pub fn take(&mut self) -> Result<usize, NotReady> {
        let i = self.next;
        let slot = &mut self.slots[i];
        if slot.state != SlotState::Ready {
            return Err(NotReady {
                slot: i,
                state: slot.state,
            });
        }
        slot.state = SlotState::Filling;
        slot.fill = 0;
        self.current = Some(i);
        self.next = (i + 1) % self.slots.len();
        self.counters.slots_used += 1;
        Ok(i)
    }

    /// Where up to `remaining` bytes go in the current slot: as many as it
    /// has room for. `None` without a current slot.
    pub fn place(&self, remaining: u64) -> Option<Placement> {
        let slot = self.current?;
        let offset = self.slots[slot].fill;
        let len = remaining.min(self.slot_size - offset);
        Some(Placement {
            slot,
            offset,
            len,
            padded: align4(len),
        })
    }

    /// Books `placement` as staged and its copy as recorded. Returns true
    /// when the slot has passed ¾ full and is to be retired.
    pub fn record(&mut self, placement: Placement) -> bool {
        let slot = &mut self.slots[placement.slot];
        slot.fill += placement.padded;
        self.counters.bytes_staged += placement.len;
        self.counters.copies += 1;
        slot.fill * 4 > self.slot_size * 3
    }

    /// Retires the current slot (filling → recorded) and returns it, so the
    /// GPU side can unmap it.
    pub fn retire_current(&mut self) -> Option<usize> {
        let i = self.current.take()?;
        self.slots[i].state = SlotState::Recorded;
        Some(i)
    }

    /// Puts every recorded slot in flight (their encoder was submitted) and
    /// returns them.
    pub fn submit_recorded(&mut self) -> Vec<usize> {
        let mut submitted = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.state == SlotState::Recorded {
                slot.state = SlotState::InFlight;
                submitted.push(i);
            }
        }
        submitted
    }

    /// Marks in-flight slot `i` ready (its copies have run). Any other state
    /// is left as it is.
    pub fn ready(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.state == SlotState::InFlight {
            slot.state = SlotState::Ready;
        }
    }

    /// Counts a wait for an in-flight slot that took `waited`.
    pub fn count_stall(&mut self, waited: Duration) {
        self.counters.stalls += 1;
        self.counters.stall_time += waited;
    }

    /// Counts an early submit of the caller's encoder.
    pub fn count_flush(&mut self) {
        self.counters.flushes += 1;
    }
}

/// Rounds `n` up to the GPU's copy alignment (4 bytes).
pub fn align4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}
