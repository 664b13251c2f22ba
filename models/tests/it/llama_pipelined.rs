//! Pipelined greedy decoding (step t+1 recorded while the GPU runs step t,
//! each token chosen on the GPU and read back a step late) against the
//! synchronous loop: the same tokens, stop and step counts on the tiny Llama
//! (untied, bf16; f32 and f16 activations) and a synthesised Qwen2 (tied
//! embeddings: the head gathers the next token's row), with and without an
//! end-of-sequence token mid-way, for 1 and 2 new tokens, and twice in a row
//! after a discarded step. A model that streams keeps the synchronous loop.

use crate::llama_common::open;
use dynvram_models::llama::synth;
use dynvram_models::llama::{Checkpoint, DecodeLoop, Generation, Limits, Llama};
use dynvram_models::synth::{SynthDtype, SynthOptions};
use dynvram_runtime::{ActDtype, Model, Runtime};
use dynvram_test_support::fixtures;
use dynvram_test_support::gpu::{have_gpu, quarter_budget, runtime};
use dynvram_test_support::safetensors::{self, get};

const NEW_TOKENS: usize = 16;

fn greedy(
    rt: &Runtime,
    model: &Model,
    llama: &mut Llama,
    prompt: &[u32],
    max_new: usize,
    eos: &[u32],
    decode_loop: DecodeLoop,
) -> Generation {
    let mut seen = Vec::new();
    let g = llama
        .generate_greedy(rt, model, prompt, max_new, eos, decode_loop, &mut |t| {
            seen.push(t)
        })
        .expect("generate_greedy");
    assert_eq!(seen, g.tokens, "on_token saw every token, in order");
    g
}

/// Both loops on one case: equal results; the pipelined one ran pipelined
/// where it can (`resident`, past the first token).
#[allow(clippy::too_many_arguments)] // the case
fn same(
    what: &str,
    rt: &Runtime,
    model: &Model,
    llama: &mut Llama,
    prompt: &[u32],
    max_new: usize,
    eos: &[u32],
    resident: bool,
) -> Vec<u32> {
    let sync = greedy(rt, model, llama, prompt, max_new, eos, DecodeLoop::Sync);
    let piped = greedy(
        rt,
        model,
        llama,
        prompt,
        max_new,
        eos,
        DecodeLoop::Pipelined,
    );
    assert!(!sync.pipelined, "{what}: the sync loop");
    let can = resident && !(sync.tokens.len() == 1 && (max_new == 1 || sync.stopped_at_eos));
    assert_eq!(piped.pipelined, can, "{what}: pipelined or not");
    assert_eq!(piped.tokens, sync.tokens, "{what}: tokens");
    assert_eq!(piped.stopped_at_eos, sync.stopped_at_eos, "{what}: stop");
    for (phase, a, b) in [
        ("prefill", &piped.prefill, &sync.prefill),
        ("decode", &piped.decode, &sync.decode),
    ] {
        assert_eq!(
            (a.tokens, a.passes, a.streamed_bytes),
            (b.tokens, b.passes, b.streamed_bytes),
            "{what}: {phase} counts"
        );
    }
    assert!(piped.prompt_logits.is_none() && piped.step_logits.is_empty());
    if piped.pipelined {
        assert!(piped.decode.seconds > 0.0 && piped.decode.record_seconds > 0.0);
    }
    eprintln!(
        "{what}: {:?} (eos {}), decode {} passes, pipelined {}: record {:.2} ms, submit {:.2} ms, wait {:.2} ms in {:.2} ms",
        piped.tokens,
        piped.stopped_at_eos,
        piped.decode.passes,
        piped.pipelined,
        piped.decode.record_seconds * 1e3,
        piped.decode.submit_seconds * 1e3,
        piped.decode.wait_seconds * 1e3,
        piped.decode.seconds * 1e3,
    );
    piped.tokens
}

/// The cases on one model and prompt (`full`: all, else 16 tokens and an
/// end of sequence mid-way); `resident` says what the budget left.
fn cases(
    what: &str,
    rt: &Runtime,
    model: &Model,
    llama: &mut Llama,
    prompt: &[u32],
    resident: bool,
    full: bool,
) {
    let all = same(
        &format!("{what}, {NEW_TOKENS} tokens"),
        rt,
        model,
        llama,
        prompt,
        NEW_TOKENS,
        &[],
        resident,
    );
    // The CPU's argmax over read-back logits chose the same tokens.
    let reference = llama
        .generate(rt, model, prompt, NEW_TOKENS, &[], false, &mut |_| {})
        .expect("generate");
    assert_eq!(all, reference.tokens, "{what}: generate's tokens");
    // The last token that first appears after the first one.
    let new_at = |k: usize| !all[..k].contains(&all[k]);
    let mid = (1..NEW_TOKENS - 1).rev().find(|&k| new_at(k));
    let mid = mid.expect("the tokens vary");
    let eos_mid = same(
        &format!("{what}, eos mid-way"),
        rt,
        model,
        llama,
        prompt,
        NEW_TOKENS,
        &[all[mid]],
        resident,
    );
    assert_eq!(eos_mid, all[..=mid], "{what}: eos mid-way");
    if !full {
        return;
    }
    for max_new in [1, 2] {
        let t = same(
            &format!("{what}, {max_new} new"),
            rt,
            model,
            llama,
            prompt,
            max_new,
            &[],
            resident,
        );
        assert_eq!(t, all[..max_new]);
    }
    // End of sequence on the last token allowed, on the first token; an id
    // never generated stops nothing.
    let last = (1..NEW_TOKENS).find(|&k| new_at(k)).unwrap_or(1);
    let absent = (0..).find(|id| !all.contains(id)).unwrap_or(0);
    for (name, max_new, eos) in [
        ("eos on the last token", last + 1, vec![all[last]]),
        ("eos first", NEW_TOKENS, vec![all[0]]),
        ("eos absent", NEW_TOKENS, vec![absent, absent]),
    ] {
        let t = same(
            &format!("{what}, {name}"),
            rt,
            model,
            llama,
            prompt,
            max_new,
            &eos,
            resident,
        );
        let stop = all.iter().position(|x| eos.contains(x));
        let want = match stop {
            Some(k) if k < max_new => &all[..=k],
            _ => &all[..max_new.min(all.len())],
        };
        assert_eq!(t, want, "{what}, {name}");
    }
    // Right after a discarded step is still in flight.
    greedy(
        rt,
        model,
        llama,
        prompt,
        NEW_TOKENS,
        &[all[mid]],
        DecodeLoop::Pipelined,
    );
    let again = greedy(
        rt,
        model,
        llama,
        prompt,
        NEW_TOKENS,
        &[],
        DecodeLoop::Pipelined,
    );
    assert_eq!(again.tokens, all, "{what}: after a discarded step");
}

fn tiny_llama(test: &str, dtype: ActDtype, quarter: bool) {
    let dir = fixtures::tiny_llama();
    let reference = safetensors::read(&dir.join("reference.safetensors"));
    let prompt = get(&reference, "input_ids_p1").ids_u32();
    let ckpt = Checkpoint::open(&dir).expect("tiny-llama opens");
    let limits = Limits {
        max_seq: prompt.len() + NEW_TOKENS,
        max_rows: prompt.len(),
    };
    let budget = quarter.then(|| quarter_budget(&ckpt.spec(limits)));
    let rt = runtime(budget);
    if dtype == ActDtype::F16 && !rt.gpu().caps.shader_f16 {
        eprintln!("{test}: no SHADER_F16, f16 skipped");
        return;
    }
    let (model, _) = open(&rt, &ckpt, limits);
    let mut llama = Llama::with_dtype(&rt, &ckpt, limits, dtype).expect("runner");
    let what = format!(
        "tiny llama {dtype:?}{}",
        if quarter { ", streamed" } else { "" }
    );
    let full = dtype == ActDtype::F32 && !quarter;
    cases(&what, &rt, &model, &mut llama, &prompt, !quarter, full);
}

#[test]
fn pipelined_greedy_equals_sync_on_tiny_llama_f32() {
    let test = "pipelined_greedy_equals_sync_on_tiny_llama_f32";
    if !have_gpu(test) {
        return;
    }
    tiny_llama(test, ActDtype::F32, false);
}

#[test]
fn pipelined_greedy_equals_sync_on_tiny_llama_f16() {
    let test = "pipelined_greedy_equals_sync_on_tiny_llama_f16";
    if !have_gpu(test) {
        return;
    }
    tiny_llama(test, ActDtype::F16, false);
}

#[test]
fn streaming_keeps_the_sync_loop() {
    let test = "streaming_keeps_the_sync_loop";
    if !have_gpu(test) {
        return;
    }
    tiny_llama(test, ActDtype::F32, true);
}

#[test]
fn pipelined_greedy_equals_sync_with_tied_embeddings() {
    let test = "pipelined_greedy_equals_sync_with_tied_embeddings";
    if !have_gpu(test) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = SynthOptions {
        dtype: SynthDtype::F16,
        seed: 7,
        layers: None,
        shard_bytes: u64::MAX,
    };
    let config = crate::llama_qwen2::config();
    synth::write_checkpoint(dir.path(), &config, opts, &mut |_, _| {}).expect("synth");
    let ckpt = Checkpoint::open(dir.path()).expect("opens");
    assert!(ckpt.config.tie_word_embeddings);
    let prompt = [5u32, 17, 90, 3, 44, 61, 8];
    let limits = Limits {
        max_seq: prompt.len() + NEW_TOKENS,
        max_rows: prompt.len(),
    };
    let rt = runtime(None);
    let (model, mut llama) = open(&rt, &ckpt, limits);
    cases("qwen2 (tied)", &rt, &model, &mut llama, &prompt, true, true);
}
