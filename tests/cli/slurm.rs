//! The Slurm recipes of deploy/slurm (the epilog and the NHC check) run as
//! Slurm and NHC run them: a clean environment without PATH, the settings
//! file putting stand-ins for `scontrol`, `logger` and `hostname` first,
//! and this build's `gpumemd check` asking a fixture daemon. Each tooling
//! failure must end in "no action", never a drain or an offline node; a
//! drain that was wanted and failed must be loud.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::bin::BIN;
use super::check::{fixture, fixture_daemon};

/// The header `scontrol listpids` prints, then one line per process.
const LISTPIDS_HEADER: &str = "PID      JOBID    STEPID   LOCALID GLOBALID";

/// A node: a directory with `gpumemd` (this build), `awk`, the stand-ins
/// given as (name, shell body), and the settings file that makes that
/// directory the whole PATH. Every stand-in appends its arguments to
/// `calls` first.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new(stubs: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(BIN, dir.path().join("gpumemd")).expect("symlink gpumemd");
        let awk = ["/usr/bin/awk", "/bin/awk"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("awk");
        std::os::unix::fs::symlink(awk, dir.path().join("awk")).expect("symlink awk");
        let calls = dir.path().join("calls");
        for (name, body) in stubs {
            let p = dir.path().join(name);
            let script = format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}\n", calls.display());
            std::fs::write(&p, script).expect("write stub");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        std::fs::write(
            dir.path().join("settings"),
            format!("PATH='{}'\n", dir.path().display()),
        )
        .expect("settings");
        Node { dir }
    }

    /// Runs a recipe with only `env` set (no PATH, as slurmd runs an epilog).
    fn run(&self, recipe: &str, url: &str, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
        let script = format!("{}/deploy/slurm/{recipe}", env!("CARGO_MANIFEST_DIR"));
        let settings: PathBuf = self.dir.path().join("settings");
        let o = Command::new("/bin/sh")
            .arg(script)
            .env_clear()
            .env("GPUMEMD_SLURM_SETTINGS", settings)
            .env("GPUMEMD_URL", url)
            .envs(env.iter().copied())
            .output()
            .expect("run the recipe");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default()
    }
}

/// A URL where nothing listens: `gpumemd check` exits 2 (cannot tell).
fn dead_url() -> String {
    let gone = TcpListener::bind("127.0.0.1:0").expect("bind");
    format!("http://{}", gone.local_addr().expect("addr"))
}

const LOGGER: (&str, &str) = ("logger", "");
const HOSTNAME: (&str, &str) = ("hostname", "echo fallback-node");

#[test]
fn the_epilog_drains_the_slurmd_node_on_a_leftover_with_no_path_from_slurm() {
    let (url, _seen) = fixture_daemon(200, fixture("job-left.json"));
    let node = Node::new(&[("scontrol", ""), LOGGER, HOSTNAME]);
    let env = [("SLURM_JOB_ID", "4242"), ("SLURMD_NODENAME", "gpu17")];
    let (code, _, err) = node.run("epilog-gpumemd.sh", &url, &env);
    assert_eq!(code, Some(0), "{err}");
    let log = node.calls();
    assert!(
        log.contains("logger -t gpumemd-epilog job 4242: LEFT: 6.0 GiB on GPU 0"),
        "{log}"
    );
    assert!(
        log.contains("scontrol update nodename=gpu17 state=drain reason=gpumemd: LEFT: 6.0 GiB"),
        "{log}"
    );
    assert!(
        !log.contains("hostname"),
        "SLURMD_NODENAME is the node's Slurm name: {log}"
    );
    // Without SLURMD_NODENAME: the short host name.
    let (code, _, _) = node.run("epilog-gpumemd.sh", &url, &[("SLURM_JOB_ID", "4242")]);
    assert_eq!(code, Some(0));
    assert!(
        node.calls()
            .contains("scontrol update nodename=fallback-node state=drain")
    );
}

#[test]
fn the_epilog_only_logs_when_nothing_is_left_or_it_cannot_tell() {
    let (url, _seen) = fixture_daemon(200, fixture("job-left.json"));
    let node = Node::new(&[("scontrol", ""), LOGGER, HOSTNAME]);
    let env = [("SLURM_JOB_ID", "9999"), ("SLURMD_NODENAME", "gpu17")];
    assert_eq!(node.run("epilog-gpumemd.sh", &url, &env).0, Some(0));
    let log = node.calls();
    assert!(log.contains("job 9999: OK") && !log.contains("scontrol"), "{log}");
    // No daemon (exit 2): logged, no drain.
    let env = [("SLURM_JOB_ID", "4242"), ("SLURMD_NODENAME", "gpu17")];
    assert_eq!(node.run("epilog-gpumemd.sh", &dead_url(), &env).0, Some(0));
    let log = node.calls();
    assert!(log.contains("job 4242: UNKNOWN") && !log.contains("scontrol"), "{log}");
    // No gpumemd at all: logged with its exit status, no drain.
    std::fs::remove_file(node.dir.path().join("gpumemd")).expect("remove gpumemd");
    assert_eq!(node.run("epilog-gpumemd.sh", &url, &env).0, Some(0));
    let log = node.calls();
    assert!(
        log.contains("no answer from gpumemd check (exit 127)") && !log.contains("scontrol"),
        "{log}"
    );
}

#[test]
fn a_wanted_drain_that_fails_is_an_error_on_stderr_and_syslog_and_a_failed_epilog() {
    let (url, _seen) = fixture_daemon(200, fixture("job-left.json"));
    let env = [("SLURM_JOB_ID", "4242"), ("SLURMD_NODENAME", "gpu17")];
    // scontrol answers with an error (the controller is down).
    let failing = Node::new(&[
        (
            "scontrol",
            "echo 'slurm_update error: Unable to contact slurm controller' >&2; exit 1",
        ),
        LOGGER,
    ]);
    // scontrol is not there at all.
    let missing = Node::new(&[LOGGER]);
    for (node, why) in [(&failing, "Unable to contact slurm controller"), (&missing, "scontrol")] {
        let (code, _, err) = node.run("epilog-gpumemd.sh", &url, &env);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("gpumemd-epilog: ERROR: job 4242 left GPU memory on gpu17 and the drain failed")
                && err.contains(why),
            "{err}"
        );
        let log = node.calls();
        assert!(
            log.contains("logger -p daemon.err -t gpumemd-epilog ERROR: job 4242 left GPU memory on gpu17"),
            "{log}"
        );
    }
}

#[test]
fn nhc_allows_the_jobs_this_nodes_slurmstepd_runs_without_asking_the_controller() {
    let (url, _seen) = fixture_daemon(200, fixture("job-left.json"));
    // Only job 4300 still runs here: job 4242's process is a leftover.
    let one = format!("printf '%s\\n' '{LISTPIDS_HEADER}' '5001 4300 batch 0 0' '5002 4300 0 0 0'");
    let node = Node::new(&[("scontrol", &one), ("squeue", "exit 1"), LOGGER]);
    let (code, out, err) = node.run("gpumemd-nhc", &url, &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("pid 4101") && out.contains("job 4242"), "{out}");
    let log = node.calls();
    assert!(log.contains("scontrol listpids") && !log.contains("squeue"), "{log}");
    // Both run: healthy.
    let both = format!("printf '%s\\n' '{LISTPIDS_HEADER}' '5001 4300 batch 0 0' '4101 4242 0 0 0'");
    let node = Node::new(&[("scontrol", &both), LOGGER]);
    let (code, out, _) = node.run("gpumemd-nhc", &url, &[]);
    assert_eq!(code, Some(0), "{out}");
    // No job on the node (listpids exits 1 and says so): every holder is a leftover.
    let none = format!("echo '{LISTPIDS_HEADER}'; echo 'No job steps exist on this node.' >&2; exit 1");
    let node = Node::new(&[("scontrol", &none), LOGGER]);
    let (code, out, _) = node.run("gpumemd-nhc", &url, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.starts_with("LEFT:"), "{out}");
}

#[test]
fn nhc_is_unknown_and_healthy_when_the_jobs_or_the_daemon_cannot_be_asked() {
    let (url, _seen) = fixture_daemon(200, fixture("job-left.json"));
    let broken = "echo 'scontrol: error: Unable to process configuration file' >&2; exit 1";
    let cases = [
        (
            Node::new(&[("scontrol", broken), LOGGER]),
            url.clone(),
            "Unable to process configuration file",
        ),
        (Node::new(&[LOGGER]), url.clone(), "scontrol listpids exited 127"),
        (
            Node::new(&[
                ("scontrol", &format!("echo '{LISTPIDS_HEADER}'; echo '1 4242 0 0 0'")),
                LOGGER,
            ]),
            dead_url(),
            "gpumemd check could not tell (exit 2)",
        ),
    ];
    for (node, url, why) in &cases {
        let (code, out, err) = node.run("gpumemd-nhc", url, &[]);
        assert_eq!(code, Some(0), "a tooling error must not offline the node: {out}{err}");
        assert!(out.starts_with("UNKNOWN: ") && out.contains(why), "{out}");
        assert!(
            node.calls().contains("logger -t gpumemd-nhc UNKNOWN: "),
            "{}",
            node.calls()
        );
    }
}
