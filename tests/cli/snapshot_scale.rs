//! `gpumemd snapshot` at fleet scale and with hostile input: `--top` bounds
//! the table and the JSON, a `--gpu` that names no GPU is an error that
//! says which exist, columns are sized from their content without trailing
//! blanks, `--watch` fits a given terminal size, and names carrying
//! terminal control sequences reach the terminal escaped (in `check` too).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::process::{Command, Stdio};
use std::time::Duration;

use super::bin::{BIN, gpumemd};
use crate::common;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A scenario whose processes were named to attack a terminal, beside one
/// with a long name and a zombie holder.
fn hostile_scenario() -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".toml").tempfile().expect("tempfile");
    let toml = r#"name = "hostile"
[[gpu]]
name = "NVIDIA H100"
memory = "80GiB"

[[process]]
gpu = 0
pid = 4242
comm = "evil\u001b[2J\nroot"
user = "mallory"
uid = 1666
memory = "3GiB"
cmdline = "evil\u001b[2J --x"

[[process]]
gpu = 0
pid = 4243
comm = "a-long-process-name"
user = "alice"
uid = 1000
memory = "2GiB"
state = "zombie"
unit = "train.service"
"#;
    std::fs::write(f.path(), toml).expect("write scenario");
    f
}

#[test]
fn top_bounds_the_table_and_the_json() {
    let o = gpumemd(&["snapshot", "--demo", "large", "--top", "3", "--color", "never"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let more: Vec<&str> = out.lines().filter(|l| l.contains("... and ")).collect();
    assert_eq!(more.len(), 64, "one closing line per GPU");
    assert!(
        more.iter().all(|l| l.trim() == "... and 997 more processes"),
        "{more:?}"
    );
    // 64 GPUs of 3 rows each and a few lines around them, not 64,000.
    assert!(out.lines().count() < 64 * 12, "{} lines", out.lines().count());

    let o = gpumemd(&["snapshot", "--demo", "large", "--top", "2", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    for d in v["devices"].as_array().unwrap() {
        assert_eq!(d["processes"].as_array().unwrap().len(), 2);
        assert_eq!(d["processes_omitted"], 998);
    }
    // Piped without --top: every process, and no count of omitted ones.
    let o = gpumemd(&["snapshot", "--demo", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(
        v["devices"][0].get("processes_omitted").is_none(),
        "{}",
        v["devices"][0]
    );
}

#[test]
fn a_gpu_that_does_not_exist_is_an_error_naming_those_that_do() {
    for (demo, want) in [
        (
            "large",
            "gpumemd: --gpu 99: no such GPU; there are 64 GPUs, index 0-63 (or give a UUID)",
        ),
        (
            "default",
            "gpumemd: --gpu 99: no such GPU; the GPUs are index 0, 1 (or give a UUID)",
        ),
    ] {
        let o = gpumemd(&["snapshot", "--demo", demo, "--gpu", "99"]);
        assert_eq!(o.status.code(), Some(1), "{demo}");
        assert_eq!(text(&o.stderr).trim_end(), want);
        assert!(o.stdout.is_empty(), "no headers: {}", text(&o.stdout));
    }
}

#[test]
fn columns_fit_their_content_and_names_are_escaped() {
    let sc = hostile_scenario();
    let path = sc.path().to_str().unwrap();
    let o = gpumemd(&["snapshot", "--demo", path, "--color", "never"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(!out.contains('\x1b'), "raw ESC reached stdout: {out:?}");
    assert!(out.contains("evil\\u{1b}[2J\\nroot"), "{out}");
    assert!(out.lines().all(|l| !l.ends_with(' ')), "trailing blanks: {out:?}");
    let lines: Vec<&str> = out.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.trim_start().starts_with("PID"))
        .expect("header");
    let col = |l: &str, w: &str| l.find(w).unwrap_or(usize::MAX);
    let (evil, zombie) = (lines[head + 1], lines[head + 2]);
    assert_eq!(col(evil, "mallory"), col(lines[head], "USER"), "{out}");
    assert_eq!(col(zombie, "alice"), col(lines[head], "USER"), "{out}");
    assert_eq!(col(zombie, "zombie"), col(lines[head], "HOLDER"), "{out}");
    assert_eq!(col(zombie, "train.service"), col(lines[head], "UNIT"), "{out}");
    // The right-aligned USED column ends where its header ends.
    let end = |l: &str, w: &str| col(l, w) + w.len();
    assert_eq!(end(evil, "3.0 GiB"), end(lines[head], "USED"), "{out}");

    let o = gpumemd(&["check", "--demo", path, "--user", "mallory"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let line = text(&o.stdout);
    assert_eq!(line.lines().count(), 1, "one line: {line:?}");
    assert!(
        !line.contains('\x1b') && line.contains("evil\\u{1b}[2J\\nroot"),
        "{line:?}"
    );
}

/// The first `--watch` frame of a piped child, then the child is stopped:
/// the lines before the second frame's title, less the blank between.
fn first_frame(child: &mut std::process::Child) -> Vec<String> {
    let mut lines = common::Lines::new(child.stdout.take().expect("stdout"));
    lines.wait_for("(refresh 2,", Duration::from_secs(60));
    child.kill().expect("kill");
    let _ = child.wait();
    let mut frame: Vec<String> = lines
        .seen
        .into_iter()
        .take_while(|l| !l.contains("(refresh 2,"))
        .collect();
    assert_eq!(frame.pop().as_deref(), Some(""), "a blank line between frames");
    frame
}

#[test]
fn watch_fits_the_terminal_it_is_given() {
    let mut child = Command::new(BIN)
        .args(["snapshot", "--demo", "large", "--watch", "0.2", "--color", "never"])
        .env("COLUMNS", "120")
        .env("LINES", "40")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let frame = first_frame(&mut child);
    assert!(
        frame[0].starts_with("Every 200ms: gpumemd snapshot (refresh 1,"),
        "{frame:?}"
    );
    assert_eq!(frame.len(), 40, "the screen is used and not overrun: {frame:#?}");
    assert!(frame.iter().all(|l| l.chars().count() <= 120), "{frame:#?}");
    assert!(
        frame.iter().any(|l| l.starts_with("GPU ") && l.contains("FREE")),
        "the GPU lines: {frame:#?}"
    );
    assert!(frame.iter().any(|l| l.contains("worker-")), "processes: {frame:#?}");
    let last = frame.last().unwrap();
    assert!(
        last.starts_with("... and ") && last.contains(" more GPUs and ") && last.ends_with(" more processes"),
        "{last}"
    );
    // A screen narrower than the table cuts lines, never wraps them.
    let mut child = Command::new(BIN)
        .args(["snapshot", "--demo", "--watch", "0.2", "--color", "never"])
        .env("COLUMNS", "50")
        .env("LINES", "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let frame = first_frame(&mut child);
    assert!(
        frame.len() <= 30 && frame.iter().all(|l| l.chars().count() <= 50),
        "{frame:#?}"
    );
}
