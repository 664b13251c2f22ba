//! [`WriteOnlyBytes`]: a destination that is written, never read.
//!
//! Streamed bytes land in memory the CPU must not read back: a mapped
//! staging slot may be write-combined (reads are uncached and very slow) and
//! its contents are not guaranteed initialised. The reader pool and every
//! [`ByteSource`](crate::ByteSource) therefore write through this type,
//! which hands out no `&[u8]`; ordinary memory comes in through
//! [`WriteOnlyBytes::from_mut`], and the GPU side of the workspace wraps its
//! mapped views with [`WriteOnlyBytes::new`]. It is the byte case of wgpu's
//! `WriteOnly`, so that file reading does not depend on wgpu.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;

/// Like `&'a mut [u8]`, but only for writing.
pub struct WriteOnlyBytes<'a> {
    ptr: NonNull<[u8]>,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: like `&mut [u8]`: exclusive access to bytes, which are `Send`.
unsafe impl Send for WriteOnlyBytes<'_> {}
// SAFETY: no method of `&WriteOnlyBytes` reads or writes the bytes.
unsafe impl Sync for WriteOnlyBytes<'_> {}

impl std::fmt::Debug for WriteOnlyBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WriteOnlyBytes({} bytes)", self.len())
    }
}

impl<'a> WriteOnlyBytes<'a> {
    /// Wraps `len` bytes at a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for writes of `ptr.len()` bytes, and nothing else
    /// may access that memory for `'a` (the conditions of `&'a mut [u8]`,
    /// except that it need not be readable or initialised).
    pub unsafe fn new(ptr: NonNull<[u8]>) -> Self {
        Self {
            ptr,
            _borrow: PhantomData,
        }
    }

    /// Ordinary memory, for writing only.
    pub fn from_mut(bytes: &'a mut [u8]) -> Self {
        // SAFETY: a `&'a mut [u8]` meets every condition of `new`.
        unsafe { Self::new(NonNull::from(bytes)) }
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.ptr.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first byte, for writes the safe methods cannot express (a
    /// `pread` into the memory, parts handed to several threads). The
    /// memory must never be read through it.
    pub fn as_raw_ptr(&mut self) -> NonNull<u8> {
        self.ptr.cast()
    }

    /// A sub-range, borrowing `self`.
    pub fn slice(&mut self, range: impl RangeBounds<usize>) -> WriteOnlyBytes<'_> {
        // SAFETY: the reborrow holds `&mut self` for its lifetime, so the
        // two are never used at once.
        let reborrow = unsafe { WriteOnlyBytes::new(self.ptr) };
        reborrow.into_slice(range)
    }

    /// A sub-range, consuming `self`.
    ///
    /// # Panics
    ///
    /// If the range is reversed or runs past the end.
    pub fn into_slice(self, range: impl RangeBounds<usize>) -> Self {
        let len = self.len();
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.checked_add(1).expect("range start overflows"),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1).expect("range end overflows"),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => len,
        };
        assert!(
            start <= end && end <= len,
            "range {start}..{end} out of {len} write-only bytes"
        );
        // SAFETY: `start <= len`, so the pointer stays inside (or one past)
        // the allocation.
        let first = unsafe { self.ptr.cast::<u8>().add(start) };
        // SAFETY: a sub-range of memory `self` may write, for the same
        // lifetime; `self` is consumed.
        unsafe { Self::new(NonNull::slice_from_raw_parts(first, end - start)) }
    }

    /// Sets every byte to `value`.
    pub fn fill(&mut self, value: u8) {
        // SAFETY: the memory is valid for `len` writes (the type's contract).
        unsafe { self.as_raw_ptr().write_bytes(value, self.len()) }
    }

    /// Copies `src` in.
    ///
    /// # Panics
    ///
    /// If `src` is not exactly as long as `self`.
    #[track_caller]
    pub fn copy_from_slice(&mut self, src: &[u8]) {
        assert_eq!(
            src.len(),
            self.len(),
            "source slice length ({}) does not match destination length ({})",
            src.len(),
            self.len()
        );
        // SAFETY: `src` is readable and `self` writable for `len` bytes; they
        // cannot overlap, `self` being exclusive.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_raw_ptr().as_ptr(), src.len());
        }
    }
}

impl<'a> From<&'a mut [u8]> for WriteOnlyBytes<'a> {
    fn from(bytes: &'a mut [u8]) -> Self {
        Self::from_mut(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::WriteOnlyBytes;

    #[test]
    fn slices_fill_and_copy_where_asked() {
        let mut buf = [0u8; 10];
        let mut w = WriteOnlyBytes::from_mut(&mut buf);
        assert_eq!(w.len(), 10);
        w.slice(..3).copy_from_slice(&[1, 2, 3]);
        w.slice(3..=4).fill(9);
        let tail = w.into_slice(8..);
        assert_eq!(tail.len(), 2);
        let mut tail = tail;
        tail.fill(7);
        assert_eq!(buf, [1, 2, 3, 9, 9, 0, 0, 0, 7, 7]);
    }

    #[test]
    #[should_panic(expected = "out of 4")]
    fn a_range_past_the_end_panics() {
        let mut buf = [0u8; 4];
        let _ = WriteOnlyBytes::from_mut(&mut buf).into_slice(2..5);
    }

    #[test]
    #[should_panic(expected = "does not match")]
    fn a_copy_of_another_length_panics() {
        let mut buf = [0u8; 4];
        WriteOnlyBytes::from_mut(&mut buf).copy_from_slice(&[1, 2]);
    }
}
