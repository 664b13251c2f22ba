//! The weight conversions the SPIR-V GEMMs take a piece at a time
//! (`record/convert.rs`), run on any adapter against the CPU: int4 nibbles
//! widened to int8 (`int4_to_int8.wgsl`). On NVIDIA the integer SPIR-V test
//! checks the whole path bit for bit with ComfyUI's epilogue; this one runs
//! where the cooperative-matrix-2 GEMMs cannot (CI's lavapipe).

use dynvram_gpu::Gpu;
use dynvram_test_support::gpu::{any_adapter, dispatch_once, test_gpu};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The shader's `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    words: u32,
    src_word0: u32,
    _pad: [u32; 2],
}

/// Words of int8 the CPU makes of int4 words: nibble `e` of word `j` (the
/// low one first) is column `8j + e`, sign-extended, four to a word.
fn widened(src: &[u32]) -> Vec<u32> {
    src.iter()
        .flat_map(|&w| {
            let byte = |e: u32| {
                let t = ((w >> (4 * e)) & 0xF) as i32;
                (((t ^ 8) - 8) as i8 as u8) as u32
            };
            [0u32, 4].map(|first| (0..4).fold(0, |r, e| r | byte(first + e) << (8 * e)))
        })
        .collect()
}

/// Runs `int4_to_int8.wgsl` over `words` words of `src` from `word0` with
/// `groups` workgroups, returning the widened words.
fn run(gpu: &Gpu, src: &[u32], word0: u32, words: u32, groups: u32) -> Vec<u32> {
    let pipeline = gpu
        .create_compute_pipeline(
            "int4_to_int8",
            dynvram_shaders::linear::INT4_TO_INT8,
            "main",
            &[],
        )
        .expect("pipeline");
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let src_buf = gpu
        .create_buffer("src", (src.len() * 4) as u64, usage)
        .expect("src");
    let dst = gpu
        .create_buffer("dst", u64::from(words) * 8, usage)
        .expect("dst");
    gpu.queue
        .write_buffer(&src_buf, 0, bytemuck::cast_slice(src));
    let params = Params {
        words,
        src_word0: word0,
        _pad: [0; 2],
    };
    dispatch_once(
        gpu,
        &pipeline,
        &[&src_buf, &dst],
        bytemuck::bytes_of(&params),
        groups,
    );
    let back = gpu
        .read_f32(&dst, 0, u64::from(words) * 2)
        .expect("read back");
    gpu.check_health().expect("healthy");
    back.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn int4_weights_widen_to_the_int8_the_cpu_makes() {
    let test = "int4_weights_widen_to_the_int8_the_cpu_makes";
    let Some(gpu) = test_gpu(test, any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(48);
    // Every nibble value in the first words, then random ones.
    let mut src: Vec<u32> = (0..2u32)
        .map(|h| (0..8).fold(0, |w, e| w | (e + 8 * h) << (4 * e)))
        .collect();
    src.extend((0..3000).map(|_| rng.random::<u32>()));
    // The whole buffer; a piece from a word inside it; fewer workgroups
    // than words (the grid-stride loop).
    for (word0, words, groups) in [(0u32, 3002u32, 12u32), (1000, 1501, 6), (7, 2000, 1)] {
        let got = run(&gpu, &src, word0, words, groups);
        let at = word0 as usize;
        let want = widened(&src[at..at + words as usize]);
        assert_eq!(
            got, want,
            "from word {word0}, {words} words, {groups} workgroups"
        );
    }
    // Nibbles 1..7 stay, 8 is -8.
    assert_eq!(widened(&[0x8765_4321]), [0x0403_0201, 0xF807_0605]);
}

/// The f16 bits of bf16 bits `b` as the CPU rounds them (f32, exact, then
/// to nearest-even f16).
fn f16_of_bf16(b: u16) -> u16 {
    half::f16::from_f32(half::bf16::from_bits(b).to_f32()).to_bits()
}

/// A resident bf16 weight rewritten as f16 in place
/// (`record_bf16_to_f16_in_place`, `bf16_to_f16_in_place.wgsl`): every
/// value in f16's range exactly as the CPU converts it — f16's normal range
/// (exact), its subnormals (rounded to nearest-even, halfway cases both
/// ways), signed zeros, bf16 subnormals (to zero), values just inside the
/// top of the range — over more words than one workgroup's loop, and the
/// buffer's bytes past the converted length untouched; a length that is
/// not whole pairs is refused.
#[test]
fn resident_bf16_weights_become_the_f16_the_cpu_makes() {
    use dynvram_gpu::ops::cache::PipelineCache;
    use dynvram_gpu::ops::encoder::Encoder;
    use dynvram_gpu::ops::linear::record_bf16_to_f16_in_place;
    let test = "resident_bf16_weights_become_the_f16_the_cpu_makes";
    let Some(gpu) = test_gpu(test, any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(49);
    // Every exponent from bf16 subnormals to 65280 (0x477F) with a few
    // mantissas each, both signs, then random in-range values.
    let mut values: Vec<u16> = Vec::new();
    for e in 0u16..=142 {
        for m in [0u16, 1, 0x3F, 0x40, 0x41, 0x7F] {
            values.extend([e << 7 | m, 0x8000 | e << 7 | m]);
        }
    }
    values.extend((0..5000).map(|_| {
        let v: u16 = rng.random();
        if v & 0x7FFF >= 0x4780 { v & 0x803F } else { v }
    }));
    if values.len() % 2 == 1 {
        values.push(0x3F80);
    }
    let bytes = (values.len() * 2) as u64;
    // A tail past the converted bytes, which must stay as it was.
    let tail = [0xDEAD_BEEFu32; 4];
    let mut init: Vec<u8> = bytemuck::cast_slice(&values).to_vec();
    init.extend_from_slice(bytemuck::cast_slice(&tail));
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let buf = gpu
        .create_buffer("w", init.len() as u64, usage)
        .expect("buffer");
    gpu.queue.write_buffer(&buf, 0, &init);
    let cache = PipelineCache::default();
    let mut enc = Encoder::new(&gpu.device, test);
    record_bf16_to_f16_in_place(&gpu, &cache, &mut enc, &buf, bytes).expect("record");
    gpu.queue.submit([enc.finish()]);
    let back = gpu
        .read_f32(&buf, 0, init.len() as u64 / 4)
        .expect("read back");
    gpu.check_health().expect("healthy");
    let words: Vec<u32> = back.iter().map(|v| v.to_bits()).collect();
    let got: &[u16] = bytemuck::cast_slice(&words[..values.len() / 2]);
    for (i, (&b, &g)) in values.iter().zip(got).enumerate() {
        assert_eq!(g, f16_of_bf16(b), "value {i}: bf16 {b:#06x}");
    }
    assert_eq!(&words[values.len() / 2..], &tail, "bytes past the length");
    let mut enc = Encoder::new(&gpu.device, test);
    let err = record_bf16_to_f16_in_place(&gpu, &cache, &mut enc, &buf, 6);
    assert!(err.is_err(), "6 bytes: not whole pairs");
}
