//! Matrix FLOPs of one Llama-family pass per runtime block (`dynvram
//! plan`'s compute time): 2·M·N·K per linear at M new rows, and attention's
//! QKᵀ and P·V (4·head_dim FLOPs per query head, query row and key it
//! sees: causal, after `past` cached tokens). The head computes the last
//! row only, as generation asks for it.

use super::config::LlamaConfig;

/// FLOPs of each block (`embed`, the layers, `head`) of a pass over `rows`
/// new tokens after `past` cached ones: a prefill is `rows` = prompt,
/// `past` = 0; a decode step `rows` = 1.
pub fn block_flops(c: &LlamaConfig, rows: usize, past: usize) -> Vec<u64> {
    let (h, i) = (c.hidden_size as u64, c.intermediate_size as u64);
    let (heads, kv, hd) = (
        c.num_attention_heads as u64,
        c.num_key_value_heads as u64,
        c.head_dim as u64,
    );
    let (m, past) = (rows as u64, past as u64);
    let linears =
        2 * m * h * (heads * hd + 2 * kv * hd) + 2 * m * heads * hd * h + 2 * m * 3 * h * i;
    // Row r (0-based) sees past + r + 1 keys.
    let keys = m * past + m * (m + 1) / 2;
    let attention = 4 * heads * hd * keys;
    let head = 2 * h * c.vocab_size as u64;
    std::iter::once(0)
        .chain(std::iter::repeat_n(
            linears + attention,
            c.num_hidden_layers,
        ))
        .chain(std::iter::once(head))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3-8B's shapes: a decode step is ~2 FLOPs a parameter; a
    /// prefill of 512 tokens ~512 times the layers' share plus attention.
    #[test]
    fn llama3_8b_prefill_and_decode() {
        let json = crate::llama::synth::preset("llama3-8b").expect("preset");
        let c = LlamaConfig::from_json(&json).expect("config");
        let layer_params = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336u64;
        let decode = block_flops(&c, 1, 0);
        assert_eq!(decode.len(), 34);
        assert_eq!(decode[0], 0);
        assert_eq!(decode[1], 2 * layer_params + 4 * 32 * 128);
        assert_eq!(decode[33], 2 * 4096 * 128256);
        let prefill = block_flops(&c, 512, 0);
        let attention = 4 * 32 * 128 * (512 * 513 / 2);
        assert_eq!(prefill[1], 2 * 512 * layer_params + attention);
        let total: u64 = prefill.iter().sum();
        // ~7.0 G parameters in the layers at 512 tokens: ~7.2 TFLOP.
        assert!((7.0e12..7.5e12).contains(&(total as f64)), "{total}");
        // Cached tokens add attention only.
        let later = block_flops(&c, 1, 1000);
        assert_eq!(later[1] - decode[1], 4 * 32 * 128 * 1000);
    }
}
