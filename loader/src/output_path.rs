//! The one rule for every path dynvram writes: an output never resolves to
//! something the same command reads, and an existing folder with files in
//! it is replaced only when the user says so (`--force`).
//!
//! "Resolves to" is decided by identity, not by spelling: the output and
//! every input are compared by device and inode (Unix; elsewhere by their
//! canonical paths), so `..`, symlinks and hard links cannot hide an input.
//! An output is refused when it is an input, when it is a folder that holds
//! an input (writing a folder replaces it whole), and, for an input folder,
//! when it is one of the files directly in that folder (a model folder's
//! config, tokenizer and shards are all read). Every check runs before any
//! work, so a refused command has touched nothing.
//!
//! Writers call [`check_output`] for a file, [`check_output_dir`] for a
//! folder written whole and [`check_write_into`] for a folder they add
//! files to (a cache); each returns a [`LoadError`] naming both paths.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{LoadError, Result};

/// What identifies a file or folder whatever path reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    /// Device and inode.
    #[cfg(unix)]
    Inode(u64, u64),
    /// The canonical path, where inodes cannot be asked.
    #[cfg_attr(unix, allow(dead_code))]
    Canonical(PathBuf),
}

/// The identity of what `path` resolves to (following symlinks), or `None`
/// when nothing is there.
fn identity(path: &Path) -> Result<Option<Identity>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LoadError::Io {
                path: path.to_owned(),
                op: "stat the output",
                source,
            });
        }
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Ok(Some(Identity::Inode(meta.dev(), meta.ino())))
    }
    #[cfg(not(unix))]
    {
        drop(meta);
        Ok(path.canonicalize().ok().map(Identity::Canonical))
    }
}

/// The identities an input stands for: itself, the folders above it (an
/// output replacing one would replace the input), and, for a folder, the
/// files directly in it. Each with the path to name in an error.
fn input_identities(input: &Path, folders_above: bool) -> Vec<(Identity, PathBuf)> {
    let mut out = Vec::new();
    let Ok(Some(own)) = identity(input) else {
        return out;
    };
    out.push((own, input.to_owned()));
    if folders_above && let Ok(canonical) = input.canonicalize() {
        for folder in canonical.ancestors().skip(1) {
            if let Ok(Some(id)) = identity(folder) {
                out.push((id, folder.to_owned()));
            }
        }
    }
    if input.is_dir()
        && let Ok(entries) = std::fs::read_dir(input)
    {
        for e in entries.flatten() {
            let path = e.path();
            if let Ok(Some(id)) = identity(&path) {
                out.push((id, path));
            }
        }
    }
    out
}

/// Refuses an `output` that resolves to one of `inputs` (see the module
/// docs): [`LoadError::OutputIsInput`], naming both. An output that does not
/// exist yet passes.
pub fn check_output(output: &Path, inputs: &[&Path]) -> Result<()> {
    check(output, inputs, true)
}

/// [`check_output`] for a folder that files are written into, never
/// replaced whole (a cache folder): it may hold an input, but it may not be
/// one, nor a file of an input folder.
pub fn check_write_into(folder: &Path, inputs: &[&Path]) -> Result<()> {
    check(folder, inputs, false)
}

fn check(output: &Path, inputs: &[&Path], folders_above: bool) -> Result<()> {
    let Some(out) = identity(output)? else {
        return Ok(());
    };
    for input in inputs {
        for (id, path) in input_identities(input, folders_above) {
            if id == out {
                return Err(LoadError::OutputIsInput {
                    output: output.to_owned(),
                    input: input.to_path_buf(),
                    resolved: path,
                });
            }
        }
    }
    Ok(())
}

/// [`check_output`] for an output folder, which is also refused when it
/// exists with anything in it unless `force` ([`LoadError::OutputNotEmpty`]);
/// a file where the folder should go is refused either way.
pub fn check_output_dir(output: &Path, inputs: &[&Path], force: bool) -> Result<()> {
    check_output(output, inputs)?;
    match std::fs::read_dir(output) {
        Ok(mut entries) => {
            if entries.next().is_some() && !force {
                return Err(LoadError::OutputNotEmpty {
                    path: output.to_owned(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LoadError::Io {
            path: output.to_owned(),
            op: "write the folder",
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(output: &Path, inputs: &[&Path]) -> String {
        check_output(output, inputs)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn an_output_reaching_an_input_by_any_path_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let model = dir.path().join("model");
        std::fs::create_dir(&model).expect("mkdir");
        let weights = model.join("model.safetensors");
        std::fs::write(&weights, b"w").expect("write");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        // The same path, through `..`.
        let dotdot = sub.join("..").join("model").join("model.safetensors");
        let e = refused(&dotdot, &[&weights]);
        assert!(
            e.contains("model.safetensors") && e.contains("reads"),
            "{e}"
        );
        // A file of an input folder, and the folder holding the input.
        refused(&weights, &[&model]);
        refused(&model, &[&weights]);
        refused(dir.path(), &[&weights]);
        #[cfg(unix)]
        {
            let link = dir.path().join("link.safetensors");
            std::os::unix::fs::symlink(&weights, &link).expect("symlink");
            refused(&link, &[&weights]);
            refused(&weights, &[&link]);
            let hard = dir.path().join("hard.safetensors");
            std::fs::hard_link(&weights, &hard).expect("link");
            let e = refused(&hard, &[&weights]);
            assert!(e.contains("hard.safetensors"), "{e}");
        }
        // Elsewhere, or not there yet: fine.
        check_output(&dir.path().join("out.safetensors"), &[&weights]).expect("new file");
        check_output(&sub.join("x"), &[&model]).expect("new file elsewhere");
        check_output(&sub, &[&model, &weights]).expect("an unrelated folder");
        // A folder written into may hold an input, not be one.
        check_write_into(dir.path(), &[&weights]).expect("holds the input");
        check_write_into(&model, &[&model]).expect_err("is the input");
        check_write_into(&weights, &[&model]).expect_err("a file of the input");
    }

    #[test]
    fn a_folder_with_files_needs_force() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        check_output_dir(&out, &[], false).expect("absent");
        std::fs::create_dir(&out).expect("mkdir");
        check_output_dir(&out, &[], false).expect("empty");
        std::fs::write(out.join("model.safetensors"), b"w").expect("write");
        let e = check_output_dir(&out, &[], false).expect_err("not empty");
        assert!(e.to_string().contains("--force"), "{e}");
        check_output_dir(&out, &[], true).expect("forced");
        // Forced or not, never over an input.
        let input = out.join("model.safetensors");
        check_output_dir(&out, &[&input], true).expect_err("holds the input");
    }
}
