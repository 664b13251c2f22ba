//! Per-layer `comfy_quant` JSON bytes (the `L.comfy_quant` U8 tensor). What
//! parses must round-trip through the writer (`comfy_quant_json`) to the
//! same format.
#![no_main]

use dynvram_quant::meta::comfy_quant_json;
use dynvram_quant::parse_comfy_quant;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(meta) = parse_comfy_quant("layer", data) else {
        return;
    };
    if let Some(json) = comfy_quant_json(meta.format) {
        let again = parse_comfy_quant("layer", json.as_bytes()).expect("our own JSON parses");
        assert_eq!(again.format, meta.format, "{json}");
    }
});
