//! `gpumemd check` as a Slurm epilog runs it: against a daemon (a fixture
//! server answering `/api/v1/snapshot`), polling once (`--demo`), and with
//! nobody to ask; exit codes 0/1/2 and the one line on stdout.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_gpumemd");

fn check(args: &[&str]) -> (Option<i32>, String) {
    let o: Output = Command::new(BIN)
        .arg("check")
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpumemd check");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        out.lines().count(),
        1,
        "one line: {out:?} (stderr {:?})",
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), out.trim_end().to_string())
}

/// Serves `body` with `status` to every request on a thread; returns the
/// base URL and a channel of the request heads it saw.
fn fixture_daemon(status: u16, body: String) -> (String, std::sync::mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for mut s in l.incoming().map_while(Result::ok) {
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).is_ok_and(|n| n == 1) {
                head.push(b[0]);
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, rx)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/fixtures/check/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
}

#[test]
fn asks_the_daemon_and_names_what_the_job_left() {
    let (url, seen) = fixture_daemon(200, fixture("job-left.json"));
    let (code, line) = check(&["--url", &url, "--job", "4242"]);
    assert_eq!(code, Some(1), "{line}");
    assert_eq!(
        line,
        "LEFT: 6.0 GiB on GPU 0: pid 4101 (python, user alice, job 4242) still holds it after its job"
    );
    assert!(
        seen.recv()
            .expect("a request")
            .starts_with("GET /api/v1/snapshot HTTP/1.1")
    );
    // The job still running is not this job's leftover.
    assert_eq!(check(&["--url", &url, "--job", "9999"]).0, Some(0));
    // NHC on a node that should be idle but for root: both holders count.
    let (code, line) = check(&["--url", &url, "--allow-user", "root"]);
    assert_eq!(code, Some(1));
    assert!(line.ends_with("(and 1 more, 8.0 GiB in all)"), "{line}");
}

#[test]
fn basic_auth_from_the_url_goes_in_the_header_not_the_messages() {
    let (url, seen) = fixture_daemon(401, "unauthorized".into());
    let with_auth = url.replace("http://", "http://ops:s3cret@");
    let (code, line) = check(&["--url", &with_auth, "--pid", "1"]);
    assert_eq!(code, Some(2), "{line}");
    assert!(line.starts_with("UNKNOWN: cannot tell: http://127.0.0.1:"), "{line}");
    assert!(line.ends_with("/api/v1/snapshot answered HTTP 401"), "{line}");
    assert!(!line.contains("s3cret"), "{line}");
    let head = seen.recv().expect("a request");
    // base64("ops:s3cret")
    assert!(head.contains("authorization: Basic b3BzOnMzY3JldA=="), "{head}");
}

#[test]
fn nobody_to_ask_or_a_bad_flag_is_exit_2() {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let (code, line) = check(&["--url", &format!("http://127.0.0.1:{port}"), "--timeout", "5s"]);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.starts_with("UNKNOWN: cannot tell: cannot ask http://127.0.0.1:"),
        "{line}"
    );
    let (code, line) = check(&["--demo", "--max-unattributed", "lots"]);
    assert_eq!(code, Some(2));
    assert!(line.starts_with("UNKNOWN: --max-unattributed:"), "{line}");
    let (code, line) = check(&["--url", "not a url"]);
    assert_eq!(
        (code, line.as_str()),
        (Some(2), "UNKNOWN: cannot tell: `not a url` is not a URL")
    );
}

#[test]
fn polls_once_without_a_daemon() {
    // The demo's first poll: job 4242 still runs on GPU 0, nothing exited yet.
    let (code, line) = check(&["--demo"]);
    assert_eq!(
        (code, line.as_str()),
        (Some(0), "OK: no GPU memory left behind on 2 GPU(s)")
    );
    let (code, line) = check(&["--demo", "--job", "4242"]);
    assert_eq!(code, Some(1), "{line}");
    assert!(line.contains("job 4242) still holds it after its job"), "{line}");
}

/// A PATH directory with `gpumemd` (this build) and stand-ins for the Slurm
/// and syslog tools the recipes call; each stand-in appends its arguments
/// to `calls` so the test sees what the recipe did.
fn slurm_stubs(running_jobs: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = dir.path().join("calls");
    std::os::unix::fs::symlink(BIN, dir.path().join("gpumemd")).expect("symlink");
    for (name, body) in [
        ("scontrol", String::new()),
        ("logger", String::new()),
        ("squeue", format!("printf '{running_jobs}'\n")),
    ] {
        let p = dir.path().join(name);
        let script = format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}", calls.display());
        std::fs::write(&p, script).expect("write stub");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    (dir, calls)
}

/// Runs a recipe of deploy/slurm with the stubs first on PATH.
fn recipe(name: &str, url: &str, stubs: &std::path::Path, job: &str) -> (Option<i32>, String) {
    let script = format!("{}/deploy/slurm/{name}", env!("CARGO_MANIFEST_DIR"));
    let path = format!("{}:{}", stubs.display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new("sh")
        .arg(script)
        .env("PATH", path)
        .env("GPUMEMD_URL", url)
        .env("SLURM_JOB_ID", job)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the recipe");
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn the_slurm_epilog_drains_on_a_leftover_and_only_logs_when_it_cannot_tell() {
    let (url, _seen) = fixture_daemon(200, fixture("job-left.json"));
    let (stubs, calls) = slurm_stubs("");
    let (code, _) = recipe("epilog-gpumemd.sh", &url, stubs.path(), "4242");
    assert_eq!(code, Some(0), "an epilog never fails itself");
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(
        log.contains("logger -t gpumemd-epilog job 4242: LEFT: 6.0 GiB on GPU 0"),
        "{log}"
    );
    assert!(
        log.contains("scontrol update nodename=") && log.contains("state=drain reason=gpumemd: LEFT: 6.0 GiB"),
        "{log}"
    );
    // A job that left nothing: logged, no drain.
    std::fs::remove_file(&calls).expect("reset");
    assert_eq!(recipe("epilog-gpumemd.sh", &url, stubs.path(), "9999").0, Some(0));
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(log.contains("job 9999: OK") && !log.contains("scontrol"), "{log}");
    // No daemon (exit 2): logged, no drain.
    std::fs::remove_file(&calls).expect("reset");
    let gone = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}", gone.local_addr().expect("addr"));
    drop(gone);
    assert_eq!(recipe("epilog-gpumemd.sh", &dead, stubs.path(), "4242").0, Some(0));
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(log.contains("logger") && !log.contains("scontrol"), "{log}");
}

#[test]
fn the_nhc_check_allows_only_the_jobs_slurm_still_runs() {
    let (url, _seen) = fixture_daemon(200, fixture("job-left.json"));
    // Only job 4300 still runs: job 4242's process is a leftover.
    let (stubs, calls) = slurm_stubs("4300\\n");
    let (code, out) = recipe("gpumemd-nhc", &url, stubs.path(), "");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("pid 4101") && out.contains("job 4242"), "{out}");
    assert!(
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .contains("squeue -h -w")
    );
    // Both still run: healthy.
    let (stubs, _) = slurm_stubs("4242\\n4300\\n");
    let (code, out) = recipe("gpumemd-nhc", &url, stubs.path(), "");
    assert_eq!(code, Some(0), "{out}");
}
