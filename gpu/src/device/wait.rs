//! Bounded waits for the GPU. A kernel that faults (NVIDIA's Xid 13, an
//! MMU fault) can leave its submission's fence unsignalled without the
//! driver reporting the device lost: an unbounded wait would hang the
//! process. Every wait of the crate goes through [`wait`], which gives up
//! after [`wait_limit`] with an error that says so.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::GpuError;

/// The default limit: far above any one submit of the runtime (a block, a
/// pass, a copy burst), far below forever.
pub const DEFAULT_WAIT_LIMIT: Duration = Duration::from_secs(300);

static LIMIT_MS: AtomicU64 = AtomicU64::new(DEFAULT_WAIT_LIMIT.as_millis() as u64);

/// Sets how long a wait for the GPU may take before it is an error
/// (`GpuOptions::wait_limit`; process-wide, as the devices share a driver).
pub fn set_wait_limit(limit: Duration) {
    LIMIT_MS.store(millis(limit), Ordering::Relaxed);
}

/// `limit` in whole milliseconds, at least one.
fn millis(limit: Duration) -> u64 {
    u64::try_from(limit.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// How long a wait for the GPU may take.
pub fn wait_limit() -> Duration {
    Duration::from_millis(LIMIT_MS.load(Ordering::Relaxed))
}

/// Waits for `submission` (None: everything submitted) within
/// [`wait_limit`]; `what` names the wait in the error.
pub(crate) fn wait(
    device: &wgpu::Device,
    submission: Option<wgpu::SubmissionIndex>,
    what: &str,
) -> Result<(), GpuError> {
    let limit = wait_limit();
    match device.poll(wgpu::PollType::Wait {
        submission_index: submission,
        timeout: Some(limit),
    }) {
        Ok(_) => Ok(()),
        Err(wgpu::PollError::Timeout) => Err(GpuError::Poll {
            message: format!(
                "{what}: the GPU did not finish within {:.0} s — a faulted or hung kernel \
                 (on Linux the kernel log names it, e.g. NVRM Xid lines); \
                 DYNVRAM_GPU_WAIT=SECONDS raises the limit for work that is only slow",
                limit.as_secs_f64()
            ),
        }),
        Err(e) => Err(GpuError::Poll {
            message: format!("{what}: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // (The limit itself is process-wide: tests waiting on a GPU beside
    // this one must not see it change.)
    #[test]
    fn limits_are_whole_milliseconds_never_zero() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 1);
        assert_eq!(millis(Duration::from_secs(7)), 7000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(millis(DEFAULT_WAIT_LIMIT), 300_000);
    }
}
