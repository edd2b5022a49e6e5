//! `Config::from_toml`: the daemon's TOML config, plain and layered over
//! the demo defaults. Seeds: the corpus and the shipped configs, including
//! `config/gpumemd.toml` with every commented-out example turned on.

use gpumemd::app::config::Config;
use proptest::prelude::*;

use super::mutate::{self, TreeEdit};
use crate::{Seed, assert_one_line, bounded, cases, corpus};

const SHIPPED: &[&str] = &["config/gpumemd.toml", "config/per-user-quotas.toml"];

/// Section names, keys and values of the config format, and TOML syntax.
const DICT: &[&str] = &[
    "[server]",
    "[poll]",
    "[nvml]",
    "[processes]",
    "[state]",
    "[alerting]",
    "[reclaim]",
    "[[rule]]",
    "[notify.alertmanager]",
    "[notify.webhook]",
    "listen",
    "enable_lifecycle",
    "web_config_file",
    "interval",
    "timeout",
    "library",
    "mode",
    "group_by",
    "top_n",
    "min_bytes",
    "cmdline",
    "label_max_bytes",
    "proc_root",
    "leak_window",
    "leak_min_rate",
    "late_release_after",
    "utilization_interval",
    "idle_after",
    "dir",
    "default_rules",
    "instance",
    "recent_transitions",
    "name",
    "kind",
    "above",
    "below",
    "clear",
    "for",
    "severity",
    "match",
    "labels",
    "annotations",
    "action",
    "holder",
    "urls",
    "url",
    "secret",
    "resend",
    "max_queue",
    "enabled",
    "dry_run",
    "grace",
    "allow_users",
    "deny_users",
    " = ",
    "=",
    "\"",
    "'",
    "\"\"\"",
    "[",
    "]",
    "{",
    "}",
    ",",
    ".",
    "#",
    "\n",
    "\\",
    "\\u0000",
    "true",
    "0",
    "-1",
    "1e999",
    "nan",
    "\"1s\"",
    "\"0s\"",
    "\"90%\"",
    "\"20GiB\"",
    "\"per-process\"",
    "\"device_used_ratio\"",
    "\"process_leak_suspected\"",
    "\"group_used_bytes\"",
    "\"terminate\"",
    "1979-05-27T07:32:00Z",
];

/// Parses `text` both ways (plain and over the demo defaults). Nothing may
/// panic; an error is one line that names the origin.
fn check(text: String) -> Result<(), String> {
    let mut first = Ok(());
    for demo in [false, true] {
        if let Err(e) = Config::from_toml(&text, "fuzz.toml", demo) {
            let msg = e.to_string();
            assert_one_line("config", &msg);
            assert!(msg.starts_with("fuzz.toml"), "error does not name the file: {msg}");
            if first.is_ok() {
                first = Err(msg);
            }
        }
    }
    first
}

fn run(text: String) -> Result<(), String> {
    bounded("config", text, check)
}

/// `config/gpumemd.toml` with every commented-out setting and example
/// turned on: the fullest real config there is.
fn everything_on() -> String {
    let text = std::fs::read_to_string(crate::repo("config/gpumemd.toml")).expect("read config/gpumemd.toml");
    text.lines()
        .map(|l| match l.strip_prefix("# ") {
            // The file shows both Alertmanager credentials; only one may be set.
            Some(rest) if rest.starts_with("bearer_token") => l,
            // Only settings and headers: prose stays a comment.
            Some(rest) if rest.starts_with('[') || rest.parse::<toml::Table>().is_ok() => rest,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn seeds() -> Vec<Seed> {
    let mut s = corpus("config", SHIPPED);
    s.push(Seed {
        name: "config/gpumemd.toml, all examples on".into(),
        path: crate::repo("config/gpumemd.toml"),
        bytes: everything_on().into_bytes(),
    });
    s
}

/// The seeds as trees, for structured mutation.
fn trees() -> Vec<serde_json::Value> {
    crate::toml_trees(&seeds())
}

#[test]
fn every_seed_is_a_valid_config() {
    for s in seeds() {
        if let Err(e) = run(s.text()) {
            panic!("seed {} does not parse: {e}", s.name);
        }
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for open in ["[", "{a="] {
        let _ = run(format!("x = {}", open.repeat(20_000)));
    }
    let _ = run(format!("{}x = 1", "[a.".repeat(5_000)));
}

format_properties!(config_tokens, 48, |t| toml::to_string(t).ok());

/// Edits that must be errors, not panics: each key of the fullest config
/// deleted, retyped or set to an odd value, one at a time (a systematic
/// sweep the random search might miss).
#[test]
fn every_key_retyped_or_deleted() {
    let base = trees().pop().expect("the all-on tree");
    let n = mutate::paths(&base).len();
    for i in 0..n {
        for edit in [
            TreeEdit::Delete(i),
            TreeEdit::Retype(i),
            TreeEdit::Set(i, 16),
            TreeEdit::Set(i, 0),
        ] {
            let mut t = base.clone();
            mutate::apply_tree(&mut t, std::slice::from_ref(&edit), DICT);
            if let Ok(text) = toml::to_string(&t) {
                let _ = run(text);
            }
        }
    }
}
