//! Tensors read through views (`ModelFiles::with_views`): rows of stored
//! tensors in several files concatenated, halves swapped, a shape given;
//! the bytes equal the stored rows in that order however a read is cut;
//! views the stored tensors cannot make are refused naming the tensor.

use dynvram_loader::{
    ByteSource, LoadError, ModelFiles, ReaderConfig, ReaderPool, TensorView, ViewPart,
};
use dynvram_test_support::random;
use dynvram_test_support::safetensors::{file_bytes, write_bytes};

/// Two shards: `a` [3, 4] and `c` [2, 4] (F16: 8 bytes a row) in the
/// first, `b` [5, 4] F16 and `odd` [2, 3] F16 and `u` [4] U8 in the second.
fn shards(dir: &std::path::Path) -> (ModelFiles, [Vec<u8>; 3]) {
    let (a, b, c) = (
        random::bytes(24, 1),
        random::bytes(40, 2),
        random::bytes(16, 3),
    );
    write_bytes(
        dir,
        "s-1.safetensors",
        &file_bytes(&[
            ("a", "F16", vec![3, 4], a.clone()),
            ("c", "F16", vec![2, 4], c.clone()),
        ]),
    );
    write_bytes(
        dir,
        "s-2.safetensors",
        &file_bytes(&[
            ("b", "F16", vec![5, 4], b.clone()),
            ("odd", "F16", vec![2, 3], random::bytes(12, 4)),
            ("u", "U8", vec![4], random::bytes(4, 5)),
        ]),
    );
    (ModelFiles::open(dir).expect("shards"), [a, b, c])
}

fn read(m: &ModelFiles, name: &str) -> Vec<u8> {
    let info = m.info(name).expect("info");
    let mut out = vec![0; info.len() as usize];
    m.read_into(name, 0..info.len(), &mut out).expect("read");
    out
}

#[test]
fn views_read_the_parts_rows_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, [a, b, c]) = shards(dir.path());
    let swapped = TensorView {
        name: "swapped".into(),
        shape: None,
        parts: vec![
            ViewPart {
                tensor: "b".into(),
                rows: Some(3..5),
            },
            ViewPart {
                tensor: "b".into(),
                rows: Some(0..3),
            },
        ],
    };
    let m = m
        .with_views(&[
            TensorView::concat("abc", ["a", "b", "c"].map(String::from)),
            swapped,
            TensorView::rename("conv", "c").with_shape(vec![2, 4, 1, 1]),
        ])
        .expect("views");
    assert!(m.has_views());
    assert_eq!(m.len(), 3);
    assert!(m.info("a").is_none(), "stored names are out of sight");
    let abc = m.info("abc").expect("abc");
    assert_eq!(abc.shape, [10, 4]);
    let want_abc = [a.clone(), b.clone(), c.clone()].concat();
    assert_eq!(read(&m, "abc"), want_abc);
    assert_eq!(read(&m, "swapped"), [&b[24..], &b[..24]].concat());
    assert_eq!(m.info("conv").expect("conv").shape, [2, 4, 1, 1]);
    assert_eq!(read(&m, "conv"), c);
    assert!(m.path_of("abc").expect("path").ends_with("s-1.safetensors"));
    // Reads cut anywhere, across the parts' and files' boundaries.
    let src = m.source("abc").expect("source");
    assert_eq!(src.len(), 80);
    for (start, len) in [(0, 80), (20, 10), (23, 2), (24, 40), (63, 17), (79, 1)] {
        let mut got = vec![0u8; len];
        src.read_at(start as u64, (&mut got[..]).into())
            .expect("read_at");
        assert_eq!(got, want_abc[start..start + len], "[{start}, +{len})");
    }
    let (range, at) = src.locate(30).expect("byte 30");
    assert_eq!((range.tensor, at), ("b", 6));
    let mut past = [0u8; 2];
    assert!(matches!(
        src.read_at(79, (&mut past[..]).into()),
        Err(LoadError::RangeOutsideTensor { .. })
    ));
    // Through the reader pool, as the ring and pins read.
    let pool = ReaderPool::new(ReaderConfig {
        threads: 3,
        ..ReaderConfig::default()
    })
    .expect("pool");
    let mut got = vec![0u8; 80];
    pool.read_into(&src, 0, &mut got).expect("pool read");
    assert_eq!(got, want_abc);
}

#[test]
fn views_the_stored_tensors_cannot_make_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refused = |v: TensorView| {
        let (m, _) = shards(dir.path());
        let e = m.with_views(&[v]).expect_err("refused");
        assert!(matches!(e, LoadError::BadView { .. }), "{e}");
        e.to_string()
    };
    let e = refused(TensorView::concat("x", ["a", "nope"].map(String::from)));
    assert!(
        e.contains("`x`") && e.contains("no stored tensor `nope`"),
        "{e}"
    );
    let e = refused(TensorView::concat("x", ["a", "odd"].map(String::from)));
    assert!(
        e.contains("s-2.safetensors") && e.contains("share dtype and width"),
        "{e}"
    );
    let e = refused(TensorView::concat("x", ["a", "u"].map(String::from)));
    assert!(e.contains("share dtype and width"), "{e}");
    let e = refused(TensorView {
        name: "x".into(),
        shape: None,
        parts: vec![ViewPart {
            tensor: "a".into(),
            rows: Some(2..4),
        }],
    });
    assert!(e.contains("rows 2..4") && e.contains("3 rows"), "{e}");
    let e = refused(TensorView::rename("x", "a").with_shape(vec![3, 2, 2, 2]));
    assert!(e.contains("[3, 2, 2, 2]") && e.contains("[3, 4]"), "{e}");
    let e = refused(TensorView::concat("x", []));
    assert!(e.contains("no stored tensor"), "{e}");
}
