//! The human-readable table printed by `gpumemd snapshot`: per GPU the memory
//! totals and holder split, then its processes with attribution, optionally
//! in colour (ANSI SGR). Columns are as wide as their widest cell, lines end
//! without blanks, and text a process chose goes through
//! [`printable`]. Formatting only; it reads a
//! finished snapshot and never decides when colour applies or how many
//! processes to show (the caller does).

use std::fmt::Write as _;

use crate::data::snapshot::{Device, Holder, Process, Snapshot};
use crate::data::units::human_seconds;
pub use crate::data::units::{human, printable};

mod grid;
pub use grid::{Align, Cell, grid};

/// Renders the whole table, without colour.
pub fn render(s: &Snapshot) -> String {
    render_styled(s, false)
}

/// The SGR codes used: red for trouble (down, leak), yellow for memory
/// nobody running holds, bold for headers.
pub const RED: &str = "1;31";
pub const YELLOW: &str = "33";
pub const BOLD: &str = "1";

/// ANSI colours when on. Colour only adds escapes around cells; the text
/// and its alignment are the same as without.
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn wrap(self, code: &str, text: &str) -> String {
        if self.0 && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

/// Renders the whole table, in colour when `color`.
pub fn render_styled(s: &Snapshot, color: bool) -> String {
    let mut out = String::new();
    for line in body(s, Paint(color)).lines() {
        out.push_str(line.trim_end_matches(' '));
        out.push('\n');
    }
    out
}

fn body(s: &Snapshot, paint: Paint) -> String {
    let mut out = String::new();
    if let Some(d) = &s.demo {
        let _ = writeln!(out, "DEMO: simulated fleet \"{}\" (no real GPU is read)", printable(d));
    }
    if let Some(d) = &s.driver {
        let _ = writeln!(
            out,
            "driver {}  NVML {}  CUDA {}",
            d.driver_version, d.nvml_version, d.cuda_version
        );
    }
    for d in &s.devices {
        device(&mut out, d, paint);
    }
    out
}

fn device(out: &mut String, d: &Device, paint: Paint) {
    let label = match (d.index, d.mig_profile.is_empty()) {
        (Some(i), _) => format!("GPU {i}"),
        (None, false) => format!("  MIG {}", d.mig_profile),
        (None, true) => "GPU ?".into(),
    };
    let _ = write!(
        out,
        "\n{}  {}  {}",
        paint.wrap(BOLD, &label),
        printable(&d.name),
        printable(&d.uuid)
    );
    if !d.up {
        let _ = writeln!(
            out,
            "  {}",
            paint.wrap(RED, &printable(&format!("DOWN: {}", d.errors.join("; "))))
        );
        return;
    }
    memory_and_holders(out, d, paint);
    left_behind_and_parked(out, d, paint);
    if let Some(h) = d.health.as_ref().and_then(|h| h.summary()) {
        let _ = writeln!(out, "  HEALTH: {h}");
    }
    for e in &d.errors {
        let _ = writeln!(out, "  note: {}", printable(e));
    }
    processes(out, &d.processes, paint);
    if d.processes_omitted > 0 {
        let _ = writeln!(out, "  ... and {} more processes", d.processes_omitted);
    }
}

/// The memory line and the holder split.
fn memory_and_holders(out: &mut String, d: &Device, paint: Paint) {
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
            .map(|&c| {
                let text = format!("{} {}", c.as_str(), human(h.get(c)));
                if c != Holder::Live && h.get(c) > 0 {
                    paint.wrap(YELLOW, &text)
                } else {
                    text
                }
            })
            .collect();
        let _ = writeln!(out, "  holders: {}", split.join("  "));
    }
}

/// Memory nobody lists any more, and memory parked in host RAM by suspend.
fn left_behind_and_parked(out: &mut String, d: &Device, paint: Paint) {
    if let Some(secs) = d.full_in_seconds {
        let who: Vec<String> = d
            .growers
            .iter()
            .map(|g| {
                let rate = format!("+{:.1} MiB/s", g.bytes_per_second / 1048576.0);
                match g.pid {
                    Some(pid) => format!("pid {pid} ({}, {}) {rate}", printable(&g.comm), printable(&g.user)),
                    None => format!("unattributed {rate}"),
                }
            })
            .collect();
        let text = format!("FULL IN {} at this growth: {}", human_seconds(secs), who.join(", "));
        let _ = writeln!(out, "  {}", paint.wrap(YELLOW, &text));
    }
    for u in &d.unreleased {
        let text = format!(
            "NOT RELEASED: {} after pid {} ({}, {}) left",
            human(u.bytes),
            u.pid,
            printable(&u.comm),
            printable(&u.user)
        );
        let _ = writeln!(out, "  {}", paint.wrap(YELLOW, &text));
    }
    for s in &d.suspended {
        let text = format!(
            "SUSPENDED: {} parked in host memory by pid {} ({}, {}), rule {}",
            human(s.suspended_bytes),
            s.pid,
            printable(&s.comm),
            printable(&s.user),
            printable(&s.rule)
        );
        let _ = writeln!(out, "  {}", paint.wrap(YELLOW, &text));
    }
}

/// The process table's columns.
pub const PROCESS_COLUMNS: [(&str, Align); 9] = [
    ("PID", Align::Right),
    ("COMMAND", Align::Left),
    ("USER", Align::Left),
    ("HOLDER", Align::Left),
    ("USED", Align::Right),
    ("GROWTH/s", Align::Right),
    ("CONTAINER/POD", Align::Left),
    ("UNIT", Align::Left),
    ("JOB", Align::Left),
];

/// One process as cells of [`PROCESS_COLUMNS`].
pub fn process_cells(p: &Process) -> Vec<Cell> {
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
    let not_live = p.holder != Some(Holder::Live) || p.idle;
    vec![
        p.pid.to_string().into(),
        printable(&p.comm).into_owned().into(),
        printable(&p.user).into_owned().into(),
        Cell::painted(holder, not_live.then_some(YELLOW)),
        used.into(),
        Cell::painted(growth, p.leak_suspected.then_some(RED)),
        printable(&owner).into_owned().into(),
        printable(&p.placement.unit).into_owned().into(),
        printable(&p.placement.job).into_owned().into(),
    ]
}

fn processes(out: &mut String, list: &[Process], paint: Paint) {
    if list.is_empty() {
        return;
    }
    let rows: Vec<Vec<Cell>> = list.iter().map(process_cells).collect();
    let mut lines = grid(&PROCESS_COLUMNS, &rows, paint.0).into_iter();
    if let Some(head) = lines.next() {
        let _ = writeln!(out, "  {head}");
    }
    for (p, line) in list.iter().zip(lines) {
        let _ = writeln!(out, "  {line}");
        if let Some(a) = &p.allocator {
            allocator_line(out, a);
        } else if let Some(d) = &p.driver {
            driver_line(out, d);
        }
    }
}

/// NVML's figure split by the driver-call ledger (`[ebpf]`), where the
/// process does not report its allocator (whose split is finer).
fn driver_line(out: &mut String, d: &crate::data::snapshot::DriverFigures) {
    let other = d.other_bytes.map(human).unwrap_or_else(|| "n/a".into());
    let _ = write!(
        out,
        "  {:>8}  = driver allocations {} + other {}; largest {}, failed allocations {}",
        "",
        human(d.live_bytes),
        other,
        human(d.largest_bytes),
        d.failures
    );
    growing(out, d.growth);
}

/// NVML's figure split by the process's own allocator report (gpumemd-torch).
fn allocator_line(out: &mut String, a: &crate::data::snapshot::AllocatorFigures) {
    let other = a.other_bytes.map(human).unwrap_or_else(|| "n/a".into());
    let _ = write!(
        out,
        "  {:>8}  = tensors {} + cache {} + other {}; split {}, retries {}, OOMs {}",
        "",
        human(a.tensors_bytes),
        human(a.cache_bytes),
        other,
        human(a.inactive_split.current),
        a.alloc_retries,
        a.ooms
    );
    growing(out, a.growth);
}

/// Ends a split line with what the leak verdict saw grow, if anything.
fn growing(out: &mut String, growth: Option<&str>) {
    match growth {
        Some(g) => {
            let _ = writeln!(out, "; growing: {g}");
        }
        None => out.push('\n'),
    }
}

fn short(s: &str) -> String {
    s.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::snapshot::{AllocPair, AllocatorFigures, Who};

    #[test]
    fn a_reporting_process_gets_its_split_under_its_row() {
        let gib = 1u64 << 30;
        let with = Process {
            pid: 7,
            used_bytes: Some(10 * gib),
            allocator: Some(Box::new(AllocatorFigures {
                inactive_split: AllocPair {
                    current: gib,
                    peak: gib,
                },
                alloc_retries: 4,
                tensors_bytes: 6 * gib,
                cache_bytes: 3 * gib,
                other_bytes: Some(gib),
                growth: Some("tensors"),
                ..AllocatorFigures::default()
            })),
            ..Process::default()
        };
        let without = Process {
            pid: 8,
            used_bytes: Some(gib),
            ..Process::default()
        };
        let mut out = String::new();
        processes(&mut out, &[with, without], Paint(false));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "header, 7, its split, 8:\n{out}");
        let want = format!(
            "= tensors {} + cache {} + other {}; split {}, retries 4, OOMs 0; growing: tensors",
            human(6 * gib),
            human(3 * gib),
            human(gib),
            human(gib)
        );
        assert!(lines[2].trim_start().starts_with(&want), "{}", lines[2]);
        assert!(lines[3].trim_start().starts_with('8'));
    }

    #[test]
    fn a_process_seen_by_the_ledger_gets_the_driver_split() {
        let gib = 1u64 << 30;
        let p = Process {
            pid: 9,
            used_bytes: Some(5 * gib),
            driver: Some(Box::new(crate::data::snapshot::DriverFigures {
                live_bytes: 4 * gib,
                largest_bytes: 2 * gib,
                other_bytes: Some(gib),
                failures: 1,
                ..Default::default()
            })),
            ..Process::default()
        };
        let mut out = String::new();
        processes(&mut out, &[p], Paint(false));
        let want = format!(
            "= driver allocations {} + other {}; largest {}, failed allocations 1",
            human(4 * gib),
            human(gib),
            human(2 * gib)
        );
        assert!(out.lines().nth(2).is_some_and(|l| l.trim_start() == want), "{out}");
    }

    #[test]
    fn process_columns_line_up_with_the_header() {
        let p = Process {
            pid: 42,
            who: Who::shared("python", "alice", None),
            used_bytes: Some(1 << 30),
            holder: Some(Holder::Live),
            ..Process::default()
        };
        let mut out = String::new();
        processes(&mut out, &[p], Paint(false));
        let lines: Vec<&str> = out.lines().collect();
        let col = |line: &str, word: &str| line.find(word).unwrap_or(usize::MAX);
        assert_eq!(col(lines[0], "USER"), col(lines[1], "alice"), "\n{out}");
        assert_eq!(col(lines[0], "HOLDER"), col(lines[1], "live"), "\n{out}");
    }

    #[test]
    fn an_idle_holder_does_not_shift_its_row_and_no_line_ends_in_blanks() {
        let p = |pid, user: &str, idle| Process {
            pid,
            who: Who::shared("python", user, None),
            used_bytes: Some(1 << 30),
            holder: Some(Holder::Live),
            idle,
            ..Process::default()
        };
        for color in [false, true] {
            let mut out = String::new();
            processes(&mut out, &[p(42, "alice", true), p(43, "bob", false)], Paint(color));
            let plain: Vec<String> = out
                .lines()
                .map(|l| l.replace("\x1b[33m", "").replace("\x1b[1m", "").replace("\x1b[0m", ""))
                .collect();
            let col = |line: &str, word: &str| line.find(word).unwrap_or(usize::MAX);
            assert_eq!(col(&plain[1], "live,idle"), col(&plain[0], "HOLDER"), "{out}");
            assert_eq!(col(&plain[1], "1.0 GiB"), col(&plain[2], "1.0 GiB"), "{out}");
            assert!(out.lines().all(|l| !l.ends_with(' ')), "{out:?}");
        }
    }

    use crate::data::snapshot::health::{Health, Remap};

    #[test]
    fn a_health_line_only_when_something_is_wrong() {
        let mut d = Device {
            uuid: "GPU-1".into(),
            index: Some(0),
            up: true,
            health: Some(Health::default()),
            ..Device::default()
        };
        let snap = |d: &Device| Snapshot {
            devices: vec![d.clone()],
            ..Snapshot::default()
        };
        assert!(!render(&snap(&d)).contains("HEALTH"));
        d.health = Some(Health {
            remap: Some(Remap {
                pending: true,
                ..Remap::default()
            }),
            ..Health::default()
        });
        assert!(render(&snap(&d)).contains("  HEALTH: row remap pending (reset GPU)\n"));
    }

    #[test]
    fn a_forecast_to_fill_names_who_grows() {
        let mut d = Device {
            uuid: "GPU-1".into(),
            index: Some(0),
            up: true,
            ..Device::default()
        };
        let snap = |d: &Device| Snapshot {
            devices: vec![d.clone()],
            ..Snapshot::default()
        };
        assert!(!render(&snap(&d)).contains("FULL IN"));
        d.full_in_seconds = Some(1700.0);
        d.growers = vec![crate::data::snapshot::Grower {
            pid: Some(731),
            comm: "python3".into(),
            user: "ana".into(),
            holder: None,
            bytes_per_second: 16.0 * 1048576.0,
        }];
        assert!(render(&snap(&d)).contains("  FULL IN 28m at this growth: pid 731 (python3, ana) +16.0 MiB/s\n"));
    }
}
