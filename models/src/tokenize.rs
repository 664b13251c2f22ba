//! The text encoders' tokenizers, built into the program: ComfyUI's model
//! files carry none (see `models/tokenizers/README.md` for their origin and
//! licences).
//!
//! - [`ClipTokenizer`]: CLIP's byte-level BPE (openai/clip-vit-large-patch14):
//!   `[BOS 49406] + tokens + [EOS 49407]`, truncated to 77 keeping EOS last,
//!   padded to 77 with 49407 (pad = EOS, as FluxPipeline and ComfyUI do).
//! - [`T5Tokenizer`]: T5 v1.1's SentencePiece Unigram: `tokens + [EOS 1]`,
//!   truncated to `max_len` keeping EOS last, padded with 0.
//!
//! Both `tokenizer.json` files have no padding or truncation of their own,
//! so the tokens are encoded without special tokens and the frame is added
//! here, where the rules are written once.

use std::path::PathBuf;

use tokenizers::Tokenizer;

use crate::error::ModelError;

/// CLIP's `tokenizer.json` (Hugging Face `tokenizers` format).
pub const CLIP_TOKENIZER_JSON: &[u8] = include_bytes!("../tokenizers/clip-l/tokenizer.json");
/// T5 v1.1's `tokenizer.json` (Hugging Face `tokenizers` format).
pub const T5_TOKENIZER_JSON: &[u8] = include_bytes!("../tokenizers/t5/tokenizer.json");
/// CLIP's licence notice (MIT, OpenAI), shipped with the program.
pub const CLIP_LICENSE: &str = include_str!("../tokenizers/clip-l/LICENSE");
/// T5's licence notice (Apache-2.0, Google), shipped with the program.
pub const T5_LICENSE: &str = include_str!("../tokenizers/t5/LICENSE");

/// Token positions CLIP-L's text encoder takes.
pub const CLIP_MAX_LEN: usize = 77;
/// CLIP's `<|startoftext|>`.
pub const CLIP_BOS: u32 = 49406;
/// CLIP's `<|endoftext|>`, also its padding.
pub const CLIP_EOS: u32 = 49407;
/// T5's `</s>`.
pub const T5_EOS: u32 = 1;
/// T5's `<pad>`.
pub const T5_PAD: u32 = 0;

/// A prompt's ids, framed and padded for an encoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// Exactly as many ids as the encoder takes.
    pub ids: Vec<u32>,
    /// The prompt was longer than the encoder takes and was cut: the
    /// caller warns, as ComfyUI does.
    pub truncated: bool,
}

/// The built-in CLIP BPE tokenizer.
#[derive(Debug)]
pub struct ClipTokenizer {
    inner: Tokenizer,
}

/// The built-in T5 Unigram tokenizer.
#[derive(Debug)]
pub struct T5Tokenizer {
    inner: Tokenizer,
}

/// The path an error names for a built-in tokenizer.
fn builtin_path(name: &str) -> PathBuf {
    PathBuf::from(format!(
        "<built-in>/models/tokenizers/{name}/tokenizer.json"
    ))
}

/// Parses an embedded `tokenizer.json` and checks that its special tokens
/// have the ids the framing writes.
fn load(name: &str, json: &[u8], specials: &[(&str, u32)]) -> Result<Tokenizer, ModelError> {
    let err = |why: String| ModelError::Tokenizer {
        path: builtin_path(name),
        why,
    };
    let inner = Tokenizer::from_bytes(json).map_err(|e| err(e.to_string()))?;
    for &(token, id) in specials {
        match inner.token_to_id(token) {
            Some(found) if found == id => {}
            found => {
                return Err(err(format!(
                    "`{token}` has id {found:?}, the framing expects {id}"
                )));
            }
        }
    }
    Ok(inner)
}

/// The tokens of `prompt` without special tokens.
fn plain_ids(inner: &Tokenizer, name: &str, prompt: &str) -> Result<Vec<u32>, ModelError> {
    let enc = inner
        .encode(prompt, false)
        .map_err(|e| ModelError::Tokenizer {
            path: builtin_path(name),
            why: format!("cannot encode the prompt: {e}"),
        })?;
    Ok(enc.get_ids().to_vec())
}

/// `head + body + [eos]`, cut to `len` keeping `eos` last, padded with
/// `pad` to `len` (`len` ≥ `head.len() + 1`).
fn frame(head: &[u32], body: &[u32], eos: u32, pad: u32, len: usize) -> Tokens {
    let room = len - head.len() - 1;
    let truncated = body.len() > room;
    let mut ids = Vec::with_capacity(len);
    ids.extend_from_slice(head);
    ids.extend_from_slice(&body[..body.len().min(room)]);
    ids.push(eos);
    ids.resize(len, pad);
    Tokens { ids, truncated }
}

impl ClipTokenizer {
    /// The tokenizer built into the program.
    pub fn builtin() -> Result<Self, ModelError> {
        let _span = tracing::debug_span!("tokenizer_load", name = "clip-l").entered();
        let inner = load(
            "clip-l",
            CLIP_TOKENIZER_JSON,
            &[("<|startoftext|>", CLIP_BOS), ("<|endoftext|>", CLIP_EOS)],
        )?;
        Ok(Self { inner })
    }

    /// `prompt` as CLIP-L takes it: [`CLIP_MAX_LEN`] ids, BOS first, EOS
    /// after the last token that fits, then EOS as padding.
    pub fn encode(&self, prompt: &str) -> Result<Tokens, ModelError> {
        let body = plain_ids(&self.inner, "clip-l", prompt)?;
        Ok(frame(&[CLIP_BOS], &body, CLIP_EOS, CLIP_EOS, CLIP_MAX_LEN))
    }
}

impl T5Tokenizer {
    /// The tokenizer built into the program.
    pub fn builtin() -> Result<Self, ModelError> {
        let _span = tracing::debug_span!("tokenizer_load", name = "t5").entered();
        let inner = load(
            "t5",
            T5_TOKENIZER_JSON,
            &[("</s>", T5_EOS), ("<pad>", T5_PAD)],
        )?;
        Ok(Self { inner })
    }

    /// `prompt` as the T5 encoder takes it: `max_len` ids (FLUX.1-dev's
    /// default is 512, schnell's 256), EOS after the last token that fits,
    /// then 0 as padding. `max_len` 0 is an error.
    pub fn encode(&self, prompt: &str, max_len: usize) -> Result<Tokens, ModelError> {
        if max_len == 0 {
            return Err(ModelError::Input(
                "T5 max_len 0: the encoder needs at least the EOS token".into(),
            ));
        }
        let body = plain_ids(&self.inner, "t5", prompt)?;
        Ok(frame(&[], &body, T5_EOS, T5_PAD, max_len))
    }
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn frame_keeps_eos_last_and_pads() {
        let t = frame(&[9], &[1, 2, 3], 7, 0, 6);
        assert_eq!(t.ids, [9, 1, 2, 3, 7, 0]);
        assert!(!t.truncated);
        let t = frame(&[9], &[1, 2, 3, 4], 7, 0, 6);
        assert_eq!(t.ids, [9, 1, 2, 3, 4, 7]);
        assert!(!t.truncated);
        let t = frame(&[9], &[1, 2, 3, 4, 5], 7, 0, 6);
        assert_eq!(t.ids, [9, 1, 2, 3, 4, 7]);
        assert!(t.truncated);
        let t = frame(&[], &[], 1, 0, 1);
        assert_eq!(t.ids, [1]);
        assert!(!t.truncated);
    }
}
