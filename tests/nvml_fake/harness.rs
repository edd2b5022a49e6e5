//! Plumbing of the stand-in tests: finding `libfake_nvml.so` and the scenario
//! files, running the real `gpumemd` binary in its own process (the scenario
//! variable and the stand-in's poll clock are process-wide), learning its
//! address from the JSON log, and reading exposition lines exactly. It must
//! not wait by sleeping: callers wait on conditions with `wait_until`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::Value;

use crate::common::{self, Response};

pub const BIN: &str = env!("CARGO_BIN_EXE_gpumemd");
/// Deadline of every wait; generous because two tests share two cores.
pub const WAIT: Duration = Duration::from_secs(30);
const LIB_NAME: &str = "libfake_nvml.so";

/// The stand-in library of this build. `cargo test` links the cdylib into
/// `deps/`, beside this test binary, and does not refresh the copy one level
/// up, so `deps/` comes first; `FAKE_NVML_LIB` overrides.
pub fn lib_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FAKE_NVML_LIB") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory").to_path_buf();
    let candidates = [deps.join(LIB_NAME), deps.parent().unwrap_or(&deps).join(LIB_NAME)];
    candidates
        .iter()
        .find(|c| c.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("{LIB_NAME} not found (tried {candidates:?}); `cargo build -p fake-nvml`"))
}

/// A scenario file of the stand-in, by name.
pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fake-nvml/scenarios")
        .join(name)
}

/// What a daemon is started with.
pub struct Opts<'a> {
    /// `None` runs without `FAKE_NVML_SCENARIO`.
    pub scenario: Option<&'a str>,
    /// `--nvml-lib`; `None` is the stand-in.
    pub lib: Option<&'a str>,
    /// The body of `[poll]`.
    pub poll: &'a str,
    /// Extra lines of `[processes]`.
    pub processes: &'a str,
    /// A scenario file elsewhere (e.g. written by the test); wins over `scenario`.
    pub scenario_path: Option<&'a Path>,
    /// Attribute from the machine's real /proc instead of an empty one.
    pub real_proc: bool,
    /// Config appended after the generated sections (`[[rule]]`, `[reclaim]`).
    pub extra: &'a str,
    /// The stand-in's call log (`FAKE_NVML_CALL_LOG`): one line per NVML call.
    pub call_log: Option<&'a Path>,
}

impl Default for Opts<'_> {
    fn default() -> Self {
        Self {
            scenario: None,
            lib: None,
            poll: "interval = \"100ms\"",
            processes: "",
            scenario_path: None,
            real_proc: false,
            extra: "",
            call_log: None,
        }
    }
}

/// A temp dir with a config whose `/proc` is empty, so every scenario PID
/// is an "exited" holder with empty identity labels whatever runs here.
pub struct Workdir {
    dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new(poll: &str, processes: &str) -> Self {
        Self::with(poll, processes, false, "")
    }

    pub fn with(poll: &str, processes: &str, real_proc: bool, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("proc")).expect("mkdir proc");
        let root = dir.path().display().to_string();
        let proc_root = if real_proc {
            "/proc".to_string()
        } else {
            format!("{root}/proc")
        };
        let text = format!(
            "[poll]\n{poll}\n\n[processes]\nproc_root = \"{proc_root}\"\n{processes}\n\n[state]\ndir = \"{root}/state\"\n\n{extra}\n"
        );
        std::fs::write(dir.path().join("gpumemd.toml"), text).expect("write config");
        Self { dir }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("gpumemd.toml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }
}

/// The daemon in a child process; killed and reaped on drop.
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    _work: Workdir,
}

impl Daemon {
    pub fn start(opts: Opts<'_>) -> Daemon {
        let work = Workdir::with(opts.poll, opts.processes, opts.real_proc, opts.extra);
        let lib = opts.lib.map_or_else(lib_path, PathBuf::from);
        let mut cmd = Command::new(BIN);
        cmd.arg("--nvml-lib")
            .arg(&lib)
            .arg("--config")
            .arg(work.config())
            .args(["--web.listen-address", "127.0.0.1:0", "--log-format", "json"])
            .env_remove("RUST_LOG")
            .env_remove("FAKE_NVML_SCENARIO")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(s) = opts.scenario {
            cmd.env("FAKE_NVML_SCENARIO", scenario(s));
        }
        if let Some(p) = opts.scenario_path {
            cmd.env("FAKE_NVML_SCENARIO", p);
        }
        cmd.env_remove("FAKE_NVML_CALL_LOG");
        if let Some(p) = opts.call_log {
            cmd.env("FAKE_NVML_CALL_LOG", p);
        }
        let mut child = cmd.spawn().expect("spawn gpumemd");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        // Drains stderr for the child's whole life, so it never blocks on a
        // full pipe, and hands over the address of the "listening" line.
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("\"listening\"") {
                    let _ = tx.send(line.clone());
                }
                sink.lock().expect("log lock").push(line);
            }
        });
        let mut daemon = Daemon {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            logs,
            _work: work,
        };
        let line = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("no \"listening\" log line; logs: {:#?}", daemon.logs()));
        let v: Value = serde_json::from_str(&line).expect("JSON log line");
        daemon.addr = v["address"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line}"));
        daemon
    }

    /// Starts the stand-in with `scenario` and a `[poll]` body.
    pub fn scenario(scenario: &str, poll: &str) -> Daemon {
        Daemon::start(Opts {
            scenario: Some(scenario),
            poll,
            ..Opts::default()
        })
    }

    pub fn state_dir(&self) -> PathBuf {
        self._work.state_dir()
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().expect("log lock").clone()
    }

    /// Waits for a log line for which `matches` holds, and returns it. The
    /// child's stderr is read on a thread, so a line can arrive after what
    /// the daemon did next (an audit line, an answer) is already visible.
    pub async fn logged(&self, what: &str, matches: impl Fn(&str) -> bool) -> String {
        common::wait_until(WAIT, what, || {
            std::future::ready(self.logs().into_iter().find(|l| matches(l)))
        })
        .await
    }

    /// Asks the child to stop cleanly (SIGTERM).
    pub fn terminate(&self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("a child has a positive pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }

    /// True while the child has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub async fn get(&self, path: &str) -> Response {
        common::get(self.addr, path, &[]).await
    }

    /// The Prometheus exposition (asserting a 200).
    pub async fn metrics(&self) -> String {
        let r = self.get("/metrics").await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// The JSON snapshot (asserting a 200).
    pub async fn snapshot(&self) -> Value {
        let r = self.get("/api/v1/snapshot").await;
        assert_eq!(r.status, 200, "{}", r.body);
        serde_json::from_str(&r.body).expect("snapshot JSON")
    }

    /// Waits for `/-/ready` to answer 200.
    pub async fn ready(&self) {
        common::wait_until(WAIT, "/-/ready 200", || async {
            (self.get("/-/ready").await.status == 200).then_some(())
        })
        .await;
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let logs = self.logs();
            let tail = &logs[logs.len().saturating_sub(20)..];
            eprintln!("gpumemd's last log lines:\n{}", tail.join("\n"));
        }
    }
}

/// The samples (not comments) of exactly `metric`.
pub fn lines_of<'a>(body: &'a str, metric: &str) -> Vec<&'a str> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(metric).is_some_and(|r| r.starts_with(['{', ' '])))
        .collect()
}

/// Every sample that carries `uuid="<uuid>"`.
pub fn series_of<'a>(body: &'a str, uuid: &str) -> Vec<&'a str> {
    let needle = format!("uuid=\"{uuid}\"");
    body.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&needle))
        .collect()
}

/// Whether `line` is one of the exposition's lines, exactly.
pub fn has_line(body: &str, line: &str) -> bool {
    body.lines().any(|l| l == line)
}

/// Asserts every one of `want` is a line of `body`, exactly.
#[track_caller]
pub fn assert_lines(body: &str, want: &[String]) {
    for w in want {
        let metric = w.split(['{', ' ']).next().unwrap_or(w);
        assert!(
            has_line(body, w),
            "missing line\n  {w}\nthe {metric} samples are:\n  {}",
            lines_of(body, metric).join("\n  ")
        );
    }
}

/// A label's value in one sample line (values here need no unescaping).
pub fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// The value of an unlabelled sample, or of the first one with all `must`.
pub fn value(body: &str, metric: &str, must: &[&str]) -> f64 {
    common::sample(body, metric, must).unwrap_or_else(|| panic!("no {metric} sample with {must:?}"))
}

/// The device with `uuid` in a JSON snapshot.
pub fn device<'a>(snap: &'a Value, uuid: &str) -> Option<&'a Value> {
    snap["devices"].as_array()?.iter().find(|d| d["uuid"] == uuid)
}

/// The four memory lines of a device.
pub fn memory_lines(uuid: &str, total: u64, used: u64, free: u64, reserved: Option<u64>) -> Vec<String> {
    let mut v = vec![
        format!("gpumem_device_memory_total_bytes{{uuid=\"{uuid}\"}} {total}"),
        format!("gpumem_device_memory_used_bytes{{uuid=\"{uuid}\"}} {used}"),
        format!("gpumem_device_memory_free_bytes{{uuid=\"{uuid}\"}} {free}"),
    ];
    if let Some(r) = reserved {
        v.push(format!("gpumem_device_memory_reserved_bytes{{uuid=\"{uuid}\"}} {r}"));
    }
    v
}

/// A process's memory line, with the empty identity labels of a PID that
/// is not in the (empty) test `/proc`.
pub fn process_memory_line(uuid: &str, pid: u32, bytes: u64) -> String {
    format!(
        "gpumem_process_memory_used_bytes{{uuid=\"{uuid}\",pid=\"{pid}\",comm=\"\",user=\"\",container_id=\"\",pod_uid=\"\",unit=\"\",slurm_job=\"\"}} {bytes}"
    )
}

/// A process's info line, as for `process_memory_line`.
pub fn process_info_line(uuid: &str, pid: u32, kind: &str) -> String {
    format!(
        "gpumem_process_info{{uuid=\"{uuid}\",pid=\"{pid}\",comm=\"\",user=\"\",state=\"exited\",type=\"{kind}\",container_runtime=\"\"}} 1"
    )
}

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
/// What the stand-in reports for an H100 80GB by default (81559 MiB).
pub const H100_TOTAL: u64 = 81_559 * MIB;
