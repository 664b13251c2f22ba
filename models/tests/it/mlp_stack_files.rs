//! MLP-stack files that are not what they claim: a gap in the block indices,
//! a stray tensor, an `input` of the wrong shape. Each is an error naming
//! the file and what is wrong (they ran as a shorter model, or the input was
//! silently replaced by random rows). No GPU: `Probe::open` only.

use std::path::Path;

use dynvram_models::mlp_stack::Probe;
use dynvram_runtime::quant::tensors::{Dtype, f32_bytes};
use safetensors::tensor::TensorView;

const HIDDEN: usize = 8;
const FFN: usize = 16;

/// Writes blocks `blocks` (fc1 [FFN, HIDDEN], fc2 [HIDDEN, FFN]) plus `extra`.
fn write(path: &Path, blocks: &[usize], extra: &[(&str, Vec<usize>)]) {
    let mut tensors: Vec<(String, Vec<usize>)> = Vec::new();
    for i in blocks {
        tensors.push((format!("blocks.{i}.mlp.fc1.weight"), vec![FFN, HIDDEN]));
        tensors.push((format!("blocks.{i}.mlp.fc2.weight"), vec![HIDDEN, FFN]));
    }
    tensors.extend(extra.iter().map(|(n, s)| (n.to_string(), s.clone())));
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(n, s)| {
            let mut v = vec![0.25; s.iter().product()];
            if n == "input" && v.len() > 5 && s.first() == Some(&5) {
                v[5] = f32::NAN;
            }
            f32_bytes(&v)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&data)
        .map(|((n, s), d)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), d).expect("view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write");
}

fn open_err(path: &Path) -> String {
    Probe::open(path).expect_err("refused").to_string()
}

#[test]
fn a_gap_in_the_block_indices_names_the_missing_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gap.safetensors");
    write(&path, &[0, 2], &[]);
    let e = open_err(&path);
    assert!(e.contains("gap.safetensors"), "{e}");
    assert!(e.contains("block 1 is missing"), "{e}");
    assert!(e.contains("blocks.2."), "{e}");
    write(&path, &[0, 1], &[]);
    assert_eq!(Probe::open(&path).expect("contiguous").shape().blocks, 2);
}

#[test]
fn a_stray_tensor_or_a_misshapen_input_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stack.safetensors");
    write(&path, &[0], &[("inputs", vec![2, HIDDEN])]);
    let e = open_err(&path);
    assert!(e.contains("unexpected tensor `inputs`"), "{e}");
    for shape in [vec![2, HIDDEN + 1], vec![2 * HIDDEN], vec![0, HIDDEN]] {
        write(&path, &[0], &[("input", shape.clone())]);
        let e = open_err(&path);
        assert!(
            e.contains("stack.safetensors") && e.contains("tensor `input`"),
            "{shape:?}: {e}"
        );
        assert!(e.contains(&format!("{HIDDEN}]")), "{e}");
    }
    // Five rows: the helper puts a NaN at element 5.
    write(&path, &[0], &[("input", vec![5, HIDDEN])]);
    let e = open_err(&path);
    assert!(
        e.contains("tensor `input`") && e.contains("element 5 is NaN"),
        "{e}"
    );
    write(&path, &[0], &[("input", vec![3, HIDDEN])]);
    let probe = Probe::open(&path).expect("a good input");
    assert_eq!(probe.rows(4), 3);
    assert_eq!(probe.input(3), vec![0.25; 3 * HIDDEN]);
}

/// The goldens' reference tensors belong to a stack (issue 31: the
/// README's own `dynvram run fixtures/conformance/stack_mixed.safetensors`
/// was refused over `debug.blocks.0.fc1_out`); a truly stray one, or a
/// reference of a block the stack does not have, is still refused.
#[test]
fn the_goldens_references_are_accepted_and_strays_refused() {
    let stack = dynvram_test_support::fixtures::conformance().join("stack_mixed.safetensors");
    let probe = Probe::open(&stack).expect("the conformance stack opens");
    assert_eq!(probe.shape().blocks, 6);
    assert_eq!(probe.rows(4), 5, "its input is used");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stack.safetensors");
    for good in [
        "expected",
        "expected_eager_cpu",
        "debug.blocks.0.out",
        "debug.blocks.0.fc1_out",
    ] {
        write(&path, &[0], &[(good, vec![2, HIDDEN])]);
        Probe::open(&path).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    for (stray, says) in [
        ("debug.other", "unexpected tensor `debug.other`"),
        ("expectedx", "unexpected tensor `expectedx`"),
        ("debug.blocks.3.out", "block 1 is missing"),
    ] {
        write(&path, &[0], &[(stray, vec![2, HIDDEN])]);
        let e = open_err(&path);
        assert!(e.contains(says), "{stray}: {e}");
    }
}

#[test]
fn a_file_truncated_before_the_cpu_reference_is_an_error_naming_it() {
    use dynvram_models::mlp_stack::{MlpError, discover, forward_cpu};
    use dynvram_runtime::FilesList;
    use dynvram_runtime::loader::ModelFiles;

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("short.safetensors");
    write(&path, &[0, 1], &[]);
    let files = ModelFiles::from_files([&path]).expect("opens");
    let list = FilesList::new(&files);
    let (_, layers) = discover(&path, &list).expect("a stack");
    let acts = vec![[None, None]; layers.len()];
    let x = vec![0.5; HIDDEN];
    forward_cpu(&list, &layers, &acts, &x).expect("whole file");
    // `run` reads the weights again for its check after the GPU pass; the
    // file loses its last block meanwhile.
    let len = std::fs::metadata(&path).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(len / 2)
        .expect("truncate");
    let e = forward_cpu(&list, &layers, &acts, &x).expect_err("a short file");
    assert!(matches!(e, MlpError::Load(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("short.safetensors"), "{e}");
}
