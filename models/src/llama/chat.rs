//! What a checkpoint folder says about text generation beyond the weights:
//! the chat template and special tokens of `tokenizer_config.json` (or
//! `chat_template.jinja`), rendered with minijinja as transformers'
//! `apply_chat_template` renders it with Jinja2, and the end-of-sequence
//! ids of `generation_config.json` (an id or a list; `config.json`'s
//! `eos_token_id` when there is no generation config).

use std::path::{Path, PathBuf};

use minijinja::{Environment, Error, ErrorKind, context};
use serde_json::Value;

use super::LlamaError;

/// `tokenizer_config.json`.
pub const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
/// The separate template file transformers ≥ 4.43 saves.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";
/// `generation_config.json`.
pub const GENERATION_CONFIG: &str = "generation_config.json";

/// The work one render may do ([`Environment::set_fuel`]: about one unit
/// per instruction and per 64 bytes of data made). Real templates (Llama
/// 3's, Qwen's, Mistral's with tools) take a few thousand; a template that
/// loops without bound stops here instead of growing memory.
pub const TEMPLATE_FUEL: u64 = 2_000_000;

/// The longest prompt text a template may render (bytes): past any
/// model's context, and a bound on memory whatever the fuel allows.
pub const TEMPLATE_OUTPUT_LIMIT: usize = 4 << 20;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A user turn.
    pub fn user(content: &str) -> Self {
        Self {
            role: "user".into(),
            content: content.into(),
        }
    }
}

/// A checkpoint's chat template with the special tokens it refers to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    /// The Jinja source.
    pub source: String,
    /// Where it was read from (for errors).
    pub path: PathBuf,
    /// `bos_token` as text ("" when the config has none).
    pub bos_token: String,
    /// `eos_token` as text ("" when the config has none).
    pub eos_token: String,
}

fn config_error(path: &Path, why: impl ToString) -> LlamaError {
    LlamaError::Config {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

fn read_json(path: &Path) -> Result<Option<Value>, LlamaError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LlamaError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| config_error(path, format!("not JSON: {e}")))
}

/// A special token as the config writes it: a string, or an added-token
/// object with `content`.
fn token_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// Reads `dir`'s chat template: `chat_template` of
    /// `tokenizer_config.json` (a string, or a list of named templates of
    /// which `default` is taken), else `chat_template.jinja`. An error names
    /// the files looked at when neither has one.
    pub fn open(dir: &Path) -> Result<Self, LlamaError> {
        let config_path = dir.join(TOKENIZER_CONFIG);
        let file_path = dir.join(CHAT_TEMPLATE_FILE);
        let config = read_json(&config_path)?.unwrap_or(Value::Null);
        let from_config = match config.get("chat_template") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .or(list.first())
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        };
        let (source, path) = match from_config {
            Some(s) => (s, config_path),
            None => match std::fs::read_to_string(&file_path) {
                Ok(s) => (s, file_path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(config_error(
                        &config_path,
                        format!(
                            "no `chat_template` here and no {} beside it: --chat needs the \
                             checkpoint's chat template (or write one with `dynvram synth --tokenizer`)",
                            file_path.display()
                        ),
                    ));
                }
                Err(source) => {
                    return Err(LlamaError::Io {
                        path: file_path,
                        source,
                    });
                }
            },
        };
        Ok(Self {
            source,
            path,
            bos_token: token_text(config.get("bos_token")),
            eos_token: token_text(config.get("eos_token")),
        })
    }

    /// The prompt text of `messages`, ending with the assistant's header
    /// when `add_generation_prompt` (as `apply_chat_template(...,
    /// tokenize=False)`). Encode it without adding special tokens: the
    /// template writes its own.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, LlamaError> {
        let mut env = Environment::new();
        env.set_fuel(Some(TEMPLATE_FUEL));
        // Jinja2 as transformers configures it.
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| config_error(&self.path, e))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        let err = |e: Error| {
            let mut why = match e.kind() {
                ErrorKind::OutOfFuel => format!(
                    "chat template: stopped after {TEMPLATE_FUEL} units of work (fuel), \
                     a template that does not end or grows without bound: {e}"
                ),
                ErrorKind::WriteFailure => {
                    format!("chat template: its output passed {TEMPLATE_OUTPUT_LIMIT} bytes: {e}")
                }
                _ => format!("chat template: {e}"),
            };
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                why.push_str(&format!(": {s}"));
                source = s.source();
            }
            config_error(&self.path, why)
        };
        env.add_template("chat", &self.source).map_err(err)?;
        let tmpl = env.get_template("chat").map_err(err)?;
        let messages: Vec<std::collections::BTreeMap<String, String>> = messages
            .iter()
            .map(|m| {
                [
                    ("role".to_owned(), m.role.clone()),
                    ("content".to_owned(), m.content.clone()),
                ]
                .into()
            })
            .collect();
        let mut out = Capped(Vec::new());
        tmpl.render_captured_to(
            context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            },
            &mut out,
        )
        .map_err(err)?;
        String::from_utf8(out.0)
            .map_err(|e| config_error(&self.path, format!("chat template: {e}")))
    }
}

/// A buffer that refuses to grow past [`TEMPLATE_OUTPUT_LIMIT`].
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > TEMPLATE_OUTPUT_LIMIT {
            return Err(std::io::Error::other("output limit"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// End-of-sequence ids: `eos_token_id` of `generation_config.json` (an id
/// or a list), else of `config.json`; empty when neither says.
pub fn eos_ids(dir: &Path) -> Result<Vec<u32>, LlamaError> {
    for name in [GENERATION_CONFIG, "config.json"] {
        let path = dir.join(name);
        let Some(v) = read_json(&path)? else {
            continue;
        };
        match v.get("eos_token_id") {
            None | Some(Value::Null) => continue,
            Some(x) => return ids(x).map_err(|why| config_error(&path, why)),
        }
    }
    Ok(Vec::new())
}

fn ids(x: &Value) -> Result<Vec<u32>, String> {
    let one = |x: &Value| {
        x.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("`eos_token_id` {x} is not a token id"))
    };
    match x {
        Value::Array(list) => list.iter().map(one).collect(),
        x => one(x).map(|id| vec![id]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3's template, abridged (BOS, headers, `eot`, trims).
    const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

    /// Qwen2's ChatML template (default system turn, `.strip()` via pycompat-free trim).
    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    fn write(dir: &Path, name: &str, v: &Value) {
        std::fs::write(dir.join(name), v.to_string()).expect("write");
    }

    #[test]
    fn a_template_without_bound_stops_with_a_clear_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let cases = [
            // Nested loops, each level doubling a string: memory grew
            // without bound (7.7 GB in 18 s) before the fuel.
            (
                "{% set ns = namespace(s='x') %}{% for i in range(100000) %}{% for j in range(100000) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% endfor %}{{ ns.s }}",
                "fuel",
            ),
            (
                "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}",
                "fuel",
            ),
            (
                "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                "chat template",
            ),
            ("{{ 'x' * 100000000 }}", "4194304 bytes"),
        ];
        for (source, want) in cases {
            write(
                dir,
                TOKENIZER_CONFIG,
                &serde_json::json!({"chat_template": source}),
            );
            let t = ChatTemplate::open(dir).expect("template");
            let start = std::time::Instant::now();
            let e = t
                .render(&[Message::user("hi")], true)
                .expect_err(source)
                .to_string();
            assert!(
                e.contains(want) && e.contains(TOKENIZER_CONFIG),
                "{source}: {e}"
            );
            // Not a timing claim: a guard against the render running on.
            assert!(start.elapsed().as_secs() < 60, "{source}");
        }
    }

    #[test]
    fn renders_llama3_and_chatml_as_transformers_does() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        write(
            dir,
            TOKENIZER_CONFIG,
            &serde_json::json!({"chat_template": LLAMA3, "bos_token": "<|begin_of_text|>",
                                "eos_token": {"content": "<|eot_id|>", "special": true}}),
        );
        let t = ChatTemplate::open(dir).expect("template");
        assert_eq!(t.eos_token, "<|eot_id|>");
        let text = t
            .render(&[Message::user(" Hi there ")], true)
            .expect("render");
        assert_eq!(
            text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        write(
            dir,
            TOKENIZER_CONFIG,
            &serde_json::json!({"chat_template": [{"name": "tool_use", "template": "x"},
                                                  {"name": "default", "template": CHATML}]}),
        );
        let t = ChatTemplate::open(dir).expect("template");
        let text = t.render(&[Message::user("Hi")], true).expect("render");
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let text = t.render(&[Message::user("Hi")], false).expect("render");
        assert!(text.ends_with("<|im_end|>\n"), "{text:?}");
    }

    /// The constructs of Llama 3.1's and Qwen2.5's published templates
    /// (`is defined`, `none`, list slices, `in` on a message, whitespace
    /// control, `tojson`, undefined keys, `tools` absent), abridged.
    #[test]
    fn llama31_and_qwen25_template_constructs_render() {
        let llama31 = r#"{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"#;
        let qwen25 = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;
        let t = |source: &str, bos: &str| ChatTemplate {
            source: source.into(),
            path: PathBuf::from(TOKENIZER_CONFIG),
            bos_token: bos.into(),
            eos_token: String::new(),
        };
        let text = t(llama31, "<|begin_of_text|>")
            .render(&[Message::user("Hi!")], true)
            .expect("llama 3.1");
        assert_eq!(
            text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let text = t(qwen25, "")
            .render(&[Message::user("Hi!")], true)
            .expect("qwen 2.5");
        assert_eq!(
            text,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_methods_and_raise_exception_work() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let src = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system turns') }}{% endif %}{{ messages[0]['content'].strip().upper() }}";
        std::fs::write(dir.join(CHAT_TEMPLATE_FILE), src).expect("write");
        let t = ChatTemplate::open(dir).expect("template from chat_template.jinja");
        assert_eq!(
            t.render(&[Message::user("  ok ")], true).expect("render"),
            "OK"
        );
        let sys = Message {
            role: "system".into(),
            content: "x".into(),
        };
        let e = t.render(&[sys], true).expect_err("raise_exception");
        let msg = e.to_string();
        assert!(
            msg.contains("no system turns") && msg.contains(CHAT_TEMPLATE_FILE),
            "{msg}"
        );
    }

    #[test]
    fn a_folder_without_a_template_names_both_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = ChatTemplate::open(tmp.path()).expect_err("no template");
        let msg = e.to_string();
        assert!(
            msg.contains(TOKENIZER_CONFIG) && msg.contains(CHAT_TEMPLATE_FILE),
            "{msg}"
        );
    }

    #[test]
    fn eos_from_generation_config_as_id_or_list_else_config() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        assert_eq!(eos_ids(dir).expect("nothing"), Vec::<u32>::new());
        write(dir, "config.json", &serde_json::json!({"eos_token_id": 2}));
        assert_eq!(eos_ids(dir).expect("config"), vec![2]);
        write(
            dir,
            GENERATION_CONFIG,
            &serde_json::json!({"eos_token_id": [128001, 128008, 128009]}),
        );
        assert_eq!(eos_ids(dir).expect("list"), vec![128001, 128008, 128009]);
        write(
            dir,
            GENERATION_CONFIG,
            &serde_json::json!({"eos_token_id": 7}),
        );
        assert_eq!(eos_ids(dir).expect("id"), vec![7]);
        write(
            dir,
            GENERATION_CONFIG,
            &serde_json::json!({"eos_token_id": "x"}),
        );
        let e = eos_ids(dir).expect_err("not an id").to_string();
        assert!(e.contains(GENERATION_CONFIG) && e.contains("\"x\""), "{e}");
    }
}
