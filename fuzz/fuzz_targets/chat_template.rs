//! A checkpoint's chat template (`ChatTemplate::render`, minijinja) on
//! arbitrary bytes: the template source, then, after the first NUL, the
//! user's message. Whatever the template does, the render ends — within
//! its fuel (`TEMPLATE_FUEL`) — with an error or a prompt no longer than
//! `TEMPLATE_OUTPUT_LIMIT`; it never panics or grows without bound
//! (issue 31: nested loops took 7.7 GB in 18 s).
#![no_main]

use dynvram_models::llama::chat::{ChatTemplate, Message, TEMPLATE_OUTPUT_LIMIT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (source, message) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(source) = std::str::from_utf8(source) else {
        return;
    };
    let template = ChatTemplate {
        source: source.to_owned(),
        path: "fuzz/chat_template.jinja".into(),
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
    };
    let message = String::from_utf8_lossy(message);
    if let Ok(text) = template.render(&[Message::user(&message)], true) {
        assert!(text.len() <= TEMPLATE_OUTPUT_LIMIT, "{} bytes", text.len());
    }
});
