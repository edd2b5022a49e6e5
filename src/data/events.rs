//! The shared, bounded list of daemon events behind `GET /api/v1/events`
//! (DESIGN.md: "recent OOM, Xid, suspend and resume events"). Owns the
//! event's common JSON shape (`kind`, `time`, `uuid`, then the kind's own
//! fields) and the bound; it must not decide when something happened (the
//! pipeline, the reclaimer and the allocator view do) nor name their types,
//! so any module may push without an import circle.
//!
//! # Adding a kind
//! Whoever holds the `Arc<EventLog>` pushes one event with one call:
//!
//! ```
//! use gpumemd::data::events::{Event, EventLog};
//! let log = EventLog::new(16);
//! log.push(Event::new("suspend", 1_700_000_000.0, "GPU-0").with("pid", 4101).with("bytes", 1u64 << 30));
//! assert_eq!(log.list()[0].kind, "suspend");
//! ```
//!
//! Kinds in use: `"xid"` (the pipeline: `xid`, `memory_related`),
//! `"oom"` (kept by the allocator view in its own store, which also feeds
//! the snapshot and the OOM alert; the handler merges it in by time).
//! `"suspend"` and `"resume"` (the reclaimer, for those done or failed:
//! `pid`, `comm`, `user`, `rule`, `result`, `bytes`, `reason`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::{Map, Value};

/// How many events `EventLog::shared` keeps, of all kinds together: the
/// endpoint answers with at most this many plus the allocator's OOMs.
pub const EVENTS_KEPT: usize = 512;

/// One event, as the endpoint serves it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// What happened: "xid", "suspend", "resume", ...
    pub kind: &'static str,
    /// Unix seconds (poll resolution for what the poller sees).
    pub time: f64,
    /// The GPU it is about; empty (and left out) when none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// The kind's own fields, flattened beside the common ones.
    #[serde(flatten)]
    pub detail: Map<String, Value>,
}

impl Event {
    pub fn new(kind: &'static str, time: f64, uuid: impl Into<String>) -> Self {
        Event {
            kind,
            time,
            uuid: uuid.into(),
            detail: Map::new(),
        }
    }

    /// Adds a field of the kind's own (a common field's name is ignored,
    /// so an event always has one `kind`, `time` and `uuid`).
    #[must_use]
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        if !matches!(key, "kind" | "time" | "uuid") {
            self.detail.insert(key.to_string(), value.into());
        }
        self
    }
}

/// Bounded: the oldest event goes when a new one would exceed the cap.
/// Shared between threads; pushing takes a short lock and never blocks on
/// readers for longer than a copy of the list. No `Default`: a log with
/// no room would have nowhere to put an event.
#[derive(Debug)]
pub struct EventLog {
    cap: usize,
    list: Mutex<VecDeque<Event>>,
}

impl EventLog {
    pub fn new(cap: usize) -> Self {
        EventLog {
            cap: cap.max(1),
            list: Mutex::new(VecDeque::new()),
        }
    }

    /// The daemon's log, `EVENTS_KEPT` long, ready to hand around.
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::new(EVENTS_KEPT))
    }

    pub fn push(&self, e: Event) {
        // A panic elsewhere cannot leave a half-pushed deque: use it as is.
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        while list.len() >= self.cap {
            list.pop_front();
        }
        list.push_back(e);
    }

    /// The events kept, oldest first.
    pub fn list(&self) -> Vec<Event> {
        let list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        list.iter().cloned().collect()
    }
}

/// `events` and `more` (each oldest first, of any serialisable shape with a
/// numeric `time`) as one list, oldest first: what the endpoint serves.
pub fn merge<T: Serialize>(events: Vec<Event>, more: &[T]) -> Vec<Value> {
    let mut all: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .chain(more.iter().filter_map(|e| serde_json::to_value(e).ok()))
        .collect();
    let time = |v: &Value| v.get("time").and_then(Value::as_f64).unwrap_or(0.0);
    // Stable: events of the same time keep their order within each list.
    all.sort_by(|a, b| time(a).total_cmp(&time(b)));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_within_the_cap() {
        let log = EventLog::new(2);
        for t in [1.0, 2.0, 3.0] {
            log.push(Event::new("xid", t, "GPU-a").with("xid", 48));
        }
        let times: Vec<f64> = log.list().iter().map(|e| e.time).collect();
        assert_eq!(times, [2.0, 3.0]);
    }

    #[test]
    fn serialises_flat_with_a_kind_and_no_empty_uuid() {
        let e = Event::new("resume", 5.0, "").with("pid", 7).with("kind", "oops");
        let v = serde_json::to_value(&e).expect("json");
        assert_eq!(v, serde_json::json!({"kind": "resume", "time": 5.0, "pid": 7}));
    }

    #[test]
    fn merge_orders_both_lists_by_time() {
        let log = EventLog::new(8);
        log.push(Event::new("xid", 1.0, "GPU-a").with("xid", 13));
        log.push(Event::new("xid", 3.0, "GPU-a").with("xid", 48));
        let ooms = [serde_json::json!({"kind": "oom", "time": 2.0})];
        let kinds: Vec<String> = merge(log.list(), &ooms)
            .iter()
            .map(|v| format!("{}@{}", v["kind"].as_str().unwrap_or("?"), v["time"]))
            .collect();
        assert_eq!(kinds, ["xid@1.0", "oom@2.0", "xid@3.0"]);
    }
}
