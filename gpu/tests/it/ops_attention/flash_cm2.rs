//! The SPIR-V flash kernels on NVIDIA's cooperative matrices 2
//! (`shaders/spirv/flash_cm2.glsl`) against the f64 reference, every block
//! shape built: row and key counts off the blocks (partial last query and
//! key blocks), causal and not, GQA, batch 2, keys whose scores grow along
//! the sequence (the running maximum moves: the outputs' rescale), and the
//! cache form (a chunk at pos0 over a longer cache, NaN past kv_len). wgpu
//! does not validate raw SPIR-V: these tests are its only check, and run
//! where the device enabled the extension (`DYNVRAM_REQUIRE_SPIRV=1` makes
//! its absence a failure).

use super::Batch;
use super::flash::{CacheCase, check_close, flash_case, flash_run};
use crate::ops_common::Ctx;
use dynvram_gpu::ActDtype;
use dynvram_gpu::device::{AdapterChoice, SpirvGemm};
use dynvram_gpu::ops::attention::{
    FlashKernel, Heads, Mask, flash_kernel_unusable, preferred_cm2_flash,
};
use dynvram_gpu::ops::cache::PipelineCache;
use dynvram_shaders::spirv::CM2_FLASH;
use dynvram_test_support::gpu::{needs_f16, test_gpu_with};
use dynvram_test_support::skip::spirv_skipped;

#[test]
fn spirv_flash_matches_the_reference() {
    let test = "spirv_flash_matches_the_reference";
    let mut choice = AdapterChoice::default();
    choice.options.spirv_gemm = SpirvGemm::Auto;
    let Some(gpu) = test_gpu_with(test, &choice, needs_f16) else {
        return;
    };
    let c = Ctx {
        gpu,
        cache: PipelineCache::default(),
    };
    // The probes are not attention.
    let kernels: Vec<FlashKernel> = CM2_FLASH
        .iter()
        .filter(|f| f.probe == 0)
        .map(|f| FlashKernel::Cm2(f.block()))
        .collect();
    let runs: Vec<FlashKernel> = kernels
        .iter()
        .copied()
        .filter(|k| match flash_kernel_unusable(&c.gpu, k, 128) {
            None => true,
            Some(why) => {
                eprintln!("{test}: {k}: skipped: {why}");
                false
            }
        })
        .collect();
    // The first that runs is the one to prefer (on small grids).
    assert_eq!(
        preferred_cm2_flash(c.gpu.cm2(), ActDtype::F16, 128, None),
        runs.first().copied()
    );
    if runs.is_empty() {
        spirv_skipped(&format!(
            "{test}: skipped: no SPIR-V flash kernel runs here"
        ));
        return;
    }
    let heads = |n_heads, n_kv_heads| Heads {
        n_heads,
        n_kv_heads,
        head_dim: 128,
    };
    // (heads, batch, sq, skv, mask, key ramp)
    let cases = [
        (heads(3, 3), 1, 128, 128, Mask::None, false),
        (heads(2, 1), 2, 77, 77, Mask::None, true),
        (heads(4, 2), 1, 200, 200, Mask::Causal, false),
        (heads(2, 2), 2, 21, 150, Mask::Causal, true),
        (heads(2, 2), 1, 300, 45, Mask::None, false),
        (heads(1, 1), 1, 33, 1000, Mask::None, true),
    ];
    let mut failed = Vec::new();
    for (i, &(h, batch, sq, skv, mask, ramp)) in cases.iter().enumerate() {
        let b = Batch::plain(batch, sq, skv, mask);
        let (q, k, v, want) = flash_case(&c, h, b, 900 + 3 * i as u64, ramp);
        for t in &runs {
            let got = flash_run(&c, (&q, &k, &v), h, b, t);
            check_close(
                &mut failed,
                &format!("{t} {h:?} {b:?} ramp {ramp}"),
                &got,
                &want,
            );
        }
    }
    // The cache form: sq rows at pos0 over kv_len keys of max_seq rows.
    let case = CacheCase::new(&c, heads(4, 1), (220, 200, 40, 160));
    for t in &runs {
        let got = case.run(&c, t);
        check_close(
            &mut failed,
            &format!("{t} cache pos0 160"),
            &got,
            &case.want,
        );
    }
    for t in &runs {
        eprintln!("{test}: {t}: {} cases", cases.len() + 1);
    }
    assert!(
        failed.is_empty(),
        "{} cases failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
