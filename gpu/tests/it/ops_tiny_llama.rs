//! Layer 0 of the tiny-llama golden checkpoint through the GPU ops, against
//! the activations transformers recorded (reference.safetensors): embedding
//! (bf16 table), input RMSNorm, RoPE tables and rotated q/k, GQA attention.

use std::sync::Arc;

use crate::ops_common::{ctx, nan_tensor, read, run, upload, upload_bytes};
use dynvram_gpu::ops::attention::{Heads, record_attention, record_kv_write};
use dynvram_gpu::ops::embed::{EmbedTable, TableDtype, TokenIds, record_embed};
use dynvram_gpu::ops::linear::LinearScratch;
use dynvram_gpu::ops::norm::record_rms_norm;
use dynvram_gpu::ops::rope::{RopeTable, cos_sin_table, inv_freq, record_rope_qk};
use dynvram_gpu::{ActDtype, GpuTensor};
use dynvram_test_support::fixtures;
use dynvram_test_support::safetensors::{self, Dtype, Tensor, get};
use dynvram_test_support::tolerance::assert_close;

const N_HEADS: u64 = 8;
const N_KV: u64 = 2;
const HEAD_DIM: u64 = 32;
const THETA: f32 = 10000.0;
const EPS: f32 = 1e-5;

fn f32_tensor(g: &dynvram_gpu::Gpu, t: &Tensor) -> GpuTensor {
    upload(g, &t.shape_u64(), &t.values)
}

#[test]
fn tiny_llama_layer0_matches_transformers() {
    let dir = fixtures::tiny_llama();
    let Some(c) = ctx("tiny_llama_layer0_matches_transformers") else {
        return;
    };
    let g = &c.gpu;
    let reference = safetensors::read(&dir.join("reference.safetensors"));
    let model = safetensors::read(&dir.join("model.safetensors"));

    // RoPE frequencies and tables, host side, against torch's f32 values
    let freqs = inv_freq(THETA, HEAD_DIM as usize);
    assert_close(
        "rope_inv_freq",
        &freqs,
        &get(&reference, "rope_inv_freq").values,
        0.0,
        2.4e-7,
    );
    let cos_ref = get(&reference, "rope_cos");
    let positions = cos_ref.shape_u64()[0];
    let table = cos_sin_table(&freqs, positions, 1.0);
    let half = (HEAD_DIM / 2) as usize;
    // reference layout [pos, head_dim] = cat(f, f); ours [pos, half, (cos, sin)]
    let spread = |k: usize| -> Vec<f32> {
        (0..positions as usize * HEAD_DIM as usize)
            .map(|e| {
                table[((e / HEAD_DIM as usize) * half + (e % HEAD_DIM as usize) % half) * 2 + k]
            })
            .collect()
    };
    assert_close("rope_cos", &spread(0), &cos_ref.values, 1e-6, 0.0);
    assert_close(
        "rope_sin",
        &spread(1),
        &get(&reference, "rope_sin").values,
        1e-6,
        0.0,
    );

    // embedding from the bf16 checkpoint table
    let ids = get(&reference, "input_ids_p0").ids_u32();
    let seq = ids.len() as u64;
    let emb = get(&model, "model.embed_tokens.weight");
    assert_eq!(emb.dtype, Dtype::BF16);
    let emb_buf = upload_bytes(g, "embed_tokens", &emb.bytes);
    let ids_buf = upload_bytes(g, "ids", bytemuck::cast_slice(&ids));
    let hidden = emb.shape_u64()[1];
    let x = nan_tensor(g, &[seq, hidden]);
    let normed = nan_tensor(g, &[seq, hidden]);
    let ln_w = f32_tensor(g, get(&model, "model.layers.0.input_layernorm.weight"));
    run(&c, |enc| {
        let table = EmbedTable {
            buffer: &emb_buf,
            offset: 0,
            vocab: emb.shape_u64()[0],
            hidden,
            dtype: TableDtype::Bf16,
        };
        let tokens = TokenIds {
            buffer: &ids_buf,
            offset: 0,
            count: seq,
        };
        record_embed(g, &c.cache, enc, &table, &tokens, &x)?;
        record_rms_norm(g, &c.cache, enc, &x, &ln_w, &normed, EPS)
    });
    assert_close(
        "hidden_embed_p0",
        &read(g, &x),
        &get(&reference, "hidden_embed_p0").values,
        0.0,
        0.0,
    );
    let ln_ref = get(&reference, "layer0.input_layernorm_p0").values.clone();
    assert_close(
        "layer0.input_layernorm_p0",
        &read(g, &normed),
        &ln_ref,
        1e-5,
        0.0,
    );

    // RoPE on the recorded projections
    let rope = RopeTable::new(g, THETA, HEAD_DIM, 64).expect("rope table");
    let q = f32_tensor(g, get(&reference, "layer0.q_proj_p0"));
    let k = f32_tensor(g, get(&reference, "layer0.k_proj_p0"));
    run(&c, |enc| {
        record_rope_qk(g, &c.cache, enc, &rope, &q, &k, N_HEADS, N_KV, 0)
    });
    assert_close(
        "layer0.q_rope_p0",
        &read(g, &q),
        &get(&reference, "layer0.q_rope_p0").values,
        1e-5,
        0.0,
    );
    assert_close(
        "layer0.k_rope_p0",
        &read(g, &k),
        &get(&reference, "layer0.k_rope_p0").values,
        1e-5,
        0.0,
    );

    // attention over a KV cache filled from the reference's rotated k and v
    let q_rope = f32_tensor(g, get(&reference, "layer0.q_rope_p0"));
    let k_rope = f32_tensor(g, get(&reference, "layer0.k_rope_p0"));
    let v = f32_tensor(g, get(&reference, "layer0.v_proj_p0"));
    let max_seq = 32;
    let cache_of = |label: &str| GpuTensor {
        buffer: Arc::new(upload_bytes(
            g,
            label,
            &vec![0u8; (max_seq * N_KV * HEAD_DIM * 4) as usize],
        )),
        offset: 0,
        shape: vec![max_seq, N_KV * HEAD_DIM],
        dtype: ActDtype::F32,
    };
    let (k_cache, v_cache) = (cache_of("k_cache"), cache_of("v_cache"));
    let out = nan_tensor(g, &q_rope.shape);
    let heads = Heads {
        n_heads: N_HEADS,
        n_kv_heads: N_KV,
        head_dim: HEAD_DIM,
    };
    run(&c, |enc| {
        record_kv_write(enc, &k_rope, &k_cache, 0)?;
        record_kv_write(enc, &v, &v_cache, 0)?;
        record_attention(
            g,
            &c.cache,
            enc,
            &q_rope,
            &k_cache,
            &v_cache,
            &out,
            heads,
            seq,
            0,
            None,
            &mut LinearScratch::new(),
        )
    });
    assert_close(
        "layer0.attn_out_p0",
        &read(g, &out),
        &get(&reference, "layer0.attn_out_p0").values,
        1e-5,
        0.0,
    );
}
