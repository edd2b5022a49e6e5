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
mod process;
mod selfproc;
mod text;

use crate::config::{ProcessMode, Processes};
use crate::snapshot::Snapshot;
pub use daemon::{Counters, DaemonState};
pub use format::Format;
pub use selfproc::{SelfStats, Units};
use text::Writer;
pub use text::{SPILL_CHUNK, Spill};

/// Build identity for `gpumem_build_info`.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
}

/// Renders the whole exposition in `format`: [`render_snapshot`] followed
/// by [`render_live`], in one buffer.
pub fn render(snap: &Snapshot, daemon: &DaemonState<'_>, cfg: &Processes, build: &BuildInfo, format: Format) -> String {
    let mut w = Writer::new(format, capacity(snap, cfg), cfg.label_max_bytes);
    snapshot_part(&mut w, snap, cfg, build);
    daemon::render(&mut w, daemon);
    w.finish()
}

/// The exposition's first part: every family that depends only on the
/// snapshot, `cfg` and the build, so the same three give the same bytes
/// (the scrape handler renders it once per snapshot). No `# EOF`.
pub fn render_snapshot(snap: &Snapshot, cfg: &Processes, build: &BuildInfo, format: Format) -> String {
    let mut w = Writer::new(format, capacity(snap, cfg), cfg.label_max_bytes);
    snapshot_part(&mut w, snap, cfg, build);
    w.into_unfinished()
}

/// [`render_snapshot`]'s bytes handed to `to` a chunk at a time, never
/// whole (the gzip scrape compresses them as they come).
pub fn stream_snapshot(snap: &Snapshot, cfg: &Processes, build: &BuildInfo, format: Format, to: &mut dyn Spill) {
    let mut w = Writer::spilling(format, cfg.label_max_bytes, to);
    snapshot_part(&mut w, snap, cfg, build);
    w.finish_spill(false);
}

/// [`render_live`]'s bytes handed to `to` a chunk at a time: at 64 x 1000
/// the demo's 12,800 firing alerts alone are 2.3 MB of text.
pub fn stream_live(daemon: &DaemonState<'_>, cfg: &Processes, format: Format, to: &mut dyn Spill) {
    let mut w = Writer::spilling(format, cfg.label_max_bytes, to);
    daemon::render(&mut w, daemon);
    w.finish_spill(true);
}

/// The exposition's second part, which changes without a new snapshot
/// (alerts, reload status, counters, `process_*`), and the `# EOF` of
/// OpenMetrics: appended to [`render_snapshot`]'s bytes it gives what
/// [`render`] gives.
pub fn render_live(daemon: &DaemonState<'_>, cfg: &Processes, format: Format) -> String {
    let alerts = daemon.alerts.map_or(0, |a| a.alerts.len());
    let mut w = Writer::new(format, 4096 + alerts * 200, cfg.label_max_bytes);
    daemon::render(&mut w, daemon);
    w.finish()
}

/// About the bytes of the snapshot part, so its text is not copied as it
/// grows: about 700 a process exported, 1600 a device, and 120 a group
/// (counted as up to 32 per device and grouping; the demo fleets have 8
/// users and 32 jobs).
fn capacity(snap: &Snapshot, cfg: &Processes) -> usize {
    let procs: usize = snap.devices.iter().map(|d| d.processes.len().min(cfg.top_n)).sum();
    let groups: usize = match cfg.mode {
        ProcessMode::Off => 0,
        _ => snap.devices.iter().map(|d| d.processes.len().min(32)).sum::<usize>() * cfg.group_by.len(),
    };
    4096 + snap.devices.len() * 1600 + procs * 700 + groups * 120
}

fn snapshot_part(w: &mut Writer, snap: &Snapshot, cfg: &Processes, build: &BuildInfo) {
    family::write_table(w, device::DEVICE, &snap.devices);
    family::write_table(w, health::HEALTH, &snap.devices);
    if cfg.mode == ProcessMode::PerProcess {
        process::processes(w, snap, cfg);
    }
    if cfg.mode != ProcessMode::Off && !cfg.group_by.is_empty() {
        process::groups(w, snap, cfg);
    }
    family::write_table(w, device::POLL, std::slice::from_ref(snap));
    device::BUILD.write(w, [build]);
}

#[cfg(test)]
mod tests;
