//! The crate's modules depend on each other in one direction. This test reads
//! `src/` as text: each top-level module (`src/x.rs` or `src/x/`) is a node,
//! each `crate::x` path used outside `#[cfg(test)]` code is an edge, and any
//! circle fails with the modules in it. Inside a folder module the same holds
//! for its files (`super::y` and `crate::x::y` paths). The leaves named in
//! `LEAVES` must not depend on anything in the crate at all. Every top-level
//! module belongs to one concept of `CONCEPTS`, and a module uses only its
//! own concept or those listed before it, but for the edges of `UPWARD`.
//!
//! It must not compile or run the crate: it is a reading of the source, cheap
//! enough for every `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules everything may use and that use nothing of the crate.
const LEAVES: &[&str] = &["clock", "sysnotify", "units", "snapshot"];

/// The concepts, lowest first, and their modules (docs/design.md's map).
const CONCEPTS: &[(&str, &[&str])] = &[
    (
        "data",
        &["snapshot", "units", "clock", "events", "links", "files", "sysnotify"],
    ),
    (
        "collect",
        &[
            "source",
            "cuda",
            "attribution",
            "health",
            "allocator",
            "ledger",
            "diagnosis",
            "pipeline",
            "poller",
            "history",
        ],
    ),
    ("judge", &["rules", "report"]),
    ("act", &["alerts", "notify", "reclaim", "suspend_follow"]),
    ("serve", &["metrics", "http", "statuspage"]),
    (
        "app",
        &["config", "reload", "daemon", "logging", "shutdown", "hangup", "malloc"],
    ),
    (
        "cli",
        &["cli", "check", "snapshot_cmd", "table", "remote", "report_cmd"],
    ),
];

/// The edges that go up the concepts, each with its reason. `config` gathers
/// every section's types from the modules that own them, so it sits above
/// them; the few readers below it that need the whole configuration or the
/// reload state name it here.
const UPWARD: &[(&str, &str, &str)] = &[
    ("pipeline", "config", "attribution and diagnosis settings of a poll"),
    ("metrics", "config", "the config hash and the rules listed as metrics"),
    ("metrics", "reload", "the reload success metrics"),
    ("http", "config", "web and server settings"),
    ("http", "reload", "POST /-/reload and its state"),
];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its test modules and test-only files.
fn production_code(rel: &str, text: &str) -> Option<String> {
    let test_file = rel.ends_with("_tests.rs")
        || rel
            .split('/')
            .any(|c| c == "tests" || c == "tests.rs" || c == "test.rs");
    if test_file {
        return None;
    }
    Some(text.split("#[cfg(test)]").next().unwrap_or_default().to_string())
}

/// Identifiers following `prefix` in `code` (`crate::` -> `foo` of `crate::foo::bar`),
/// including the names inside `prefix{a, b::c}` groups.
fn paths_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find('}').unwrap_or(group.len())];
            for item in body.split(',') {
                found.insert(ident(item.trim()));
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|s| !s.is_empty());
    found
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// `src/` as (module path relative to src, production code) pairs.
fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut out = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&src)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if let Some(code) = production_code(&rel, &text) {
            out.push((rel, code));
        }
    }
    out
}

fn top_module(rel: &str) -> String {
    let first = rel.split('/').next().unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// Circles of a graph, each as its sorted members (strongly connected components of 2+ nodes).
fn circles(g: &Graph) -> Vec<Vec<String>> {
    // Kosaraju on a small graph: reachability sets are fine at this size.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(n) = stack.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    stack.push(m.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|k| (k, reach(k))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (k, r) in &reach {
        let mut comp: Vec<String> = r
            .iter()
            .filter(|m| *m != *k && reach.get(m).is_some_and(|back| back.contains(*k)))
            .cloned()
            .collect();
        if comp.is_empty() {
            continue;
        }
        comp.push((*k).clone());
        comp.sort();
        if !out.contains(&comp) {
            out.push(comp);
        }
    }
    out
}

fn top_level_graph() -> Graph {
    let files = sources();
    let mods: BTreeSet<String> = files
        .iter()
        .map(|(rel, _)| top_module(rel))
        .filter(|m| m != "main" && m != "lib")
        .collect();
    let mut g = Graph::new();
    for (rel, code) in &files {
        let m = top_module(rel);
        if !mods.contains(&m) {
            continue;
        }
        let deps = paths_after(code, "crate::");
        let entry = g.entry(m.clone()).or_default();
        entry.extend(deps.into_iter().filter(|d| mods.contains(d) && *d != m));
    }
    g
}

#[test]
fn top_level_modules_have_no_circles() {
    let g = top_level_graph();
    assert!(g.len() > 10, "expected the crate's modules, found {:?}", g.keys());
    let c = circles(&g);
    assert!(c.is_empty(), "import circles among src/ modules: {c:?}\nedges: {g:#?}");
}

#[test]
fn leaves_depend_on_nothing_in_the_crate() {
    let g = top_level_graph();
    for leaf in LEAVES {
        let deps = g.get(*leaf).unwrap_or_else(|| panic!("leaf module {leaf} not found"));
        assert!(deps.is_empty(), "leaf module {leaf} uses {deps:?}");
    }
}

fn concept_of(module: &str) -> Option<usize> {
    CONCEPTS.iter().position(|(_, mods)| mods.contains(&module))
}

#[test]
fn every_module_has_one_concept_and_uses_only_lower_ones() {
    let g = top_level_graph();
    let mut errors = Vec::new();
    for (i, (name, mods)) in CONCEPTS.iter().enumerate() {
        for m in *mods {
            if !g.contains_key(*m) {
                errors.push(format!("{name}: module {m} does not exist"));
            }
            if CONCEPTS[i + 1..].iter().any(|(_, later)| later.contains(m)) {
                errors.push(format!("{m} is in two concepts"));
            }
        }
    }
    let mut used_upward = BTreeSet::new();
    for (m, deps) in &g {
        let Some(mine) = concept_of(m) else {
            errors.push(format!("module {m} has no concept in CONCEPTS"));
            continue;
        };
        for d in deps {
            let Some(theirs) = concept_of(d) else { continue };
            if theirs <= mine {
                continue;
            }
            if UPWARD.iter().any(|(from, to, _)| from == m && to == d) {
                used_upward.insert((m.clone(), d.clone()));
            } else {
                errors.push(format!(
                    "{m} ({}) uses {d} ({}), a later concept: move one of them or name the edge in UPWARD",
                    CONCEPTS[mine].0, CONCEPTS[theirs].0
                ));
            }
        }
    }
    for (from, to, _) in UPWARD {
        if !used_upward.contains(&(from.to_string(), to.to_string())) {
            errors.push(format!("UPWARD names {from} -> {to}, which the code no longer has"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn files_inside_a_folder_module_have_no_circles() {
    let files = sources();
    let mut by_folder: BTreeMap<String, Graph> = BTreeMap::new();
    for (rel, code) in &files {
        let parts: Vec<&str> = rel.split('/').collect();
        if parts.len() != 2 || parts[1] == "mod.rs" {
            continue;
        }
        let (folder, me) = (parts[0], parts[1].trim_end_matches(".rs"));
        let mut deps = paths_after(code, "super::");
        deps.extend(paths_after(code, &format!("crate::{folder}::")));
        deps.remove(me);
        by_folder
            .entry(folder.to_string())
            .or_default()
            .insert(me.to_string(), deps);
    }
    for (folder, g) in &by_folder {
        let c = circles(g);
        assert!(c.is_empty(), "import circles inside src/{folder}/: {c:?}");
    }
}

#[test]
fn the_circle_finder_finds_circles() {
    let mut g = Graph::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), ["a".to_string()].into());
    g.insert("d".into(), ["a".to_string()].into());
    assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
    assert_eq!(
        paths_after("use crate::{a::X, b};\nlet y = crate::c::f();", "crate::"),
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    );
}
