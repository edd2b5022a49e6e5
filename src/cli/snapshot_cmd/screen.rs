//! One `--watch` screen that fits the terminal: the whole table when it
//! fits, else a compact view that always keeps the title and the GPU lines
//! (as many as leave room for processes), fills the rest with the largest
//! processes of the fleet and ends with what was left out. Owns the
//! terminal size (the window, else `$COLUMNS`/`$LINES`, else 80x24) and the
//! layout; it must not fetch, filter or write.

use crate::cli::table::{self, Align, Cell, RED, YELLOW, human, printable};
use crate::data::snapshot::{Device, Holder, Process, Snapshot};

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub cols: usize,
    pub rows: usize,
}

/// Smaller than this and nothing useful fits; treat it as this.
const MIN: Size = Size { cols: 20, rows: 6 };

/// The size to fit: the window of a terminal stdout, else `$COLUMNS` and
/// `$LINES` when both are set (how a caller or a test gives one), else
/// 80x24 on a terminal. `None` when stdout is no terminal and no size is
/// given: piped frames are not cut.
pub fn size(tty: bool) -> Option<Size> {
    if tty
        && let Ok(ws) = rustix::termios::tcgetwinsize(std::io::stdout())
        && ws.ws_col > 0
        && ws.ws_row > 0
    {
        return Some(at_least(usize::from(ws.ws_col), usize::from(ws.ws_row)));
    }
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<usize>().ok());
    match (env("COLUMNS"), env("LINES")) {
        (Some(c), Some(r)) => Some(at_least(c, r)),
        _ => tty.then_some(Size { cols: 80, rows: 24 }),
    }
}

fn at_least(cols: usize, rows: usize) -> Size {
    Size {
        cols: cols.max(MIN.cols),
        rows: rows.max(MIN.rows),
    }
}

/// The screen's lines, at most `size.rows`, each at most `size.cols`
/// characters wide (colour escapes not counted), `title` first.
pub fn fit(snap: &Snapshot, color: bool, size: Size, title: &str) -> Vec<String> {
    let full = table::render_styled(snap, color);
    let mut lines: Vec<String> = std::iter::once(title.to_string())
        .chain(full.lines().map(String::from))
        .collect();
    if lines.len() > size.rows {
        lines = compact(snap, color, size.rows, title);
    }
    lines.iter().map(|l| clip(l, size.cols)).collect()
}

/// The compact view in `rows` lines.
fn compact(snap: &Snapshot, color: bool, rows: usize, title: &str) -> Vec<String> {
    let mut out = vec![title.to_string()];
    if let Some(d) = &snap.demo {
        out.push(format!("DEMO: simulated fleet \"{}\"", printable(d)));
    }
    let mut procs: Vec<(&Device, &Process)> = snap
        .devices
        .iter()
        .flat_map(|d| d.processes.iter().map(move |p| (d, p)))
        .collect();
    procs.sort_by_key(|(_, p)| std::cmp::Reverse(p.used_bytes.unwrap_or(0)));
    let omitted: usize = snap.devices.iter().map(|d| d.processes_omitted).sum();
    let total_procs = procs.len() + omitted;
    // Left for the GPU table, the process table and the closing line.
    let avail = rows.saturating_sub(out.len() + 1);
    let n = snap.devices.len();
    let gpus_shown = if procs.is_empty() || n + 1 + 2 + procs.len().min(5) <= avail {
        n.min(avail.saturating_sub(1))
    } else {
        n.min((avail.saturating_sub(2) / 2).max(1))
    };
    let gpu_rows: Vec<Vec<Cell>> = snap.devices[..gpus_shown].iter().map(gpu_cells).collect();
    out.extend(table::grid(&GPU_COLUMNS, &gpu_rows, color));
    let room = avail.saturating_sub(gpus_shown + 1 + 1);
    let procs_shown = procs.len().min(room);
    if procs_shown > 0 {
        let mut heads = vec![("GPU", Align::Right)];
        heads.extend(table::PROCESS_COLUMNS);
        let rows: Vec<Vec<Cell>> = procs[..procs_shown]
            .iter()
            .map(|(d, p)| {
                let mut cells = vec![Cell::from(gpu_label(d))];
                cells.extend(table::process_cells(p));
                cells
            })
            .collect();
        out.extend(table::grid(&heads, &rows, color));
    }
    let (more_gpus, more_procs) = (n - gpus_shown, total_procs - procs_shown);
    let left: Vec<String> = [(more_gpus, "GPUs"), (more_procs, "processes")]
        .into_iter()
        .filter(|&(n, _)| n > 0)
        .map(|(n, what)| format!("{n} more {what}"))
        .collect();
    if !left.is_empty() {
        out.push(format!("... and {}", left.join(" and ")));
    }
    out.truncate(rows);
    out
}

const GPU_COLUMNS: [(&str, Align); 8] = [
    ("GPU", Align::Right),
    ("NAME", Align::Left),
    ("USED", Align::Right),
    ("TOTAL", Align::Right),
    ("FREE", Align::Right),
    ("NOT LIVE", Align::Right),
    ("PROCS", Align::Right),
    ("STATE", Align::Left),
];

fn gpu_label(d: &Device) -> String {
    match (d.index, d.mig_profile.is_empty()) {
        (Some(i), _) => i.to_string(),
        (None, false) => format!("MIG {}", printable(&d.mig_profile)),
        (None, true) => "?".into(),
    }
}

fn gpu_cells(d: &Device) -> Vec<Cell> {
    let mem = |f: fn(&crate::data::snapshot::Memory) -> u64| {
        Cell::from(d.memory.as_ref().map(f).map(human).unwrap_or_default())
    };
    let not_live = d
        .holders
        .map(|h| {
            Holder::ALL
                .iter()
                .filter(|&&c| c != Holder::Live)
                .map(|&c| h.get(c))
                .sum::<u64>()
        })
        .unwrap_or(0);
    let (word, colour) = if !d.up {
        ("DOWN", Some(RED))
    } else if d.processes.iter().any(|p| p.leak_suspected) {
        ("LEAK", Some(RED))
    } else if !d.unreleased.is_empty() {
        ("NOT RELEASED", Some(YELLOW))
    } else {
        ("", None)
    };
    // The forecast: when the GPU fills at its holders' growth.
    let state = match d.full_in_seconds {
        Some(s) => Cell::painted(
            format!("{word} full in {}", crate::data::units::human_seconds(s))
                .trim_start()
                .to_string(),
            colour.or(Some(YELLOW)),
        ),
        None => Cell::painted(word.into(), colour),
    };
    vec![
        gpu_label(d).into(),
        printable(&d.name).into_owned().into(),
        mem(|m| m.used_bytes),
        mem(|m| m.total_bytes),
        mem(|m| m.free_bytes),
        Cell::painted(human(not_live), (not_live > 0).then_some(YELLOW)),
        (d.processes.len() + d.processes_omitted).to_string().into(),
        state,
    ]
}

/// `line` cut to `cols` visible characters; SGR escapes are kept and do
/// not count, and a cut inside colour resets it.
pub fn clip(line: &str, cols: usize) -> String {
    let mut out = String::with_capacity(line.len().min(cols * 2));
    let mut shown = 0;
    let mut chars = line.chars().peekable();
    let mut cut = false;
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            out.push(c);
            for e in chars.by_ref() {
                out.push(e);
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        if shown == cols {
            cut = true;
            break;
        }
        out.push(c);
        shown += 1;
    }
    if cut && out.contains('\x1b') {
        out.push_str("\x1b[0m");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_counts_only_visible_characters() {
        assert_eq!(clip("abcdef", 4), "abcd");
        assert_eq!(clip("ab", 4), "ab");
        assert_eq!(clip("\x1b[1mabcdef\x1b[0m", 3), "\x1b[1mabc\x1b[0m");
    }
}
