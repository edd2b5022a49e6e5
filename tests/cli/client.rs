//! The client subcommands (`snapshot --url`, `check --url`, `suspend`,
//! `resume`) against a real daemon behind TLS (a private CA made here with
//! rcgen) and basic auth, all with the same options; and what `suspend` and
//! `resume` say on success, on refusal, with the lifecycle API off and with
//! no daemon: one line, what happened and what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::bin::{BIN, gpumemd};
use crate::common;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// The demo's Jupyter kernel (default scenario, GPU 0).
const KERNEL: &str = "4303";

fn out(o: &Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).trim_end().to_string(),
        String::from_utf8_lossy(&o.stderr).trim_end().to_string(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write test file");
    p
}

/// A CA, a server certificate for 127.0.0.1 signed by it, and the web
/// config (TLS, basic auth user `ops`) and daemon config (lifecycle API on,
/// suspend by API) that use them; returns the CA's path.
fn tls_and_auth(dir: &Path, password: &str) -> PathBuf {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, "gpumemd test CA");
    let ca_key = KeyPair::generate().expect("key");
    let ca = p.self_signed(&ca_key).expect("self-sign");
    let issuer = Issuer::new(p, ca_key);
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
    let key = KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &issuer).expect("sign");
    write(dir, "server.pem", &cert.pem());
    write(dir, "server.key", &key.serialize_pem());
    let hash = bcrypt::hash(password, 4).expect("bcrypt");
    write(
        dir,
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nbasic_auth_users:\n  ops: \"{hash}\"\n"
        ),
    );
    let state = dir.join("state");
    write(
        dir,
        "gpumemd.toml",
        &format!(
            "[server]\nenable_lifecycle = true\n[state]\ndir = \"{}\"\n[reclaim]\nenabled = true\ndry_run = false\n\
             allow_all_users = true\ndeny_users = []\n",
            state.display()
        ),
    );
    write(dir, "ca.pem", &ca.pem())
}

/// A demo daemon on 127.0.0.1:0 with `args`; its address from the log.
fn daemon(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["--demo", "--web.listen-address", "127.0.0.1:0", "--log-format", "json"])
        .args(args)
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("\"listening\""))
        .expect("a listening log line");
    // Keep draining the log so the daemon never blocks on a full pipe.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    let v: serde_json::Value = serde_json::from_str(&listening).expect("JSON log line");
    (child, v["address"].as_str().expect("address").to_string())
}

struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_client_subcommand_speaks_tls_and_basic_auth() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = tls_and_auth(dir.path(), "s3cret");
    let pw = write(dir.path(), "pw", "s3cret\n");
    let wrong = write(dir.path(), "wrong", "guess\n");
    let web = dir.path().join("web.yml");
    let cfg = dir.path().join("gpumemd.toml");
    let (child, addr) = daemon(&[
        "--web.config.file",
        web.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let _stop = Stop(child);
    let url = format!("https://{addr}");
    let (ca, pw, wrong) = (ca.to_str().unwrap(), pw.to_str().unwrap(), wrong.to_str().unwrap());
    let with = |sub: &[&str], password: &str| {
        let mut a = sub.to_vec();
        a.extend([
            "--url",
            &url,
            "--ca-file",
            ca,
            "--auth-user",
            "ops",
            "--password-file",
            password,
        ]);
        out(&gpumemd(&a))
    };

    // Until the daemon's first poll lists the kernel.
    let json = common::wait_blocking(Duration::from_secs(30), "the demo's kernel listed", || {
        let (code, json, err) = with(&["snapshot", "--json", "--pid", KERNEL], pw);
        assert_eq!(code, Some(0), "{err}");
        json.contains("jupyter-kernel").then_some(json)
    });
    let v: serde_json::Value = serde_json::from_str(&json).expect("a snapshot");
    assert_eq!(
        v["devices"][0]["processes"][0]["pid"].as_u64(),
        KERNEL.parse().ok(),
        "{json}"
    );
    let (code, line, _) = with(&["check", "--pid", "999999"], pw);
    assert_eq!((code, line.starts_with("OK: ")), (Some(0), true), "{line}");
    // A wrong password is refused by the daemon, and said so.
    let (code, line, _) = with(&["check", "--pid", "1"], wrong);
    assert_eq!(code, Some(2), "{line}");
    assert!(line.ends_with("/api/v1/snapshot answered HTTP 401"), "{line}");
    // Without the private CA the daemon's certificate is not trusted.
    let (code, _, err) = out(&gpumemd(&[
        "snapshot",
        "--url",
        &url,
        "--auth-user",
        "ops",
        "--password-file",
        pw,
    ]));
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(&format!("gpumemd: cannot ask {url}/api/v1/snapshot: ")),
        "{err}"
    );
    assert!(err.contains("UnknownIssuer"), "{err}");

    // suspend and resume: what happened, in one line.
    let (code, line, err) = with(&["suspend", KERNEL], pw);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        line.starts_with(&format!("suspended PID {KERNEL} (jupyter-kernel, ")) && line.ends_with(" to host memory)"),
        "{line}"
    );
    let (code, line, err) = with(&["suspend", KERNEL], pw);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        err.starts_with(&format!("gpumemd: cannot suspend PID {KERNEL}: ")),
        "{err}"
    );
    assert!(!err.contains('{'), "no raw JSON: {err}");
    let (code, line, err) = with(&["resume", KERNEL], pw);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        line.starts_with(&format!("resumed PID {KERNEL} (jupyter-kernel, ")) && line.ends_with(" back on the GPU)"),
        "{line}"
    );
    // Refused: the reason and what to do, not `404 Not Found: {...}`.
    let (code, line, err) = with(&["resume", KERNEL], pw);
    assert_eq!((code, line.as_str()), (Some(1), ""));
    assert_eq!(
        err,
        format!(
            "gpumemd: cannot resume PID {KERNEL}: gpumemd has not suspended it (refused not_suspended); \
             `gpumemd snapshot --url URL` shows what is suspended"
        )
    );
    // --json: the daemon's answer as it came, for scripts.
    let (code, json, _) = with(&["resume", KERNEL, "--json"], pw);
    assert_eq!(code, Some(1));
    let v: serde_json::Value = serde_json::from_str(&json).expect("raw JSON");
    assert_eq!(
        (v["result"].as_str(), v["reason"].as_str()),
        (Some("refused"), Some("not_suspended"))
    );
}

#[test]
fn lifecycle_off_and_no_daemon_say_what_to_do() {
    let (child, addr) = daemon(&[]);
    let _stop = Stop(child);
    let (code, line, err) = out(&gpumemd(&["suspend", KERNEL, "--url", &format!("http://{addr}")]));
    assert_eq!((code, line.as_str()), (Some(1), ""));
    assert_eq!(
        err,
        format!(
            "gpumemd: cannot suspend PID {KERNEL}: the daemon's lifecycle API is off; set `[server] \
             enable_lifecycle = true` in its config and reload it (systemctl reload gpumemd)"
        )
    );
    // No daemon: the URL and the cause.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let (code, _, err) = out(&gpumemd(&["resume", "7", "--url", &format!("http://127.0.0.1:{port}")]));
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        format!(
            "gpumemd: cannot ask http://127.0.0.1:{port}/api/v1/processes/7/resume: Connection refused (os error \
             111); is gpumemd running and listening there?"
        )
    );
    // Options that only make sense with a daemon are not silently ignored.
    let (code, _, err) = out(&gpumemd(&["check", "--demo", "--auth-user", "ops"]));
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = out(&gpumemd(&["snapshot", "--demo", "--ca-file", "ca.pem"]));
    assert_eq!(
        (code, err.as_str()),
        (Some(1), "gpumemd: --ca-file is for asking a daemon; give --url too")
    );
}

#[test]
fn man_pages_and_the_readme_document_the_client_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = gpumemd(&["generate", "man", "--dir", dir.path().to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o).2);
    let page = |sub: &str| std::fs::read_to_string(dir.path().join(format!("gpumemd-{sub}.1"))).unwrap_or_default();
    let client = [
        "\\-\\-url",
        "\\-\\-ca\\-file",
        "\\-\\-cert\\-file",
        "\\-\\-key\\-file",
        "\\-\\-auth\\-user",
    ];
    for sub in ["check", "snapshot", "suspend", "resume"] {
        let text = page(sub);
        for flag in client.iter().chain(&["\\-\\-password\\-file"]) {
            assert!(text.contains(flag), "gpumemd-{sub}.1 lacks {flag}");
        }
    }
    assert!(page("snapshot").contains("\\-\\-top"), "gpumemd-snapshot.1 lacks --top");
    assert!(page("suspend").contains("\\-\\-json"), "gpumemd-suspend.1 lacks --json");
    assert!(
        !page("resume").contains("\\-\\-user "),
        "the old --user spelling stays hidden"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let start = readme.find("## Command line").expect("a Command line section");
    let section = &readme[start
        ..readme[start..]
            .find("\n## Configuration")
            .map_or(readme.len(), |e| start + e)];
    for flag in [
        "--top",
        "--ca-file",
        "--cert-file",
        "--key-file",
        "--auth-user",
        "--password-file",
        "--json",
    ] {
        assert!(section.contains(flag), "README's Command line lacks {flag}");
    }
}
