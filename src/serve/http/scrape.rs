//! `/metrics`: the exposition per scrape, with the snapshot's part kept
//! from one scrape to the next until the poller publishes again. Owns that
//! one kept text. Must not keep anything a scrape reads anew (alerts,
//! counters, `process_*`): those are rendered every time.
//!
//! Why keep it: at 8 GPUs x 64 processes the snapshot's families are about
//! 240 kB of text and rendering them is most of a scrape's CPU; several
//! scrapers (Prometheus pairs, the status page, curl) read the same poll.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::Response;

use super::AppState;
use super::bodies;
use super::handlers::{ServerBudget, budget};
use crate::app::config::Config;
use crate::data::snapshot::Snapshot;
use crate::serve::metrics::{self, Format};

/// The snapshot part last rendered, and what it was rendered from. `Weak`
/// so that the memo never keeps an old snapshot's processes alive.
#[derive(Default)]
pub struct ScrapeMemo(Mutex<Option<Kept>>);

struct Kept {
    snap: Weak<Snapshot>,
    config: Weak<Config>,
    format: Format,
    text: Arc<[u8]>,
}

impl ScrapeMemo {
    /// The snapshot part for `snap` under `cfg` in `format`: the kept one
    /// when all three are the ones it was rendered from, else a new one.
    fn part(&self, snap: &Arc<Snapshot>, cfg: &Arc<Config>, build: &metrics::BuildInfo, format: Format) -> Arc<[u8]> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = kept.as_ref()
            && k.format == format
            && Weak::ptr_eq(&k.snap, &Arc::downgrade(snap))
            && Weak::ptr_eq(&k.config, &Arc::downgrade(cfg))
        {
            return k.text.clone();
        }
        let text: Arc<[u8]> = metrics::render_snapshot(snap, &cfg.processes, build, format)
            .into_bytes()
            .into();
        *kept = Some(Kept {
            snap: Arc::downgrade(snap),
            config: Arc::downgrade(cfg),
            format,
            text: text.clone(),
        });
        text
    }
}

pub async fn metrics(State(st): State<AppState>, b: ServerBudget, headers: HeaderMap) -> Response {
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    // Clone the Arcs and release the watch locks before rendering, so a
    // slow scrape never holds up the poller's next publish.
    let snap = st.snapshots.borrow().clone();
    let alerts = st.alerts.borrow().clone();
    let cfg = st.config.borrow().clone();
    let daemon = metrics::DaemonState {
        alerts: Some(&alerts),
        reload: Some(*st.reload_status.borrow()),
        counters: Some(&st.counters),
        // At scrape time, as the Go and Python clients do: a handful of
        // small /proc reads, cheaper than keeping them current.
        process: Some(metrics::SelfStats::read()),
    };
    let part = st.scrape_memo.part(&snap, &cfg, &st.build, format);
    let rest = metrics::render_daemon(&daemon, format, cfg.processes.label_max_bytes);
    bodies::bounded(budget(&b), Some(part), rest.into_bytes(), format.content_type())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build() -> metrics::BuildInfo {
        metrics::BuildInfo {
            version: "0.0.0",
            revision: "test",
        }
    }

    fn snap(seq: u64) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            seq,
            nvml_up: true,
            ..Snapshot::default()
        })
    }

    #[test]
    fn the_part_is_kept_until_the_snapshot_config_or_format_changes() {
        let memo = ScrapeMemo::default();
        let (s1, cfg) = (snap(1), Arc::new(Config::default()));
        let first = memo.part(&s1, &cfg, &build(), Format::Prometheus);
        assert!(Arc::ptr_eq(&first, &memo.part(&s1, &cfg, &build(), Format::Prometheus)));
        assert_eq!(
            &*first,
            metrics::render_snapshot(&s1, &cfg.processes, &build(), Format::Prometheus).as_bytes()
        );

        let om = memo.part(&s1, &cfg, &build(), Format::OpenMetrics);
        assert!(!Arc::ptr_eq(&first, &om));
        let cfg2 = Arc::new(Config::default());
        assert!(!Arc::ptr_eq(&om, &memo.part(&s1, &cfg2, &build(), Format::OpenMetrics)));

        // A new poll with other figures: the text follows it.
        let mut s2 = (*s1).clone();
        s2.seq = 2;
        s2.poll.polls_total = 7;
        let s2 = Arc::new(s2);
        let second = memo.part(&s2, &cfg2, &build(), Format::Prometheus);
        assert_ne!(&*first, &*second);
        assert_eq!(
            &*second,
            metrics::render_snapshot(&s2, &cfg2.processes, &build(), Format::Prometheus).as_bytes()
        );
    }

    #[test]
    fn the_whole_exposition_is_the_kept_part_then_the_daemon_part() {
        let (s, cfg) = (snap(3), Config::default());
        let daemon = metrics::DaemonState {
            alerts: None,
            reload: None,
            counters: None,
            process: None,
        };
        let whole = metrics::render(&s, &daemon, &cfg.processes, &build(), Format::OpenMetrics);
        let part = metrics::render_snapshot(&s, &cfg.processes, &build(), Format::OpenMetrics);
        assert!(whole.starts_with(&part));
        assert!(whole.ends_with("# EOF\n"));
        assert_eq!(whole.matches("# EOF").count(), 1);
    }
}
