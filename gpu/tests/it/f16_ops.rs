//! Every transformer op with f16 activations against the same op in f32 on
//! the same (f16-rounded) inputs: elementwise (GELU, SiLU, scale, add,
//! SwiGLU, mul; in and out of place), RMSNorm, LayerNorm, RoPE, KV write +
//! attention (f16 caches) and the embedding gather, on odd sizes.
//!
//! Tolerance rule: the kernels compute in f32 either way and the f16 run
//! rounds its result once, so `|y16 − y32| ≤ 2⁻¹¹·|y32| + 2⁻²⁴` (half an f16
//! ulp, relative for normal values, the subnormal spacing below) plus
//! `F32_SLACK·|y32|` for code-generation differences between the two
//! pipelines (fused multiply-adds, reordered sums). Where an f16 result
//! feeds another op (attention reads f16 caches that are exact copies) the
//! inputs are identical, so the same rule holds.
//!
//! On an adapter without `SHADER_F16` the tests print
//! `skipped …: adapter lacks SHADER_F16`, and one test checks the typed error.

use std::sync::Arc;

use crate::ops_common::{Ctx, ctx_with, read, run, up, zeros};
use dynvram_test_support::gpu::{lacks_f16, needs_f16, test_gpu};
use dynvram_test_support::random::uniform_seeded;

use dynvram_gpu::ops::attention::{Heads, record_attention, record_kv_write};
use dynvram_gpu::ops::cache::PipelineCache;
use dynvram_gpu::ops::elementwise::{
    Binary, Unary, record_binary, record_binary_inplace, record_unary, record_unary_inplace,
};
use dynvram_gpu::ops::embed::{EmbedTable, TableDtype, TokenIds, record_embed};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host::{self, round_to};
use dynvram_gpu::ops::linear::LinearScratch;
use dynvram_gpu::ops::norm::{record_layer_norm, record_rms_norm};
use dynvram_gpu::ops::rope::{RopeTable, record_rope};
use dynvram_gpu::{ActDtype, GpuError, GpuTensor};

const F32_SLACK: f32 = 2e-6;

/// The test GPU, if it has `SHADER_F16`.
fn ctx(test: &str) -> Option<Ctx> {
    ctx_with(test, needs_f16)
}

fn f16_rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| round_to(x, ActDtype::F16)).collect()
}

/// The tolerance rule of the module doc.
fn assert_f16_close(what: &str, y16: &[f32], y32: &[f32]) {
    assert_eq!(y16.len(), y32.len(), "{what}: lengths");
    let mut worst = 0.0f32;
    for (i, (&a, &b)) in y16.iter().zip(y32).enumerate() {
        let tol = (2f32.powi(-11) + F32_SLACK) * b.abs() + 2f32.powi(-24);
        let d = (a - b).abs();
        assert!(
            d <= tol,
            "{what}: element {i}: f16 {a} vs f32 {b} (|diff| {d:e} > {tol:e})"
        );
        worst = worst.max(d / b.abs().max(1e-6));
    }
    eprintln!(
        "{what}: worst relative diff {worst:.2e} over {} values",
        y16.len()
    );
}

/// Runs `f` on f16-rounded `inputs` once per dtype; compares the outputs.
fn compare(
    c: &Ctx,
    what: &str,
    inputs: &[(&[f32], &[u64])],
    out_shape: &[u64],
    f: impl Fn(&mut Encoder, &[GpuTensor], &GpuTensor) -> Result<(), GpuError>,
) {
    let mut results = Vec::new();
    for dtype in [ActDtype::F32, ActDtype::F16] {
        let ins: Vec<GpuTensor> = inputs
            .iter()
            .map(|(d, s)| up(c, &f16_rounded(d), s, dtype))
            .collect();
        let out = zeros(c, out_shape, dtype);
        run(c, |enc| f(enc, &ins, &out));
        results.push(read(&c.gpu, &out));
    }
    assert_f16_close(what, &results[1], &results[0]);
}

#[test]
fn elementwise_ops_in_f16_match_f32() {
    let Some(c) = ctx("elementwise_ops_in_f16_match_f32") else {
        return;
    };
    let (g, k) = (&c.gpu, &c.cache);
    // 1001 elements: an odd f16 count (the binding ends on a half word).
    let shape = [7u64, 143];
    let n = 1001;
    let a = uniform_seeded(1, n, 6.0);
    let b = uniform_seeded(2, n, 3.0);
    for op in [
        Unary::GeluTanh,
        Unary::Silu,
        Unary::Scale(0.37),
        Unary::QuickGelu,
    ] {
        compare(
            &c,
            &format!("{op:?}"),
            &[(&a, &shape)],
            &shape,
            |e, i, o| record_unary(g, k, e, op, &i[0], o),
        );
        compare(
            &c,
            &format!("{op:?} in place"),
            &[(&a, &shape)],
            &shape,
            |e, i, o| {
                e.commands()
                    .copy_buffer_to_buffer(&i[0].buffer, 0, &o.buffer, 0, o.buffer.size());
                record_unary_inplace(g, k, e, op, o)
            },
        );
    }
    for op in [Binary::Add, Binary::SwiGlu, Binary::Mul, Binary::GeGlu] {
        compare(
            &c,
            &format!("{op:?}"),
            &[(&a, &shape), (&b, &shape)],
            &shape,
            |e, i, o| record_binary(g, k, e, op, &i[0], &i[1], o),
        );
        compare(
            &c,
            &format!("{op:?} in place"),
            &[(&a, &shape), (&b, &shape)],
            &shape,
            |e, i, o| {
                e.commands()
                    .copy_buffer_to_buffer(&i[0].buffer, 0, &o.buffer, 0, o.buffer.size());
                record_binary_inplace(g, k, e, op, o, &i[1])
            },
        );
    }
}

#[test]
fn norms_in_f16_match_f32() {
    let Some(c) = ctx("norms_in_f16_match_f32") else {
        return;
    };
    let (g, k) = (&c.gpu, &c.cache);
    for (rows, cols) in [(1u64, 256u64), (5, 771)] {
        let n = (rows * cols) as usize;
        let x = uniform_seeded(3, n, 4.0);
        let shape = [rows, cols];
        // Norm weights and biases stay f32 whatever the activations are.
        let w = host::upload(
            g,
            "w",
            &uniform_seeded(4, cols as usize, 1.5),
            vec![cols],
            ActDtype::F32,
        )
        .expect("w");
        let b = host::upload(
            g,
            "b",
            &uniform_seeded(5, cols as usize, 0.5),
            vec![cols],
            ActDtype::F32,
        )
        .expect("b");
        compare(
            &c,
            &format!("rms_norm {shape:?}"),
            &[(&x, &shape)],
            &shape,
            |e, i, o| record_rms_norm(g, k, e, &i[0], &w, o, 1e-5),
        );
        compare(
            &c,
            &format!("layer_norm {shape:?}"),
            &[(&x, &shape)],
            &shape,
            |e, i, o| record_layer_norm(g, k, e, &i[0], &w, Some(&b), o, 1e-5),
        );
    }
}

#[test]
fn rope_in_f16_matches_f32() {
    let Some(c) = ctx("rope_in_f16_matches_f32") else {
        return;
    };
    let (g, k) = (&c.gpu, &c.cache);
    let table = RopeTable::new(g, 10000.0, 64, 300).expect("table");
    let (seq, heads) = (9u64, 3u64);
    let shape = [seq, heads * 64];
    let x = uniform_seeded(6, (seq * heads * 64) as usize, 3.0);
    compare(&c, "rope", &[(&x, &shape)], &shape, |e, i, o| {
        e.commands()
            .copy_buffer_to_buffer(&i[0].buffer, 0, &o.buffer, 0, o.buffer.size());
        record_rope(g, k, e, &table, o, heads, 250)
    });
}

#[test]
fn attention_with_f16_caches_matches_f32() {
    let Some(c) = ctx("attention_with_f16_caches_matches_f32") else {
        return;
    };
    let (g, k) = (&c.gpu, &c.cache);
    let heads = Heads {
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 32,
    };
    let (max_seq, kv_len, sq, pos0) = (140u64, 131u64, 5u64, 126u64);
    let width = 2 * 32;
    let q = uniform_seeded(7, (sq * 8 * 32) as usize, 1.5);
    let kk = uniform_seeded(8, (kv_len * width) as usize, 1.5);
    let v = uniform_seeded(9, (kv_len * width) as usize, 2.0);
    let (qs, ks) = ([sq, 8 * 32], [kv_len, width]);
    compare(
        &c,
        "attention",
        &[(&q, &qs), (&kk, &ks), (&v, &ks)],
        &qs,
        |e, i, o| {
            let dtype = i[0].dtype;
            let k_cache = zeros(&c, &[max_seq, width], dtype);
            let v_cache = zeros(&c, &[max_seq, width], dtype);
            record_kv_write(e, &i[1], &k_cache, 0)?;
            record_kv_write(e, &i[2], &v_cache, 0)?;
            record_attention(
                g,
                k,
                e,
                &i[0],
                &k_cache,
                &v_cache,
                o,
                heads,
                kv_len,
                pos0,
                None,
                &mut LinearScratch::new(),
            )
        },
    );
}

#[test]
fn embed_into_f16_rounds_the_table_values() {
    let Some(c) = ctx("embed_into_f16_rounds_the_table_values") else {
        return;
    };
    let (g, k) = (&c.gpu, &c.cache);
    let (vocab, hidden) = (50u64, 33u64);
    let values = uniform_seeded(10, (vocab * hidden) as usize, 2.0);
    let table =
        host::upload(g, "table", &values, vec![vocab, hidden], ActDtype::F32).expect("table");
    let ids: Vec<u32> = vec![3, 49, 0, 17, 3];
    let ids_buf = host::upload(
        g,
        "ids",
        &ids.iter().map(|&i| f32::from_bits(i)).collect::<Vec<_>>(),
        vec![ids.len() as u64],
        ActDtype::F32,
    )
    .expect("ids");
    let out = zeros(&c, &[ids.len() as u64, hidden], ActDtype::F16);
    run(&c, |e| {
        record_embed(
            g,
            k,
            e,
            &EmbedTable {
                buffer: &table.buffer,
                offset: 0,
                vocab,
                hidden,
                dtype: TableDtype::F32,
            },
            &TokenIds {
                buffer: &ids_buf.buffer,
                offset: 0,
                count: ids.len() as u64,
            },
            &out,
        )
    });
    let got = read(&c.gpu, &out);
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| {
            values[(i as u64 * hidden) as usize..][..hidden as usize]
                .iter()
                .map(|&v| round_to(v, ActDtype::F16))
        })
        .collect();
    assert_eq!(
        got, want,
        "embed f16 = the f32 table rounded to nearest even"
    );
}

#[test]
fn mixed_dtypes_are_rejected() {
    let Some(c) = ctx("mixed_dtypes_are_rejected") else {
        return;
    };
    let (g, k) = (&c.gpu, &c.cache);
    let a = zeros(&c, &[4, 8], ActDtype::F16);
    let b = zeros(&c, &[4, 8], ActDtype::F32);
    let out = zeros(&c, &[4, 8], ActDtype::F16);
    let mut enc = Encoder::new(&g.device, "test");
    let e = record_binary(g, k, &mut enc, Binary::Add, &a, &b, &out).expect_err("mixed");
    assert!(
        matches!(
            &e,
            GpuError::DtypeMismatch {
                dtype: ActDtype::F32,
                expected: ActDtype::F16,
                ..
            }
        ),
        "{e}"
    );
    let w16 = zeros(&c, &[8], ActDtype::F16);
    let e = record_rms_norm(g, k, &mut enc, &a, &w16, &out, 1e-5).expect_err("f16 weight");
    assert!(
        matches!(&e, GpuError::DtypeMismatch { name, .. } if name == "weight"),
        "{e}"
    );
}

/// On an adapter without `SHADER_F16`, asking for f16 activations is
/// [`GpuError::NoShaderF16`], both when allocating and when recording.
#[test]
fn f16_without_shader_f16_is_a_typed_error() {
    let Some(gpu) = test_gpu("f16_without_shader_f16_is_a_typed_error", lacks_f16) else {
        return;
    };
    let e = host::upload(&gpu, "x", &[1.0; 8], vec![8], ActDtype::F16).expect_err("no f16");
    assert!(matches!(e, GpuError::NoShaderF16 { .. }), "{e}");
    eprintln!("{e}");
    // A hand-made f16 view over raw bytes still cannot be recorded.
    let buffer = gpu
        .create_buffer(
            "raw",
            64,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        )
        .expect("buffer");
    let t = GpuTensor {
        buffer: Arc::new(buffer),
        offset: 0,
        shape: vec![32],
        dtype: ActDtype::F16,
    };
    let cache = PipelineCache::default();
    let mut enc = Encoder::new(&gpu.device, "test");
    let e = record_unary_inplace(&gpu, &cache, &mut enc, Unary::Silu, &t).expect_err("no f16");
    assert!(matches!(e, GpuError::NoShaderF16 { .. }), "{e}");
}
