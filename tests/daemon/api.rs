//! Integration tests of the daemon through its public API: `run()` on
//! 127.0.0.1:0 with the simulated fleet (and gated or hanging wrappers of
//! it), checked over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::{sample, spawn_app, test_config, wait_until};
use gpumemd::collect::source::nvml::NvmlSource;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::collect::source::{GpuSource, RawPoll, SourceError};

const WAIT: Duration = Duration::from_secs(20);

fn sim(name: &str, interval: Duration) -> SimulatedSource {
    SimulatedSource::new(
        Scenario::resolve(name).expect("built-in scenario"),
        interval,
        1_700_000_000.0,
    )
}

/// Blocks poll number `block_at` (1-based) until the test sends on the gate.
struct Gated {
    inner: SimulatedSource,
    block_at: u64,
    gate: mpsc::Receiver<()>,
    polls: Arc<AtomicU64>,
}

impl GpuSource for Gated {
    fn poll(&mut self, sample: bool) -> Result<RawPoll, SourceError> {
        let n = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.block_at {
            let _ = self.gate.recv();
        }
        self.inner.poll(sample)
    }
    fn demo_name(&self) -> Option<String> {
        self.inner.demo_name()
    }
}

fn gated(block_at: u64) -> (Box<dyn GpuSource>, mpsc::Sender<()>, Arc<AtomicU64>) {
    let (tx, rx) = mpsc::channel();
    let polls = Arc::new(AtomicU64::new(0));
    let src = Gated {
        inner: sim("default", Duration::from_millis(100)),
        block_at,
        gate: rx,
        polls: polls.clone(),
    };
    (Box::new(src), tx, polls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_until_the_first_poll_then_200() {
    let (src, gate, _) = gated(1);
    let app = spawn_app(test_config("100ms"), src).await;
    let r = app.get("/-/ready").await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("first poll"), "{}", r.body);
    assert_eq!(app.get("/-/healthy").await.status, 200);
    gate.send(()).expect("release the first poll");
    wait_until(WAIT, "ready", || async {
        (app.get("/-/ready").await.status == 200).then_some(())
    })
    .await;
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_snapshot_json_describe_the_demo_fleet() {
    let app = spawn_app(
        test_config("100ms"),
        Box::new(sim("default", Duration::from_millis(100))),
    )
    .await;
    wait_until(WAIT, "ready", || async {
        (app.get("/-/ready").await.status == 200).then_some(())
    })
    .await;
    let m = app.get("/metrics").await;
    assert_eq!(m.status, 200);
    assert_eq!(
        m.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let gpu0 = "uuid=\"GPU-5f3c9a1e-2b7d-4c1e-9a0f-6d2e8b4c7a11\"";
    assert_eq!(
        sample(&m.body, "gpumem_device_memory_total_bytes", &[gpu0]),
        Some((80u64 << 30) as f64)
    );
    assert_eq!(sample(&m.body, "gpumem_device_up", &[gpu0]), Some(1.0));
    assert_eq!(sample(&m.body, "gpumem_nvml_up", &[]), Some(1.0));
    assert!(
        sample(
            &m.body,
            "gpumem_process_memory_used_bytes",
            &["pid=\"4202\"", "user=\"bob\""]
        )
        .is_some()
    );

    let s = app.get("/api/v1/snapshot").await;
    assert_eq!(s.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_str(&s.body).expect("JSON");
    assert_eq!(v["demo"], "default");
    let devs = v["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 2);
    for d in devs {
        let m = &d["memory"];
        let h = &d["holders"];
        let parts: u64 = ["live", "zombie", "exited", "unattributed"]
            .iter()
            .map(|k| h[k].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(Some(parts), m["used_bytes"].as_u64(), "holders add up to used: {d}");
    }
    let p4202 = devs[0]["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"] == 4202))
        .cloned();
    let p = p4202.expect("pid 4202 on GPU 0");
    assert_eq!(p["user"], "bob");
    assert_eq!(p["container_runtime"], "docker");
    assert!(p["start_time"].as_f64().is_some());

    let om = app
        .get_with("/metrics", &[("Accept", "application/openmetrics-text; version=1.0.0")])
        .await;
    assert!(
        om.header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text"))
    );
    assert!(om.body.ends_with("# EOF\n"));
    assert!(om.body.contains("# TYPE gpumem_polls counter\n"));
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_lost_mid_run_keeps_the_others_served() {
    let app = spawn_app(
        test_config("100ms"),
        Box::new(sim("gpu-lost", Duration::from_millis(100))),
    )
    .await;
    let uuids = wait_until(WAIT, "8 GPUs up", || async {
        let v: serde_json::Value = serde_json::from_str(&app.get("/api/v1/snapshot").await.body).ok()?;
        let d = v["devices"].as_array()?;
        (d.len() == 8 && d.iter().all(|x| x["up"] == true)).then(|| {
            d.iter()
                .map(|x| x["uuid"].as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        })
    })
    .await;
    let lost = format!("uuid=\"{}\"", uuids[3]);
    let body = wait_until(WAIT, "GPU 3 down", || async {
        let b = app.get("/metrics").await.body;
        (sample(&b, "gpumem_device_up", &[&lost]) == Some(0.0)).then_some(b)
    })
    .await;
    for name in [
        "gpumem_device_memory_used_bytes",
        "gpumem_device_memory_total_bytes",
        "gpumem_device_memory_held_bytes",
        "gpumem_process_memory_used_bytes",
    ] {
        assert_eq!(sample(&body, name, &[&lost]), None, "no stale {name} for the lost GPU");
    }
    for (i, u) in uuids.iter().enumerate().filter(|(i, _)| *i != 3) {
        let l = format!("uuid=\"{u}\"");
        assert_eq!(sample(&body, "gpumem_device_up", &[&l]), Some(1.0), "GPU {i}");
        assert!(
            sample(&body, "gpumem_device_memory_used_bytes", &[&l]).is_some(),
            "GPU {i}"
        );
        assert!(
            sample(&body, "gpumem_process_memory_used_bytes", &[&l]).is_some(),
            "GPU {i}"
        );
    }
    assert!(sample(&body, "gpumem_poll_errors_total", &["reason=\"device\""]).is_some_and(|v| v >= 1.0));
    assert_eq!(sample(&body, "gpumem_poll_success", &[]), Some(1.0));
    assert_eq!(app.get("/-/ready").await.status, 200);
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_poll_is_timed_out_not_duplicated_and_http_stays_fast() {
    let (src, gate, polls) = gated(3);
    let app = spawn_app(test_config("100ms"), src).await;
    let body = wait_until(WAIT, "a poll timeout", || async {
        let b = app.get("/metrics").await.body;
        (sample(&b, "gpumem_poll_errors_total", &["reason=\"timeout\""]) >= Some(1.0)).then_some(b)
    })
    .await;
    assert_eq!(sample(&body, "gpumem_poll_success", &[]), Some(0.0));
    // While the poll is stuck, ticks are overruns and no second poll starts.
    wait_until(WAIT, "overruns", || async {
        let b = app.get("/metrics").await.body;
        (sample(&b, "gpumem_poll_overruns_total", &[]) >= Some(3.0)).then_some(())
    })
    .await;
    assert_eq!(polls.load(Ordering::SeqCst), 3, "no poll started while one is stuck");
    let t = Instant::now();
    for _ in 0..20 {
        assert_eq!(app.get("/metrics").await.status, 200);
    }
    let per = t.elapsed() / 20;
    assert!(
        per < Duration::from_millis(250),
        "scrapes must not wait for the stuck poll: {per:?} each"
    );
    let v: serde_json::Value = serde_json::from_str(&app.get("/api/v1/snapshot").await.body).expect("JSON");
    assert_eq!(v["stale"], true);
    gate.send(()).expect("release");
    wait_until(WAIT, "polling to resume", || async {
        let b = app.get("/metrics").await.body;
        (sample(&b, "gpumem_poll_success", &[]) == Some(1.0)).then_some(())
    })
    .await;
    assert!(polls.load(Ordering::SeqCst) > 3);
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nvml_it_serves_nvml_up_0_and_is_not_ready() {
    let src = NvmlSource::new("/nonexistent/libnvidia-ml.so.1");
    let app = spawn_app(test_config("100ms"), Box::new(src)).await;
    let body = wait_until(WAIT, "a poll", || async {
        let b = app.get("/metrics").await.body;
        (sample(&b, "gpumem_polls_total", &[]) >= Some(1.0)).then_some(b)
    })
    .await;
    assert_eq!(sample(&body, "gpumem_nvml_up", &[]), Some(0.0));
    assert!(sample(&body, "gpumem_poll_errors_total", &["reason=\"nvml_unavailable\""]) >= Some(1.0));
    assert!(!body.contains("gpumem_device_up{"));
    let r = app.get("/-/ready").await;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("NVML"));
    assert_eq!(app.get("/-/healthy").await.status, 200);
    let v: serde_json::Value = serde_json::from_str(&app.get("/api/v1/snapshot").await.body).expect("JSON");
    assert!(v["nvml_error"].as_str().is_some_and(|e| e.contains("not found")), "{v}");
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_and_method_handling() {
    let app = spawn_app(
        test_config("100ms"),
        Box::new(sim("default", Duration::from_millis(100))),
    )
    .await;
    let r = app.get("/").await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/html")));
    assert!(r.body.contains("/api/v1/snapshot"));
    assert_eq!(common::request(app.addr, "POST", "/metrics", &[]).await.status, 405);
    assert_eq!(common::request(app.addr, "HEAD", "/metrics", &[]).await.status, 200);
    assert_eq!(app.get("/nope").await.status, 404);
    app.stop().await.expect("clean stop");
}

fn write_config(path: &std::path::Path, extra: &str) {
    let text = format!(
        "[poll]\ninterval = \"100ms\"\n[server]\nenable_lifecycle = true\n[alerting]\ndefault_rules = false\n{extra}"
    );
    std::fs::write(path, text).expect("write config");
}

const BIG_RULE: &str = "[[rule]]\nname = \"BigHolder\"\nkind = \"process_used_bytes\"\nabove = \"8GiB\"\nseverity = \"page\"\nannotations = { summary = \"{{ comm }} holds {{ value_human }}\" }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_fire_into_the_alerts_api_and_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    write_config(&path, BIG_RULE);
    let cfg = gpumemd::app::config::Config::load(&path, false).expect("config");
    let app = spawn_app(cfg, Box::new(sim("default", Duration::from_millis(100)))).await;
    let v = wait_until(WAIT, "a firing alert", || async {
        let v: serde_json::Value = serde_json::from_str(&app.get("/api/v1/alerts").await.body).ok()?;
        let firing = v["alerts"].as_array()?.iter().any(|a| a["state"] == "firing");
        firing.then_some(v)
    })
    .await;
    let a = &v["alerts"][0];
    assert_eq!(a["labels"]["alertname"], "BigHolder");
    assert_eq!(a["labels"]["pid"], "4303", "the 9 GiB notebook, not the 6 GiB worker");
    assert_eq!(a["labels"]["severity"], "page");
    assert_eq!(a["annotations"]["summary"], "jupyter-kernel holds 9.0 GiB");
    assert!(a["active_at"].as_f64().is_some() && a["fired_at"].as_f64().is_some());
    assert_eq!(v["transitions"][0]["to"], "firing");
    let m = app.get("/metrics").await.body;
    assert_eq!(
        sample(
            &m,
            "gpumem_alerts",
            &["alertname=\"BigHolder\"", "alertstate=\"firing\"", "pid=\"4303\""]
        ),
        Some(1.0)
    );
    // `instance` is the scrape target's label; the alert series must not carry its own.
    assert!(
        m.lines()
            .filter(|l| l.starts_with("gpumem_alerts{"))
            .all(|l| !l.contains("instance="))
    );
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_validates_first_and_keeps_the_old_config_on_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    write_config(&path, "");
    let cfg = gpumemd::app::config::Config::load(&path, false).expect("config");
    let app = spawn_app(cfg, Box::new(sim("default", Duration::from_millis(100)))).await;
    let rules = |body: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        v["rules"]
            .as_array()
            .map(|r| r.iter().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    assert!(rules(&app.get("/api/v1/alerts").await.body).is_empty());

    write_config(&path, BIG_RULE);
    let r = common::request(app.addr, "POST", "/-/reload", &[]).await;
    assert_eq!((r.status, r.body.as_str()), (200, "config reloaded\n"));
    assert_eq!(rules(&app.get("/api/v1/alerts").await.body), ["BigHolder"]);

    std::fs::write(&path, "[poll]\ninterval = \"0s\"\n").expect("write");
    let r = common::request(app.addr, "POST", "/-/reload", &[]).await;
    assert_eq!(r.status, 400);
    assert!(
        r.body.contains("gpumemd.toml:2: poll.interval: `0s` is zero"),
        "{}",
        r.body
    );
    let m = app.get("/metrics").await.body;
    assert_eq!(sample(&m, "gpumem_config_last_reload_successful", &[]), Some(0.0));
    assert_eq!(
        rules(&app.get("/api/v1/alerts").await.body),
        ["BigHolder"],
        "the old config stays"
    );

    write_config(&path, "[server]\n");
    let r = common::request(app.addr, "POST", "/-/reload", &[]).await;
    assert_eq!(r.status, 400, "a duplicate [server] table is an error too: {}", r.body);
    app.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_needs_enable_lifecycle() {
    let app = spawn_app(
        test_config("100ms"),
        Box::new(sim("default", Duration::from_millis(100))),
    )
    .await;
    let r = common::request(app.addr, "POST", "/-/reload", &[]).await;
    assert_eq!(r.status, 403);
    app.stop().await.expect("clean stop");
}
