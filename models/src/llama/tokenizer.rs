//! Text in and out of a checkpoint: its `tokenizer.json` (the Hugging Face
//! `tokenizers` format) for `generate --prompt`, decoded incrementally so
//! text can be printed as tokens come; and a synthetic byte-level BPE
//! tokenizer whose vocabulary fills a config's `vocab_size`, so benchmark
//! checkpoints written by [`super::synth`] take text prompts too.

use std::path::{Path, PathBuf};

use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecodeStream, DecoderWrapper, ModelWrapper, NormalizerWrapper,
    PostProcessorWrapper, PreTokenizerWrapper, Tokenizer,
};

use super::LlamaError;

/// The file name transformers saves a fast tokenizer under.
pub const FILE: &str = "tokenizer.json";

/// Special tokens of the synthetic tokenizer, at ids 0, 1, 2 (the
/// `bos_token_id` 1 and `eos_token_id` 2 that [`super::synth`] writes).
pub const SYNTH_SPECIALS: [&str; 3] = ["<unk>", "<s>", "</s>"];

/// Letters the synthetic merges are spelled from: `Ġ` (the byte-level
/// space) and a–z, so random ids decode to word-like text.
const SYNTH_ALPHABET: &str = "Ġabcdefghijklmnopqrstuvwxyz";

/// A checkpoint's tokenizer.
#[derive(Debug)]
pub struct TextTokenizer {
    inner: Tokenizer,
    path: PathBuf,
}

impl TextTokenizer {
    /// Reads `dir/tokenizer.json`; a missing file is an error naming it.
    pub fn open(dir: &Path) -> Result<Self, LlamaError> {
        Self::from_file(&dir.join(FILE))
    }

    /// Reads a `tokenizer.json` at `path`.
    pub fn from_file(path: &Path) -> Result<Self, LlamaError> {
        let _span = tracing::info_span!("tokenizer_load", path = %path.display()).entered();
        if !path.is_file() {
            return Err(tokenizer_error(
                path,
                "no such file: text prompts need the checkpoint's tokenizer.json \
                 (pass token ids instead, or write one with `dynvram synth --tokenizer`)",
            ));
        }
        let inner = Tokenizer::from_file(path).map_err(|e| tokenizer_error(path, e))?;
        Ok(Self {
            inner,
            path: path.to_owned(),
        })
    }

    /// The file this tokenizer was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens including added (special) ones; ids are below this.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Ids of `text` with the tokenizer's own special tokens (e.g. a BOS),
    /// as `tokenizer(text)` does in transformers.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlamaError> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| tokenizer_error(&self.path, e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids of `text` as written, without the tokenizer's own special
    /// tokens (a rendered chat template carries its own BOS), as
    /// `tokenizer(text, add_special_tokens=False)`; special tokens spelled
    /// in the text still map to their ids.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, LlamaError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| tokenizer_error(&self.path, e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The id of a token spelled exactly `text` (e.g. a config's `eos_token`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// Text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String, LlamaError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| tokenizer_error(&self.path, e))
    }

    /// An incremental decoder: feed ids one at a time, get the new text.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tok: self,
            inner: self.inner.decode_stream(true),
        }
    }
}

type Stream<'a> = DecodeStream<
    'a,
    ModelWrapper,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// Incremental decoding (see [`TextTokenizer::stream`]): multi-byte
/// characters split over several tokens come out once complete.
#[allow(missing_debug_implementations)] // the tokenizers stream is not Debug
pub struct TextStream<'a> {
    tok: &'a TextTokenizer,
    inner: Stream<'a>,
}

impl TextStream<'_> {
    /// The text `id` completes, if any. Should the decoder's view of the
    /// text so far change (the library reports an invalid prefix), the
    /// stream restarts at `id` rather than failing a generation.
    pub fn step(&mut self, id: u32) -> Result<Option<String>, LlamaError> {
        match self.inner.step(id) {
            Ok(text) => Ok(text),
            Err(e) => {
                tracing::debug!(id, error = %e, "decode stream restarted");
                self.inner = self.tok.inner.decode_stream(true);
                self.inner
                    .step(id)
                    .map_err(|e| tokenizer_error(&self.tok.path, e))
            }
        }
    }
}

fn tokenizer_error(path: &Path, why: impl ToString) -> LlamaError {
    LlamaError::Tokenizer {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

/// A byte-level BPE tokenizer (GPT-2 / Llama 3 / Qwen2 style) of exactly
/// `vocab_size` tokens: [`SYNTH_SPECIALS`] at 0–2, the 256 byte symbols,
/// then merges spelling every string over `SYNTH_ALPHABET` of length 2,
/// 3, … in order until the vocabulary is full. Every text round-trips; a
/// `<s>` is prepended on encode, as Llama's tokenizers do.
pub fn synthetic(vocab_size: usize) -> Result<Tokenizer, String> {
    let base = SYNTH_SPECIALS.len() + 256;
    if vocab_size < base {
        return Err(format!(
            "vocab_size {vocab_size} is below the {base} tokens a byte-level tokenizer needs"
        ));
    }
    let mut vocab = Vocab::default();
    vocab.reserve(vocab_size);
    let add = |vocab: &mut Vocab, s: String| {
        let id = vocab.len() as u32;
        vocab.entry(s).or_insert(id);
    };
    for s in SYNTH_SPECIALS {
        add(&mut vocab, s.to_owned());
    }
    for c in byte_chars() {
        add(&mut vocab, c.to_string());
    }
    let alphabet: Vec<char> = SYNTH_ALPHABET.chars().collect();
    let mut merges = Vec::with_capacity(vocab_size - base);
    // Strings of the previous length, in order; each new one is a merge of
    // one of them (already in the vocabulary) and a single letter.
    let mut prev: Vec<String> = alphabet.iter().map(char::to_string).collect();
    'fill: loop {
        let mut next = Vec::with_capacity(prev.len() * alphabet.len());
        for p in &prev {
            for c in &alphabet {
                if vocab.len() == vocab_size {
                    break 'fill;
                }
                let s = format!("{p}{c}");
                merges.push((p.clone(), c.to_string()));
                add(&mut vocab, s.clone());
                next.push(s);
            }
        }
        prev = next;
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| e.to_string())?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(
        tokenizers::pre_tokenizers::byte_level::ByteLevel::default().add_prefix_space(false),
    ));
    tok.with_decoder(Some(ByteLevel::default()));
    let bos = SYNTH_SPECIALS[1];
    let template = TemplateProcessing::builder()
        .try_single(format!("{bos} $A"))
        .map_err(|e| e.to_string())?
        .special_tokens(vec![(bos, 1u32)])
        .build()
        .map_err(|e| e.to_string())?;
    tok.with_post_processor(Some(template));
    tok.add_special_tokens(SYNTH_SPECIALS.map(|s| AddedToken::from(s, true)))
        .map_err(|e| e.to_string())?;
    Ok(tok)
}

/// A ChatML-like template for synthetic checkpoints: [`SYNTH_SPECIALS`]'s
/// `<s>` opens, each turn is `<|role|>` then its text then `</s>`.
pub const SYNTH_CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] | trim }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

/// The `tokenizer_config.json` written beside a synthetic tokenizer.
pub fn synthetic_config_json() -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SYNTH_SPECIALS[1],
        "eos_token": SYNTH_SPECIALS[2],
        "unk_token": SYNTH_SPECIALS[0],
        "chat_template": SYNTH_CHAT_TEMPLATE,
    }))
    .unwrap_or_default()
        + "\n"
}

/// [`synthetic`] as `tokenizer.json` text.
pub fn synthetic_json(vocab_size: usize) -> Result<String, String> {
    synthetic(vocab_size)?
        .to_string(false)
        .map_err(|e| e.to_string())
}

/// GPT-2's byte-to-character table, in byte order: printable bytes stand
/// for themselves, the rest map to U+0100 onwards (what the byte-level
/// pre-tokenizer emits, so merges must be spelled in these characters).
fn byte_chars() -> impl Iterator<Item = char> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut shifted = 0u32;
    (0..=255u8).map(move |b| {
        if printable(b) {
            char::from(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_fills_the_vocab_and_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let json = synthetic_json(1024).expect("tokenizer");
        std::fs::write(dir.path().join(FILE), json).expect("write");
        let tok = TextTokenizer::open(dir.path()).expect("open");
        assert_eq!(tok.vocab_size(), 1024);
        let text = "hello world, naïve café — 日本 🙂";
        let ids = tok.encode(text).expect("encode");
        assert_eq!(ids[0], 1, "BOS first: {ids:?}");
        assert!(ids.iter().all(|&i| i < 1024), "{ids:?}");
        // Merges make common letters cheaper than bytes.
        assert!(
            ids.len() < text.len(),
            "{} ids for {} bytes",
            ids.len(),
            text.len()
        );
        assert_eq!(tok.decode(&ids).expect("decode"), text);
        let mut stream = tok.stream();
        let mut streamed = String::new();
        for &id in &ids {
            if let Some(t) = stream.step(id).expect("step") {
                streamed.push_str(&t);
            }
        }
        assert_eq!(streamed, text);
    }

    #[test]
    fn every_id_decodes() {
        let tok = TextTokenizer {
            inner: synthetic(300).expect("tokenizer"),
            path: PathBuf::from("mem"),
        };
        assert_eq!(tok.vocab_size(), 300);
        let ids: Vec<u32> = (3..300).collect();
        let mut stream = tok.stream();
        for &id in &ids {
            stream.step(id).expect("step");
        }
        assert!(!tok.decode(&ids).expect("decode").is_empty());
    }

    #[test]
    fn missing_file_and_small_vocab_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = TextTokenizer::open(dir.path())
            .expect_err("absent")
            .to_string();
        assert!(e.contains("tokenizer.json"), "{e}");
        assert!(synthetic(100).is_err());
        std::fs::write(dir.path().join(FILE), "{not json").expect("write");
        let e = TextTokenizer::open(dir.path())
            .expect_err("bad")
            .to_string();
        assert!(e.contains("tokenizer.json"), "{e}");
    }
}
