//! The `gpumemd snapshot` command once its data source is chosen: filters
//! (`--gpu`, `--user`, `--pid`), `--top`, table or JSON, colour, `--watch`
//! refreshing in place on a screen that fits the terminal, and output that
//! ends quietly when the reader goes away (`| head`).
//! It gets snapshots from a caller-given fetch (a local poll, built in
//! `main.rs`, or [`fetch_remote`] from a running daemon: a bounded plain
//! GET through the shared client, never retried or waited on past its
//! timeout); it never polls hardware itself and knows nothing of the HTTP
//! server.

pub mod args;
pub mod screen;

use std::io::{IsTerminal, Write};
use std::time::Duration;

use thiserror::Error;

use crate::cli::remote::{ClientError, Daemon, SNAPSHOT_PATH, block_on};
use crate::data::snapshot::Snapshot;
pub use args::{ColorWhen, SnapshotOpts};

#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The local source failed (NVML missing, a bad scenario).
    #[error("{0}")]
    Source(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{url}: not a gpumemd snapshot: {source}")]
    NotASnapshot { url: String, source: serde_json::Error },
    #[error("cannot print JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error("--gpu {asked}: no such GPU; {known}")]
    NoSuchGpu { asked: String, known: String },
}

/// Processes per GPU shown on a terminal without `--top` (and without
/// `--watch`, whose screen fits the terminal instead): a screenful per GPU
/// or two, where a large node lists thousands.
pub const DEFAULT_TOP_ON_TERMINAL: usize = 10;

/// `snapshot --url`: the whole request, connect to last byte.
pub const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);

/// One snapshot of the running daemon, whose processes carry the growth
/// trend of its history, on a small runtime of its own (the CLI has none).
///
/// # Errors
/// Unreachable, a non-200 answer, a timeout, or a body that is not a snapshot.
pub fn fetch_remote(d: &Daemon) -> Result<Snapshot, SnapshotError> {
    let body = block_on(d.get(SNAPSHOT_PATH, &[]))?;
    serde_json::from_str(&body).map_err(|source| SnapshotError::NotASnapshot {
        url: d.endpoint(SNAPSHOT_PATH).to_string(),
        source,
    })
}

/// Where the snapshots come from, and whether they carry a growth trend.
pub struct Feed<'a> {
    pub fetch: Box<dyn FnMut() -> Result<Snapshot, SnapshotError> + 'a>,
    /// False for a single local poll: its GROWTH column is empty.
    pub has_history: bool,
}

/// Runs the command: one snapshot, or a refresh every `--watch` interval
/// until interrupted. A closed stdout (`| head -1`) ends it with `Ok`.
///
/// # Errors
/// The first failed fetch, or a write error other than a closed pipe.
pub fn run(opts: &SnapshotOpts, mut feed: Feed<'_>) -> Result<(), SnapshotError> {
    let out = std::io::stdout();
    let tty = out.is_terminal();
    let color = match opts.color {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    let top = match opts.top {
        None if tty && !opts.json && opts.watch.is_none() => Some(DEFAULT_TOP_ON_TERMINAL),
        top => top.filter(|&n| n > 0),
    };
    let mut frames = 0u64;
    loop {
        // Read every frame: the window may have been resized.
        let screen = screen::size(tty).filter(|_| opts.watch.is_some() && !opts.json);
        let mut snap = (feed.fetch)()?;
        known_gpus(&snap, &opts.gpu)?;
        filter(&mut snap, opts);
        if let Some(n) = top {
            bound(&mut snap, n);
        }
        let text = match (opts.watch, screen) {
            (Some(every), Some(size)) => {
                let lines = screen::fit(&snap, color, size, &title(every, frames));
                fitted(&lines, tty)
            }
            (watch, _) => {
                let body = if opts.json {
                    serde_json::to_string_pretty(&snap)? + "\n"
                } else {
                    crate::cli::table::render_styled(&snap, color)
                };
                match watch {
                    None => body,
                    Some(every) => frame(&body, every, frames, tty),
                }
            }
        };
        if let Err(e) = (&out).write_all(text.as_bytes()).and_then(|()| (&out).flush()) {
            return quiet_pipe(e);
        }
        if frames == 0 && !feed.has_history && !opts.json && opts.watch.is_none() {
            // To stderr: stdout stays the table alone for scripts.
            eprintln!(
                "note: GROWTH needs history; one poll has none. Ask the running daemon \
                 (--url http://127.0.0.1:9947) or use --watch. The tensors / cache / other split \
                 of PyTorch processes needs the daemon too: gpumemd-torch reports reach only it."
            );
        }
        frames += 1;
        let Some(every) = opts.watch else { return Ok(()) };
        std::thread::sleep(every);
    }
}

/// One `--watch` frame. On a terminal it redraws in place: cursor home,
/// each line cleared to its end, the rest of the screen cleared, so the
/// table never flickers through a blank screen. Piped, frames follow each
/// other, each after a header line.
fn frame(body: &str, every: Duration, n: u64, tty: bool) -> String {
    let head = title(every, n) + "\n";
    if !tty {
        return format!("{head}{body}\n");
    }
    let mut s = String::from("\x1b[H");
    for line in head.lines().chain(body.lines()) {
        s.push_str(line);
        s.push_str("\x1b[K\n");
    }
    s.push_str("\x1b[J");
    s
}

fn title(every: Duration, n: u64) -> String {
    format!(
        "Every {}: gpumemd snapshot (refresh {}, Ctrl-C to stop)",
        humantime::format_duration(every),
        n + 1
    )
}

/// A fitted screen: on a terminal drawn in place with no newline after the
/// last line (one there would scroll the title away); piped, the lines and
/// a blank line after them.
fn fitted(lines: &[String], tty: bool) -> String {
    if !tty {
        return lines.join("\n") + "\n\n";
    }
    let mut s = String::from("\x1b[H");
    s.push_str(&lines.join("\x1b[K\n"));
    s.push_str("\x1b[K\x1b[J");
    s
}

/// Every `--gpu` must name a GPU of the snapshot: a typo is an error that
/// says what exists, not an empty table.
fn known_gpus(snap: &Snapshot, asked: &[String]) -> Result<(), SnapshotError> {
    let Some(missing) = asked.iter().find(|g| {
        !snap.devices.iter().any(|d| {
            *g == &d.uuid
                || (!d.parent_uuid.is_empty() && *g == &d.parent_uuid)
                || d.index.is_some_and(|i| g.parse::<u32>() == Ok(i))
        })
    }) else {
        return Ok(());
    };
    let mut idx: Vec<u32> = snap.devices.iter().filter_map(|d| d.index).collect();
    idx.sort_unstable();
    let known = match (idx.first(), idx.last()) {
        (None, _) | (_, None) => "this host lists no GPU".to_string(),
        (Some(&a), Some(&b)) if (b - a) as usize + 1 == idx.len() && idx.len() > 2 => {
            format!("there are {} GPUs, index {a}-{b} (or give a UUID)", idx.len())
        }
        _ => {
            let list: Vec<String> = idx.iter().map(u32::to_string).collect();
            format!("the GPUs are index {} (or give a UUID)", list.join(", "))
        }
    };
    Err(SnapshotError::NoSuchGpu {
        asked: crate::data::units::printable(missing).into_owned(),
        known,
    })
}

/// At most `n` processes per GPU (the largest: the list is sorted so), the
/// rest counted in `processes_omitted`.
pub fn bound(snap: &mut Snapshot, n: usize) {
    for d in &mut snap.devices {
        if d.processes.len() > n {
            d.processes_omitted += d.processes.len() - n;
            d.processes.truncate(n);
        }
    }
}

/// A reader that went away (`| head`) is the end of the output, not an error.
fn quiet_pipe(e: std::io::Error) -> Result<(), SnapshotError> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(SnapshotError::Output(e))
    }
}

/// Keeps the GPUs `--gpu` names (index or UUID; a MIG instance also by its
/// parent's), and in them the processes of `--user` and `--pid`. With a
/// process filter, GPUs left without a matching process are dropped, so
/// `--user alice` shows where alice's memory is.
pub fn filter(snap: &mut Snapshot, opts: &SnapshotOpts) {
    if !opts.gpu.is_empty() {
        let parents: Vec<(String, Option<u32>)> = snap.devices.iter().map(|d| (d.uuid.clone(), d.index)).collect();
        let named = |uuid: &str, index: Option<u32>| {
            opts.gpu
                .iter()
                .any(|g| g == uuid || index.is_some_and(|i| g.parse::<u32>() == Ok(i)))
        };
        snap.devices.retain(|d| {
            named(&d.uuid, d.index)
                || parents
                    .iter()
                    .any(|(u, i)| !d.parent_uuid.is_empty() && *u == d.parent_uuid && named(u, *i))
        });
    }
    if opts.user.is_empty() && opts.pid.is_empty() {
        return;
    }
    let keep = |user: &str, pid: u32| {
        (opts.user.is_empty() || opts.user.iter().any(|u| u == user))
            && (opts.pid.is_empty() || opts.pid.contains(&pid))
    };
    for d in &mut snap.devices {
        d.processes.retain(|p| keep(&p.user, p.pid));
        d.unreleased.retain(|u| keep(&u.user, u.pid));
        d.suspended.retain(|s| keep(&s.user, s.pid));
    }
    snap.devices
        .retain(|d| !d.processes.is_empty() || !d.unreleased.is_empty() || !d.suspended.is_empty());
}

#[cfg(test)]
mod tests;
