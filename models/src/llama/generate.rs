//! Decoding: one prefill pass over the prompt, then one pass per token with
//! the KV cache, as `model.generate()`; greedy (`do_sample=False`) unless
//! a chooser such as [`super::Sampler`] is given.
//!
//! Two decode loops. The synchronous one waits for each step's logits,
//! reads them back and chooses the next token on the CPU. The pipelined one
//! ([`Llama::generate_greedy`], greedy with every weight resident) chooses
//! it on the GPU ([`argmax`] as a kernel) where the next step's embedding
//! reads it, so step t+1 is recorded and submitted before step t's token
//! comes back through a small read-back: the CPU's recording overlaps the
//! GPU's work. An end-of-sequence token is then seen one step late; that
//! step is discarded (its KV row lies past the tokens returned).

use std::time::Instant;

use dynvram_runtime::device::ReadbackRing;
use dynvram_runtime::{Model, PassStats, Runtime, RuntimeError};
use serde::Serialize;

use super::LlamaError;
use super::forward::{ForwardOptions, Greedy, Ids, Llama, LogitRows};

pub use dynvram_runtime::ops::argmax::argmax;

/// Which loop greedy decoding runs ([`Llama::generate_greedy`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DecodeLoop {
    /// Step t+1 is submitted before step t's token is read back (the token
    /// is chosen on the GPU) where the prompt's pass streamed nothing;
    /// else [`Self::Sync`].
    #[default]
    Pipelined,
    /// Each step's logits are read back and its token chosen on the CPU
    /// before the next step is recorded (for comparisons).
    Sync,
}

/// Read-back slots of the pipelined loop: two steps are in flight at most.
const READBACK_SLOTS: usize = 3;

/// Figures of one phase (prefill or decode).
///
/// In the pipelined decode loop ([`DecodeLoop::Pipelined`]) a step's
/// figures are those of its pass, but `wait_seconds` is the time the CPU
/// blocked reading back the step's token, while the next step was already
/// queued behind it (so it is not GPU idle time), and `seconds` runs until
/// that token was known, including the recording of the next step. A step
/// discarded after an end-of-sequence token is not counted, except in the
/// `seconds` of the step before it, during which it was recorded.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseStats {
    /// Tokens processed (prompt tokens, or generated tokens fed back).
    pub tokens: usize,
    /// Passes run.
    pub passes: usize,
    /// Wall time including logits (or token) read-back.
    pub seconds: f64,
    /// Weight bytes streamed to the GPU.
    pub streamed_bytes: u64,
    /// CPU seconds recording the passes' kernels.
    pub record_seconds: f64,
    /// CPU seconds staging weights and submitting (wgpu encodes the
    /// recorded commands here).
    pub submit_seconds: f64,
    /// Seconds waiting for the GPU at the passes' ends (pipelined: for
    /// each token's read-back).
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

/// A pipelined step whose token is not read yet.
struct InFlight {
    slot: dynvram_runtime::device::ReadbackSlot,
    stats: PassStats,
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
    /// The decode steps ran pipelined ([`DecodeLoop::Pipelined`]).
    pub pipelined: bool,
}

/// How a decode loop chooses tokens.
enum Chooser<'p> {
    /// On the CPU from each step's logits.
    Cpu(&'p mut dyn FnMut(&[f32]) -> u32),
    /// Greedy, pipelined where the model is resident.
    Pipelined,
}

impl Llama {
    /// Greedy decoding of up to `max_new` tokens after `prompt` (positions
    /// from 0; the cache is overwritten), stopping after a token in `eos`;
    /// `on_token` sees each token as soon as it is known. No logits are
    /// kept. With [`DecodeLoop::Pipelined`] and every weight resident each
    /// step is recorded while the GPU runs the one before it (module docs);
    /// the tokens, the stop and the step counts are those of the
    /// synchronous loop.
    #[allow(clippy::too_many_arguments)] // the generation settings
    pub fn generate_greedy(
        &mut self,
        rt: &Runtime,
        model: &Model,
        prompt: &[u32],
        max_new: usize,
        eos: &[u32],
        decode_loop: DecodeLoop,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<Generation, LlamaError> {
        let mut cpu = |row: &[f32]| argmax(row);
        let chooser = match decode_loop {
            DecodeLoop::Pipelined => Chooser::Pipelined,
            DecodeLoop::Sync => Chooser::Cpu(&mut cpu),
        };
        self.decode(
            rt,
            model,
            prompt,
            max_new,
            eos,
            (false, false),
            chooser,
            on_token,
        )
    }

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
            Chooser::Cpu(&mut |row| argmax(row)),
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
            Chooser::Cpu(pick),
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
        chooser: Chooser<'_>,
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
        // Every logits row that reaches the CPU is checked (the prompt's, and
        // each step of the synchronous loop; the pipelined loop picks its
        // tokens on the GPU, `--sync-decode` checks those steps too).
        LlamaError::check_finite("lm_head's logits", || "the prompt".into(), &f.logits)?;
        let last = f.logits[(f.rows - 1) * vocab..].to_vec();
        if keep_prompt_logits {
            g.prompt_logits = Some(f.logits);
        }
        let mut argmax_pick = |row: &[f32]| argmax(row);
        let pick = match chooser {
            Chooser::Cpu(pick) => pick,
            // A pass that streamed waits for the GPU anyway.
            Chooser::Pipelined if f.stats.streamed_bytes == 0 => {
                let token = argmax(&last);
                g.tokens.push(token);
                on_token(token);
                if eos.contains(&token) {
                    g.stopped_at_eos = true;
                } else if max_new > 1 {
                    g.pipelined = true;
                    self.pipelined_steps(rt, model, prompt.len(), max_new, eos, &mut g, on_token)?;
                }
                return Ok(g);
            }
            Chooser::Pipelined => &mut argmax_pick,
        };
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
            LlamaError::check_finite(
                "lm_head's logits",
                || format!("decode step {}", g.tokens.len()),
                &f.logits,
            )?;
            logits = f.logits;
            pos += 1;
        }
        Ok(g)
    }

    /// Steps 1.. of the pipelined loop after token 0 (in `g`): step s feeds
    /// token s-1 at position `pos0 + s - 1` and is submitted before token
    /// s-1 is read back. Each step is submitted only where the synchronous
    /// loop could run it (below `max_new` tokens), so the one step run in
    /// vain is the one after an end-of-sequence token.
    #[allow(clippy::too_many_arguments)] // the generation settings
    fn pipelined_steps(
        &mut self,
        rt: &Runtime,
        model: &Model,
        pos0: usize,
        max_new: usize,
        eos: &[u32],
        g: &mut Generation,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<(), LlamaError> {
        let mut ring =
            ReadbackRing::new(rt.gpu(), READBACK_SLOTS, 1).map_err(RuntimeError::from)?;
        let mut clock = Instant::now();
        let first = g.tokens[0];
        let mut current = self.greedy_step(rt, model, &mut ring, Ids::Host(&[first]), pos0)?;
        loop {
            let s = g.tokens.len();
            let next = if s + 1 < max_new {
                Some(self.greedy_step(rt, model, &mut ring, Ids::OnGpu, pos0 + s)?)
            } else {
                None
            };
            let waiting = Instant::now();
            let values = ring
                .read(rt.gpu(), current.slot)
                .map_err(RuntimeError::from)?;
            let token = values[0];
            if token as usize >= self.config().vocab_size {
                return Err(LlamaError::Input(format!(
                    "the GPU chose token {token}, outside the vocabulary"
                )));
            }
            let mut stats = current.stats;
            stats.wait_seconds += waiting.elapsed().as_secs_f64();
            g.decode.add(1, clock.elapsed().as_secs_f64(), &stats);
            g.tokens.push(token);
            on_token(token);
            clock = Instant::now();
            if eos.contains(&token) {
                // The step after it (if any) is left to finish on its own.
                g.stopped_at_eos = true;
                return Ok(());
            }
            match next {
                Some(n) => current = n,
                None => return Ok(()),
            }
        }
    }

    /// Submits one pipelined step (one token at `pos`).
    fn greedy_step(
        &mut self,
        rt: &Runtime,
        model: &Model,
        ring: &mut ReadbackRing,
        ids: Ids<'_>,
        pos: usize,
    ) -> Result<InFlight, LlamaError> {
        let opts = ForwardOptions {
            logits: Some(LogitRows::Last),
            ..ForwardOptions::default()
        };
        match self.pass(rt, model, ids, pos, opts, Some(Greedy { ring }))? {
            (f, Some(slot)) => Ok(InFlight {
                slot,
                stats: f.stats,
            }),
            (_, None) => Err(LlamaError::Input(
                "a greedy pass returned no read-back slot".into(),
            )),
        }
    }
}
