//! The webhook notifier against a real HTTP receiver on 127.0.0.1: schema
//! and signature of every body, retries through 503s and timeouts, permanent
//! rejections, and the outbox carrying messages across a daemon restart while
//! the receiver is down. Waits are polls on conditions with deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use crate::common;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::wait_true;
use gpumemd::act::notify::{
    AlertPayload, AlertStatus, NotifierStats, Notifiers, NotifyConfig, Secret, WebhookConfig, signature,
};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

const SECRET: &str = "test-hmac-key";

/// What the receiver does with the next requests; after the plan it answers 200.
#[derive(Clone, Copy)]
enum Reply {
    Status(u16),
    /// Never answers, so the sender's timeout fires.
    Hang,
}

#[derive(Default)]
struct Log {
    plan: VecDeque<Reply>,
    requests: usize,
    /// Accepted bodies, in arrival order.
    delivered: Vec<Value>,
    problems: Vec<String>,
}

struct Receiver {
    log: Arc<Mutex<Log>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Receiver {
    async fn start(addr: SocketAddr, plan: &[Reply], secret: Option<&'static str>) -> (Receiver, SocketAddr) {
        let listener = TcpListener::bind(addr).await.expect("bind receiver");
        let addr = listener.local_addr().expect("addr");
        let log = Arc::new(Mutex::new(Log {
            plan: plan.iter().copied().collect(),
            ..Log::default()
        }));
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state((log.clone(), secret));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (Receiver { log, server }, addr)
    }

    fn delivered(&self) -> Vec<Value> {
        self.log.lock().expect("log").delivered.clone()
    }
}

async fn receive(
    State((log, secret)): State<(Arc<Mutex<Log>>, Option<&'static str>)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let reply = {
        let mut log = log.lock().expect("log");
        log.requests += 1;
        if let Err(p) = check(&headers, &body, secret) {
            log.problems.push(p);
        }
        log.plan.pop_front().unwrap_or(Reply::Status(200))
    };
    match reply {
        Reply::Hang => std::future::pending().await,
        Reply::Status(200) => {
            let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            log.lock().expect("log").delivered.push(value);
            StatusCode::OK
        }
        Reply::Status(code) => StatusCode::from_u16(code).expect("status"),
    }
}

/// The documented schema (docs/notifications.md) and the signature.
fn check(headers: &HeaderMap, body: &[u8], secret: Option<&str>) -> Result<(), String> {
    let sig = headers.get("x-gpumemd-signature").and_then(|v| v.to_str().ok());
    match (secret, sig) {
        (Some(s), Some(got)) if got == signature(s, body) => {}
        (None, None) => {}
        (s, got) => return Err(format!("signature: secret set {}, header {got:?}", s.is_some())),
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/json") {
        return Err("content-type is not application/json".into());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let ok = v["version"] == "1"
        && v["id"].as_str().is_some_and(|id| id.parse::<u64>().is_ok())
        && matches!(v["status"].as_str(), Some("firing" | "resolved"))
        && v["sentAt"].is_string()
        && v["alerts"]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(alert_ok));
    if ok {
        Ok(())
    } else {
        Err(format!("body does not match the schema: {v}"))
    }
}

fn alert_ok(a: &Value) -> bool {
    matches!(a["status"].as_str(), Some("firing" | "resolved"))
        && a["labels"]["alertname"].is_string()
        && a["annotations"].is_object()
        && a["startsAt"].is_string()
        && (a["endsAt"].is_string() || (a["endsAt"].is_null() && a["status"] == "firing"))
        && (a["value"].is_number() || a["value"].is_null())
        && a["fingerprint"].as_str().is_some_and(|f| f.len() == 16)
        && a["generatorURL"].is_string()
}

fn alert(name: &str, status: AlertStatus) -> AlertPayload {
    AlertPayload {
        labels: BTreeMap::from([("alertname".into(), name.into()), ("uuid".into(), "GPU-0".into())]),
        annotations: BTreeMap::from([("summary".into(), format!("{name} test"))]),
        status,
        starts_at: 1_700_000_000.0,
        ends_at: (status == AlertStatus::Resolved).then_some(1_700_000_060.0),
        value: Some(42.0),
        generator_url: "http://127.0.0.1:9947/".into(),
    }
}

fn config(addr: SocketAddr, secret: Option<&str>) -> NotifyConfig {
    NotifyConfig {
        alertmanager: None,
        webhook: Some(WebhookConfig {
            url: format!("http://{addr}/hook"),
            secret: secret.map(Secret::new),
            timeout: Duration::from_secs(1),
            retry_initial: Duration::from_millis(20),
            retry_max: Duration::from_millis(100),
            ..WebhookConfig::default()
        }),
    }
}

fn stats(n: &Notifiers) -> NotifierStats {
    n.stats()
        .into_iter()
        .find(|s| s.notifier == "webhook")
        .expect("webhook stats")
}

/// (alertname, status) of every alert of every delivered message, in order.
fn transitions(delivered: &[Value]) -> Vec<(String, String)> {
    delivered
        .iter()
        .flat_map(|m| m["alerts"].as_array().cloned().unwrap_or_default())
        .map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap_or("").into(),
                a["status"].as_str().unwrap_or("").into(),
            )
        })
        .collect()
}

fn ids(delivered: &[Value]) -> Vec<u64> {
    delivered
        .iter()
        .filter_map(|m| m["id"].as_str()?.parse().ok())
        .collect()
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The batches a rule engine would hand over: every transition matters.
fn scenario() -> Vec<Vec<AlertPayload>> {
    use AlertStatus::{Firing, Resolved};
    vec![
        vec![alert("A", Firing)],
        vec![alert("B", Firing)],
        vec![alert("A", Resolved)],
        vec![alert("A", Firing), alert("C", Firing)],
        vec![alert("B", Resolved), alert("C", Resolved)],
    ]
}

fn expected() -> Vec<(String, String)> {
    scenario()
        .iter()
        .flatten()
        .map(|a| (a.labels["alertname"].clone(), a.status.as_str().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transition_arrives_in_order_through_503s_and_timeouts() {
    let plan = [
        Reply::Status(503),
        Reply::Status(503),
        Reply::Hang,
        Reply::Status(502),
        Reply::Status(429),
    ];
    let (rx, addr) = Receiver::start(loopback(), &plan, Some(SECRET)).await;
    let state = tempfile::tempdir().expect("tempdir");
    let (_stop_tx, stop) = watch::channel(false);
    let n = Notifiers::start(&config(addr, Some(SECRET)), state.path(), stop).expect("start");
    for batch in scenario() {
        n.submit(&batch, &[]);
    }
    wait_true(Duration::from_secs(15), "5 deliveries", || rx.delivered().len() >= 5).await;
    let delivered = rx.delivered();
    assert_eq!(delivered.len(), 5, "no duplicates expected here: {delivered:?}");
    assert_eq!(transitions(&delivered), expected());
    let ids = ids(&delivered);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids grow: {ids:?}");
    let statuses: Vec<&str> = delivered.iter().filter_map(|m| m["status"].as_str()).collect();
    assert_eq!(statuses, ["firing", "firing", "resolved", "firing", "resolved"]);
    {
        let log = rx.log.lock().expect("log");
        assert!(log.problems.is_empty(), "{:?}", log.problems);
        assert_eq!(log.requests, 10, "5 failed attempts + 5 deliveries");
    }
    wait_true(Duration::from_secs(5), "stats settle", || stats(&n).queue_length == 0).await;
    let s = stats(&n);
    assert_eq!(
        (s.sent_ok, s.failed, s.dropped, s.persist_errors),
        (5, 5, 0, 0),
        "{s:?}"
    );
    assert_eq!(
        files(&state.path().join("outbox/webhook")),
        0,
        "delivered messages leave the disk"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_rejection_is_dropped_and_the_queue_moves_on() {
    let (rx, addr) = Receiver::start(loopback(), &[Reply::Status(400)], None).await;
    let state = tempfile::tempdir().expect("tempdir");
    let (_stop_tx, stop) = watch::channel(false);
    let n = Notifiers::start(&config(addr, None), state.path(), stop).expect("start");
    n.submit(&[alert("Rejected", AlertStatus::Firing)], &[]);
    n.submit(&[alert("Accepted", AlertStatus::Firing)], &[]);
    wait_true(Duration::from_secs(10), "the second message", || {
        !rx.delivered().is_empty()
    })
    .await;
    wait_true(Duration::from_secs(5), "stats settle", || stats(&n).queue_length == 0).await;
    assert_eq!(
        transitions(&rx.delivered()),
        [("Accepted".to_owned(), "firing".to_owned())]
    );
    let s = stats(&n);
    assert_eq!((s.sent_ok, s.failed, s.dropped), (1, 1, 1), "{s:?}");
    let log = rx.log.lock().expect("log");
    assert!(log.problems.is_empty(), "unsigned without a secret: {:?}", log.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_delivers_after_a_restart_while_the_receiver_was_down() {
    // A port with nothing listening: connections are refused.
    let addr = TcpListener::bind(loopback())
        .await
        .expect("bind")
        .local_addr()
        .expect("addr");
    let state = tempfile::tempdir().expect("tempdir");
    let cfg = config(addr, Some(SECRET));
    let (_stop_tx, stop) = watch::channel(false);
    let first = Notifiers::start(&cfg, state.path(), stop.clone()).expect("start");
    for batch in scenario() {
        first.submit(&batch, &[]);
    }
    wait_true(Duration::from_secs(10), "a refused attempt", || {
        stats(&first).failed >= 1
    })
    .await;
    assert_eq!(stats(&first).queue_length, 5);
    drop(first); // the daemon "restarts"
    assert_eq!(files(&state.path().join("outbox/webhook")), 5);

    let second = Notifiers::start(&cfg, state.path(), stop.clone()).expect("restart");
    assert_eq!(
        stats(&second).queue_length,
        5,
        "the new run loads what the old one left"
    );
    let (rx, _) = Receiver::start(addr, &[], Some(SECRET)).await;
    wait_true(Duration::from_secs(15), "5 deliveries", || rx.delivered().len() >= 5).await;
    assert_eq!(transitions(&rx.delivered()), expected(), "none lost, none reordered");
    assert!(rx.log.lock().expect("log").problems.is_empty());
    wait_true(Duration::from_secs(5), "an empty outbox", || {
        stats(&second).queue_length == 0
    })
    .await;
    assert_eq!(files(&state.path().join("outbox/webhook")), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_the_tasks_and_keeps_the_outbox() {
    let addr = TcpListener::bind(loopback())
        .await
        .expect("bind")
        .local_addr()
        .expect("addr");
    let state = tempfile::tempdir().expect("tempdir");
    let (stop_tx, stop) = watch::channel(false);
    let n = Notifiers::start(&config(addr, None), state.path(), stop).expect("start");
    n.submit(&[alert("A", AlertStatus::Firing)], &[]);
    stop_tx.send(true).expect("signal");
    tokio::time::timeout(Duration::from_secs(5), n.join())
        .await
        .expect("tasks end on shutdown");
    assert_eq!(files(&state.path().join("outbox/webhook")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_state_dir_at_start_delays_durability_not_delivery() {
    let addr = TcpListener::bind(loopback())
        .await
        .expect("bind")
        .local_addr()
        .expect("addr");
    let tmp = tempfile::tempdir().expect("tempdir");
    // A file where the state dir should be: every write under it fails (as on
    // a full disk) until it is removed (space freed), root or not.
    let state = tmp.path().join("state");
    std::fs::write(&state, b"").expect("write");
    let (_stop_tx, stop) = watch::channel(false);
    let n = Notifiers::start(&config(addr, None), &state, stop).expect("starts anyway");
    n.submit(&[alert("A", AlertStatus::Firing)], &[]);
    wait_true(Duration::from_secs(10), "a refused attempt", || stats(&n).failed >= 1).await;
    assert!(
        stats(&n).persist_errors >= 1,
        "the metric tells that nothing is on disk"
    );
    std::fs::remove_file(&state).expect("free the disk");
    n.submit(&[alert("A", AlertStatus::Resolved)], &[]);
    let dir = state.join("outbox/webhook");
    wait_true(Duration::from_secs(15), "the outbox opened and written", || {
        files(&dir) == 2
    })
    .await;
    let (rx, _) = Receiver::start(addr, &[], None).await;
    wait_true(Duration::from_secs(15), "2 deliveries", || rx.delivered().len() >= 2).await;
    let got = transitions(&rx.delivered());
    assert_eq!(got, [("A".into(), "firing".into()), ("A".into(), "resolved".into())]);
    wait_true(Duration::from_secs(5), "an empty outbox", || files(&dir) == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_firing_at_shutdown_and_cleared_by_the_restart_is_resolved() {
    let (rx, addr) = Receiver::start(loopback(), &[], None).await;
    let state = tempfile::tempdir().expect("tempdir");
    let cfg = config(addr, None);
    let (_stop_tx, stop) = watch::channel(false);
    let first = Notifiers::start(&cfg, state.path(), stop.clone()).expect("start");
    let a = alert("A", AlertStatus::Firing);
    let b = alert("B", AlertStatus::Firing);
    first.submit(&[a.clone(), b.clone()], &[a.clone(), b.clone()]);
    // Delivered and acknowledged (gone from the outbox), so that the restart
    // does not deliver it again.
    wait_true(Duration::from_secs(10), "the firing message", || {
        stats(&first).queue_length == 0
    })
    .await;
    assert_eq!(rx.delivered().len(), 1);
    drop(first); // the daemon stops with A and B firing
    // After the restart only B fires: A cleared while the daemon was down.
    let second = Notifiers::start(&cfg, state.path(), stop.clone()).expect("restart");
    second.submit(std::slice::from_ref(&b), std::slice::from_ref(&b));
    wait_true(Duration::from_secs(10), "a second message, acknowledged", || {
        rx.delivered().len() >= 2 && stats(&second).queue_length == 0
    })
    .await;
    let got = transitions(&rx.delivered());
    assert!(
        got.contains(&("A".into(), "resolved".into())),
        "A resolved after the restart: {got:?}"
    );
    assert!(
        !got.contains(&("B".into(), "resolved".into())),
        "B still fires: {got:?}"
    );
    // Resolved once, not again on later evaluations or restarts.
    second.submit(&[], std::slice::from_ref(&b));
    drop(second);
    let third = Notifiers::start(&cfg, state.path(), stop).expect("restart");
    third.submit(&[], &[b]);
    wait_true(Duration::from_secs(5), "an empty queue", || {
        stats(&third).queue_length == 0
    })
    .await;
    let resolved_a = transitions(&rx.delivered())
        .iter()
        .filter(|t| t.0 == "A" && t.1 == "resolved")
        .count();
    assert_eq!(resolved_a, 1);
}

fn files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                .count()
        })
        .unwrap_or(0)
}

/// The whole daemon, stopped with SIGTERM while a rule fires and restarted
/// with a config under which it no longer fires: the webhook gets that
/// alert's `resolved` from the restarted daemon (its open alerts are kept
/// in the state dir), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_resolves_after_a_restart_what_fired_at_its_shutdown() {
    use common::Lines;
    use common::proc::{daemon, signal, wait_exit};
    let (rx, addr) = Receiver::start(loopback(), &[], None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumemd.toml");
    let config = |above: &str| {
        format!(
            "[poll]\ninterval = \"100ms\"\n[alerting]\ndefault_rules = false\n[state]\ndir = \"{}\"\n\
             [notify.webhook]\nurl = \"http://{addr}/hook\"\nretry_initial = \"20ms\"\nretry_max = \"100ms\"\n\
             [[rule]]\nname = \"RestartProbe\"\nkind = \"device_used_bytes\"\nabove = \"{above}\"\nfor = \"0s\"\n",
            dir.path().join("state").display()
        )
    };
    // (gpu, status) of every RestartProbe alert delivered, in order.
    let probe = |d: &[Value]| -> Vec<(String, String)> {
        d.iter()
            .flat_map(|m| m["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["labels"]["alertname"] == "RestartProbe")
            .map(|a| {
                (
                    a["labels"]["gpu"].as_str().unwrap_or("").into(),
                    a["status"].as_str().unwrap_or("").into(),
                )
            })
            .collect()
    };
    let gpus = |d: &[Value], status: &str| -> Vec<String> {
        let mut g: Vec<String> = probe(d).into_iter().filter(|t| t.1 == status).map(|t| t.0).collect();
        g.sort();
        g
    };
    let run = |text: String| {
        std::fs::write(&path, text).expect("write config");
        let mut child = daemon(&["--demo", "--web.listen-address", "127.0.0.1:0"], &path);
        let mut log = Lines::new(child.stderr.take().expect("stderr"));
        log.wait_for("listening", Duration::from_secs(20));
        (child, log)
    };

    let (first, _log) = run(config("1B"));
    wait_true(Duration::from_secs(20), "RestartProbe firing at the webhook", || {
        !gpus(&rx.delivered(), "firing").is_empty()
    })
    .await;
    signal(&first, rustix::process::Signal::TERM);
    assert!(wait_exit(first, Duration::from_secs(20)).success());
    let fired = gpus(&rx.delivered(), "firing");
    assert!(
        gpus(&rx.delivered(), "resolved").is_empty(),
        "resolved before the restart"
    );

    let (second, _log) = run(config("1000TiB"));
    wait_true(
        Duration::from_secs(20),
        "RestartProbe resolved after the restart",
        || gpus(&rx.delivered(), "resolved") == fired,
    )
    .await;
    signal(&second, rustix::process::Signal::TERM);
    assert!(wait_exit(second, Duration::from_secs(20)).success());
    // Each resolved once, and nothing fired again.
    assert_eq!(gpus(&rx.delivered(), "resolved"), fired, "{:?}", probe(&rx.delivered()));
    assert_eq!(gpus(&rx.delivered(), "firing"), fired, "{:?}", probe(&rx.delivered()));
}
