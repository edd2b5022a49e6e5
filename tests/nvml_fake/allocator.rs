//! The allocator view end to end: the real daemon (NVML stand-in listing
//! this test's own PID, or a Python child's), its real socket, and reports
//! sent by this process with std, then by the `gpumemd-torch` package itself
//! (with a fake torch module). The kernel names the sender; these tests
//! rely on that, which is why the stand-in lists real PIDs.

use std::os::unix::net::UnixDatagram;
use std::path::Path;

use serde_json::Value;

use super::harness::*;
use crate::common::{wait_true, wait_until};

const UUID: &str = "GPU-3a8f2c41-7b9e-4d05-a6c3-1e2f3a4b5c6d";
const GIB: u64 = 1 << 30;

/// A one-GPU scenario listing `pid` (3 GiB) and 4243 (5 GiB).
fn scenario_with(dir: &Path, pid: u32) -> std::path::PathBuf {
    let text = format!(
        "driver_version = \"550.54.15\"\nnvml_version = \"12.550.54.15\"\ncuda_driver_version = 12040\n\n\
         [[device]]\nuuid = \"{UUID}\"\nname = \"NVIDIA H100 80GB HBM3\"\npci_bus_id = \"00000000:1B:00.0\"\n\
         total = \"81559MiB\"\nreserved = \"535MiB\"\n\n\
         [[device.process]]\npid = {pid}\nused = \"3GiB\"\n\n[[device.process]]\npid = 4243\nused = \"5GiB\"\n"
    );
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn report(uuid: &str, allocated: u64, reserved: u64, ooms: u64) -> String {
    format!(
        r#"{{"v":1,"devices":[{{"uuid":"{uuid}","allocated":{{"current":{allocated},"peak":{allocated}}},"reserved":{{"current":{reserved},"peak":{reserved}}},"active":{{"current":{allocated},"peak":{allocated}}},"inactive_split":{{"current":0,"peak":0}},"alloc_retries":3,"ooms":{ooms}}}]}}"#
    )
}

fn common_sample(body: &str, result: &str) -> f64 {
    crate::common::sample(
        body,
        "gpumem_allocator_messages_total",
        &[&format!("result=\"{result}\"")],
    )
    .unwrap_or(0.0)
}

fn allocator_section(sock: &Path) -> String {
    format!("[allocator]\nenabled = true\nsocket = \"{}\"\n", sock.display())
}

fn figures_of(snap: &Value, pid: u32) -> Option<Value> {
    snap["devices"][0]["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"] == pid)
        .and_then(|p| p.get("allocator").cloned())
}

#[tokio::test]
async fn reports_over_the_socket_reach_the_snapshot_metrics_and_events() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let scen = scenario_with(dir.path(), me);
    let sock = dir.path().join("a.sock");
    let extra = allocator_section(&sock);
    let d = Daemon::start(Opts {
        scenario_path: Some(&scen),
        extra: &extra,
        ..Opts::default()
    });
    wait_true(WAIT, "the socket", || sock.exists()).await;
    let tx = UnixDatagram::unbound().unwrap();
    let send = |body: String| tx.send_to(body.as_bytes(), &sock).unwrap();
    // Until the first poll lists us, a report is dropped as unknown_pid:
    // resend on each check (the rate limit lets bursts of 8 through). The
    // first report that passes already carries an OOM: no holder table
    // exists yet for this GPU (nobody reported), the next poll's is used.
    let a = wait_until(WAIT, "our figures in the snapshot", || {
        send(report(UUID, GIB, 2 * GIB, 1));
        async { figures_of(&d.snapshot().await, me) }
    })
    .await;
    assert_eq!(a["tensors_bytes"], GIB);
    assert_eq!(a["cache_bytes"], GIB);
    assert_eq!(a["other_bytes"], GIB, "NVML's 3 GiB minus 2 GiB reserved");
    let body = d.metrics().await;
    for line in [
        format!("gpumem_process_allocator_bytes{{uuid=\"{UUID}\",pid=\"{me}\",kind=\"allocated\"}} {GIB}"),
        format!(
            "gpumem_process_allocator_bytes{{uuid=\"{UUID}\",pid=\"{me}\",kind=\"reserved\"}} {}",
            2 * GIB
        ),
        format!("gpumem_process_alloc_retries_total{{uuid=\"{UUID}\",pid=\"{me}\"}} 3"),
    ] {
        assert!(has_line(&body, &line), "missing {line}");
    }
    assert!(!body.contains("pid=\"4243\",kind="), "4243 does not report");
    // The OOM: one event with the GPU's whole holder table.
    let ev = wait_until(WAIT, "an OOM event with its table", || async {
        let v: Value = serde_json::from_str(&d.get("/api/v1/events").await.body).ok()?;
        let e = v["events"].as_array()?.first()?.clone();
        (e["gpu"]["processes"].as_array()?.len() == 2).then_some(e)
    })
    .await;
    assert_eq!(
        (ev["kind"].as_str(), ev["pid"].as_u64()),
        (Some("oom"), Some(u64::from(me)))
    );
    assert!(ev["gpu"]["polled_at"].as_f64().unwrap_or(0.0) >= ev["time"].as_f64().unwrap_or(f64::MAX));
    let other = ev["gpu"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == 4243)
        .cloned()
        .unwrap_or_default();
    assert_eq!(other["used_bytes"], 5 * GIB);
    // The alert names the other holder, from that table.
    wait_until(WAIT, "GpuOutOfMemory naming pid 4243", || async {
        let body = d.get("/api/v1/alerts").await.body;
        (body.contains("GpuOutOfMemory") && body.contains("(4243) 5.0 GiB")).then_some(())
    })
    .await;
    // A GPU we do not use: dropped and counted.
    wait_until(WAIT, "a foreign_gpu count", || {
        send(report("GPU-00000000-0000-0000-0000-000000000000", 1, 1, 0));
        async {
            let body = d.metrics().await;
            (common_sample(&body, "foreign_gpu") >= 1.0).then_some(())
        }
    })
    .await;
    let v: Value = serde_json::from_str(&d.get("/api/v1/events").await.body).unwrap();
    assert_eq!(
        v["events"].as_array().map(Vec::len),
        Some(1),
        "resending the same count is no new OOM"
    );
}

/// Repeated OOMs of one process are one `gpumem_alerts` series: two alerts
/// with the same labels would be an invalid exposition.
#[tokio::test]
async fn repeated_ooms_of_one_process_are_one_alert_series() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let scen = scenario_with(dir.path(), me);
    let sock = dir.path().join("a.sock");
    let extra = allocator_section(&sock);
    let d = Daemon::start(Opts {
        scenario_path: Some(&scen),
        extra: &extra,
        ..Opts::default()
    });
    wait_true(WAIT, "the socket", || sock.exists()).await;
    let tx = UnixDatagram::unbound().unwrap();
    let (d, mut seq) = (&d, 0);
    for ooms in 1..=3 {
        seq = wait_until(WAIT, "the OOM in the snapshot", || {
            let _ = tx.send_to(report(UUID, GIB, 2 * GIB, ooms).as_bytes(), &sock);
            async move {
                let s = d.snapshot().await;
                (s["devices"][0]["ooms"].as_array()?.len() as u64 == ooms).then(|| s["seq"].as_u64())?
            }
        })
        .await;
    }
    // Two polls later every rule has seen the three OOMs.
    wait_until(WAIT, "two more polls", || async {
        (d.snapshot().await["seq"].as_u64()? >= seq + 2).then_some(())
    })
    .await;
    let body = d.metrics().await;
    let mut alerts = lines_of(&body, "gpumem_alerts");
    let oom = alerts.iter().filter(|l| l.contains("GpuOutOfMemory")).count();
    assert_eq!(oom, 1, "{alerts:#?}");
    let n = alerts.len();
    alerts.sort_unstable();
    alerts.dedup();
    assert_eq!(alerts.len(), n, "no series twice");
}

#[tokio::test]
async fn a_missing_socket_dir_is_one_error_and_monitoring_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let scen = scenario_with(dir.path(), 4242);
    let extra = allocator_section(&dir.path().join("no/such/dir/a.sock"));
    let d = Daemon::start(Opts {
        scenario_path: Some(&scen),
        extra: &extra,
        ..Opts::default()
    });
    d.ready().await;
    let body = d.metrics().await;
    assert!(has_line(&body, &format!("gpumem_device_up{{uuid=\"{UUID}\"}} 1")));
    assert!(body.contains("gpumem_allocator_messages_total{result=\"accepted\"} 0"));
    let errors: Vec<String> = d
        .logs()
        .into_iter()
        .filter(|l| l.contains("allocator view disabled"))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("does not exist"), "{}", errors[0]);
}

/// A flood from one listed PID is rate-limited on the receiver's thread
/// while polls go on at their pace: none skipped, none late.
#[tokio::test]
async fn a_flood_never_holds_up_the_poll() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let scen = scenario_with(dir.path(), std::process::id());
    let sock = dir.path().join("a.sock");
    let extra = allocator_section(&sock);
    let d = Daemon::start(Opts {
        scenario_path: Some(&scen),
        poll: "interval = \"500ms\"",
        extra: &extra,
        ..Opts::default()
    });
    wait_true(WAIT, "the socket", || sock.exists()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, sent, sock) = (stop.clone(), sent.clone(), sock.clone());
        std::thread::spawn(move || {
            let tx = UnixDatagram::unbound().unwrap();
            let body = report(UUID, GIB, 2 * GIB, 0);
            // Blocks whenever the socket's queue is full: as fast as the
            // receiver drains it.
            while !stop.load(Ordering::Relaxed) {
                if tx.send_to(body.as_bytes(), &sock).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let polls = |body: &str| crate::common::sample(body, "gpumem_polls_total", &[]).unwrap_or(0.0);
    let overruns = |body: &str| crate::common::sample(body, "gpumem_poll_overruns_total", &[]).unwrap_or(0.0);
    // Flooding for real: the rate limit has started dropping.
    let before = wait_until(WAIT, "rate_limited drops", || async {
        let body = d.metrics().await;
        (common_sample(&body, "rate_limited") > 100.0).then_some(body)
    })
    .await;
    let after = wait_until(WAIT, "four more polls during the flood", || async {
        let body = d.metrics().await;
        (polls(&body) >= polls(&before) + 4.0).then_some(body)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    assert_eq!(overruns(&after), overruns(&before), "no poll tick skipped");
    assert!(common_sample(&after, "rate_limited") > common_sample(&before, "rate_limited"));
    assert!(common_sample(&after, "accepted") >= 1.0);
    assert!(
        sent.load(Ordering::Relaxed) > 1000,
        "a flood: {}",
        sent.load(Ordering::Relaxed)
    );
}

/// A clean stop (SIGTERM) takes the socket file with it.
#[tokio::test]
async fn sigterm_removes_the_socket_file() {
    let dir = tempfile::tempdir().unwrap();
    let scen = scenario_with(dir.path(), 4242);
    let sock = dir.path().join("a.sock");
    let extra = allocator_section(&sock);
    let mut d = Daemon::start(Opts {
        scenario_path: Some(&scen),
        extra: &extra,
        ..Opts::default()
    });
    d.ready().await;
    assert!(sock.exists());
    d.terminate();
    wait_true(WAIT, "the daemon to exit", || !d.running()).await;
    assert!(!sock.exists(), "the socket file was left behind");
}

/// The Python package itself, with a fake torch, against the real daemon.
#[tokio::test]
async fn the_python_package_reports_to_the_daemon() {
    let found = Some(Path::new("/usr/bin/python3")).filter(|p| p.exists());
    let Some(python) = crate::common::peer_or_skip("python3", found, "apt-get install python3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("a.sock");
    let fake = dir.path().join("fake");
    std::fs::create_dir(&fake).unwrap();
    std::fs::write(
        fake.join("torch.py"),
        "import types\nclass cuda:\n    is_initialized = staticmethod(lambda: True)\n    device_count = staticmethod(lambda: 1)\n    \
         memory_stats = staticmethod(lambda i: {'allocated_bytes.all.current': 7, 'reserved_bytes.all.current': 9, \
         'reserved_bytes.all.peak': 9, 'num_ooms': 0})\n    \
         get_device_properties = staticmethod(lambda i: types.SimpleNamespace(uuid='3a8f2c41-7b9e-4d05-a6c3-1e2f3a4b5c6d'))\n",
    )
    .unwrap();
    let pkg = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let child = std::process::Command::new(python)
        .args([
            "-c",
            "import time, torch, gpumemd_torch; gpumemd_torch.start(interval=0.1); time.sleep(120)",
        ])
        .env("PYTHONPATH", format!("{}:{}", fake.display(), pkg.display()))
        .env("GPUMEMD_SOCKET", &sock)
        .spawn()
        .unwrap();
    let child = KillOnDrop(child);
    let scen = scenario_with(dir.path(), child.0.id());
    let extra = allocator_section(&sock);
    let d = Daemon::start(Opts {
        scenario_path: Some(&scen),
        extra: &extra,
        ..Opts::default()
    });
    let a = wait_until(WAIT, "the child's figures", || async {
        figures_of(&d.snapshot().await, child.0.id())
    })
    .await;
    assert_eq!(
        (a["allocated"]["current"].as_u64(), a["reserved"]["current"].as_u64()),
        (Some(7), Some(9))
    );
}

/// A child process that is killed and reaped however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
