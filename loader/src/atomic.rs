//! Atomic file writes: every file dynvram writes appears whole or not at all.
//!
//! [`AtomicFile`] writes into a temp file beside the target (same folder, so
//! the rename cannot cross file systems), and [`AtomicFile::commit`] flushes,
//! fsyncs and renames it into place, then fsyncs the folder. Dropped without a
//! commit (an error on the way), it removes the temp file.
//!
//! Every live temp file is registered here, so a process ended by a signal can
//! remove them: [`remove_temp_files`] deletes them all and holds the registry
//! locked from then on, so no new temp file can appear before the process exits.
//!
//! A process that could not clean up (SIGKILL, a crash, power loss) leaves its
//! temp file; the next write of the same target removes the ones whose process
//! is gone ([`sweep_stale`], Unix).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::error::{LoadError, Result};

/// Temp files now open for writing (removed on commit or drop).
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// [`AtomicFile::create`]'s write buffer.
const BULK_BUFFER: usize = 8 << 20;

/// Distinguishes temp files of one process for the same target.
static SERIAL: AtomicU64 = AtomicU64::new(0);

fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `name` is a temp file name this module makes (`.NAME.tmp-PID-N`).
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// A file being written; see the module docs.
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

fn io_error<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> LoadError + 'a {
    move |source| LoadError::Io {
        path: path.to_owned(),
        op,
        source,
    }
}

/// The folder `path` is in (`.` for a bare file name).
fn folder(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The process id in a temp name of target `base` (`.BASE.tmp-PID-N`).
fn temp_pid(name: &str, base: &str) -> Option<u32> {
    let rest = name
        .strip_prefix('.')?
        .strip_prefix(base)?
        .strip_prefix(".tmp-")?;
    let (pid, serial) = rest.split_once('-')?;
    serial.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether process `pid` exists (or may: when it cannot be asked, yes).
#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Elsewhere a process cannot be asked cheaply: every one is taken as alive.
#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    true
}

/// Removes the temp files (and folders) of target `base` in `dir` that a
/// process which no longer exists left behind (killed before it could
/// clean up). Another live process's, and this one's, are kept; a reused
/// process id keeps a stale one (the safe side). Unix only: elsewhere
/// nothing is removed. Returns how many were removed.
pub fn sweep_stale(dir: &Path, base: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let me = std::process::id();
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = temp_pid(&name.to_string_lossy(), base) else {
            continue;
        };
        let stale = pid != me && !process_alive(pid);
        if stale && remove_temp(&e.path()) {
            tracing::info!(path = %e.path().display(), pid, "removed a temp file its killed writer left");
            removed += 1;
        }
    }
    removed
}

impl AtomicFile {
    /// Starts writing `path`: creates and registers its temp file (after
    /// removing the stale ones of the same target, [`sweep_stale`]). Writes
    /// go through an 8 MiB buffer (streamed tensors: few, large syscalls).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        Self::with_buffer(path, BULK_BUFFER)
    }

    /// [`Self::create`] with a write buffer of `capacity` bytes, allocated
    /// up front; 0 sends every write straight to the file.
    pub fn with_buffer(path: impl AsRef<Path>, capacity: usize) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let base = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| LoadError::Io {
                path: path.clone(),
                op: "write",
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
            })?;
        sweep_stale(folder(&path), &base);
        let tmp = temp_beside(&path, &base);
        // Created under the lock: once a signal handler has removed the temp
        // files (and kept the lock), none can be created any more.
        let mut live = live();
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io_error(&path, "create a temp file beside"))?;
        live.push(tmp.clone());
        drop(live);
        tracing::trace!(path = %path.display(), tmp = %tmp.display(), "atomic write started");
        Ok(Self {
            path,
            tmp,
            out: Some(BufWriter::with_capacity(capacity, file)),
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An error naming the final path, for a failed write through this file.
    pub fn error(&self, source: io::Error) -> LoadError {
        io_error(&self.path, "write")(source)
    }

    /// Flushes, fsyncs and renames the temp file into place (replacing any
    /// file there), then fsyncs the folder. Returns the bytes written.
    pub fn commit(mut self) -> Result<u64> {
        let out = self.out.take().expect("an uncommitted file has its writer");
        let result = finish(out, &self.tmp, &self.path);
        if result.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        unregister(&self.tmp);
        result
    }
}

/// Flush, fsync, rename, fsync the folder.
fn finish(out: BufWriter<File>, tmp: &Path, path: &Path) -> Result<u64> {
    let file = out
        .into_inner()
        .map_err(|e| io_error(path, "write")(e.into_error()))?;
    file.sync_all().map_err(io_error(path, "fsync"))?;
    let len = file.metadata().map_err(io_error(path, "stat"))?.len();
    drop(file);
    std::fs::rename(tmp, path).map_err(io_error(path, "rename into"))?;
    // Make the rename itself durable; not every platform can open a folder.
    if let Ok(d) = File::open(folder(path)) {
        let _ = d.sync_all();
    }
    Ok(len)
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.as_mut().map_or(Ok(0), |w| w.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.out.as_mut() {
            Some(w) => w.write_all(buf),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.as_mut().map_or(Ok(()), BufWriter::flush)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
            unregister(&self.tmp);
        }
    }
}

fn unregister(tmp: &Path) {
    live().retain(|p| p != tmp);
}

/// A folder being filled (e.g. a quantized model's shards and index): its
/// files go into a temp folder beside the target, which
/// [`AtomicDir::commit`] renames into place. Dropped without a commit, or
/// removed by [`remove_temp_files`] on a signal, it leaves nothing behind.
#[derive(Debug)]
pub struct AtomicDir {
    path: PathBuf,
    tmp: PathBuf,
    committed: bool,
}

/// A temp name beside `path` for target `base` (`.BASE.tmp-PID-N`), which
/// [`sweep_stale`] recognises.
fn temp_beside(path: &Path, base: &str) -> PathBuf {
    folder(path).join(format!(
        ".{base}.tmp-{}-{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ))
}

impl AtomicDir {
    /// Starts filling `path`, which must not exist or be an empty folder
    /// (a folder with files in it is refused, naming it: nothing is
    /// overwritten; [`Self::replacing`] for `--force`).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        Self::replacing(path, false)
    }

    /// [`Self::create`], or with `force` also over a folder with files in
    /// it, which [`Self::commit`] replaces whole (the old folder stays
    /// until the new one is complete).
    pub fn replacing(path: impl AsRef<Path>, force: bool) -> Result<Self> {
        let path = path.as_ref().to_owned();
        crate::output_path::check_output_dir(&path, &[], force)?;
        let base = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| {
                io_error(&path, "write")(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a folder name",
                ))
            })?;
        sweep_stale(folder(&path), &base);
        let tmp = temp_beside(&path, &base);
        let mut live = live();
        std::fs::create_dir(&tmp).map_err(io_error(&path, "create a temp folder beside"))?;
        live.push(tmp.clone());
        drop(live);
        Ok(Self {
            path,
            tmp,
            committed: false,
        })
    }

    /// The temp folder to write into.
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the temp folder into place. A folder there (empty, or any
    /// with [`Self::replacing`]) is first moved aside under a temp name and
    /// removed once the new one is in place; should that rename fail, the
    /// old folder is put back.
    pub fn commit(mut self) -> Result<()> {
        let mut old = None;
        if self.path.is_dir() {
            let base = self
                .path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let aside = temp_beside(&self.path, &base);
            std::fs::rename(&self.path, &aside).map_err(io_error(&self.path, "replace"))?;
            old = Some(aside);
        }
        if let Err(e) = std::fs::rename(&self.tmp, &self.path) {
            if let Some(aside) = &old {
                let _ = std::fs::rename(aside, &self.path);
            }
            return Err(io_error(&self.path, "rename into")(e));
        }
        if let Some(aside) = old {
            let _ = std::fs::remove_dir_all(aside);
        }
        if let Ok(d) = File::open(folder(&self.path)) {
            let _ = d.sync_all();
        }
        self.committed = true;
        unregister(&self.tmp);
        Ok(())
    }
}

impl Drop for AtomicDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
            unregister(&self.tmp);
        }
    }
}

/// Removes a registered temp file or folder.
fn remove_temp(p: &Path) -> bool {
    if p.is_dir() {
        std::fs::remove_dir_all(p).is_ok()
    } else {
        std::fs::remove_file(p).is_ok()
    }
}

/// Writes `bytes` to `path` atomically, unbuffered: the bytes are already
/// whole (a buffer would only add its 8 MiB to the process's peak; R1 saw it
/// on every pipeline-cache save).
pub fn write_file(path: impl AsRef<Path>, bytes: &[u8]) -> Result<u64> {
    let mut f = AtomicFile::with_buffer(path, 0)?;
    f.write_all(bytes).map_err(|e| f.error(e))?;
    f.commit()
}

/// Held by [`remove_temp_files`]: while it lives no temp file can be created.
#[derive(Debug)]
pub struct TempFilesRemoved {
    _live: MutexGuard<'static, Vec<PathBuf>>,
    /// How many temp files were removed.
    pub removed: usize,
}

/// Removes every registered temp file and keeps the registry locked until the
/// returned guard is dropped (for a signal handler that exits next).
pub fn remove_temp_files() -> TempFilesRemoved {
    let mut live = live();
    let removed = live.drain(..).filter(|p| remove_temp(p)).count();
    TempFilesRemoved {
        _live: live,
        removed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry is process-wide: these tests take turns.
    static TURN: Mutex<()> = Mutex::new(());

    fn turn() -> MutexGuard<'static, ()> {
        TURN.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn temps(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .expect("read dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_temp_name(n))
            .collect()
    }

    #[test]
    fn commit_replaces_the_target_and_drop_leaves_nothing() {
        let _turn = turn();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.json");
        std::fs::write(&path, b"old").expect("write");
        let mut f = AtomicFile::create(&path).expect("create");
        f.write_all(b"half").expect("write");
        assert_eq!(temps(dir.path()).len(), 1, "the temp file is beside it");
        assert_eq!(std::fs::read(&path).expect("read"), b"old", "untouched");
        drop(f);
        assert_eq!(temps(dir.path()), Vec::<String>::new());
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        assert_eq!(write_file(&path, b"new").expect("write"), 3);
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        assert_eq!(temps(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn an_unbuffered_file_writes_through_and_a_buffered_one_holds_back() {
        let _turn = turn();
        let dir = tempfile::tempdir().expect("tempdir");
        let on_disk = |f: &AtomicFile| std::fs::metadata(&f.tmp).expect("stat").len();
        let mut direct = AtomicFile::with_buffer(dir.path().join("a"), 0).expect("create");
        direct.write_all(b"abc").expect("write");
        assert_eq!(on_disk(&direct), 3, "no buffer: in the file at once");
        let mut bulk = AtomicFile::create(dir.path().join("b")).expect("create");
        bulk.write_all(b"abc").expect("write");
        assert_eq!(on_disk(&bulk), 0, "buffered until commit");
        assert_eq!(direct.commit().expect("commit"), 3);
        assert_eq!(bulk.commit().expect("commit"), 3);
    }

    #[test]
    fn a_failed_rename_names_the_target_and_removes_the_temp_file() {
        let _turn = turn();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("folder");
        std::fs::create_dir(&path).expect("mkdir");
        std::fs::write(path.join("keep"), b"x").expect("write");
        let e = write_file(&path, b"data").expect_err("rename over a folder");
        assert!(e.to_string().contains("folder"), "{e}");
        assert_eq!(temps(dir.path()), Vec::<String>::new());
        let e = write_file(dir.path().join("no/such/dir/f"), b"x").expect_err("no folder");
        assert!(e.to_string().contains("no/such/dir/f"), "{e}");
    }

    #[test]
    fn a_dir_appears_whole_or_not_at_all() {
        let _turn = turn();
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("model");
        let d = AtomicDir::create(&out).expect("create");
        write_file(d.tmp().join("a.bin"), b"x").expect("write");
        assert!(!out.exists());
        drop(d);
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
        let d = AtomicDir::create(&out).expect("create");
        write_file(d.tmp().join("a.bin"), b"x").expect("write");
        d.commit().expect("commit");
        assert_eq!(std::fs::read(out.join("a.bin")).expect("read"), b"x");
        let e = AtomicDir::create(&out).expect_err("not empty");
        assert!(e.to_string().contains("not empty"), "{e}");
        // A signal's clean-up removes a live temp folder with its files.
        let other = dir.path().join("other");
        let d = AtomicDir::create(&other).expect("create");
        write_file(d.tmp().join("b.bin"), b"y").expect("write");
        let removed = remove_temp_files();
        assert!(removed.removed >= 1);
        drop(removed);
        drop(d);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("model")]);
    }

    #[test]
    fn a_forced_dir_replaces_a_full_folder_whole() {
        let _turn = turn();
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("model");
        std::fs::create_dir(&out).expect("mkdir");
        std::fs::write(out.join("old.bin"), b"old").expect("write");
        let e = AtomicDir::create(&out).expect_err("not empty");
        assert!(e.to_string().contains("--force"), "{e}");
        let d = AtomicDir::replacing(&out, true).expect("forced");
        write_file(d.tmp().join("new.bin"), b"new").expect("write");
        assert_eq!(std::fs::read(out.join("old.bin")).expect("old"), b"old");
        d.commit().expect("commit");
        let names: Vec<_> = std::fs::read_dir(&out)
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("new.bin")]);
        assert_eq!(temps(dir.path()), Vec::<String>::new());
    }

    #[cfg(unix)]
    #[test]
    fn a_killed_writers_temp_files_go_at_the_next_write() {
        let _turn = turn();
        let dir = tempfile::tempdir().expect("tempdir");
        // A process that has exited: its id names no process now.
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let dead = child.id();
        child.wait().expect("wait");
        let me = std::process::id();
        let names = [
            format!(".out.bin.tmp-{dead}-0"),
            format!(".out.bin.tmp-{me}-12345"),
            ".out.bin.tmp-1-0".to_owned(),
            format!(".other.bin.tmp-{dead}-0"),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), b"half").expect("write");
        }
        std::fs::create_dir(dir.path().join(format!(".model.tmp-{dead}-3"))).expect("mkdir");
        write_file(dir.path().join("out.bin"), b"whole").expect("write");
        let mut left = temps(dir.path());
        left.sort();
        // The dead writer's temp file of this target went; this process's,
        // a live process's (init) and another target's stayed.
        let mut want = names[1..].to_vec();
        want.push(format!(".model.tmp-{dead}-3"));
        want.sort();
        assert_eq!(left, want);
        let d = AtomicDir::create(dir.path().join("model")).expect("create");
        assert!(!dir.path().join(format!(".model.tmp-{dead}-3")).exists());
        drop(d);
        assert_eq!(temp_pid(".out.bin.tmp-12-3", "out.bin"), Some(12));
        assert_eq!(temp_pid(".out.bin.tmp-12", "out.bin"), None);
        assert_eq!(temp_pid(".out.bin.x.tmp-12-3", "out.bin"), None);
    }

    #[test]
    fn remove_temp_files_deletes_live_temp_files() {
        let _turn = turn();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = AtomicFile::create(dir.path().join("big.bin")).expect("create");
        f.write_all(&[0; 1024]).expect("write");
        f.flush().expect("flush");
        assert_eq!(temps(dir.path()).len(), 1);
        let removed = remove_temp_files();
        assert!(removed.removed >= 1);
        assert_eq!(temps(dir.path()), Vec::<String>::new());
        drop(removed);
        drop(f);
    }
}
