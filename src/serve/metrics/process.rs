//! The per-process and per-group families. Owns the cardinality limits
//! (`top_n`, `min_bytes`, and `gpumem_processes_not_exported` counting what
//! they leave out) and the group sums, which count every process, exported
//! or not. Reads only the snapshot and the `[processes]` config.

use std::collections::BTreeMap;

use super::text::{Digits, Kind, Writer};
use crate::app::config::Processes;
use crate::data::snapshot::{AllocPair, AllocatorFigures, Device, Process, Snapshot};

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

/// One exported process: its device, itself, and its pid as a label value.
type Exported<'a> = (&'a Device, &'a Process, Digits);

pub(super) fn processes(w: &mut Writer, snap: &Snapshot, cfg: &Processes) {
    let mut per_dev: Vec<(&Device, usize)> = Vec::new();
    let mut rows: Vec<Exported<'_>> = Vec::new();
    for d in snap.devices.iter().filter(|d| d.up) {
        let (ps, left) = exported(d, cfg);
        per_dev.push((d, left));
        rows.extend(ps.into_iter().map(|p| (d, p, Digits::new(u64::from(p.pid)))));
    }
    identity_families(w, &rows, cfg);
    per_process_gauges(w, &rows);
    allocator_families(w, &rows);
    super::ledger::driver_families(w, &rows);
    w.family(
        "gpumem_processes_not_exported",
        Kind::Gauge,
        "Processes left out of per-process series by top_n or min_bytes; their memory still counts in holders and groups.",
    );
    for (d, left) in per_dev.iter().filter(|(d, _)| !d.processes_unreadable) {
        w.sample("gpumem_processes_not_exported", &[("uuid", &d.uuid)], *left as u64);
    }
}

/// `gpumem_process_memory_used_bytes` and `gpumem_process_info`: the
/// families that carry a process's identity labels after uuid and pid.
fn identity_families(w: &mut Writer, rows: &[Exported<'_>], cfg: &Processes) {
    w.family(
        "gpumem_process_memory_used_bytes",
        Kind::Gauge,
        "Device memory used by a process, in bytes; absent when NVML reports it unavailable.",
    );
    for (d, p, pid) in rows {
        if let Some(b) = p.used_bytes {
            let labels = [
                ("uuid", d.uuid.as_str()),
                ("pid", pid.as_str()),
                ("comm", &p.comm),
                ("user", &p.user),
                ("container_id", &p.placement.container),
                ("pod_uid", &p.placement.pod_uid),
                ("unit", &p.placement.unit),
                // `job` would collide with the scrape target's own label.
                ("slurm_job", &p.placement.job),
            ];
            w.sample("gpumem_process_memory_used_bytes", &labels, b);
        }
    }
    w.family(
        "gpumem_process_info",
        Kind::Gauge,
        "Process identity and state; value is always 1.",
    );
    for (d, p, pid) in rows {
        // An array, not a Vec: no allocation per process.
        let cmdline = p.cmdline.as_deref().filter(|_| cfg.cmdline);
        let labels = [
            ("uuid", d.uuid.as_str()),
            ("pid", pid.as_str()),
            ("comm", &p.comm),
            ("user", &p.user),
            ("state", p.state.as_str()),
            ("type", p.kind.as_str()),
            ("container_runtime", &p.placement.container_runtime),
            ("cmdline", cmdline.unwrap_or_default()),
        ];
        let n = labels.len() - usize::from(cmdline.is_none());
        w.sample("gpumem_process_info", &labels[..n], 1u64);
    }
}

fn per_process_gauges(w: &mut Writer, rows: &[Exported<'_>]) {
    type Get = fn(&Process) -> Option<f64>;
    let gauges: [(&str, &str, Get); 5] = [
        (
            "gpumem_process_memory_used_max_bytes",
            "Peak of the process's device memory over [poll] peak_window, in bytes: spikes between scrapes.",
            |p| p.used_max_bytes.map(|b| b as f64),
        ),
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
        for (d, p, pid) in rows {
            if let Some(v) = get(p) {
                w.sample(name, &[("uuid", &d.uuid), ("pid", pid.as_str())], v);
            }
        }
    }
}

/// The allocator view of processes that report it (gpumemd-torch): no
/// sample for the others, whose figures are unknown, not zero.
fn allocator_families(w: &mut Writer, rows: &[Exported<'_>]) {
    type Pairs = fn(&AllocatorFigures) -> [(&'static str, AllocPair); 4];
    let pairs: Pairs = |a| {
        [
            ("allocated", a.allocated),
            ("reserved", a.reserved),
            ("active", a.active),
            ("inactive_split", a.inactive_split),
        ]
    };
    let with = || {
        rows.iter()
            .filter_map(|(d, p, pid)| Some((p.allocator.as_ref()?, d.uuid.as_str(), pid.as_str())))
    };
    type OfPair = fn(AllocPair) -> u64;
    type OfFigures = fn(&AllocatorFigures) -> u64;
    let tables: [(&str, &str, OfPair); 2] = [
        (
            "gpumem_process_allocator_bytes",
            "Bytes as the process's own caching allocator reports them, by kind (allocated: live tensors; reserved: held from the driver; active; inactive_split: fragmentation).",
            |p| p.current,
        ),
        (
            "gpumem_process_allocator_peak_bytes",
            "Peak bytes since the process started (or reset its peaks), by kind, as its allocator reports them.",
            |p| p.peak,
        ),
    ];
    for (name, help, get) in tables {
        w.family(name, Kind::Gauge, help);
        for (a, uuid, pid) in with() {
            for (kind, pair) in pairs(a) {
                w.sample(name, &[("uuid", uuid), ("pid", pid), ("kind", kind)], get(pair));
            }
        }
    }
    let counters: [(&str, &str, OfFigures); 2] = [
        (
            "gpumem_process_ooms_total",
            "Out-of-memory errors the process's allocator raised on this GPU.",
            |a| a.ooms,
        ),
        (
            "gpumem_process_alloc_retries_total",
            "Device allocations the process's allocator retried after freeing its cache (memory pressure).",
            |a| a.alloc_retries,
        ),
    ];
    for (name, help, get) in counters {
        w.family(name, Kind::Counter, help);
        for (a, uuid, pid) in with() {
            w.sample(name, &[("uuid", uuid), ("pid", pid)], get(a));
        }
    }
}

pub(super) fn groups(w: &mut Writer, snap: &Snapshot, cfg: &Processes) {
    w.family(
        "gpumem_group_memory_used_bytes",
        Kind::Gauge,
        "Device memory used by all processes of a group (user, container, pod, unit, job), in bytes.",
    );
    for d in snap.devices.iter().filter(|d| d.up) {
        for &by in &cfg.group_by {
            let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
            for p in &d.processes {
                let g = p.group(by);
                if !g.is_empty() {
                    // Saturating: NVML's figures are not checked against
                    // the device size, and a garbage one must not panic.
                    let sum = sums.entry(g).or_default();
                    *sum = sum.saturating_add(p.used_bytes.unwrap_or(0));
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
