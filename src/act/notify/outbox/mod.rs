//! The durable outbox of one delivery target: an ordered, bounded queue in
//! memory mirrored by one JSON file per entry in its own directory.
//!
//! Memory is the source of truth while running; the files let the next start
//! deliver what this one could not. Files are written to a temp name, fsynced
//! and renamed, so a crash leaves the old or the new entry, never half of one.
//! Entries pushed under an existing key replace it (Alertmanager coalesces by
//! fingerprint); unique keys keep every entry (the webhook). This module must
//! not know about HTTP or the payload formats.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::{NotifierStats, NotifyError};

mod reopen;

/// Bumped when the entry file layout changes incompatibly.
const FORMAT: u32 = 1;
const CORRUPT_DIR: &str = "corrupt";

/// One entry file: `{"format":1,"seq":N,"item":...}`.
#[derive(Serialize, Deserialize)]
struct EntryFile<T> {
    format: u32,
    seq: u64,
    item: T,
}

struct Entry<T> {
    key: String,
    item: T,
    on_disk: bool,
}

/// Counters kept next to the queue they describe.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    pub sent_ok: u64,
    pub failed: u64,
    pub dropped: u64,
    pub persist_errors: u64,
}

pub(crate) struct Outbox<T> {
    dir: PathBuf,
    /// `None` once the directory has been opened; until then, when the next
    /// attempt is due and the delay after it (the queue lives in memory).
    detached: Option<(Instant, Duration)>,
    /// Log a failing disk once per outage, not once per entry.
    disk_failing: bool,
    entries: BTreeMap<u64, Entry<T>>,
    by_key: HashMap<String, u64>,
    next_seq: u64,
    max: usize,
    pub counters: Counters,
}

impl<T: Serialize + DeserializeOwned + Clone> Outbox<T> {
    /// Opens (creating) `dir`, proves it is writable, and loads the entries a
    /// previous run left, oldest first. Corrupt files are moved to
    /// `dir/corrupt/` and counted as dropped.
    ///
    /// # Errors
    /// `dir` cannot be created or written.
    pub fn open(dir: &Path, max: usize) -> Result<Self, NotifyError> {
        let err = |source| NotifyError::StateDir {
            path: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(err)?;
        // create_dir_all succeeds on an existing read-only directory; only a
        // write shows whether the outbox can work.
        let probe = dir.join(".probe.tmp");
        write_atomic(&probe, b"probe").map_err(err)?;
        fs::remove_file(&probe).map_err(err)?;
        let mut outbox = Self::empty(dir, max);
        let mut max_seq = outbox.load()?;
        if max_seq.is_some_and(|s| s > reopen::SEQ_SANE_MAX) {
            max_seq = outbox.renumber();
        }
        // Sequence numbers start at the wall clock in microseconds so that ids
        // keep growing across restarts even when the outbox was empty.
        outbox.next_seq = max_seq.map_or(0, |s| s.saturating_add(1)).max(now_micros());
        outbox.enforce_bound();
        Ok(outbox)
    }

    /// An outbox of `dir` holding nothing, attached and with no counts.
    fn empty(dir: &Path, max: usize) -> Self {
        Outbox {
            dir: dir.to_path_buf(),
            detached: None,
            disk_failing: false,
            entries: BTreeMap::new(),
            by_key: HashMap::new(),
            next_seq: 0,
            max: max.max(1),
            counters: Counters::default(),
        }
    }

    fn load(&mut self) -> Result<Option<u64>, NotifyError> {
        let rd = fs::read_dir(&self.dir).map_err(|source| NotifyError::StateDir {
            path: self.dir.clone(),
            source,
        })?;
        let mut max_seq = None;
        for dirent in rd.flatten() {
            let path = dirent.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            if name.ends_with(".tmp") {
                // A write that a crash interrupted before its rename.
                let _ = fs::remove_file(&path);
                continue;
            }
            let Some(key) = name.strip_suffix(".json") else {
                continue;
            };
            match fs::read(&path)
                .map_err(BadEntry::Read)
                .and_then(|b| parse_entry::<T>(&b))
            {
                Ok(file) => {
                    max_seq = max_seq.max(Some(file.seq));
                    self.insert(file.seq, key.to_owned(), file.item, true);
                }
                Err(reason) => self.quarantine(&path, &name, &reason.to_string()),
            }
        }
        Ok(max_seq)
    }

    /// Moves a file that cannot be read aside, so it is kept for a human and
    /// never retried.
    fn quarantine(&mut self, path: &Path, name: &str, reason: &str) {
        self.counters.dropped += 1;
        let aside = self.dir.join(CORRUPT_DIR);
        let moved = fs::create_dir_all(&aside).and_then(|()| fs::rename(path, aside.join(name)));
        match moved {
            Ok(()) => {
                tracing::warn!(file = %path.display(), moved_to = %aside.display(), reason, "corrupt outbox entry skipped")
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), reason, error = %e, "corrupt outbox entry skipped; cannot move it aside");
                let _ = fs::remove_file(path);
            }
        }
    }

    fn insert(&mut self, seq: u64, key: String, item: T, on_disk: bool) {
        if let Some(prev) = self
            .by_key
            .insert(key.clone(), seq)
            .and_then(|old| self.entries.remove(&old))
        {
            // The file under this key holds the replaced state if the new one
            // could not be written; a restart must not deliver that.
            if prev.on_disk && !on_disk {
                let _ = fs::remove_file(self.dir.join(format!("{key}.json")));
            }
        }
        self.entries.insert(seq, Entry { key, item, on_disk });
    }

    /// Appends `item` under `key` (replacing an entry with the same key) and
    /// persists it. `key = None` makes a unique key from the sequence number.
    /// Returns the sequence number.
    pub fn push(&mut self, key: Option<&str>, item: T) -> u64 {
        self.retry_open();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        let key = key.map_or_else(|| format!("{seq:020}"), str::to_owned);
        let on_disk = self.persist(seq, &key, &item);
        self.insert(seq, key, item, on_disk);
        self.enforce_bound();
        seq
    }

    /// Appends `item` in memory only, unless `key` is already queued. For
    /// resends: the firing set is the rule engine's to restore, not ours.
    pub fn push_volatile(&mut self, key: &str, item: T) {
        if self.by_key.contains_key(key) {
            return;
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        self.insert(seq, key.to_owned(), item, false);
        self.enforce_bound();
    }

    fn persist(&mut self, seq: u64, key: &str, item: &T) -> bool {
        if self.detached.is_some() {
            // Not written, and counted, so that the metric tells the truth.
            self.counters.persist_errors += 1;
            return false;
        }
        let file = EntryFile {
            format: FORMAT,
            seq,
            item,
        };
        let written = serde_json::to_vec(&file)
            .map_err(std::io::Error::other)
            .and_then(|bytes| write_atomic(&self.dir.join(format!("{key}.json")), &bytes));
        self.disk_result(written, "write")
    }

    fn disk_result(&mut self, r: std::io::Result<()>, op: &'static str) -> bool {
        match r {
            Ok(()) => {
                if self.disk_failing {
                    self.disk_failing = false;
                    tracing::info!(dir = %self.dir.display(), "outbox writes work again");
                }
                true
            }
            Err(e) => {
                self.counters.persist_errors += 1;
                if !self.disk_failing {
                    self.disk_failing = true;
                    tracing::error!(dir = %self.dir.display(), op, error = %e,
                        "outbox write failed; notifications are kept in memory only until it works again");
                }
                false
            }
        }
    }

    /// Drops the oldest entries beyond the bound, counting each.
    fn enforce_bound(&mut self) {
        let mut dropped = 0u64;
        while self.entries.len() > self.max {
            let Some((&seq, _)) = self.entries.first_key_value() else {
                break;
            };
            self.remove(seq);
            dropped += 1;
        }
        if dropped > 0 {
            self.counters.dropped += dropped;
            tracing::warn!(dir = %self.dir.display(), dropped, max = self.max, "outbox full; oldest entries dropped");
        }
    }

    fn remove(&mut self, seq: u64) -> bool {
        let Some(entry) = self.entries.remove(&seq) else {
            return false;
        };
        self.by_key.remove(&entry.key);
        if entry.on_disk {
            let path = self.dir.join(format!("{}.json", entry.key));
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    self.disk_result(Err(e), "remove");
                }
                _ => {}
            }
        }
        true
    }

    /// Up to `n` of the oldest entries, with their sequence numbers.
    pub fn batch(&self, n: usize) -> Vec<(u64, T)> {
        self.entries.iter().take(n).map(|(s, e)| (*s, e.item.clone())).collect()
    }

    /// Removes delivered (or given up) entries. An entry replaced since the
    /// batch was taken has a new sequence number and stays queued.
    pub fn remove_seqs(&mut self, seqs: &[u64]) -> usize {
        seqs.iter().filter(|s| self.remove(**s)).count()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The delivery counters of `notifier`, summed over its outboxes.
pub(crate) fn stats<'a, T: 'a>(
    notifier: &'static str,
    outboxes: impl IntoIterator<Item = &'a std::sync::Mutex<Outbox<T>>>,
) -> NotifierStats {
    let mut s = NotifierStats {
        notifier,
        ..NotifierStats::default()
    };
    for o in outboxes {
        let o = lock(o);
        s.sent_ok += o.counters.sent_ok;
        s.failed += o.counters.failed;
        s.dropped += o.counters.dropped;
        s.persist_errors += o.counters.persist_errors;
        s.queue_length += o.entries.len() as u64;
    }
    s
}

/// Why an outbox file is set aside; the text goes to the log.
#[derive(Debug, thiserror::Error)]
enum BadEntry {
    #[error("{0}")]
    Read(std::io::Error),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("unknown outbox format {0}")]
    Format(u32),
}

fn parse_entry<T: DeserializeOwned>(bytes: &[u8]) -> Result<EntryFile<T>, BadEntry> {
    let file: EntryFile<T> = serde_json::from_slice(bytes)?;
    if file.format != FORMAT {
        return Err(BadEntry::Format(file.format));
    }
    Ok(file)
}

/// Writes `path` so that readers see the old file or the whole new one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        // Without the fsync a power loss after the rename can leave an empty
        // file under the final name.
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn now_micros() -> u64 {
    crate::data::clock::unix_micros()
}

/// Locks a mutex even if a thread panicked while holding it: the queue holds
/// plain data that stays consistent between statements, and the daemon must
/// keep delivering.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
