//! Bounded reads of the files an operator names (config, web config,
//! scenario, trace): a size cap so `/dev/zero` or a runaway file cannot eat
//! memory, a refusal of devices, directories and sockets (and of FIFOs where
//! only a regular file makes sense), and variants with a deadline for
//! callers that must not block (reload); and `one_line`, how
//! their text is quoted in an error. A leaf: it owns how such a file is read
//! and must not parse it, know what the text means, or use the rest of the
//! crate.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use thiserror::Error;

/// Cap for config and web-config files: far above any real one.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Cap for scenario files (the `large` scenario is a few KiB).
pub const MAX_SCENARIO_BYTES: u64 = 8 << 20;
/// Cap for recorded traces (about two million rows).
pub const MAX_TRACE_BYTES: u64 = 64 << 20;

/// Why a file could not be read. The messages leave the path out: every
/// caller already names the file in its own error.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("is a {0}, not a regular file; name a regular file")]
    NotRegular(&'static str),
    #[error("is larger than the limit of {limit} bytes; is this the right file?")]
    TooLarge { limit: u64 },
    #[error("is not UTF-8 text")]
    NotText,
    #[error(
        "could not be read within {} (a FIFO without a writer, or a hung network mount?)",
        humantime::format_duration(*.0)
    )]
    TimedOut(Duration),
    #[error("the reader thread could not be started: {0}")]
    Thread(std::io::Error),
}

impl ReadError {
    /// Whether the file does not exist (callers word that case themselves).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Reads `path` as UTF-8 text of at most `limit` bytes. Regular files and
/// FIFOs are read (`--config <(...)` is a pipe); devices, directories and
/// sockets are refused before they are opened. Opening a FIFO blocks until
/// a writer comes: callers that must not block use [`read_text_within`].
///
/// # Errors
/// The file is missing or unreadable, not a file or FIFO, over `limit`, or
/// not UTF-8.
pub fn read_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() && !kind.is_fifo() {
        return Err(ReadError::NotRegular(kind_name(kind)));
    }
    read_capped(File::open(path)?, limit)
}

/// Reads `path` as UTF-8 text of at most `limit` bytes, refusing anything
/// but a regular file, FIFOs included, before a byte is read: the file is
/// opened without blocking (a FIFO's open waits for a writer otherwise) and
/// its type taken from the open descriptor, so a file swapped for a FIFO
/// between a look and the open is refused too. For files read again while
/// the daemon runs (reload, the web config) and for `check-config`, where a
/// FIFO could only hang.
///
/// # Errors
/// As [`read_text`], and `NotRegular` for a FIFO.
pub fn read_regular(path: &Path, limit: u64) -> Result<String, ReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    // A look first, for a clear word on a socket (whose open fails
    // with "no such device"); the descriptor's type is the one that counts.
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular(kind_name(kind)));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular(kind_name(kind)));
    }
    read_capped(file, limit)
}

fn kind_name(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "directory"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_fifo() {
        "FIFO"
    } else {
        "special file"
    }
}

fn read_capped(file: File, limit: u64) -> Result<String, ReadError> {
    let mut bytes = Vec::new();
    // One byte over the cap tells "exactly at the limit" from "over it".
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotText)
}

/// [`read_text`] on a thread of its own, given up after `deadline`. A read
/// stuck in the kernel (a FIFO nobody writes, a hung NFS or FUSE mount)
/// cannot be cancelled: its thread is left behind, blocked, and ends with
/// the process; the caller gets `TimedOut` and goes on.
///
/// # Errors
/// As [`read_text`], plus `TimedOut` and `Thread`.
pub fn read_text_within(path: &Path, limit: u64, deadline: Duration) -> Result<String, ReadError> {
    within(path, limit, deadline, read_text)
}

/// [`read_regular`] with a deadline, as [`read_text_within`]: a hung
/// network mount can still block the open or the read.
///
/// # Errors
/// As [`read_regular`], plus `TimedOut` and `Thread`.
pub fn read_regular_within(path: &Path, limit: u64, deadline: Duration) -> Result<String, ReadError> {
    within(path, limit, deadline, read_regular)
}

fn within(
    path: &Path,
    limit: u64,
    deadline: Duration,
    read: fn(&Path, u64) -> Result<String, ReadError>,
) -> Result<String, ReadError> {
    let (tx, rx) = mpsc::sync_channel(1);
    let owned: PathBuf = path.to_path_buf();
    std::thread::Builder::new()
        .name("gpumemd-read".into())
        .spawn(move || {
            // The receiver is gone when the deadline passed; nothing to do then.
            let _ = tx.send(read(&owned, limit));
        })
        .map_err(ReadError::Thread)?;
    rx.recv_timeout(deadline).unwrap_or(Err(ReadError::TimedOut(deadline)))
}

/// `s` with control characters escaped (`\n`, `\r`, `\u{1b}`).
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_zero_is_refused_not_read_forever() {
        let e = read_text(Path::new("/dev/zero"), MAX_CONFIG_BYTES).expect_err("a device");
        assert!(matches!(e, ReadError::NotRegular("character device")), "{e}");
        let e = read_text(Path::new("/"), MAX_CONFIG_BYTES).expect_err("a directory");
        assert!(matches!(e, ReadError::NotRegular("directory")), "{e}");
    }

    #[test]
    fn files_over_the_cap_are_refused_and_at_the_cap_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("big.toml");
        // Sparse: a 2 GiB file costs nothing on disk, and reading it whole
        // would cost 2 GiB of memory.
        File::create(&p).and_then(|f| f.set_len(2 << 30)).expect("sparse file");
        let e = read_text(&p, MAX_CONFIG_BYTES).expect_err("over the cap");
        assert!(
            matches!(
                e,
                ReadError::TooLarge {
                    limit: MAX_CONFIG_BYTES
                }
            ),
            "{e}"
        );
        std::fs::write(&p, "x".repeat(10)).expect("write");
        assert_eq!(read_text(&p, 10).expect("at the cap").len(), 10);
        assert!(matches!(read_text(&p, 9), Err(ReadError::TooLarge { limit: 9 })));
    }

    #[test]
    fn missing_and_binary_files() {
        let e = read_text(Path::new("/nonexistent/x.toml"), 10).expect_err("missing");
        assert!(e.is_not_found(), "{e}");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("bin");
        std::fs::write(&p, [0xff, 0xfe, 0]).expect("write");
        assert!(matches!(read_text(&p, 10), Err(ReadError::NotText)));
    }

    /// A temporary directory holding a FIFO nobody writes to, and its path.
    fn fifo() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "mkfifo failed");
        (dir, p)
    }

    #[test]
    fn a_fifo_without_writer_times_out() {
        let (_dir, p) = fifo();
        let started = std::time::Instant::now();
        let e = read_text_within(&p, 10, Duration::from_millis(200)).expect_err("nobody writes");
        assert!(matches!(e, ReadError::TimedOut(_)), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "gave up late: {:?}",
            started.elapsed()
        );
        // Unblock the stuck reader so the test leaves no thread behind.
        let _ = std::fs::OpenOptions::new().write(true).open(&p);
    }

    #[test]
    fn a_fifo_is_refused_at_once_where_a_regular_file_is_required() {
        let (dir, p) = fifo();
        let started = std::time::Instant::now();
        let e = read_regular_within(&p, 10, Duration::from_secs(30)).expect_err("a FIFO");
        assert!(matches!(e, ReadError::NotRegular("FIFO")), "{e}");
        assert!(e.to_string().contains("is a FIFO, not a regular file"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let e = read_regular(Path::new("/dev/zero"), 10).expect_err("a device");
        assert!(matches!(e, ReadError::NotRegular("character device")), "{e}");
        let e = read_regular(dir.path(), 10).expect_err("a directory");
        assert!(matches!(e, ReadError::NotRegular("directory")), "{e}");
        let f = dir.path().join("ok.toml");
        std::fs::write(&f, "a = 1\n").expect("write");
        assert_eq!(read_regular(&f, 10).expect("a regular file"), "a = 1\n");
        assert!(matches!(read_regular(&f, 3), Err(ReadError::TooLarge { limit: 3 })));
    }
}
