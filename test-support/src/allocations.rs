//! Counting this thread's heap allocations, for tests that hold a hot path
//! to "allocates nothing": a test binary installs [`Counting`] as its
//! global allocator (`#[global_allocator] static A: Counting = Counting;`)
//! and reads [`count`] around the code under test. Other threads'
//! allocations (drivers' workers, the test harness) are not counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting each thread's allocations and
/// reallocations.
#[derive(Debug)]
pub struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn tally() {
    // `try_with`: a thread being torn down allocates too.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

/// Allocations (and reallocations) this thread made so far.
pub fn count() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards every call to `System` unchanged; the tally is a
// thread-local `Cell` with a const initialiser, so it neither allocates nor
// re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        tally();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        tally();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        tally();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}
