//! The `gpumemd` binary as a user runs it: exit codes and one-line errors
//! for bad input, `check-config`, JSON and logfmt logs, the
//! exporter flags (`--version`, `--log.level`, `--web.telemetry-path`), and a
//! clean exit 0 on SIGTERM, and every printing command into a closed pipe
//! (`snapshot` has its own file).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common;

use super::bin::{BIN, gpumemd, stderr};
use common::Lines;

fn write_tmp(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".toml").tempfile().expect("tempfile");
    std::fs::write(f.path(), text).expect("write");
    f
}

#[test]
fn bad_input_is_one_clear_line_and_exit_1() {
    let bad = write_tmp("[poll]\ninterval = \"1s\"\ntimeout = \"3s\"\n");
    let bad_path = bad.path().display().to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let zero_scenario = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero_scenario).expect("symlink");
    let zero_scenario = zero_scenario.display().to_string();
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--config", "/nonexistent/g.toml"],
            "gpumemd: config file /nonexistent/g.toml does not exist".into(),
        ),
        (
            vec!["check-config", &bad_path],
            format!("gpumemd: {bad_path}:3: poll.timeout: 3s is not below poll.interval (1s)"),
        ),
        (
            vec!["--demo", "--web.listen-address", "nowhere"],
            "gpumemd: --web.listen-address: `nowhere` has no port".into(),
        ),
        // Files that are not config files are refused, not read until
        // memory runs out.
        (
            vec!["--config", "/dev/zero"],
            "gpumemd: config file /dev/zero is a character device, not a regular file".into(),
        ),
        (
            vec!["check-config", "/dev/zero"],
            "gpumemd: config file /dev/zero is a character device, not a regular file".into(),
        ),
        (
            vec!["--demo", &zero_scenario],
            format!("gpumemd: cannot read scenario {zero_scenario}: is a character device"),
        ),
        (
            vec!["--demo", "no-such-scenario"],
            "gpumemd: unknown scenario `no-such-scenario`".into(),
        ),
        (
            vec!["snapshot", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"],
            "gpumemd: NVML not available: /nonexistent/libnvidia-ml.so.1 not found; use --demo to try without a GPU"
                .into(),
        ),
    ];
    for (args, want) in cases {
        let o = gpumemd(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with(&want), "{args:?}\n got: {err}\nwant: {want}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn an_address_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let o = gpumemd(&["--demo", "--web.listen-address", &addr]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let last = err.trim_end().lines().last().unwrap_or("");
    assert!(
        last.starts_with(&format!("gpumemd: cannot listen on {addr}: ")),
        "{err}"
    );
}

#[test]
fn check_config_prints_the_effective_config() {
    let f = write_tmp("[poll]\ninterval = \"2s\"\n");
    let o = gpumemd(&["check-config", &f.path().display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("interval = \"2s\""), "{out}");
    assert!(
        out.contains("timeout = \"1s 600ms\""),
        "derived timeout is printed: {out}"
    );
    assert!(out.contains("top_n = 50"), "{out}");
}

#[test]
fn check_config_redacts_url_tokens_and_secrets() {
    let f = write_tmp(
        "[notify.webhook]\nurl = \"https://hooks.example/services/T0/B0/SECRETPATH?token=SECRETQUERY\"\n\
         secret = \"SECRETHMAC\"\n",
    );
    let o = gpumemd(&["check-config", &f.path().display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("SECRET"), "{out}");
    assert!(out.contains("url = \"https://hooks.example/<redacted>\""), "{out}");
}

#[test]
fn a_config_over_the_size_cap_is_refused() {
    let f = write_tmp("");
    // Sparse: 2 GiB that cost no disk, and would cost 2 GiB of memory.
    std::fs::File::options()
        .write(true)
        .open(f.path())
        .and_then(|h| h.set_len(2 << 30))
        .expect("grow the file");
    let o = gpumemd(&["check-config", &f.path().display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is larger than the limit of 1048576 bytes"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn sigterm_exits_0() {
    let mut child = Command::new(BIN)
        .args(["--demo", "--web.listen-address", "127.0.0.1:0", "--log-format", "json"])
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    // The JSON log says where it listens; wait for that line (bounded by the
    // child's own output: it either logs it or exits).
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("\"listening\""))
        .expect("a listening log line");
    let v: serde_json::Value = serde_json::from_str(&listening).expect("JSON log line");
    // Flat, as Prometheus' exporters log: ts, level (lower case), msg, fields.
    assert_eq!(
        (v["level"].as_str(), v["msg"].as_str()),
        (Some("info"), Some("listening")),
        "{v}"
    );
    assert!(v["ts"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
    assert!(
        v["address"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{v}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait().map(|s| s.code()));
    });
    let code = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("gpumemd exits within 10 s of SIGTERM");
    assert_eq!(code.expect("wait"), Some(0));
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("SIGTERM received")), "{rest:?}");
}

#[test]
fn version_names_the_revision_and_build_date() {
    let o = gpumemd(&["--version"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let want = format!("gpumemd {} (revision ", env!("CARGO_PKG_VERSION"));
    assert!(out.starts_with(&want), "{out}");
    let date = out.trim_end().trim_end_matches(')').rsplit(' ').next().unwrap_or("");
    let parts: Vec<&str> = date.split('-').collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
        "a YYYY-MM-DD build date in {out}"
    );
}

/// `key=value` pairs of a logfmt line (quoted values unescaped just enough
/// for the test: no `\"` inside the values it reads).
fn logfmt(line: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut rest = line;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().to_string();
        let after = &rest[eq + 1..];
        let (value, next) = match after.strip_prefix('"') {
            Some(q) => {
                let end = q.find('"').expect("closing quote");
                (q[..end].to_string(), &q[end + 1..])
            }
            None => {
                let end = after.find(' ').unwrap_or(after.len());
                (after[..end].to_string(), &after[end..])
            }
        };
        out.insert(key, value);
        rest = next;
    }
    out
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("read");
    body
}

#[test]
fn logfmt_by_default_and_metrics_on_the_telemetry_path() {
    let mut child = Command::new(BIN)
        .args([
            "--demo",
            "--web.listen-address",
            "127.0.0.1:0",
            "--web.telemetry-path",
            "/prom",
        ])
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut log = Lines::new(child.stderr.take().expect("stderr"));
    let kv = logfmt(&log.wait_for("msg=listening", Duration::from_secs(20)));
    assert_eq!(kv.get("level").map(String::as_str), Some("info"), "{kv:?}");
    assert!(
        kv.get("ts").is_some_and(|t| t.ends_with('Z') && t.contains('T')),
        "{kv:?}"
    );
    let addr = kv.get("address").expect("address").clone();
    let metrics = http_get(&addr, "/prom");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("gpumem_build_info"), "{metrics}");
    assert!(http_get(&addr, "/metrics").starts_with("HTTP/1.1 404"));
    let _ = child.kill();
    let _ = child.wait();
    // Every line, not only the one read, is logfmt.
    assert!(
        log.seen
            .iter()
            .all(|l| l.starts_with("ts=") && logfmt(l).contains_key("msg")),
        "{:?}",
        log.seen
    );
}

#[test]
fn log_level_error_hides_info_and_a_clashing_telemetry_path_is_refused() {
    // Every route refuses it, those added after /-/ready too.
    for path in ["/-/ready", "/runbook", "/api/v1/summary"] {
        let o = gpumemd(&["--demo", "--web.telemetry-path", path]);
        assert_eq!(o.status.code(), Some(1), "{path}");
        assert_eq!(
            stderr(&o).trim(),
            format!("gpumemd: --web.telemetry-path: `{path}` is already a route of gpumemd")
        );
    }
    // A taken port fails after logging starts: at error level the only
    // line is the failure itself, none of the info lines before it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let o = gpumemd(&["--demo", "--log.level", "error", "--web.listen-address", &addr]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(!err.contains("level=info"), "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    let o = gpumemd(&["--demo", "--log.level", "info", "--web.listen-address", &addr]);
    assert!(stderr(&o).contains("level=info"), "{}", stderr(&o));
}

#[test]
fn man_page_and_completions_come_from_the_cli_definition() {
    let man = gpumemd(&["generate", "man"]);
    assert!(man.status.success(), "{}", stderr(&man));
    let man = String::from_utf8_lossy(&man.stdout);
    assert!(man.starts_with(".ie") && man.contains(".TH gpumemd 1"), "{man}");
    for flag in ["web.telemetry\\-path", "log.level", "log.format"] {
        assert!(man.contains(flag), "the man page lacks {flag}");
    }
    for (shell, needle) in [
        ("bash", "_gpumemd()"),
        ("zsh", "#compdef gpumemd"),
        ("fish", "complete -c gpumemd"),
    ] {
        let o = gpumemd(&["generate", shell]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && text.contains(needle), "{shell}: {text}");
        assert!(
            text.contains("check-config") && text.contains("telemetry"),
            "{shell} lacks commands or flags"
        );
    }
    assert!(gpumemd(&["generate", "powershell"]).status.code() == Some(2));
    // One page per subcommand, as the top page's SUBCOMMANDS section names.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = gpumemd(&["generate", "man", "--dir", dir.path().to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    for sub in ["check", "snapshot", "suspend", "resume", "check-config", "run"] {
        let text = page(&format!("gpumemd-{sub}.1"));
        assert!(
            text.contains(&format!(".TH gpumemd-{sub} 1")),
            "no gpumemd-{sub}.1: {text}"
        );
    }
    assert!(
        page("gpumemd-check.1").contains("allow\\-user"),
        "check's flags are documented"
    );
    assert!(page("gpumemd.1").contains("gpumemd\\-check(1)"));
    // `generate` is a listed subcommand (the README documents it).
    assert!(page("gpumemd-generate.1").contains(".TH gpumemd-generate 1"));
}

/// Runs `gpumemd ARGS` with its stdout a pipe whose reader is already gone,
/// as `gpumemd ARGS | head -0` leaves it.
fn into_closed_pipe(args: &[&str]) -> std::process::ExitStatus {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe(2)");
    // SAFETY: both descriptors are fresh and owned by nothing else.
    let (reader, writer) = unsafe {
        use std::os::fd::{FromRawFd, OwnedFd};
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    drop(reader);
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn gpumemd");
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().expect("stderr"), &mut err).expect("stderr");
    let status = child.wait().expect("wait");
    assert!(
        !err.contains("panicked"),
        "gpumemd {args:?} panicked on a closed pipe: {err}"
    );
    status
}

#[test]
fn a_closed_pipe_ends_every_printing_command_quietly() {
    let printing: [&[&str]; 7] = [
        &["generate", "bash"],
        &["generate", "zsh"],
        &["generate", "fish"],
        &["generate", "man"],
        &["snapshot", "--demo"],
        &["snapshot", "--demo", "--json"],
        &["check-config", "config/gpumemd.toml"],
    ];
    for args in printing {
        let status = into_closed_pipe(args);
        // A reader that left is not a failure, and never the panic exit 101.
        assert_eq!(status.code(), Some(0), "gpumemd {args:?} on a closed pipe: {status:?}");
    }
}
