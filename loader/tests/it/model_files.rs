//! A model over several files: index.json with `weight_map`, a list of files,
//! and the errors for a broken index.

use dynvram_loader::{LoadError, ModelFiles};
use dynvram_test_support::random;
use dynvram_test_support::safetensors::{file_bytes, write_bytes};

fn shards(dir: &std::path::Path) {
    write_bytes(
        dir,
        "m-00001-of-00002.safetensors",
        &file_bytes(&[
            ("l0.weight", "U8", vec![10], random::bytes(10, 1)),
            ("l0.bias", "U8", vec![3], random::bytes(3, 2)),
        ]),
    );
    write_bytes(
        dir,
        "m-00002-of-00002.safetensors",
        &file_bytes(&[("l1.weight", "U8", vec![7], random::bytes(7, 3))]),
    );
}

#[test]
fn index_json_maps_names_to_shards() {
    let dir = tempfile::tempdir().expect("tempdir");
    shards(dir.path());
    let index = write_bytes(
        dir.path(),
        "model.safetensors.index.json",
        br#"{
        "metadata": {"total_size": 20},
        "weight_map": {
            "l0.weight": "m-00001-of-00002.safetensors",
            "l0.bias": "m-00001-of-00002.safetensors",
            "l1.weight": "m-00002-of-00002.safetensors"
        }}"#,
    );
    for opened in [ModelFiles::open(&index), ModelFiles::open(dir.path())] {
        let m = opened.expect("model opens");
        assert_eq!(m.files().len(), 2);
        assert_eq!(m.len(), 3);
        let info = m.info("l1.weight").expect("l1.weight");
        let path = m.path_of("l1.weight").expect("its file");
        assert!(path.ends_with("m-00002-of-00002.safetensors"));
        let mut bytes = vec![0; info.len() as usize];
        m.read_into("l1.weight", 0..info.len(), &mut bytes)
            .expect("bytes");
        assert_eq!(bytes, random::bytes(7, 3));
        assert_eq!(m.tensors().count(), 3);
        assert!(m.info("nope").is_none());
    }
}

#[test]
fn list_of_files_and_duplicates() {
    let dir = tempfile::tempdir().expect("tempdir");
    shards(dir.path());
    let m = ModelFiles::open(dir.path()).expect("directory of shards");
    assert_eq!(m.len(), 3);
    let dup = write_bytes(
        dir.path(),
        "dup.safetensors",
        &file_bytes(&[("l0.bias", "U8", vec![1], vec![9])]),
    );
    let err = ModelFiles::from_files([dir.path().join("m-00001-of-00002.safetensors"), dup])
        .expect_err("duplicate name");
    assert!(matches!(err, LoadError::DuplicateTensor { .. }), "{err}");
    assert!(err.to_string().contains("l0.bias"));
}

#[test]
fn broken_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    shards(dir.path());
    let missing = write_bytes(
        dir.path(),
        "a.index.json",
        br#"{"weight_map": {"l9.weight": "m-00001-of-00002.safetensors"}}"#,
    );
    let err = ModelFiles::open(&missing).expect_err("tensor not in shard");
    assert!(matches!(err, LoadError::NoSuchTensor { .. }));
    assert!(
        err.to_string().contains("l9.weight") && err.to_string().contains("m-00001"),
        "{err}"
    );
    let bad = write_bytes(dir.path(), "b.index.json", br#"{"weight_map": 3}"#);
    assert!(matches!(
        ModelFiles::open(&bad),
        Err(LoadError::BadIndex { .. })
    ));
    let escape = write_bytes(
        dir.path(),
        "c.index.json",
        br#"{"weight_map": {"x": "../x.safetensors"}}"#,
    );
    assert!(matches!(
        ModelFiles::open(&escape),
        Err(LoadError::BadIndex { .. })
    ));
    let absent = write_bytes(
        dir.path(),
        "d.index.json",
        br#"{"weight_map": {"x": "gone.safetensors"}}"#,
    );
    let err = ModelFiles::open(&absent).expect_err("missing shard");
    assert!(err.to_string().contains("gone.safetensors"), "{err}");
}
