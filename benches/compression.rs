//! What gzip costs and saves per `/metrics` scrape: the exposition of the
//! scrape target's 8 x 64 fleet and of `large` (64 x 1000), rendered by
//! `metrics::render` and sent through the daemon's own compression layer
//! (`gpumemd::serve::http::compression()`) as a router would, with and without
//! `Accept-Encoding: gzip`, and with gzip's default level for comparison.
//! Prints the body sizes, then times a whole
//! scrape (render, compress, collect the body) of each with criterion, on
//! one thread: the time is the CPU a scrape costs. Results and the machine
//! are in BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

#[path = "common/fleet.rs"]
#[allow(dead_code)] // EPOCH is for the benches that build their own state
mod fleet;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::get;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpumemd::app::config::Config;
use gpumemd::data::snapshot::Snapshot;
use gpumemd::serve::metrics::{self, DaemonState, Format};
use tower::ServiceExt as _;
use tower_http::compression::{CompressionLayer, CompressionLevel};

const SIZES: &[(usize, usize)] = &[(8, 64), (64, 1000)];

/// `/metrics` rendering `snap` at each request, behind `layer`.
fn app(cfg: Arc<Config>, snap: Arc<Snapshot>, layer: CompressionLayer) -> Router {
    let handler = move || {
        let (cfg, snap) = (cfg.clone(), snap.clone());
        async move {
            let build = metrics::BuildInfo {
                version: "0.1.0",
                revision: "bench",
            };
            let d = DaemonState::default();
            metrics::render(&snap, &d, &cfg.processes, &build, Format::Prometheus)
        }
    };
    Router::new().route("/metrics", get(handler)).layer(layer)
}

/// One scrape; the body's bytes as sent, and its Content-Encoding.
async fn scrape(app: &Router, gzip: bool) -> (usize, Option<String>) {
    let mut req = Request::get("/metrics");
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let enc = resp
        .headers()
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    (body.len(), enc)
}

fn compression(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let cfg = Arc::new(Config::defaults(false));
    for &(gpus, per_gpu) in SIZES {
        let snap = Arc::new(fleet::snapshot(&cfg, gpus, per_gpu));
        let daemon = app(cfg.clone(), snap.clone(), gpumemd::serve::http::compression());
        // For comparison: gzip's default level (6), which the daemon does
        // not use.
        let level6 = app(
            cfg.clone(),
            snap,
            CompressionLayer::new().quality(CompressionLevel::Default),
        );
        let (plain, none) = rt.block_on(scrape(&daemon, false));
        let (gz, enc) = rt.block_on(scrape(&daemon, true));
        let (gz6, _) = rt.block_on(scrape(&level6, true));
        assert_eq!((none.as_deref(), enc.as_deref()), (None, Some("gzip")));
        println!(
            "{gpus}x{per_gpu}: plain {plain} B, gzip {gz} B ({:.1} % of plain, {} B saved per scrape), gzip level 6 {gz6} B",
            100.0 * gz as f64 / plain as f64,
            plain - gz
        );
        let id = format!("{gpus}x{per_gpu}");
        let mut g = c.benchmark_group("scrape");
        for (name, app, gzip) in [
            ("plain", &daemon, false),
            ("gzip", &daemon, true),
            ("gzip_level6", &level6, true),
        ] {
            g.bench_with_input(BenchmarkId::new(name, &id), &gzip, |b, &gzip| {
                b.iter(|| black_box(rt.block_on(scrape(app, gzip))));
            });
        }
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
}

criterion_group! { name = benches; config = config(); targets = compression }
criterion_main!(benches);
