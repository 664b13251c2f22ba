//! `cargo bench -p dynvram-quant --bench convrot`: CPU time per weight of the
//! convrot_w4a4 quantizer (matmul-order rotation, int4 scale, packing) on
//! one thread, for the Llama-7B row lengths at the default group of 256.
//! No harness: a few timed repetitions, the best one printed.

use std::hint::black_box;
use std::time::Instant;

use dynvram_quant::quantize::quantize_convrot_w4a4_weight;

fn weights(n: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // bf16-exact values around 0.02, as a Llama linear's.
            let v = ((s >> 11) as f32 / (1u64 << 53) as f32 - 0.5) * 0.08;
            f32::from_bits(v.to_bits() & 0xFFFF_0000)
        })
        .collect()
}

fn main() {
    for (rows, k) in [(256usize, 4096usize), (96, 11008)] {
        let w = weights(rows * k);
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            black_box(quantize_convrot_w4a4_weight(black_box(&w), k, 256));
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "convrot_w4a4 g256 [{rows}, {k}]: {:.2} ns/weight (one thread, best of 5)",
            best * 1e9 / w.len() as f64
        );
    }
}
