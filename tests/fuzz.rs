//! Bounded fuzzing of every parser that reads operator or kernel text: the
//! daemon config, the web config, scenario files, `/proc/<pid>/cgroup`,
//! `/proc/<pid>/stat` (with `status` and `/proc/stat`) and the command-line
//! redactor. cargo-fuzz needs nightly, so this is proptest on stable.
//!
//! Every target has the same properties: it never panics or hangs, on
//! arbitrary text, on text built from the format's own tokens, on byte and
//! line mutations of its seed corpus, and (for the structured formats) on
//! tree mutations of real files: keys deleted, values swapped, types
//! changed. Every error it returns is one line. The seeds are the files in
//! `tests/fuzz/corpus/<target>/` plus the files the project ships, and each
//! seed must also parse as it is (they are real inputs).
//!
//! This file is CI's bounded fuzz pass: the case counts keep it well under
//! 30 s in debug on 2 cores. `PROPTEST_CASES=N` sets every property's
//! count for a longer run, e.g.
//! `PROPTEST_CASES=20000 cargo test --release --test fuzz`. A failure prints
//! the shrunk input: add it to the target's corpus once fixed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

/// The four properties the structured targets (config, scenario, web
/// config) share: arbitrary text, the format's own tokens, byte mutations
/// of the seeds, and tree mutations of the seed files serialised back with
/// `$serialize` (a tree the format cannot hold is no case). Expands in the
/// target's module, so `run`, `seeds`, `trees` and `DICT` are its own.
macro_rules! format_properties {
    ($tokens:ident, $soup_max:expr, $serialize:expr) => {
        proptest! {
            #![proptest_config(cases(512))]

            #[test]
            fn arbitrary_text(text in any::<String>()) {
                let _ = run(text);
            }

            #[test]
            fn $tokens(text in mutate::soup(DICT, $soup_max)) {
                let _ = run(text);
            }

            #[test]
            fn mutated_seeds(seed in any::<usize>(), edits in mutate::edits(12)) {
                let seeds = seeds();
                let s = &seeds[seed % seeds.len()];
                let _ = run(String::from_utf8_lossy(&mutate::apply(&s.bytes, &edits, DICT)).into_owned());
            }

            #[test]
            fn structured_mutations(seed in any::<usize>(), edits in mutate::tree_edits(8)) {
                let trees = trees();
                let mut tree = trees[seed % trees.len()].clone();
                mutate::apply_tree(&mut tree, &edits, DICT);
                let serialize: fn(&serde_json::Value) -> Option<String> = $serialize;
                let text = serialize(&tree);
                prop_assume!(text.is_some());
                let _ = run(text.unwrap_or_default());
            }
        }
    };
}

// An inline module in a root test file resolves its modules in the folder
// of its name: `fuzz::stat` is tests/fuzz/stat.rs.
mod fuzz {
    mod cgroup;
    mod cmdline;
    mod config;
    mod mutate;
    mod scenario;
    mod stat;
    mod webconfig;
}

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use proptest::test_runner::Config as ProptestConfig;

/// A call that has not returned after this long is a hang. Parsing any
/// input here takes milliseconds; the margin is for a loaded CI machine.
const HANG: Duration = Duration::from_secs(10);

/// The proptest config of one property: `cases` unless PROPTEST_CASES says
/// otherwise.
fn cases(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        // A failing input goes into the corpus by hand, as a named file;
        // proptest's own regression files would be written into the tree.
        failure_persistence: None,
        // Shrinking a hang costs HANG per step: give up on it early.
        max_shrink_time: 60_000,
        // Structured mutations reject the few trees TOML cannot write (a
        // null); that share must not abort a long run.
        max_global_rejects: cases.max(1024),
        ..ProptestConfig::default()
    }
}

/// Runs `f(input)` on a thread of its own and fails when it has not
/// returned within [`HANG`]: a parser that loops forever then fails one
/// case instead of stalling CI. A panic inside `f` is raised again here,
/// so proptest sees it and shrinks the input.
fn bounded<I, O>(what: &str, input: I, f: fn(I) -> O) -> O
where
    I: Send + 'static,
    O: Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::Builder::new()
        .name(format!("fuzz-{what}"))
        .spawn(move || {
            let _ = tx.send(f(input));
        })
        .expect("spawn a fuzz worker");
    match rx.recv_timeout(HANG) {
        Ok(out) => {
            let _ = worker.join();
            out
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{what}: the worker ended without an answer"),
        },
        // The worker is left running: there is no way to stop a thread,
        // and the test fails anyway.
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} did not return within {HANG:?}: it hangs"),
    }
}

/// An error message fit for one log line: non-empty, no line breaks.
fn assert_one_line(what: &str, msg: &str) {
    assert!(!msg.trim().is_empty(), "{what}: empty error message");
    assert!(
        !msg.contains(['\n', '\r']),
        "{what}: error message spans lines: {msg:?}"
    );
}

/// Repository-relative path.
fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// One seed input: where it came from and its bytes.
#[derive(Debug, Clone)]
struct Seed {
    name: String,
    path: PathBuf,
    bytes: Vec<u8>,
}

impl Seed {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// TOML seeds as JSON trees, for structured mutation (the config and
/// scenario targets); a seed that is not TOML is a broken corpus.
fn toml_trees(seeds: &[Seed]) -> Vec<serde_json::Value> {
    seeds
        .iter()
        .map(|s| {
            let t: toml::Table = toml::from_str(&s.text()).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            serde_json::to_value(t).expect("toml to json")
        })
        .collect()
}

/// The seeds of `target`: every file in `tests/fuzz/corpus/<target>/` and
/// the shipped files named in `shipped` (read where they live, so the
/// corpus cannot drift from them), sorted by name for stable case indices.
fn corpus(target: &str, shipped: &[&str]) -> Vec<Seed> {
    let dir = repo(&format!("tests/fuzz/corpus/{target}"));
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths.extend(shipped.iter().map(|s| repo(s)));
    let seeds: Vec<Seed> = paths
        .into_iter()
        .map(|path| Seed {
            name: path
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap_or(&path)
                .display()
                .to_string(),
            bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("seed {}: {e}", path.display())),
            path,
        })
        .collect();
    assert!(seeds.len() >= 4, "corpus {target} has only {} seeds", seeds.len());
    seeds
}
