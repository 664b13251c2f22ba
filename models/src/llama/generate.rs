//! Decoding: one prefill pass over the prompt, then one pass per token with
//! the KV cache, as `model.generate()`; greedy (`do_sample=False`) unless
//! a chooser such as [`super::Sampler`] is given.

use std::time::Instant;

use dynvram_runtime::{Model, PassStats, Runtime};
use serde::Serialize;

use super::LlamaError;
use super::forward::{ForwardOptions, Llama, LogitRows};

/// Figures of one phase (prefill or decode).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseStats {
    /// Tokens processed (prompt tokens, or generated tokens fed back).
    pub tokens: usize,
    /// Passes run.
    pub passes: usize,
    /// Wall time including logits read-back.
    pub seconds: f64,
    /// Weight bytes streamed to the GPU.
    pub streamed_bytes: u64,
    /// CPU seconds recording the passes' kernels.
    pub record_seconds: f64,
    /// CPU seconds staging weights and submitting (wgpu encodes the
    /// recorded commands here).
    pub submit_seconds: f64,
    /// Seconds waiting for the GPU at the passes' ends.
    pub wait_seconds: f64,
}

impl PhaseStats {
    /// Tokens per second (0 when nothing ran).
    pub fn tokens_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.tokens as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Streamed bytes per pass (each pass is one token when decoding).
    pub fn bytes_per_pass(&self) -> u64 {
        self.streamed_bytes / self.passes.max(1) as u64
    }

    fn add(&mut self, tokens: usize, seconds: f64, pass: &PassStats) {
        self.tokens += tokens;
        self.passes += 1;
        self.seconds += seconds;
        self.streamed_bytes += pass.streamed_bytes;
        self.record_seconds += pass.record_seconds;
        self.submit_seconds += pass.submit_seconds;
        self.wait_seconds += pass.wait_seconds;
    }
}

/// The result of [`Llama::generate`].
#[derive(Debug, Clone, Default)]
pub struct Generation {
    /// Generated ids (without the prompt).
    pub tokens: Vec<u32>,
    /// Logits of every prompt position `[prompt, vocab]`, when asked for.
    pub prompt_logits: Option<Vec<f32>>,
    /// Logits each token was chosen from: step 0 is the prompt's last row,
    /// step i the pass that fed token i-1 ([`Llama::generate`] always keeps
    /// them; [`Llama::generate_with`] when asked: a 128 256-token vocabulary
    /// makes them 0.5 MB a token).
    pub step_logits: Vec<Vec<f32>>,
    /// The prompt pass.
    pub prefill: PhaseStats,
    /// The one-token passes.
    pub decode: PhaseStats,
    /// The last token is one of the end-of-sequence ids.
    pub stopped_at_eos: bool,
}

/// Index of the largest value; the first one on ties (as `torch.argmax`), NaN never wins.
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] || row[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

impl Llama {
    /// Greedy decoding of up to `max_new` tokens after `prompt` (positions
    /// from 0; the cache is overwritten). Stops early after a token in
    /// `eos`. `on_token` sees each token as soon as it is chosen.
    #[allow(clippy::too_many_arguments)] // the generation settings
    pub fn generate(
        &mut self,
        rt: &Runtime,
        model: &Model,
        prompt: &[u32],
        max_new: usize,
        eos: &[u32],
        keep_prompt_logits: bool,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<Generation, LlamaError> {
        self.decode(
            rt,
            model,
            prompt,
            max_new,
            eos,
            (keep_prompt_logits, true),
            &mut |row| argmax(row),
            on_token,
        )
    }

    /// [`Llama::generate`] with `pick` choosing each token from its row of
    /// logits (e.g. [`super::Sampler::pick`]); `keep_logits` keeps the
    /// prompt's and every step's logits (else neither: long generations
    /// with large vocabularies would hold them all).
    #[allow(clippy::too_many_arguments)] // the generation settings
    pub fn generate_with(
        &mut self,
        rt: &Runtime,
        model: &Model,
        prompt: &[u32],
        max_new: usize,
        eos: &[u32],
        keep_logits: bool,
        pick: &mut dyn FnMut(&[f32]) -> u32,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<Generation, LlamaError> {
        self.decode(
            rt,
            model,
            prompt,
            max_new,
            eos,
            (keep_logits, keep_logits),
            pick,
            on_token,
        )
    }

    /// The decoding loop; `keep` is (prompt logits, step logits).
    #[allow(clippy::too_many_arguments)] // the generation settings
    fn decode(
        &mut self,
        rt: &Runtime,
        model: &Model,
        prompt: &[u32],
        max_new: usize,
        eos: &[u32],
        keep: (bool, bool),
        pick: &mut dyn FnMut(&[f32]) -> u32,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<Generation, LlamaError> {
        let (keep_prompt_logits, keep_steps) = keep;
        let _span = tracing::info_span!("generate", prompt = prompt.len(), max_new).entered();
        let mut g = Generation::default();
        if max_new == 0 {
            return Ok(g);
        }
        let vocab = self.config().vocab_size;
        let start = Instant::now();
        let rows = if keep_prompt_logits {
            LogitRows::All
        } else {
            LogitRows::Last
        };
        let f = self.forward_with(
            rt,
            model,
            prompt,
            0,
            ForwardOptions {
                logits: Some(rows),
                ..ForwardOptions::default()
            },
        )?;
        g.prefill
            .add(prompt.len(), start.elapsed().as_secs_f64(), &f.stats);
        let last = f.logits[(f.rows - 1) * vocab..].to_vec();
        if keep_prompt_logits {
            g.prompt_logits = Some(f.logits);
        }
        let mut pos = prompt.len();
        let mut logits = last;
        loop {
            let token = pick(&logits);
            if keep_steps {
                g.step_logits.push(logits);
            }
            g.tokens.push(token);
            on_token(token);
            if eos.contains(&token) {
                g.stopped_at_eos = true;
                break;
            }
            if g.tokens.len() == max_new {
                break;
            }
            let start = Instant::now();
            let f = self.forward_with(
                rt,
                model,
                &[token],
                pos,
                ForwardOptions {
                    logits: Some(LogitRows::Last),
                    ..ForwardOptions::default()
                },
            )?;
            g.decode.add(1, start.elapsed().as_secs_f64(), &f.stats);
            logits = f.logits;
            pos += 1;
        }
        Ok(g)
    }
}
