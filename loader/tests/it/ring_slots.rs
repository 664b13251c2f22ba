//! The staging ring's bookkeeping without a GPU: the slot protocol, where
//! each upload's bytes go, the ¾ rule, and the counters.

use std::time::Duration;

use dynvram_loader::{NotReady, Placement, RingSlots, SlotState};

#[test]
fn shape_is_rounded() {
    let r = RingSlots::new(0, 5);
    assert_eq!(
        (r.len(), r.slot_size()),
        (1, 4096),
        "at least one 4 KiB slot"
    );
    assert_eq!(RingSlots::new(3, 4097).slot_size(), 4100, "rounded up to 4");
}

#[test]
fn uploads_fill_slots_and_retire_past_three_quarters() {
    let mut r = RingSlots::new(2, 4096);
    assert_eq!(r.place(10), None, "no slot is filling yet");
    assert_eq!(r.take(), Ok(0));
    assert_eq!(r.state(0), SlotState::Filling);
    // 1001 bytes: copied as 1004, the next placement starts at 1004.
    let p = r.place(1001).expect("current slot");
    assert_eq!(
        p,
        Placement {
            slot: 0,
            offset: 0,
            len: 1001,
            padded: 1004
        }
    );
    assert!(!r.record(p), "a quarter full");
    let p = r.place(5000).expect("current slot");
    assert_eq!((p.offset, p.len, p.padded), (1004, 3092, 3092), "what fits");
    assert!(r.record(p), "full: retire");
    assert_eq!(r.retire_current(), Some(0));
    assert_eq!((r.current(), r.state(0)), (None, SlotState::Recorded));
    let c = r.counters();
    assert_eq!((c.bytes_staged, c.copies, c.slots_used), (4093, 2, 1));
    // Exactly ¾ stays; past it retires.
    assert_eq!(r.take(), Ok(1));
    let p = r.place(3072).expect("slot 1");
    assert!(!r.record(p), "exactly three quarters");
    let p = r.place(4).expect("slot 1");
    assert!(r.record(p), "past three quarters");
}

#[test]
fn slots_cycle_through_submit_and_ready() {
    let mut r = RingSlots::new(2, 4096);
    assert_eq!(r.take(), Ok(0));
    assert_eq!(r.retire_current(), Some(0));
    assert_eq!(r.retire_current(), None, "nothing filling");
    assert_eq!(r.take(), Ok(1));
    assert_eq!(r.retire_current(), Some(1));
    // Both recorded in one unsubmitted encoder: slot 0 cannot be taken.
    assert_eq!(r.next(), 0);
    assert_eq!(
        r.take(),
        Err(NotReady {
            slot: 0,
            state: SlotState::Recorded
        })
    );
    r.count_flush();
    assert_eq!(r.submit_recorded(), [0, 1]);
    assert_eq!(r.submit_recorded(), [] as [usize; 0], "already in flight");
    assert_eq!(r.state(0), SlotState::InFlight);
    assert!(r.take().is_err(), "in flight");
    r.count_stall(Duration::from_millis(3));
    r.ready(0);
    r.ready(0);
    assert_eq!(r.state(0), SlotState::Ready);
    assert_eq!(r.take(), Ok(0));
    r.ready(0);
    assert_eq!(
        r.state(0),
        SlotState::Filling,
        "ready() leaves a filling slot"
    );
    let c = r.counters();
    assert_eq!((c.slots_used, c.flushes, c.stalls), (3, 1, 1));
    assert_eq!(c.stall_time, Duration::from_millis(3));
    let later = r.counters();
    assert_eq!(later.since(&c), Default::default());
}
