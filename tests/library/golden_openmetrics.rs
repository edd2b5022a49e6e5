//! The OpenMetrics golden (`tests/golden/demo.om.txt`) parsed as
//! OpenMetrics 1.0 by a small strict checker, so the file `golden.rs`
//! compares byte for byte is also known to be valid: metadata before
//! samples, counter naming, `# EOF` last, no duplicate series or labels,
//! label escaping, UNIT and HELP well formed. A render with hostile label
//! values checks escaping round-trips. The checker follows the spec's ABNF
//! for what gpumemd writes; it does not cover exemplars or histograms.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpumemd::app::config::Config;
use gpumemd::data::snapshot::{Device, Memory, Process, Snapshot, Who};
use gpumemd::serve::metrics::{self, DaemonState, Format};

#[derive(Debug, Default)]
struct Family {
    kind: Option<String>,
    unit: Option<String>,
    help: bool,
    samples: usize,
}

/// A parsed sample: its name, unescaped labels and value.
type Sample = (String, Vec<(String, String)>, f64);

fn is_name(s: &str, colon: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut cs = s.chars();
    cs.next().is_some_and(|c| ok(c, true)) && cs.all(|c| ok(c, false))
}

/// Undoes OpenMetrics escaping (`\\`, `\"`, `\n`); raw `"`, `\` or a
/// newline, and any other escape, are errors.
fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut cs = s.chars();
    while let Some(c) = cs.next() {
        match c {
            '\\' => match cs.next() {
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some('n') => out.push('\n'),
                e => return Err(format!("bad escape \\{e:?} in {s:?}")),
            },
            '"' | '\n' => return Err(format!("unescaped {c:?} in {s:?}")),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// `name{a="x",b="y"} value` into its parts.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return Err(format!("no value: {line}")),
    };
    let mut labels = Vec::new();
    let mut rest = rest;
    if let Some(mut r) = rest.strip_prefix('{') {
        while !r.starts_with('}') {
            let (k, after) = r.split_once("=\"").ok_or(format!("label without =\": {line}"))?;
            // The value ends at the first quote not escaped.
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            let end = end.ok_or(format!("unterminated label value: {line}"))?;
            if !is_name(k, false) || k.starts_with("__") {
                return Err(format!("bad label name {k:?}: {line}"));
            }
            labels.push((k.to_string(), unescape(&after[..end])?));
            r = &after[end + 1..];
            r = r.strip_prefix(',').filter(|x| !x.starts_with('}')).unwrap_or(r);
        }
        rest = &r[1..];
    }
    let value = rest.strip_prefix(' ').ok_or(format!("no space before value: {line}"))?;
    let v = match value {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad value {v:?}: {line}"))?,
    };
    Ok((name.to_string(), labels, v))
}

/// Checks `text` as OpenMetrics; returns every sample.
fn check_openmetrics(text: &str) -> Result<Vec<Sample>, String> {
    let body = text
        .strip_suffix("# EOF\n")
        .ok_or("does not end in # EOF and a newline")?;
    if body.contains("# EOF") {
        return Err("# EOF before the end".into());
    }
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current = String::new();
    let mut series = BTreeSet::new();
    let mut out = Vec::new();
    for line in body.lines() {
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (what, name, arg) = (parts.next(), parts.next().unwrap_or(""), parts.next());
            if !is_name(name, true) {
                return Err(format!("bad family name: {line}"));
            }
            if name != current {
                if families.contains_key(name) {
                    return Err(format!("family {name} interleaved with another"));
                }
                current = name.to_string();
            }
            let f = families.entry(name.to_string()).or_default();
            if f.samples > 0 {
                return Err(format!("metadata after samples: {line}"));
            }
            match (what, arg) {
                (Some("HELP"), Some(h)) if !f.help => {
                    unescape(h)?;
                    f.help = true;
                }
                (Some("TYPE"), Some(t)) if f.kind.is_none() => f.kind = Some(t.to_string()),
                (Some("UNIT"), Some(u)) if f.unit.is_none() && is_name(u, false) => f.unit = Some(u.to_string()),
                _ => return Err(format!("bad or repeated metadata: {line}")),
            }
            continue;
        }
        let (name, labels, v) = parse_sample(line)?;
        let f = families
            .get_mut(&current)
            .ok_or(format!("sample before any TYPE: {line}"))?;
        let kind = f.kind.as_deref().ok_or(format!("sample before its TYPE: {line}"))?;
        let want = match kind {
            "gauge" | "unknown" | "info" | "stateset" => current.clone(),
            "counter" => format!("{current}_total"),
            k => return Err(format!("type {k} is not one gpumemd writes: {line}")),
        };
        if name != want {
            return Err(format!("sample {name} in family {current} ({kind}) should be {want}"));
        }
        if kind == "counter" && (v.is_nan() || v < 0.0) {
            return Err(format!("counter below zero or NaN: {line}"));
        }
        let names: BTreeSet<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        if names.len() != labels.len() {
            return Err(format!("repeated label name: {line}"));
        }
        let mut key = labels.clone();
        key.sort();
        if !series.insert((name.clone(), key)) {
            return Err(format!("duplicate series: {line}"));
        }
        f.samples += 1;
        out.push((name, labels, v));
    }
    for (name, f) in &families {
        if f.kind.is_none() {
            return Err(format!("{name} has no TYPE"));
        }
        if f.kind.as_deref() == Some("counter") && name.ends_with("_total") {
            return Err(format!("counter family {name} ends in _total"));
        }
        if let Some(u) = &f.unit
            && !name.ends_with(&format!("_{u}"))
        {
            return Err(format!("{name} does not end in its unit {u}"));
        }
    }
    Ok(out)
}

#[test]
fn the_openmetrics_golden_is_valid_openmetrics() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/demo.om.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let samples = check_openmetrics(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // The checker saw the file's substance, not an empty shell.
    assert!(samples.len() > 50, "{} samples", samples.len());
    assert!(samples.iter().any(|(n, _, _)| n == "gpumem_polls_total"));
}

#[test]
fn the_checker_refuses_what_it_must() {
    let ok = "# HELP a x\n# TYPE a counter\na_total 1\n# EOF\n";
    assert!(check_openmetrics(ok).is_ok());
    for bad in [
        "# TYPE a counter\na_total 1\n",                                // no EOF
        "# TYPE a counter\na_total 1\n# EOF\n# TYPE b gauge\n# EOF\n",  // EOF twice
        "a 1\n# TYPE a gauge\n# EOF\n",                                 // sample before TYPE
        "# TYPE a_total counter\na_total_total 1\n# EOF\n",             // counter family named _total
        "# TYPE a counter\na 1\n# EOF\n",                               // counter sample without _total
        "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n# EOF\n",          // duplicate series
        "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n# EOF\n",                // repeated label
        "# TYPE a gauge\na{x=\"a\\tb\"} 1\n# EOF\n",                    // unknown escape
        "# TYPE a gauge\n# TYPE b gauge\nb 1\n# TYPE a gauge\n# EOF\n", // interleaved
        "# TYPE a gauge\n# UNIT a bytes\na 1\n# EOF\n",                 // unit not the suffix
        "# HELP a say \"hi\"\n# TYPE a gauge\n# EOF\n",                 // raw quote in HELP
        "# TYPE a gauge\na 1\n# HELP a late\n# EOF\n",                  // metadata after samples
    ] {
        assert!(check_openmetrics(bad).is_err(), "accepted: {bad:?}");
    }
}

#[test]
fn hostile_label_values_round_trip_through_escaping() {
    let comm = "a\"b\\c\nd}e,f=\"g";
    let mut cfg = Config::defaults(false);
    cfg.processes.cmdline = true;
    let snap = Snapshot {
        nvml_up: true,
        devices: vec![Device {
            uuid: "GPU-\"q\"".into(),
            up: true,
            memory: Some(Memory::default()),
            processes: vec![Process {
                pid: 7,
                used_bytes: Some(1),
                who: Who::shared(comm, "\\", None),
                cmdline: Some("python -c 'print(\"x\")'\n".into()),
                ..Process::default()
            }],
            ..Device::default()
        }],
        ..Snapshot::default()
    };
    let build = metrics::BuildInfo {
        version: "v",
        revision: "r",
    };
    let text = metrics::render(
        &snap,
        &DaemonState::default(),
        &cfg.processes,
        &build,
        Format::OpenMetrics,
    );
    let samples = check_openmetrics(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let (_, labels, _) = samples
        .iter()
        .find(|(n, _, _)| n == "gpumem_process_info")
        .unwrap_or_else(|| panic!("no process_info\n{text}"));
    let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("uuid"), Some("GPU-\"q\""));
    assert_eq!(get("comm"), Some(comm));
    assert_eq!(get("user"), Some("\\"));
    assert_eq!(get("cmdline"), Some("python -c 'print(\"x\")'\n"));
}
