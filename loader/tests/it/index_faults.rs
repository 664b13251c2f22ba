//! Every malformed-header case gives the right error, naming the file, the
//! tensor and the sizes; nothing panics (issue 8's fault matrix, file rows).

use dynvram_loader::{Dtype, LoadError, SafetensorsFile};
use dynvram_test_support::random;
use dynvram_test_support::safetensors::{file_bytes, raw_file, write_bytes};
use proptest::prelude::*;

fn open_bytes(
    bytes: &[u8],
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Result<SafetensorsFile, LoadError>,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_bytes(dir.path(), "model.safetensors", bytes);
    let r = SafetensorsFile::open(&path);
    (dir, path, r)
}

/// Opens `bytes`, expects an error, and checks its text names every `needle`
/// and the file path.
fn expect_error(bytes: &[u8], needles: &[&str]) -> LoadError {
    let (_dir, path, r) = open_bytes(bytes);
    let err = r.expect_err("malformed file must not open");
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "no path in: {text}"
    );
    for n in needles {
        assert!(text.contains(n), "`{n}` missing from: {text}");
    }
    err
}

#[test]
fn valid_file_indexes_and_reads() {
    let w = random::bytes(24, 1);
    let b = random::bytes(6, 2);
    let bytes = file_bytes(&[
        ("w", "F32", vec![2, 3], w.clone()),
        ("b", "F16", vec![3], b.clone()),
        ("empty", "BF16", vec![0, 4], vec![]),
    ]);
    let (_dir, path, r) = open_bytes(&bytes);
    let f = r.expect("valid file opens");
    assert_eq!(f.path(), path);
    assert_eq!(f.len(), bytes.len() as u64);
    assert_eq!(f.tensors().len(), 3);
    let info = f.get("w").expect("w");
    assert_eq!(
        (info.dtype, info.shape.clone(), info.len()),
        (Dtype::F32, vec![2, 3], 24)
    );
    assert_eq!(f.bytes("w").expect("bytes"), &w[..]);
    assert_eq!(f.bytes("b").expect("bytes"), &b[..]);
    assert!(f.bytes("empty").expect("bytes").is_empty());
    assert_eq!(f.metadata().get("format").map(String::as_str), Some("pt"));
    let mut part = vec![0u8; 10];
    f.read_into("w", 7..17, &mut part).expect("read_into");
    assert_eq!(part, w[7..17]);
    let err = f
        .read_into("w", 20..30, &mut part)
        .expect_err("outside the tensor");
    assert!(
        matches!(err, LoadError::RangeOutsideTensor { tensor_len: 24, .. }),
        "{err}"
    );
    assert!(matches!(
        f.tensor("nope"),
        Err(LoadError::NoSuchTensor { .. })
    ));
}

#[test]
fn files_written_by_the_safetensors_crate_open() {
    let data = random::bytes(64, 3);
    let view = safetensors::tensor::TensorView::new(Dtype::I8, vec![8, 8], &data).expect("view");
    let bytes = safetensors::serialize([("x", view)], None).expect("serialize");
    let (_dir, _path, r) = open_bytes(&bytes);
    let f = r.expect("opens");
    assert_eq!(f.bytes("x").expect("bytes"), &data[..]);
}

#[test]
fn shorter_than_eight_bytes() {
    for len in 0..8 {
        let err = expect_error(&vec![0u8; len], &[&format!("is {len} bytes")]);
        assert!(matches!(err, LoadError::TooShort { .. }));
    }
}

#[test]
fn header_length_past_end() {
    let mut bytes = raw_file("{}", &[]);
    bytes[..8].copy_from_slice(&1000u64.to_le_bytes());
    let err = expect_error(&bytes, &["1000", &format!("{}", bytes.len())]);
    assert!(matches!(
        err,
        LoadError::HeaderPastEnd {
            header_len: 1000,
            ..
        }
    ));
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = expect_error(&bytes, &[&u64::MAX.to_string()]);
    assert!(matches!(err, LoadError::HeaderTooLarge { .. }));
}

#[test]
fn invalid_json_and_wrong_shapes_of_json() {
    let err = expect_error(&raw_file("{\"a\": ", &[]), &["invalid safetensors header"]);
    assert!(matches!(err, LoadError::HeaderJson { .. }));
    expect_error(&raw_file("[1, 2]", &[]), &["not a JSON object"]);
    expect_error(&raw_file("\u{0}\u{1}", &[]), &["invalid"]);
    let err = expect_error(
        &raw_file(r#"{"t": {"dtype": "F32", "shape": [1]}}"#, &[0; 4]),
        &["`t`", "data_offsets"],
    );
    assert!(matches!(err, LoadError::BadEntry { .. }));
    expect_error(
        &raw_file(
            r#"{"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}"#,
            &[0; 4],
        ),
        &["`t`", "shape"],
    );
    expect_error(
        &raw_file(r#"{"__metadata__": {"k": 3}}"#, &[]),
        &["__metadata__", "`k`"],
    );
}

#[test]
fn unknown_dtype() {
    let err = expect_error(
        &raw_file(
            r#"{"t": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}"#,
            &[0; 16],
        ),
        &["`t`", "F128"],
    );
    assert!(matches!(err, LoadError::UnknownDtype { .. }));
}

#[test]
fn dtype_shape_mismatch_with_offsets() {
    let err = expect_error(
        &raw_file(
            r#"{"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}"#,
            &[0; 20],
        ),
        &["`w`", "24 bytes", "span 20 bytes", "[2, 3]"],
    );
    assert!(matches!(
        err,
        LoadError::ByteCountMismatch {
            expected: 24,
            actual: 20,
            ..
        }
    ));
    let err = expect_error(
        &raw_file(
            r#"{"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 4]}}"#,
            &[0; 4],
        ),
        &["`w`", "overflows"],
    );
    assert!(matches!(err, LoadError::BadShape { .. }));
    expect_error(
        &raw_file(
            r#"{"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}"#,
            &[0; 2],
        ),
        &["`w`", "whole number of bytes"],
    );
}

#[test]
fn offsets_out_of_range_or_reversed() {
    let err = expect_error(
        &raw_file(
            r#"{"w": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}}"#,
            &[0; 10],
        ),
        &["`w`", "[4, 12)", "10 bytes"],
    );
    assert!(matches!(
        err,
        LoadError::OffsetsOutOfRange { data_len: 10, .. }
    ));
    expect_error(
        &raw_file(
            r#"{"w": {"dtype": "U8", "shape": [0], "data_offsets": [6, 2]}}"#,
            &[0; 10],
        ),
        &["`w`", "[6, 2)"],
    );
}

#[test]
fn overlapping_tensors() {
    let err = expect_error(
        &raw_file(
            r#"{"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                "b": {"dtype": "U8", "shape": [4], "data_offsets": [6, 10]}}"#,
            &[0; 10],
        ),
        &["`a`", "`b`", "[0, 8)", "[6, 10)"],
    );
    assert!(matches!(err, LoadError::Overlap { .. }));
    // A tensor nested inside a long earlier one is caught too.
    expect_error(
        &raw_file(
            r#"{"a": {"dtype": "U8", "shape": [10], "data_offsets": [0, 10]},
                "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},
                "c": {"dtype": "U8", "shape": [2], "data_offsets": [5, 7]}}"#,
            &[0; 10],
        ),
        &["overlaps"],
    );
}

#[test]
fn truncated_after_open_is_an_error_not_sigbus() {
    let w = random::bytes(4096, 4);
    let bytes = file_bytes(&[("w", "U8", vec![4096], w)]);
    let (_dir, path, r) = open_bytes(&bytes);
    let f = r.expect("opens");
    let cut = bytes.len() as u64 - 1000;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|h| h.set_len(cut))
        .expect("truncate");
    let err = f.bytes("w").expect_err("map access refused");
    assert!(
        matches!(err, LoadError::FileChanged { actual, .. } if actual == cut),
        "{err}"
    );
    let mut dst = vec![0u8; 4096];
    let err = f.read_into("w", 0..4096, &mut dst).expect_err("short read");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            LoadError::ShortRead {
                expected: 4096,
                got: 3096,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("`w`") && text.contains(&path.display().to_string()),
        "{text}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Flipping, replacing or truncating header bytes never panics; a file
    /// that still opens has every tensor inside the file.
    #[test]
    fn mutated_headers_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = file_bytes(&[
            ("a.weight", "F16", vec![4, 4], random::bytes(32, 5)),
            ("a.bias", "F32", vec![4], random::bytes(16, 6)),
            ("a.comfy_quant", "U8", vec![5], b"{\"a\"}".to_vec()),
        ]);
        let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default()) as usize;
        for (at, value) in edits {
            let i = at.index(header_end.min(bytes.len()));
            bytes[i] = value;
        }
        if let Some(c) = cut {
            bytes.truncate(c.index(bytes.len() + 1));
        }
        let (_dir, _path, r) = open_bytes(&bytes);
        if let Ok(f) = r {
            for t in f.tensors() {
                prop_assert!(t.range.end <= f.len());
                prop_assert!(f.bytes(&t.name).is_ok());
            }
        }
    }
}

/// A FIFO (or any non-regular file) is refused at once with its path, never
/// read (a read would wait for a writer forever).
#[cfg(unix)]
#[test]
fn special_files_are_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("model.safetensors");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("special_files_are_refused_without_blocking: skipped: mkfifo unavailable");
        return;
    }
    for (path, says) in [(fifo.as_path(), "is a FIFO"), (dir.path(), "is a folder")] {
        let err = SafetensorsFile::open(path).expect_err("a special file opened");
        let msg = err.to_string();
        // A sentence, not a `FileType { … }` Debug dump (issue 31).
        assert!(msg.contains(says) && !msg.contains("FileType"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
    }
}

/// Bytes after the last tensor are refused, as the `safetensors` crate
/// refuses them (issue 31: they were accepted).
#[test]
fn trailing_bytes_after_the_last_tensor_are_refused() {
    let w = random::bytes(24, 1);
    let mut bytes = file_bytes(&[("w", "U8", vec![24], w)]);
    open_bytes(&bytes).2.expect("the file as written opens");
    bytes.extend_from_slice(&[0; 5]);
    expect_error(
        &bytes,
        &["5 bytes after the last tensor", "24 of the 29-byte"],
    );
    let crate_says = safetensors::SafeTensors::deserialize(&bytes).map(|_| ());
    assert!(crate_says.is_err(), "the safetensors crate refuses it too");
    // A header with no tensors and a data section: refused the same way.
    expect_error(
        &raw_file("{}", &[1, 2, 3]),
        &["3 bytes after the last tensor"],
    );
}
