//! SIGINT, SIGTERM, SIGHUP (the terminal closed) and SIGQUIT: remove the
//! temp files and folders of writes in progress (`dynvram_loader::atomic`),
//! then exit with the shell's status for the signal (128 + its number: 130,
//! 143, 129, 131), as an interrupted tool does. (SIGQUIT's core dump is
//! given up for the clean-up.)
//!
//! The signal is received on a thread of its own (signal-hook's iterator),
//! so the clean-up runs as ordinary code, not in a signal handler.

/// Installs the handler thread. Failing to install it is logged, not fatal:
/// the command still runs, only without the clean-up.
pub fn remove_temp_files_on_exit() {
    #[cfg(unix)]
    {
        use std::io::Write;

        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([
            SIGINT, SIGTERM, SIGHUP, SIGQUIT,
        ]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "no signal handler: an interrupted write may leave a temp file");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    // Held until the process ends: no temp file appears after this.
                    let removed = dynvram_loader::atomic::remove_temp_files();
                    // Not our `eprintln!`: its failure path takes the
                    // registry lock, which `removed` holds.
                    let _ = writeln!(
                        std::io::stderr(),
                        "interrupted by signal {signal}; removed {} unfinished file(s)",
                        removed.removed
                    );
                    // SAFETY: `_exit` ends the process at once, without running
                    // atexit handlers or destructors that another thread (in the
                    // middle of its work) could race with.
                    unsafe { libc::_exit(128 + signal) };
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no signal thread: an interrupted write may leave a temp file");
        }
    }
}
