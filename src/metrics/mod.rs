//! Renders the Prometheus exposition from one snapshot at scrape time, so a
//! GPU or process that disappears leaves no stale series. Owns metric names,
//! help texts, labels and cardinality limits (top-N, min bytes, label length).
//! It must not read anything but the snapshot, config and daemon state it is
//! given, nor change the state of what it reads.

mod daemon;
mod format;
mod text;

use std::collections::BTreeMap;

use crate::config::{GroupBy, ProcessMode, Processes};
use crate::snapshot::{Device, Process, Snapshot};
pub use daemon::{Counters, DaemonState};
pub use format::Format;
use text::{Digits, Kind, Writer};

/// Reasons `gpumem_poll_errors_total` always exposes (0 until seen), so
/// `rate()` works from the first scrape.
pub const POLL_ERROR_REASONS: &[&str] = &["timeout", "nvml_unavailable", "failed", "device", "panic"];

/// Build identity for `gpumem_build_info`.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
}

/// Renders the whole exposition in `format`.
pub fn render(snap: &Snapshot, daemon: &DaemonState<'_>, cfg: &Processes, build: &BuildInfo, format: Format) -> String {
    let procs: usize = snap.devices.iter().map(|d| d.processes.len().min(cfg.top_n)).sum();
    let mut w = Writer::new(
        format,
        4096 + snap.devices.len() * 1200 + procs * 700,
        cfg.label_max_bytes,
    );
    devices(&mut w, snap);
    if cfg.mode == ProcessMode::PerProcess {
        processes(&mut w, snap, cfg);
    }
    if cfg.mode != ProcessMode::Off && !cfg.group_by.is_empty() {
        groups(&mut w, snap, cfg);
    }
    self_metrics(&mut w, snap, build);
    daemon::render(&mut w, daemon);
    w.finish()
}

fn devices(w: &mut Writer, snap: &Snapshot) {
    let ds = &snap.devices;
    w.family(
        "gpumem_device_info",
        Kind::Gauge,
        "GPU or MIG instance identity; value is always 1.",
    );
    for d in ds {
        let index = d.index.map(|i| Digits::new(u64::from(i)));
        let index = index.as_ref().map_or("", Digits::as_str);
        w.sample(
            "gpumem_device_info",
            &[
                ("uuid", &d.uuid),
                ("index", index),
                ("name", &d.name),
                ("pci_bus_id", &d.pci_bus_id),
                ("parent_uuid", &d.parent_uuid),
                ("mig_profile", &d.mig_profile),
            ],
            1u64,
        );
    }
    w.family(
        "gpumem_device_up",
        Kind::Gauge,
        "1 if the device was read this poll, 0 if it failed (lost, driver error).",
    );
    for d in ds {
        w.sample("gpumem_device_up", &[("uuid", &d.uuid)], u64::from(d.up));
    }
    type Field = fn(&crate::snapshot::Memory) -> Option<u64>;
    let mem: [(&str, &str, Field); 4] = [
        (
            "gpumem_device_memory_total_bytes",
            "Total device memory in bytes.",
            |m| Some(m.total_bytes),
        ),
        (
            "gpumem_device_memory_used_bytes",
            "Used device memory in bytes (NVML v2: excludes reserved).",
            |m| Some(m.used_bytes),
        ),
        ("gpumem_device_memory_free_bytes", "Free device memory in bytes.", |m| {
            Some(m.free_bytes)
        }),
        (
            "gpumem_device_memory_reserved_bytes",
            "Memory reserved by the driver and firmware, in bytes.",
            |m| m.reserved_bytes,
        ),
    ];
    for (name, help, get) in mem {
        w.family(name, Kind::Gauge, help);
        for d in ds.iter().filter(|d| d.up) {
            if let Some(v) = d.memory.as_ref().and_then(get) {
                w.sample(name, &[("uuid", &d.uuid)], v);
            }
        }
    }
    w.family(
        "gpumem_device_memory_held_bytes",
        Kind::Gauge,
        "Used memory by holder: live processes, zombie (state Z or D), exited (listed by NVML, gone from /proc), unattributed. Adds up to used.",
    );
    for d in ds.iter().filter(|d| d.up) {
        if let Some(h) = d.holders {
            for (holder, v) in [
                ("live", h.live),
                ("zombie", h.zombie),
                ("exited", h.exited),
                ("unattributed", h.unattributed),
            ] {
                w.sample(
                    "gpumem_device_memory_held_bytes",
                    &[("uuid", &d.uuid), ("holder", holder)],
                    v,
                );
            }
        }
    }
    w.family(
        "gpumem_device_memory_unreleased_bytes",
        Kind::Gauge,
        "Memory still used after its holder left the process list for longer than late_release_after.",
    );
    for d in ds.iter().filter(|d| d.up && d.holders.is_some()) {
        let v: u64 = d.unreleased.iter().map(|u| u.bytes).sum();
        w.sample("gpumem_device_memory_unreleased_bytes", &[("uuid", &d.uuid)], v);
    }
    w.family(
        "gpumem_device_processes",
        Kind::Gauge,
        "Processes with a context on the device.",
    );
    for d in ds.iter().filter(|d| d.up && !d.processes_unreadable) {
        w.sample(
            "gpumem_device_processes",
            &[("uuid", &d.uuid)],
            d.processes.len() as u64,
        );
    }
}

/// The processes of `d` that get series: above `min_bytes`, largest first,
/// at most `top_n`. Processes with unavailable memory rank last but count.
fn exported<'a>(d: &'a Device, cfg: &Processes) -> (Vec<&'a Process>, usize) {
    let eligible: Vec<&Process> = d
        .processes
        .iter()
        .filter(|p| p.used_bytes.is_none_or(|b| b >= cfg.min_bytes.0))
        .collect();
    let keep = eligible.len().min(cfg.top_n);
    let left_out = d.processes.len() - keep;
    (eligible.into_iter().take(keep).collect(), left_out)
}

/// One exported process: its device, itself, and where its escaped
/// `uuid="..",pid=".."` labels lie in the shared prefix buffer.
type Exported<'a> = (&'a Device, &'a Process, std::ops::Range<usize>);

fn processes(w: &mut Writer, snap: &Snapshot, cfg: &Processes) {
    let mut per_dev: Vec<(&Device, usize)> = Vec::new();
    let mut rows: Vec<Exported<'_>> = Vec::new();
    // Every per-process family starts with uuid and pid: escape them once
    // per process into one buffer instead of once per series.
    let mut prefixes = String::new();
    for d in snap.devices.iter().filter(|d| d.up) {
        let (ps, left) = exported(d, cfg);
        per_dev.push((d, left));
        for p in ps {
            let pid = Digits::new(u64::from(p.pid));
            let start = prefixes.len();
            w.labels(&mut prefixes, &[("uuid", &d.uuid), ("pid", pid.as_str())]);
            rows.push((d, p, start..prefixes.len()));
        }
    }
    let prefix = |r: &std::ops::Range<usize>| prefixes.get(r.clone()).unwrap_or_default();
    w.family(
        "gpumem_process_memory_used_bytes",
        Kind::Gauge,
        "Device memory used by a process, in bytes; absent when NVML reports it unavailable.",
    );
    for (_, p, r) in &rows {
        if let Some(b) = p.used_bytes {
            let labels = [
                ("comm", p.comm.as_str()),
                ("user", &p.user),
                ("container", &p.placement.container),
                ("pod_uid", &p.placement.pod_uid),
                ("unit", &p.placement.unit),
                // `job` would collide with the scrape target's own label.
                ("slurm_job", &p.placement.job),
            ];
            w.sample_after("gpumem_process_memory_used_bytes", prefix(r), &labels, b);
        }
    }
    w.family(
        "gpumem_process_info",
        Kind::Gauge,
        "Process identity and state; value is always 1.",
    );
    for (_, p, r) in &rows {
        // An array, not a Vec: no allocation per process.
        let cmdline = p.cmdline.as_deref().filter(|_| cfg.cmdline);
        let labels = [
            ("comm", p.comm.as_str()),
            ("user", &p.user),
            ("state", &p.state),
            ("type", &p.kind),
            ("container_runtime", &p.placement.container_runtime),
            ("cmdline", cmdline.unwrap_or_default()),
        ];
        let n = if cmdline.is_some() {
            labels.len()
        } else {
            labels.len() - 1
        };
        w.sample_after("gpumem_process_info", prefix(r), &labels[..n], 1u64);
    }
    per_process_gauges(w, &rows, &prefixes);
    w.family(
        "gpumem_processes_not_exported",
        Kind::Gauge,
        "Processes left out of per-process series by top_n or min_bytes; their memory still counts in holders and groups.",
    );
    for (d, left) in per_dev.iter().filter(|(d, _)| !d.processes_unreadable) {
        w.sample("gpumem_processes_not_exported", &[("uuid", &d.uuid)], *left as u64);
    }
}

fn per_process_gauges(w: &mut Writer, rows: &[Exported<'_>], prefixes: &str) {
    type Get = fn(&Process) -> Option<f64>;
    let gauges: [(&str, &str, Get); 4] = [
        (
            "gpumem_process_start_time_seconds",
            "Process start time, Unix seconds; with pid it identifies a process across PID reuse.",
            |p| p.start_time,
        ),
        (
            "gpumem_process_memory_growth_bytes_per_second",
            "Robust trend of the process's memory over the leak window, bytes per second.",
            |p| p.growth_bytes_per_second,
        ),
        (
            "gpumem_process_leak_suspected",
            "1 if the process's memory grows steadily over the leak window.",
            |p| {
                p.growth_bytes_per_second
                    .map(|_| if p.leak_suspected { 1.0 } else { 0.0 })
            },
        ),
        (
            "gpumem_process_idle_seconds",
            "Seconds the process has held memory with no SM activity (absent where utilisation is not sampled).",
            |p| p.idle_seconds,
        ),
    ];
    for (name, help, get) in gauges {
        w.family(name, Kind::Gauge, help);
        for (_, p, r) in rows {
            if let Some(v) = get(p) {
                w.sample_after(name, prefixes.get(r.clone()).unwrap_or_default(), &[], v);
            }
        }
    }
}

/// The group a process belongs to under `by` (empty when it has none).
pub fn group_value(p: &Process, by: GroupBy) -> &str {
    p.group(by)
}

fn groups(w: &mut Writer, snap: &Snapshot, cfg: &Processes) {
    w.family(
        "gpumem_group_memory_used_bytes",
        Kind::Gauge,
        "Device memory used by all processes of a group (user, container, pod, unit, job), in bytes.",
    );
    for d in snap.devices.iter().filter(|d| d.up) {
        for &by in &cfg.group_by {
            let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
            for p in &d.processes {
                let g = group_value(p, by);
                if !g.is_empty() {
                    *sums.entry(g).or_default() += p.used_bytes.unwrap_or(0);
                }
            }
            for (g, v) in sums {
                w.sample(
                    "gpumem_group_memory_used_bytes",
                    &[("uuid", &d.uuid), ("group_by", by.as_str()), ("group", g)],
                    v,
                );
            }
        }
    }
}

fn self_metrics(w: &mut Writer, snap: &Snapshot, build: &BuildInfo) {
    let p = &snap.poll;
    w.family("gpumem_nvml_up", Kind::Gauge, "1 if NVML is initialised and answering.");
    w.sample("gpumem_nvml_up", &[], u64::from(snap.nvml_up));
    if let Some(d) = &snap.driver {
        w.family(
            "gpumem_driver_info",
            Kind::Gauge,
            "Driver, NVML and CUDA versions; value is always 1.",
        );
        w.sample(
            "gpumem_driver_info",
            &[
                ("driver_version", &d.driver_version),
                ("nvml_version", &d.nvml_version),
                ("cuda_version", &d.cuda_version),
            ],
            1u64,
        );
    }
    w.family(
        "gpumem_poll_duration_seconds",
        Kind::Gauge,
        "Duration of the latest poll.",
    );
    w.sample("gpumem_poll_duration_seconds", &[], p.duration_seconds);
    w.family(
        "gpumem_poll_source_duration_seconds",
        Kind::Gauge,
        "Part of the latest poll spent reading the GPU source (NVML calls); the rest is gpumemd's own work.",
    );
    w.sample("gpumem_poll_source_duration_seconds", &[], p.source_seconds);
    if let Some(t) = p.last_success_timestamp {
        w.family(
            "gpumem_last_poll_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the latest successful poll.",
        );
        w.sample("gpumem_last_poll_timestamp_seconds", &[], t);
    }
    w.family("gpumem_poll_success", Kind::Gauge, "1 if the latest poll succeeded.");
    w.sample("gpumem_poll_success", &[], u64::from(p.success));
    w.family("gpumem_polls_total", Kind::Counter, "Polls started.");
    w.sample("gpumem_polls_total", &[], p.polls_total);
    w.family(
        "gpumem_poll_errors_total",
        Kind::Counter,
        "Polls or devices that failed, by reason.",
    );
    for reason in POLL_ERROR_REASONS {
        let v = p.errors_total.get(*reason).copied().unwrap_or(0);
        w.sample("gpumem_poll_errors_total", &[("reason", reason)], v);
    }
    w.family(
        "gpumem_poll_overruns_total",
        Kind::Counter,
        "Poll ticks skipped because the previous poll was still running.",
    );
    w.sample("gpumem_poll_overruns_total", &[], p.overruns_total);
    w.family(
        "gpumem_build_info",
        Kind::Gauge,
        "gpumemd version and revision; value is always 1.",
    );
    w.sample(
        "gpumem_build_info",
        &[("version", build.version), ("revision", build.revision)],
        1u64,
    );
}

#[cfg(test)]
mod tests;
