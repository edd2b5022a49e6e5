//! Renders the Prometheus exposition from one snapshot at scrape time, so a
//! GPU or process that disappears leaves no stale series. Owns metric names,
//! help texts, labels and cardinality limits (top-N, min bytes, label length).
//! It must not read anything but the snapshot, config and daemon state it is
//! given, nor change the state of what it reads. (The one reader here,
//! `SelfStats::read` of `/proc/self`, is called by the scrape handler, not
//! by `render`.)

mod daemon;
mod device;
mod family;
mod format;
mod health;
mod ledger;
mod process;
mod selfproc;
mod text;

use crate::app::config::{ProcessMode, Processes};
use crate::data::snapshot::Snapshot;
pub use daemon::{Counters, DaemonState};
pub use format::Format;
pub use selfproc::{SelfStats, Units};
use text::Writer;

/// Build identity for `gpumem_build_info`.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
}

/// Renders the whole exposition in `format`: the snapshot's families,
/// then the daemon's own (alerts, reload status, counters, `process_*`),
/// and the `# EOF` of OpenMetrics.
pub fn render(snap: &Snapshot, daemon: &DaemonState<'_>, cfg: &Processes, build: &BuildInfo, format: Format) -> String {
    let mut out = render_snapshot(snap, cfg, build, format);
    out.push_str(&render_daemon(daemon, format, cfg.label_max_bytes));
    out
}

/// The part of the exposition that depends only on the snapshot, config
/// and build: the same bytes for every scrape until the next poll, so the
/// scrape handler may keep it (`http::handlers`).
pub fn render_snapshot(snap: &Snapshot, cfg: &Processes, build: &BuildInfo, format: Format) -> String {
    let mut w = Writer::new(format, cfg.label_max_bytes);
    family::write_table(&mut w, device::DEVICE, &snap.devices);
    family::write_table(&mut w, health::HEALTH, &snap.devices);
    if cfg.mode == ProcessMode::PerProcess {
        process::processes(&mut w, snap, cfg);
    }
    if cfg.mode != ProcessMode::Off && !cfg.group_by.is_empty() {
        process::groups(&mut w, snap, cfg);
    }
    family::write_table(&mut w, device::POLL, std::slice::from_ref(snap));
    device::BUILD.write(&mut w, [build]);
    w.into_text()
}

/// The part read anew at every scrape: alerts, reloads, counters and
/// `process_*`, then the format's end.
pub fn render_daemon(daemon: &DaemonState<'_>, format: Format, label_max_bytes: usize) -> String {
    let mut w = Writer::with_capacity(format, label_max_bytes, 8 << 10);
    daemon::render(&mut w, daemon);
    w.finish()
}

#[cfg(test)]
mod tests;
