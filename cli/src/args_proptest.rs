//! Argument vectors built from the CLI's own subcommands and flags and from
//! awkward values (huge, negative, NaN, empty, non-ASCII): parsing them and
//! running the flag checks must never panic; every outcome is a parse result
//! or an error. No GPU, no file is touched.

use clap::{CommandFactory, Parser};
use proptest::prelude::*;

use crate::Cli;

/// Every subcommand path (`run`, `bench pass`, …) with its long flags (the
/// global ones included), so most vectors reach the checks past parsing.
fn vocabulary() -> Vec<(Vec<String>, Vec<String>)> {
    fn walk(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, Vec<String>)>) {
        let flags = cmd
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .chain(["--json".to_owned(), "--help".to_owned()])
            .collect();
        out.push((path.clone(), flags));
        for sub in cmd.get_subcommands() {
            let mut p = path.clone();
            p.push(sub.get_name().to_owned());
            walk(sub, p, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), Vec::new(), &mut out);
    out
}

const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "4",
    "0.5",
    "1e400",
    "-0",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "4294967296",
    "",
    " ",
    "💥",
    "a,b",
    "1,,2",
    ",",
    "1GiB",
    "999999PiB",
    "0x10",
    "int8",
    "convrot_w4a4",
    "float8_e4m3fn",
    "tiny",
    "auto",
    "host",
    "mapped",
    "(",
    "[",
    "a{99999999}",
    "/nonexistent/x.safetensors",
    "-",
    "--",
    "=",
];

#[test]
fn the_command_definition_is_consistent() {
    Cli::command().debug_assert();
}

proptest! {
    // PROPTEST_CASES sets the count (the fuzz smoke runs thousands).
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn argument_vectors_never_panic(
        path in any::<prop::sample::Index>(),
        words in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0u8..4), 0..8),
        junk in prop::option::of("\\PC{0,12}"),
    ) {
        let vocabulary = vocabulary();
        let (path, flags) = path.get(&vocabulary);
        let mut argv = vec!["dynvram".to_owned()];
        argv.extend(path.iter().cloned());
        for (flag, value, kind) in &words {
            match kind {
                0 => argv.push(flag.get(flags).clone()),
                1 => argv.push(value.get(VALUES).to_string()),
                2 => argv.push(format!("{}={}", flag.get(flags), value.get(VALUES))),
                _ => argv.extend([flag.get(flags).clone(), value.get(VALUES).to_string()]),
            }
        }
        argv.extend(junk);
        if let Ok(cli) = Cli::try_parse_from(&argv) {
            let _ = cli.command.check_flags();
        }
    }
}
