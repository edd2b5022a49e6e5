//! `gpumemd check` as a Slurm epilog runs it: against a daemon (a fixture
//! server answering `/api/v1/snapshot`), polling once (`--demo`), and with
//! nobody to ask; exit codes 0/1/2 and the one line on stdout. The fixture
//! daemon is shared with the Slurm recipes' tests (slurm.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use super::bin::BIN;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};

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
pub(super) fn fixture_daemon(status: u16, body: String) -> (String, std::sync::mpsc::Receiver<String>) {
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

pub(super) fn fixture(name: &str) -> String {
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
