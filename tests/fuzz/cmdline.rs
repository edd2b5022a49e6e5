//! The command-line redactor: `format_cmdline` (raw `/proc/<pid>/cmdline`
//! bytes) and `redact_cmdline` (args). Besides "no panic, no hang" on any
//! bytes: the result fits the byte budget and holds no NUL, and a secret in
//! any of the documented forms never survives, whatever ordinary args
//! surround it.

use gpumemd::collect::attribution::{format_cmdline, redact_cmdline};
use proptest::prelude::*;
use proptest::sample::select;

use super::mutate;
use crate::{bounded, cases, corpus};

const DICT: &[&str] = &[
    "\0",
    " ",
    "=",
    ":",
    "://",
    "@",
    "?",
    "&",
    "#",
    ",",
    "--",
    "-",
    "--password",
    "--token",
    "--api-key=",
    "Bearer",
    "Authorization: ",
    "postgres://u:p@h/db",
    "?token=",
    "HF_TOKEN=",
    "python3",
    "é",
    "\u{1F600}",
];

/// Secrets written the ways the redactor documents; `{S}` is the secret.
const FORMS: &[&[&str]] = &[
    &["--password={S}"],
    &["--password", "{S}"],
    &["--passwd", "{S}"],
    &["--token", "{S}"],
    &["--api-key", "{S}"],
    &["--api_key={S}"],
    &["--secret", "{S}"],
    &["--access-key={S}"],
    &["--hf-token", "{S}"],
    &["--Auth-Token", "{S}"],
    &["HF_TOKEN={S}"],
    &["AWS_SECRET_ACCESS_KEY={S}"],
    &["DB_PASSWORD={S}"],
    &["-Djavax.net.ssl.keyStorePassword={S}"],
    &["api_key={S}"],
    &["Authorization: Bearer {S}"],
    &["X-Api-Key: {S}"],
    &["Bearer", "{S}"],
    &["postgres://bob:{S}@db:5432/x"],
    &["--url=https://u:{S}@h/a?b=1"],
    &["https://h/p?token={S}&b=1#f"],
    &["a://u:p@h,b://v:{S}@i"],
    &["python x.py --token {S} -p 1"],
    &["python train.py --password={S}"],
];

/// Ordinary args, flags included, none of them a secret's name.
const NOISE: &[&str] = &[
    "python3",
    "train.py",
    "-p",
    "8080",
    "--lr",
    "0.1",
    "-v",
    "--verbose",
    "--max-num-batched-tokens",
    "8192",
    "--tokenizer",
    "gpt2",
    "--key-file",
    "/etc/k",
    "x=1",
    "PATH=/bin",
    "https://h/p",
    "a://b",
    "--",
    "-",
    "",
    "two words",
    "é",
];

fn format((bytes, max): (Vec<u8>, usize)) -> String {
    let out = format_cmdline(&bytes, max);
    assert!(out.len() <= max, "{} bytes over a budget of {max}: {out:?}", out.len());
    assert!(!out.contains('\0'), "NUL in {out:?}");
    out
}

fn redact(args: Vec<String>) -> String {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    redact_cmdline(&refs)
}

fn noise() -> impl Strategy<Value = Vec<String>> {
    let word = prop_oneof![
        select(NOISE).prop_map(str::to_string),
        // Never starts with '-': a random flag could be a secret's name.
        "[a-z][a-z0-9._/]{0,10}",
    ];
    proptest::collection::vec(word, 0..4)
}

#[test]
fn no_seed_shows_its_secrets() {
    const SECRETS: &[&str] = &[
        "hf_AbCdEfGh",
        "0123abcd",
        "FwoG",
        "s3cr3t",
        "changeit",
        "eyJhbGciOi",
        "wJalrXUtnFEMI",
    ];
    for s in corpus("cmdline", &[]) {
        let out = bounded("cmdline", (s.bytes.clone(), 4096), format);
        for secret in SECRETS {
            assert!(!out.contains(secret), "seed {}: {secret} in {out:?}", s.name);
        }
    }
}

#[test]
fn huge_cmdlines_are_quick() {
    // procfs reads at most 256 KiB of cmdline.
    let _ = bounded("cmdline", (b"--token\0".repeat(32 * 1024), 128), format);
    let _ = bounded("cmdline", (b"a://".repeat(64 * 1024), 128), format);
    let _ = bounded("cmdline", (b"x ".repeat(128 * 1024), 128), format);
}

proptest! {
    #![proptest_config(cases(1024))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300), max in 0..300usize) {
        bounded("cmdline", (bytes, max), format);
    }

    #[test]
    fn arbitrary_args(args in proptest::collection::vec(any::<String>(), 0..8)) {
        bounded("redact", args, redact);
    }

    #[test]
    fn cmdline_tokens(text in mutate::soup(DICT, 40), max in 0..300usize) {
        bounded("cmdline", (text.into_bytes(), max), format);
    }

    #[test]
    fn mutated_seeds(seed in any::<usize>(), edits in mutate::edits(12), max in 0..300usize) {
        let seeds = corpus("cmdline", &[]);
        let s = &seeds[seed % seeds.len()];
        bounded("cmdline", (mutate::apply(&s.bytes, &edits, DICT), max), format);
    }

    #[test]
    fn secrets_never_survive(
        before in noise(),
        form in select(FORMS),
        after in noise(),
        secret in "Zq[A-Za-z0-9]{6,16}",
    ) {
        let mut args = before;
        args.extend(form.iter().map(|a| a.replace("{S}", &secret)));
        args.extend(after);
        let joined = args.join("\0");
        let out = bounded("redact", args.clone(), redact);
        prop_assert!(!out.contains(&secret), "{:?} -> {:?}", args, out);
        let out = bounded("cmdline", (joined.into_bytes(), 4096), format);
        prop_assert!(!out.contains(&secret), "{:?} -> {:?}", args, out);
    }
}
