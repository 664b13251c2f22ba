//! Embedding gather from f32, f16 and bf16 tables (odd sizes, so 16-bit
//! rows straddle 32-bit words), with an out-of-range id giving a zero row.

use crate::ops_common::{Ctx, ctx, nan_tensor, read, run, stored_as, upload_bytes};
use dynvram_gpu::device::GpuOptions;
use dynvram_gpu::ops::cache::PipelineCache;
use dynvram_gpu::ops::embed::{EmbedTable, TableDtype, TokenIds, record_embed};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::{AdapterChoice, GpuError};
use dynvram_test_support::gpu::{any_adapter, test_gpu_with};
use dynvram_test_support::random::nonzero;
use half::{bf16, f16};

#[test]
fn embed_gathers_every_dtype() {
    let Some(c) = ctx("embed_gathers_every_dtype") else {
        return;
    };
    let g = &c.gpu;
    let (vocab, hidden) = (37usize, 45usize);
    let values = nonzero(5, vocab * hidden, 4.0);
    let ids: Vec<u32> = vec![
        3, 0, 36, 3, 17, 1, 40, 22, 9, 11, 2, 35, 7, 8, 30, 31, 5, 6, 19,
    ];
    let ids_buf = upload_bytes(g, "ids", bytemuck::cast_slice(&ids));
    for dtype in [TableDtype::F32, TableDtype::F16, TableDtype::Bf16] {
        let (stored, bytes) = stored_as(&values, dtype);
        let table_buf = upload_bytes(g, "table", &bytes);
        let table = EmbedTable {
            buffer: &table_buf,
            offset: 0,
            vocab: vocab as u64,
            hidden: hidden as u64,
            dtype,
        };
        let tokens = TokenIds {
            buffer: &ids_buf,
            offset: 0,
            count: ids.len() as u64,
        };
        let out = nan_tensor(g, &[ids.len() as u64, hidden as u64]);
        run(&c, |enc| {
            record_embed(g, &c.cache, enc, &table, &tokens, &out)
        });
        let got = read(g, &out);
        for (t, &id) in ids.iter().enumerate() {
            let row = &got[t * hidden..][..hidden];
            if (id as usize) < vocab {
                assert_eq!(
                    row,
                    &stored[id as usize * hidden..][..hidden],
                    "{dtype:?} token {t} id {id}"
                );
            } else {
                assert!(
                    row.iter().all(|&v| v == 0.0),
                    "{dtype:?}: id {id} >= vocab should give zeros"
                );
            }
        }
    }
}

/// Both f16 decoders (`f16_words.wgsl`'s integer one and, where the adapter
/// grants it, `unpack2x16float`) give every class of f16 exactly.
#[test]
fn f16_subnormals_and_specials_decode_exactly() {
    let test = "f16_subnormals_and_specials_decode_exactly";
    let mut decoders = 0;
    for f16_unpack in [false, true] {
        let choice = AdapterChoice {
            options: GpuOptions {
                f16_unpack,
                ..GpuOptions::default()
            },
            ..AdapterChoice::default()
        };
        let Some(gpu) = test_gpu_with(test, &choice, any_adapter) else {
            return;
        };
        if f16_unpack && !gpu.f16_unpack() {
            eprintln!("{test}: unpack2x16float skipped: the adapter lacks SHADER_F16_IN_F32");
            continue;
        }
        let c = Ctx {
            gpu,
            cache: PipelineCache::default(),
        };
        decode_f16_specials(&c);
        decoders += 1;
    }
    assert!(decoders >= 1);
}

fn decode_f16_specials(c: &Ctx) {
    let g = &c.gpu;
    let bits: Vec<u16> = vec![
        0x0000, 0x8000, 0x0001, 0x83ff, 0x03ff, 0x0400, 0x3c00, 0xc000, 0x7bff, 0xfbff, 0xfc00,
        0x7c00, 0x3555, 0x0200, 0x8001,
    ];
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let table_buf = upload_bytes(g, "table", &bytes);
    let ids_buf = upload_bytes(g, "ids", bytemuck::cast_slice(&[0u32]));
    let table = EmbedTable {
        buffer: &table_buf,
        offset: 0,
        vocab: 1,
        hidden: bits.len() as u64,
        dtype: TableDtype::F16,
    };
    let tokens = TokenIds {
        buffer: &ids_buf,
        offset: 0,
        count: 1,
    };
    let out = nan_tensor(g, &[1, bits.len() as u64]);
    run(c, |enc| {
        record_embed(g, &c.cache, enc, &table, &tokens, &out)
    });
    let want: Vec<f32> = bits.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
    let got = read(g, &out);
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "unpack {}: got {got:?} want {want:?}",
        g.f16_unpack()
    );
}

#[test]
fn embed_rejects_a_table_past_its_buffer() {
    let Some(c) = ctx("embed_rejects_a_table_past_its_buffer") else {
        return;
    };
    let g = &c.gpu;
    let table_buf = upload_bytes(g, "table", &[0u8; 64]);
    let ids_buf = upload_bytes(g, "ids", &[0u8; 4]);
    let table = EmbedTable {
        buffer: &table_buf,
        offset: 0,
        vocab: 10,
        hidden: 4,
        dtype: TableDtype::Bf16,
    };
    let tokens = TokenIds {
        buffer: &ids_buf,
        offset: 0,
        count: 1,
    };
    let out = nan_tensor(g, &[1, 4]);
    let mut enc = Encoder::new(&g.device, "test");
    let err = record_embed(g, &c.cache, &mut enc, &table, &tokens, &out)
        .expect_err("80 bytes in a 64-byte buffer");
    assert!(
        matches!(
            err,
            GpuError::OutsideBuffer {
                op: "embed",
                buffer_size: 64,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn embed_gathers_from_a_table_larger_than_one_binding() {
    let name = "embed_gathers_from_a_table_larger_than_one_binding";
    let Some(c) = ctx(name) else {
        return;
    };
    let g = &c.gpu;
    let limit = g.device.limits().max_storage_buffer_binding_size;
    if limit > 512 << 20 {
        eprintln!("{name}: skipped: one binding holds {limit} bytes, too many to exceed cheaply");
        return;
    }
    // bf16 rows of 2000 bytes: not a multiple of the offset alignment, so
    // chunks must start at whole multiples of it.
    let hidden = 1000usize;
    let vocab = (limit / 2000) as usize + 777;
    let value = |row: usize, col: usize| -> f32 {
        match col {
            0 => (row % 256) as f32,
            1 => (row / 256 % 256) as f32,
            _ => ((row * 7 + col) % 251) as f32 - 125.0,
        }
    };
    let mut bytes = Vec::with_capacity(vocab * hidden * 2);
    for row in 0..vocab {
        for col in 0..hidden {
            bytes.extend_from_slice(&bf16::from_f32(value(row, col)).to_le_bytes());
        }
    }
    let table_buf = upload_bytes(g, "big table", &bytes);
    drop(bytes);
    let half = vocab / 2;
    let ids: Vec<u32> = [
        0,
        1,
        half,
        half + 1,
        vocab - 778,
        vocab - 777,
        vocab - 1,
        vocab,
        vocab + 5,
    ]
    .iter()
    .map(|&i| i as u32)
    .chain([u32::MAX])
    .collect();
    let ids_buf = upload_bytes(g, "ids", bytemuck::cast_slice(&ids));
    let table = EmbedTable {
        buffer: &table_buf,
        offset: 0,
        vocab: vocab as u64,
        hidden: hidden as u64,
        dtype: TableDtype::Bf16,
    };
    let tokens = TokenIds {
        buffer: &ids_buf,
        offset: 0,
        count: ids.len() as u64,
    };
    let out = nan_tensor(g, &[ids.len() as u64, hidden as u64]);
    run(&c, |enc| {
        record_embed(g, &c.cache, enc, &table, &tokens, &out)
    });
    let got = read(g, &out);
    for (t, &id) in ids.iter().enumerate() {
        let row = &got[t * hidden..][..hidden];
        let id = id as usize;
        let want: Vec<f32> = (0..hidden)
            .map(|col| if id < vocab { value(id, col) } else { 0.0 })
            .collect();
        assert_eq!(row, &want[..], "token {t} id {id} of {vocab} rows");
    }
}
