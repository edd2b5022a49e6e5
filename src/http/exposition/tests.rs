//! The cached `/metrics` body against `metrics::render`: the same bytes
//! for every scrape, the snapshot part rendered once per snapshot, config
//! and format, the live part rendered every time.

use std::time::Duration;

use super::*;
use crate::config::ProcessMode;
use crate::pipeline::Pipeline;
use crate::reload::ReloadStatus;
use crate::source::GpuSource;
use crate::source::scenario::large;
use crate::source::simulated::SimulatedSource;

const BUILD: BuildInfo = BuildInfo {
    version: "0.0.0",
    revision: "test",
};

/// A simulated fleet's snapshot after poll `polls`: each poll changes the
/// figures, so two of them render differently.
fn fleet(cfg: &Config, polls: u64) -> Arc<Snapshot> {
    let epoch = 1_767_225_600.0;
    let mut src = SimulatedSource::new(large(2, 5), Duration::from_secs(10), epoch);
    let mut pipe = Pipeline::new(&cfg.processes);
    let mut snap = Snapshot::default();
    for i in 0..polls {
        let now = epoch + 10.0 * i as f64;
        let Ok(poll) = src.poll(true) else {
            panic!("simulated poll failed")
        };
        let (driver, devices) = pipe.build(poll, now);
        snap = Snapshot {
            seq: i + 1,
            timestamp: now,
            nvml_up: true,
            driver,
            devices,
            ..Snapshot::default()
        };
    }
    Arc::new(snap)
}

fn live(cpu: f64, reload_ok: bool) -> DaemonState<'static> {
    DaemonState {
        alerts: None,
        reload: Some(ReloadStatus {
            successful: reload_ok,
            last_success: 1_767_225_000.0,
        }),
        counters: None,
        process: Some(metrics::SelfStats {
            cpu_seconds: Some(cpu),
            ..metrics::SelfStats::default()
        }),
    }
}

fn text(f: &Frames) -> String {
    String::from_utf8(f.concat()).unwrap_or_default()
}

fn head_ptr(f: &Frames) -> *const u8 {
    f.frames().next().map_or(std::ptr::null(), |b| b.as_ptr())
}

#[test]
fn two_scrapes_of_one_snapshot_are_the_same_bytes_rendered_once() {
    let cfg = Arc::new(Config::default());
    let snap = fleet(&cfg, 3);
    let cache = ScrapeCache::default();
    let d = live(1.5, true);
    for format in [Format::Prometheus, Format::OpenMetrics] {
        let a = cache.body(&snap, &cfg, &BUILD, &d, format);
        let b = cache.body(&snap, &cfg, &BUILD, &d, format);
        let whole = metrics::render(&snap, &d, &cfg.processes, &BUILD, format);
        assert_eq!(text(&a), whole, "{format:?}");
        assert_eq!(text(&b), whole, "{format:?}");
        // The second scrape sent the first one's bytes, not a new render.
        assert_eq!(head_ptr(&a), head_ptr(&b), "{format:?}");
        assert!(whole.contains("gpumem_device_memory_used_bytes{"), "{whole}");
    }
}

#[test]
fn a_new_snapshot_or_config_is_rendered_afresh() {
    let cfg = Arc::new(Config::default());
    let (first, second) = (fleet(&cfg, 2), fleet(&cfg, 4));
    let cache = ScrapeCache::default();
    let d = live(1.5, true);
    let f = Format::Prometheus;
    let old = text(&cache.body(&first, &cfg, &BUILD, &d, f));
    let new = text(&cache.body(&second, &cfg, &BUILD, &d, f));
    assert_ne!(old, new);
    assert_eq!(new, metrics::render(&second, &d, &cfg.processes, &BUILD, f));
    // A reload that changes what is rendered: same snapshot, new config.
    let mut off = Config::default();
    off.processes.mode = ProcessMode::Off;
    let off = Arc::new(off);
    let reloaded = text(&cache.body(&second, &off, &BUILD, &d, f));
    assert_eq!(reloaded, metrics::render(&second, &d, &off.processes, &BUILD, f));
    assert_ne!(reloaded, new);
}

#[test]
fn the_live_part_changes_between_scrapes_of_one_snapshot() {
    let cfg = Arc::new(Config::default());
    let snap = fleet(&cfg, 3);
    let cache = ScrapeCache::default();
    let f = Format::Prometheus;
    let a = cache.body(&snap, &cfg, &BUILD, &live(1.5, true), f);
    let b = cache.body(&snap, &cfg, &BUILD, &live(2.25, false), f);
    assert_eq!(head_ptr(&a), head_ptr(&b));
    let (a, b) = (text(&a), text(&b));
    assert!(a.contains("\nprocess_cpu_seconds_total 1.5\n"), "{a}");
    assert!(b.contains("\nprocess_cpu_seconds_total 2.25\n"), "{b}");
    assert!(a.contains("\ngpumem_config_last_reload_successful 1\n"), "{a}");
    assert!(b.contains("\ngpumem_config_last_reload_successful 0\n"), "{b}");
    assert_eq!(b, metrics::render(&snap, &live(2.25, false), &cfg.processes, &BUILD, f));
}

#[test]
fn text_and_openmetrics_bodies_are_kept_apart() {
    let cfg = Arc::new(Config::default());
    let snap = fleet(&cfg, 3);
    let cache = ScrapeCache::default();
    let d = live(1.5, true);
    // Alternating formats: each keeps its own slot and its own bytes.
    let mut heads = Vec::new();
    for format in [
        Format::Prometheus,
        Format::OpenMetrics,
        Format::Prometheus,
        Format::OpenMetrics,
    ] {
        let body = cache.body(&snap, &cfg, &BUILD, &d, format);
        heads.push(head_ptr(&body));
        let body = text(&body);
        assert_eq!(body, metrics::render(&snap, &d, &cfg.processes, &BUILD, format));
        let om = format == Format::OpenMetrics;
        assert_eq!(body.ends_with("# EOF\n"), om, "{format:?}");
        assert_eq!(body.matches("# EOF").count(), usize::from(om), "{format:?}");
        // OpenMetrics names counter families without `_total`.
        assert_eq!(body.contains("# TYPE gpumem_poll_errors counter"), om, "{format:?}");
    }
    assert_eq!(heads[0], heads[2]);
    assert_eq!(heads[1], heads[3]);
    assert_ne!(heads[0], heads[1]);
}

#[test]
fn frames_go_out_in_order_with_their_exact_length() {
    let mut f = Frames::new(vec![
        Bytes::from_static(b"ab"),
        Bytes::new(),
        Bytes::from_static(b"cde"),
    ]);
    assert_eq!(f.size_hint().exact(), Some(5));
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut got = Vec::new();
    while let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut f).poll_frame(&mut cx) {
        got.push(frame.into_data().unwrap_or_default());
        assert_eq!(
            f.size_hint().exact(),
            Some(5 - got.iter().map(Bytes::len).sum::<usize>() as u64)
        );
    }
    assert_eq!(got, [Bytes::from_static(b"ab"), Bytes::from_static(b"cde")]);
    assert!(f.is_end_stream());
}

fn gunzip(f: &Frames) -> String {
    use std::io::Read as _;
    let member = f.concat();
    // One member only: GzDecoder stops after the first.
    let mut out = String::new();
    let _ = flate2::read::GzDecoder::new(&member[..]).read_to_string(&mut out);
    out
}

#[test]
fn gzipped_scrapes_are_one_member_of_the_same_text_with_a_cached_head() {
    let cfg = Arc::new(Config::default());
    let (first, second) = (fleet(&cfg, 2), fleet(&cfg, 4));
    let cache = ScrapeCache::default();
    for format in [Format::Prometheus, Format::OpenMetrics] {
        let Ok(a) = cache.gzip_body(&first, &cfg, &BUILD, &live(1.5, true), format) else {
            panic!("gzip")
        };
        let Ok(b) = cache.gzip_body(&first, &cfg, &BUILD, &live(2.5, false), format) else {
            panic!("gzip")
        };
        assert_eq!(head_ptr(&a), head_ptr(&b), "{format:?}");
        assert_eq!(
            gunzip(&a),
            metrics::render(&first, &live(1.5, true), &cfg.processes, &BUILD, format)
        );
        assert_eq!(
            gunzip(&b),
            metrics::render(&first, &live(2.5, false), &cfg.processes, &BUILD, format)
        );
        let Ok(c) = cache.gzip_body(&second, &cfg, &BUILD, &live(1.5, true), format) else {
            panic!("gzip")
        };
        assert_eq!(
            gunzip(&c),
            metrics::render(&second, &live(1.5, true), &cfg.processes, &BUILD, format)
        );
        assert_ne!(head_ptr(&a), head_ptr(&c));
        // Only gzip was asked for: the 5.5 MB-at-scale text is not kept.
        assert!(!cache.holds_text(format), "{format:?}: text kept for gzip scrapes only");
        // A plain scrape of the same entry gets the same text, and from then
        // on it is kept beside the gzip head, which stays the same.
        let plain = cache.body(&second, &cfg, &BUILD, &live(1.5, true), format);
        assert_eq!(gunzip(&c), text(&plain));
        assert!(cache.holds_text(format), "{format:?}");
        let Ok(d) = cache.gzip_body(&second, &cfg, &BUILD, &live(1.5, true), format) else {
            panic!("gzip")
        };
        assert_eq!(head_ptr(&c), head_ptr(&d), "{format:?}: the gzip head is kept");
        assert!(cache.holds_text(format), "{format:?}: a plain scrape's text stays");
    }
}

/// A fleet whose text is many spill chunks: the head and the tail are
/// compressed as they are rendered and still make one member of the
/// same text.
#[test]
fn a_body_of_many_chunks_is_gzipped_as_it_is_rendered() {
    let mut cfg = Config::default();
    cfg.processes.top_n = 1000;
    let cfg = Arc::new(cfg);
    let epoch = 1_767_225_600.0;
    let mut src = SimulatedSource::new(large(4, 300), Duration::from_secs(10), epoch);
    let Ok(poll) = src.poll(true) else {
        panic!("simulated poll failed")
    };
    let (driver, devices) = Pipeline::new(&cfg.processes).build(poll, epoch);
    let snap = Arc::new(Snapshot {
        seq: 1,
        timestamp: epoch,
        nvml_up: true,
        driver,
        devices,
        ..Snapshot::default()
    });
    let cache = ScrapeCache::default();
    for format in [Format::Prometheus, Format::OpenMetrics] {
        let want = metrics::render(&snap, &live(1.5, true), &cfg.processes, &BUILD, format);
        assert!(want.len() > 8 * metrics::SPILL_CHUNK, "{} bytes", want.len());
        let Ok(g) = cache.gzip_body(&snap, &cfg, &BUILD, &live(1.5, true), format) else {
            panic!("gzip")
        };
        assert!(!cache.holds_text(format));
        assert_eq!(gunzip(&g), want, "{format:?}");
    }
}

/// A plain scrape first, then gzip: the text stays (a plain scraper of
/// this snapshot will ask again) and the gzip head is made from it.
#[test]
fn a_plain_scrape_keeps_its_text_beside_a_later_gzip_head() {
    let cfg = Arc::new(Config::default());
    let snap = fleet(&cfg, 2);
    let cache = ScrapeCache::default();
    let format = Format::Prometheus;
    let plain = cache.body(&snap, &cfg, &BUILD, &live(1.5, true), format);
    let Ok(g) = cache.gzip_body(&snap, &cfg, &BUILD, &live(1.5, true), format) else {
        panic!("gzip")
    };
    assert_eq!(gunzip(&g), text(&plain));
    assert!(cache.holds_text(format));
    let again = cache.body(&snap, &cfg, &BUILD, &live(1.5, true), format);
    assert_eq!(head_ptr(&plain), head_ptr(&again), "the cached text is served");
}

#[test]
fn accept_encoding_table() {
    for (h, want) in [
        (None, false),
        (Some("gzip"), true),
        (Some("gzip, deflate, br"), true),
        (Some("GZIP;q=0.5"), true),
        (Some("br;q=1, gzip;q=0.1"), true),
        (Some("gzip;q=0"), false),
        (Some("gzip;q=0.0, identity"), false),
        (Some("identity"), false),
        (Some("*"), false),
        (Some("x-gzip"), false),
        (Some("gzip;q=abc"), false),
    ] {
        assert_eq!(wants_gzip(h), want, "{h:?}");
    }
}
