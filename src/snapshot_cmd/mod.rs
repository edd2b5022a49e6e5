//! The `gpumemd snapshot` command once its data source is chosen: filters
//! (`--gpu`, `--user`, `--pid`), table or JSON, colour, `--watch` refreshing
//! in place, and output that ends quietly when the reader goes away (`| head`).
//! It gets snapshots from a caller-given fetch (a local poll, built in
//! `main.rs`, or [`remote::fetch`] from a running daemon); it never polls
//! hardware itself and knows nothing of the HTTP server.

pub mod args;
pub mod remote;

use std::io::{IsTerminal, Write};

use thiserror::Error;

use crate::snapshot::Snapshot;
pub use args::{ColorWhen, SnapshotOpts};

#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The local source failed (NVML missing, a bad scenario).
    #[error("{0}")]
    Source(String),
    #[error(transparent)]
    Remote(#[from] remote::RemoteError),
    #[error("cannot print JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
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
    let mut frames = 0u64;
    loop {
        let mut snap = (feed.fetch)()?;
        filter(&mut snap, opts);
        let body = if opts.json {
            serde_json::to_string_pretty(&snap)? + "\n"
        } else {
            crate::table::render_styled(&snap, color)
        };
        let text = match opts.watch {
            None => body,
            Some(every) => frame(&body, every, frames, tty),
        };
        if let Err(e) = write_all(&out, &text) {
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
fn frame(body: &str, every: std::time::Duration, n: u64, tty: bool) -> String {
    let head = format!(
        "Every {}: gpumemd snapshot (refresh {}, Ctrl-C to stop)\n",
        humantime::format_duration(every),
        n + 1
    );
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

fn write_all(out: &std::io::Stdout, text: &str) -> std::io::Result<()> {
    let mut lock = out.lock();
    lock.write_all(text.as_bytes())?;
    lock.flush()
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
    for d in &mut snap.devices {
        d.processes.retain(|p| {
            (opts.user.is_empty() || opts.user.iter().any(|u| *u == p.user))
                && (opts.pid.is_empty() || opts.pid.contains(&p.pid))
        });
        d.unreleased.retain(|u| {
            (opts.user.is_empty() || opts.user.iter().any(|n| *n == u.user))
                && (opts.pid.is_empty() || opts.pid.contains(&u.pid))
        });
        d.suspended.retain(|s| {
            (opts.user.is_empty() || opts.user.contains(&s.user)) && (opts.pid.is_empty() || opts.pid.contains(&s.pid))
        });
    }
    snap.devices
        .retain(|d| !d.processes.is_empty() || !d.unreleased.is_empty() || !d.suspended.is_empty());
}

#[cfg(test)]
mod tests;
