//! A whole `/metrics` scrape through the daemon's HTTP stack: the simulated
//! 8 x 64 and 64 x 1000 fleets served by `gpumemd::serve::http::router` and
//! `gpumemd::serve::http::serve` (its limits and timeouts) on a two-worker runtime,
//! as the daemon runs it. One client thread makes sequential scrapes on one
//! kept-alive connection and times each from request to last body byte.
//! Prints p50 / p99 per fleet and encoding. Results, command and machine
//! are in BENCHMARKS.md.
//!
//! `cargo bench --bench scrape [-- SCRAPES]` (default 1000 per case).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

#[path = "common/fleet.rs"]
mod fleet;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use gpumemd::act::alerts::AlertsView;
use gpumemd::app::config::Config;
use gpumemd::app::reload::ReloadStatus;
use gpumemd::collect::history::History;
use gpumemd::data::snapshot::Snapshot;
use gpumemd::serve::http::AppState;
use gpumemd::serve::metrics::{BuildInfo, Counters};
use tokio::sync::{mpsc, watch};

const SIZES: &[(usize, usize)] = &[(8, 64), (64, 1000)];

/// The state a daemon serving `snap` would have (no rules, no notifiers).
/// The senders are returned so the channels stay open.
#[allow(clippy::type_complexity)]
fn state(
    cfg: Arc<Config>,
    snap: Arc<Snapshot>,
) -> (
    AppState,
    (
        watch::Sender<Arc<Snapshot>>,
        watch::Sender<Arc<AlertsView>>,
        watch::Sender<Arc<Config>>,
        watch::Sender<ReloadStatus>,
    ),
) {
    let (s_tx, s_rx) = watch::channel(snap);
    let (a_tx, a_rx) = watch::channel(Arc::new(AlertsView::default()));
    let (c_tx, c_rx) = watch::channel(cfg);
    let reload = ReloadStatus {
        successful: true,
        last_success: fleet::EPOCH,
    };
    let (r_tx, r_rx) = watch::channel(reload);
    let (reload_tx, _) = mpsc::channel(1);
    let st = AppState {
        snapshots: s_rx,
        alerts: a_rx,
        config: c_rx,
        reload_status: r_rx,
        reload: reload_tx,
        counters: Counters::default(),
        build: BuildInfo {
            version: "0.1.0",
            revision: "bench",
        },
        history: Arc::new(Mutex::new(History::new(60, 10))),
        allocator: None,
        events: gpumemd::data::events::EventLog::shared(),
        reclaimer: None,
        telemetry_path: "/metrics".into(),
        reports: None,
        scrape_memo: Default::default(),
    };
    (st, (s_tx, a_tx, c_tx, r_tx))
}

/// Serves `router` on a free local port; returns the port.
fn start(rt: &tokio::runtime::Runtime, router: Router, stop: watch::Receiver<bool>) -> u16 {
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(gpumemd::serve::http::serve(listener, router, None, stop));
    port
}

/// One kept-alive connection that scrapes `/metrics`.
struct Client {
    conn: BufReader<TcpStream>,
    request: Vec<u8>,
    body: Vec<u8>,
}

impl Client {
    fn new(port: u16, gzip: bool) -> Self {
        let conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.set_nodelay(true).unwrap();
        let enc = if gzip { "Accept-Encoding: gzip\r\n" } else { "" };
        let request = format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n{enc}\r\n").into_bytes();
        Self {
            conn: BufReader::with_capacity(1 << 16, conn),
            request,
            body: Vec::new(),
        }
    }

    /// One scrape; the body's length as sent.
    fn scrape(&mut self) -> usize {
        self.conn.get_mut().write_all(&self.request).unwrap();
        let (mut len, mut chunked, mut line) = (None, false, String::new());
        loop {
            line.clear();
            self.conn.read_line(&mut line).unwrap();
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.strip_prefix("content-length:") {
                len = Some(v.trim().parse::<usize>().unwrap());
            }
            chunked |= l == "transfer-encoding: chunked";
        }
        self.body.clear();
        if !chunked {
            let n = len.expect("a Content-Length or chunks");
            self.body.resize(n, 0);
            self.conn.read_exact(&mut self.body).unwrap();
            return n;
        }
        loop {
            line.clear();
            self.conn.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim_end(), 16).unwrap();
            let at = self.body.len();
            self.body.resize(at + n + 2, 0);
            self.conn.read_exact(&mut self.body[at..]).unwrap();
            self.body.truncate(at + n);
            if n == 0 {
                return self.body.len();
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn main() {
    let scrapes: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_stop_tx, stop) = watch::channel(false);
    println!("| fleet | encoding | body bytes | p50 / p99 ms |");
    println!("|---|---|---:|---:|");
    for &(gpus, per_gpu) in SIZES {
        let cfg = Arc::new(Config::default());
        let snap = Arc::new(fleet::snapshot(&cfg, gpus, per_gpu));
        let (st, _keep) = state(cfg, snap);
        let port = start(&rt, gpumemd::serve::http::router(st), stop.clone());
        for gzip in [false, true] {
            let mut client = Client::new(port, gzip);
            let (mut times, mut bytes) = (Vec::new(), 0);
            for _ in 0..10 {
                client.scrape();
            }
            for _ in 0..scrapes {
                let t0 = Instant::now();
                bytes = client.scrape();
                times.push(t0.elapsed());
            }
            times.sort();
            let enc = if gzip { "gzip" } else { "identity" };
            println!(
                "| {gpus} x {per_gpu} | {enc} | {bytes} | {:.3} / {:.3} |",
                percentile(&times, 0.5),
                percentile(&times, 0.99)
            );
        }
    }
}
