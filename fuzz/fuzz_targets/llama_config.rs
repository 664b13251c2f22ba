//! `config.json` of Llama-family checkpoints (`LlamaConfig::from_json`) on
//! arbitrary bytes. What parses must satisfy every rule the forward pass
//! relies on: sizes non-zero, heads divisible, an even head width, a positive
//! finite epsilon and a RoPE table of positive finite frequencies.
#![no_main]

use dynvram_models::llama::LlamaConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(c) = LlamaConfig::from_json(&value) else {
        return;
    };
    assert!(c.hidden_size > 0 && c.intermediate_size > 0 && c.vocab_size > 0);
    assert!(c.num_hidden_layers > 0 && c.max_position_embeddings > 0);
    assert!(c.num_key_value_heads > 0);
    assert_eq!(c.num_attention_heads % c.num_key_value_heads, 0);
    assert!(c.head_dim > 0 && c.head_dim % 2 == 0);
    assert!(c.q_width() >= c.kv_width());
    assert!(c.rms_norm_eps.is_finite() && c.rms_norm_eps > 0.0);
    assert!(c.rope_theta.is_finite() && c.rope_theta > 0.0);
    let freqs = c.inv_freq();
    assert_eq!(freqs.len(), c.head_dim / 2);
    assert!(freqs.iter().all(|f| f.is_finite() && *f > 0.0), "{c:?}");
});
