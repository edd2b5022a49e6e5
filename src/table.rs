//! The human-readable table printed by `gpumemd snapshot`: per GPU the memory
//! totals and holder split, then its processes with attribution. Formatting
//! only; it reads a finished snapshot.

use std::fmt::Write as _;

use crate::snapshot::{Device, Holder, Process, Snapshot};
pub use crate::units::human;

/// Renders the whole table.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    if let Some(d) = &s.demo {
        let _ = writeln!(out, "DEMO: simulated fleet \"{d}\" (no real GPU is read)");
    }
    if let Some(d) = &s.driver {
        let _ = writeln!(
            out,
            "driver {}  NVML {}  CUDA {}",
            d.driver_version, d.nvml_version, d.cuda_version
        );
    }
    for d in &s.devices {
        device(&mut out, d);
    }
    out
}

fn device(out: &mut String, d: &Device) {
    let label = match (d.index, d.mig_profile.is_empty()) {
        (Some(i), _) => format!("GPU {i}"),
        (None, false) => format!("  MIG {}", d.mig_profile),
        (None, true) => "GPU ?".into(),
    };
    let _ = write!(out, "\n{label}  {}  {}", d.name, d.uuid);
    if !d.up {
        let _ = writeln!(out, "  DOWN: {}", d.errors.join("; "));
        return;
    }
    match d.memory {
        Some(m) => {
            let reserved = m.reserved_bytes.map(human).unwrap_or_else(|| "n/a".into());
            let _ = writeln!(
                out,
                "\n  used {} / {}  reserved {}  free {}",
                human(m.used_bytes),
                human(m.total_bytes),
                reserved,
                human(m.free_bytes)
            );
        }
        None => {
            let _ = writeln!(out, "\n  memory unreadable");
        }
    }
    if let Some(h) = d.holders {
        let split: Vec<String> = Holder::ALL
            .iter()
            .map(|&c| format!("{} {}", c.as_str(), human(h.get(c))))
            .collect();
        let _ = writeln!(out, "  holders: {}", split.join("  "));
    }
    for u in &d.unreleased {
        let _ = writeln!(
            out,
            "  NOT RELEASED: {} after pid {} ({}, {}) left",
            human(u.bytes),
            u.pid,
            u.comm,
            u.user
        );
    }
    for e in &d.errors {
        let _ = writeln!(out, "  note: {e}");
    }
    processes(out, &d.processes);
}

fn processes(out: &mut String, list: &[Process]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  {:>8}  {:<16} {:<10} {:<8} {:>10}  {:>11}  {:<14} {:<18} {:<8}",
        "PID", "COMMAND", "USER", "HOLDER", "USED", "GROWTH/s", "CONTAINER/POD", "UNIT", "JOB"
    );
    for p in list {
        let used = p.used_bytes.map(human).unwrap_or_else(|| "n/a".into());
        let growth = match p.growth_bytes_per_second {
            Some(g) => format!(
                "{}{}",
                if p.leak_suspected { "LEAK " } else { "" },
                human(g.max(0.0) as u64)
            ),
            None => String::new(),
        };
        let holder = format!(
            "{}{}",
            p.holder.map(|h| h.as_str()).unwrap_or("?"),
            if p.idle { ",idle" } else { "" }
        );
        let owner = if !p.placement.pod_uid.is_empty() {
            format!("pod {}", short(&p.placement.pod_uid))
        } else {
            short(&p.placement.container)
        };
        let _ = writeln!(
            out,
            "  {:>8}  {:<16} {:<10} {:<8} {:>10}  {:>11}  {:<14} {:<18} {:<8}",
            p.pid, p.comm, p.user, holder, used, growth, owner, p.placement.unit, p.placement.job
        );
    }
}

fn short(s: &str) -> String {
    s.chars().take(12).collect()
}
