//! The outbox's ways back to a sane state: an outbox whose directory cannot
//! be opened lives in memory and retries with backoff (a full disk at start
//! delays durability, never delivery), and entries numbered past any clock
//! are renumbered in order. It must not know about HTTP or payloads.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Serialize, de::DeserializeOwned};

use super::{Outbox, now_micros};

/// Delays between attempts to open an outbox that could not be opened.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Sequence numbers start at the clock in microseconds; one past this
/// (about 292,000 years) was not made by this code.
pub(super) const SEQ_SANE_MAX: u64 = u64::MAX / 2;

impl<T: Serialize + DeserializeOwned + Clone> Outbox<T> {
    /// [`Outbox::open`], or when that fails an outbox in memory that
    /// retries opening its directory (with backoff, on every push and on
    /// [`Outbox::retry_open`]): a full or unwritable disk at start delays
    /// durability, never delivery.
    pub fn open_or_retry(dir: &Path, max: usize) -> Self {
        match Self::open(dir, max) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(error = %e, "outbox unusable; notifications are kept in memory and the outbox retried");
                let mut o = Self::empty(dir, max);
                o.detached = Some((Instant::now() + RETRY_FIRST, RETRY_FIRST));
                o.disk_failing = true;
                o.next_seq = now_micros();
                o.counters.persist_errors = 1;
                o
            }
        }
    }

    /// Makes the next [`Outbox::retry_open`] attempt at once (tests).
    #[cfg(test)]
    pub fn retry_due_now(&mut self) {
        if let Some((_, delay)) = self.detached {
            self.detached = Some((Instant::now(), delay));
        }
    }

    /// Whether the directory is open (entries are persisted).
    #[cfg(test)]
    pub fn attached(&self) -> bool {
        self.detached.is_none()
    }

    /// Tries to open the directory if it is not yet and an attempt is due:
    /// loads what a previous run left (ordered before what this run queued)
    /// and writes what is held in memory.
    pub fn retry_open(&mut self) {
        let Some((due, delay)) = self.detached else {
            return;
        };
        if Instant::now() < due {
            return;
        }
        match Self::open(&self.dir, self.max) {
            Ok(old) => {
                self.detached = None;
                let mine = std::mem::take(&mut self.entries);
                self.by_key.clear();
                self.next_seq = self.next_seq.max(old.next_seq);
                for (seq, e) in old.entries {
                    self.insert(seq, e.key, e.item, true);
                }
                for (_, e) in mine {
                    let seq = self.next_seq;
                    self.next_seq = self.next_seq.saturating_add(1);
                    let on_disk = self.persist(seq, &e.key, &e.item);
                    self.insert(seq, e.key, e.item, on_disk);
                }
                self.counters.dropped += old.counters.dropped;
                self.enforce_bound();
                self.disk_failing = false;
                tracing::info!(dir = %self.dir.display(), queued = self.entries.len(), "outbox opened; notifications are durable again");
            }
            Err(_) => {
                let next = (delay * 2).min(RETRY_MAX);
                self.detached = Some((Instant::now() + delay, next));
            }
        }
    }

    /// Gives the loaded entries fresh sequence numbers from the clock, in
    /// their order, and rewrites their files: a number past any clock (a
    /// hand-edited or corrupt file) would otherwise leave no room after it,
    /// and what this run queues would be delivered before it.
    pub(super) fn renumber(&mut self) -> Option<u64> {
        let old = std::mem::take(&mut self.entries);
        self.by_key.clear();
        for (seq, (_, e)) in (now_micros()..).zip(old) {
            let on_disk = self.persist(seq, &e.key, &e.item);
            self.insert(seq, e.key, e.item, on_disk);
        }
        self.entries.last_key_value().map(|(s, _)| *s)
    }
}
