//! `comfy_quant` metadata in all its forms over a fuzzed tensor list: the
//! per-layer `L.comfy_quant` tensor (any dtype/shape/bytes), the header's
//! `_quantization_metadata` JSON, and the `scaled_fp8` marker; then layer
//! discovery and validation. What validates must be usable by the kernels.
#![no_main]

use std::collections::HashMap;

use dynvram_quant::meta::{HEADER_KEY, header_layers};
use dynvram_quant::tensors::Dtype;
use dynvram_quant::{Format, TensorList, TensorTable, discover_layers, layer_meta, validate_layer};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

const LAYERS: [&str; 2] = ["blk.a", "blk.b"];
const SUFFIXES: [&str; 6] = [
    "weight",
    "weight_scale",
    "bias",
    "input_scale",
    "scale_weight",
    "comfy_quant",
];
const DTYPES: [Dtype; 10] = [
    Dtype::U8,
    Dtype::I8,
    Dtype::F8_E4M3,
    Dtype::F8_E5M2,
    Dtype::F16,
    Dtype::BF16,
    Dtype::F32,
    Dtype::I32,
    Dtype::F64,
    Dtype::BOOL,
];

#[derive(Debug, Arbitrary)]
struct Tensor {
    layer: u8,
    suffix: u8,
    dtype: u8,
    shape: Vec<u16>,
    data: Option<Vec<u8>>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    header: Option<String>,
    scaled_fp8: bool,
    tensors: Vec<Tensor>,
}

fn pick<T: Copy>(list: &[T], i: u8) -> T {
    list[usize::from(i) % list.len()]
}

fuzz_target!(|input: Input| {
    let mut table = TensorTable::default();
    if let Some(h) = input.header {
        table.metadata = Some(HashMap::from([(HEADER_KEY.to_owned(), h)]));
    }
    if input.scaled_fp8 {
        table.push("scaled_fp8", Dtype::F8_E4M3, &[0]);
    }
    for t in input.tensors.iter().take(16) {
        let name = format!("{}.{}", pick(&LAYERS, t.layer), pick(&SUFFIXES, t.suffix));
        let shape: Vec<usize> = t.shape.iter().take(3).map(|&d| usize::from(d)).collect();
        let dtype = pick(&DTYPES, t.dtype);
        match &t.data {
            Some(d) => table.push_data(&name, dtype, &shape, d.clone()),
            None => table.push(&name, dtype, &shape),
        };
    }
    let _ = header_layers(&table);
    let _ = discover_layers(&table);
    for layer in LAYERS {
        let _ = layer_meta(&table, layer);
        let Ok(q) = validate_layer(&table, layer) else {
            continue;
        };
        let (_, wshape) = table.dtype_shape(&q.weight).expect("validated weight exists");
        assert_eq!(wshape.len(), 2);
        assert_eq!(q.n, wshape[0]);
        match q.format {
            Format::ConvrotW4a4 { group, .. } => {
                assert_eq!(q.k, 2 * wshape[1]);
                assert!(q.k.is_multiple_of(group as usize) && q.k.is_multiple_of(64));
            }
            Format::Int8Tensorwise {
                convrot_group: Some(g),
            } => assert!(q.k.is_multiple_of(g as usize)),
            _ => {}
        }
        for t in [&q.scale, &q.bias, &q.input_scale].into_iter().flatten() {
            assert!(table.dtype_shape(t).is_some(), "{t} validated but absent");
        }
    }
});
