//! The crate's modules depend on each other in one direction. This test reads
//! `src/` as text. Each folder under `src/` is a concept and each module in
//! it (`src/concept/x.rs` or `src/concept/x/`) is a node; `src/cli/mod.rs`
//! is the `cli` module itself, the command line's arguments. Each
//! `crate::concept::x` path used outside `#[cfg(test)]` code (and `super::x`
//! inside `src/cli/`) is an edge, and any circle fails with the modules in
//! it. Inside a module folder the same holds for its files (`super::y` and
//! `crate::concept::x::y` paths). The leaves named in `LEAVES` must not
//! depend on anything in the crate at all. A module uses only its own
//! concept or those before it in `CONCEPTS`, with no exception, so the
//! concepts themselves have no circle. The folders are the concepts: no
//! hand-kept list says which module is where.
//!
//! It must not compile or run the crate: it is a reading of the source, cheap
//! enough for every `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules everything may use and that use nothing of the crate.
const LEAVES: &[&str] = &["clock", "sysnotify", "units", "snapshot"];

/// The concepts (the folders of `src/`), lowest first (docs/design.md's map).
const CONCEPTS: &[&str] = &["data", "collect", "judge", "act", "app", "serve", "cli"];

/// Files of `src/` that belong to no concept: the library's and the
/// binary's roots and the binary's own modules (`mod` in `main.rs`), and
/// the unit tests' shared helpers.
const OUTSIDE: &[&str] = &["lib.rs", "main.rs", "hangup.rs", "malloc.rs", "tests"];

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

/// The concept and module of a file of `src/` (`collect/source/nvml/mod.rs`
/// -> `collect`, `source`; `cli/mod.rs` -> `cli`, `cli`), or `None` for one
/// outside the concepts.
fn place(rel: &str) -> Option<(String, String)> {
    let mut parts = rel.split('/');
    let (concept, second) = (parts.next()?, parts.next()?);
    let module = if second == "mod.rs" {
        concept
    } else {
        second.trim_end_matches(".rs")
    };
    Some((concept.to_string(), module.to_string()))
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

/// Each module's concept.
fn concepts() -> BTreeMap<String, String> {
    sources()
        .iter()
        .filter_map(|(rel, _)| place(rel))
        .map(|(c, m)| (m, c))
        .collect()
}

fn top_level_graph() -> Graph {
    let of = concepts();
    let mut g = Graph::new();
    for (rel, code) in &sources() {
        let Some((concept, m)) = place(rel) else { continue };
        let mut deps = BTreeSet::new();
        for c in CONCEPTS {
            deps.extend(paths_after(code, &format!("crate::{c}::")));
        }
        // The command line's modules reach its arguments as `super::`.
        let parts: Vec<&str> = rel.split('/').collect();
        let module_root = parts.len() == 2 || (parts.len() == 3 && parts[2] == "mod.rs");
        if concept == "cli" && m != "cli" && module_root && !paths_after(code, "super::").is_empty() {
            deps.insert("cli".to_string());
        }
        let entry = g.entry(m.clone()).or_default();
        entry.extend(deps.into_iter().filter(|d| of.contains_key(d) && *d != m));
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

#[test]
fn every_folder_of_src_is_a_concept() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for e in std::fs::read_dir(&src).expect("src/").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if OUTSIDE.contains(&name.as_str()) {
            continue;
        }
        if e.path().is_dir() && CONCEPTS.contains(&name.as_str()) {
            seen.insert(name);
        } else {
            errors.push(format!("src/{name} is in no concept: move it into one of {CONCEPTS:?}"));
        }
    }
    for c in CONCEPTS {
        if !seen.contains(*c) {
            errors.push(format!("concept {c} has no folder src/{c}/"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn every_module_uses_only_its_own_concept_or_lower_ones() {
    let g = top_level_graph();
    let of = concepts();
    let rank = |m: &str| of.get(m).and_then(|c| CONCEPTS.iter().position(|x| x == c));
    let mut errors = Vec::new();
    for (m, deps) in &g {
        let Some(mine) = rank(m) else { continue };
        for d in deps {
            let Some(theirs) = rank(d) else { continue };
            if theirs > mine {
                errors.push(format!(
                    "{m} ({}) uses {d} ({}), a later concept: move one of them, or the type it needs",
                    CONCEPTS[mine], CONCEPTS[theirs]
                ));
            }
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
        if parts.len() != 3 || parts[2] == "mod.rs" {
            continue;
        }
        let folder = format!("{}/{}", parts[0], parts[1]);
        let me = parts[2].trim_end_matches(".rs");
        let mut deps = paths_after(code, "super::");
        deps.extend(paths_after(code, &format!("crate::{}::{}::", parts[0], parts[1])));
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
