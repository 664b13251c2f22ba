//! A whole safetensors file from arbitrary bytes: written to a temp file,
//! opened with `SafetensorsFile::open` (header length, header, index), then
//! every tensor read with `pread` and through the map; the two must agree.
#![no_main]

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use dynvram_loader::SafetensorsFile;
use libfuzzer_sys::fuzz_target;

/// One scratch file per fuzzing process.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("dynvram-fuzz-{}.safetensors", std::process::id()))
    })
}

/// Removes the scratch file when an input is done (a process that ends
/// mid-input, on a finding, leaves it: it is the input).
struct Cleanup<'a>(&'a PathBuf);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    let _cleanup = Cleanup(path);
    let Ok(mut f) = std::fs::File::create(path) else {
        return;
    };
    if f.write_all(data).is_err() {
        return;
    }
    drop(f);
    let Ok(file) = SafetensorsFile::open(path) else {
        return;
    };
    assert_eq!(file.len(), data.len() as u64);
    for t in file.tensors() {
        let len = usize::try_from(t.len()).expect("inside a file in memory");
        let mut buf = vec![0u8; len];
        file.read_into(&t.name, 0..t.len(), &mut buf)
            .expect("a validated range of an unchanged file reads");
        let mapped = file.bytes(&t.name).expect("unchanged file maps");
        assert_eq!(mapped, &buf[..], "{}", t.name);
        let at = usize::try_from(t.range.start).expect("inside the file");
        assert_eq!(&data[at..at + len], &buf[..], "{}", t.name);
        // One past the end is refused, not read.
        assert!(file.read_into(&t.name, 0..t.len() + 1, &mut vec![0u8; len + 1]).is_err());
    }
});
