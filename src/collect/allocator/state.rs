//! The shared latest-state map between the receiver (or the demo feeder)
//! and the poll pipeline. Owns the checks a report passes once the kernel
//! has named its sender (size, rate per PID, version and shape, the PID is
//! one NVML lists, every GPU it names is one that PID uses), the count of
//! each outcome, and forgetting a PID when NVML stops listing it. It must
//! not read sockets, /proc or NVML: the receiver hands it bytes and a PID,
//! the pipeline hands it each poll's devices. The lock is held for map
//! updates only (parsing happens outside it), so the poll never waits on a
//! sender.

use std::collections::HashMap;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::config::AllocatorConfig;
use super::events::{Events, OomEvent, Table};
use super::listed::Listed;
use super::message::{self, DeviceReport, MessageError, bare};
use crate::data::snapshot::{AllocatorFigures, Device};
use rustc_hash::FxHashMap;

/// How long a reported OOM stays on its device in the snapshot (what the
/// `process_oom` rule kind sees): ten minutes.
pub const OOM_RECENT_SECONDS: f64 = 600.0;

/// What became of one datagram: the `result` label of
/// `gpumem_allocator_messages_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    /// Longer than `max_message_bytes` (or cut short by the kernel).
    Oversize,
    /// Not JSON of the report's shape (garbage, truncated).
    Malformed,
    /// A `v` this daemon does not read.
    Version,
    /// The kernel gave no sender credentials.
    NoCredentials,
    /// NVML does not list the sender's PID on any GPU.
    UnknownPid,
    /// The report names a GPU the sender does not use.
    ForeignGpu,
    /// Over the sender's rate.
    RateLimited,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Accepted,
        Outcome::Oversize,
        Outcome::Malformed,
        Outcome::Version,
        Outcome::NoCredentials,
        Outcome::UnknownPid,
        Outcome::ForeignGpu,
        Outcome::RateLimited,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Oversize => "oversize",
            Outcome::Malformed => "malformed",
            Outcome::Version => "unsupported_version",
            Outcome::NoCredentials => "no_credentials",
            Outcome::UnknownPid => "unknown_pid",
            Outcome::ForeignGpu => "foreign_gpu",
            Outcome::RateLimited => "rate_limited",
        }
    }
}

/// A token bucket per PID: `rate` a second, bursts of four times that.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: f64,
}

/// The latest report of one PID.
#[derive(Debug, Clone)]
struct Report {
    at: f64,
    devices: Vec<DeviceReport>,
    /// Per device (same order): when the OOM count last rose.
    last_oom: Vec<Option<f64>>,
    /// Per device (same order): when the retry count last rose.
    last_retry: Vec<Option<f64>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Who NVML listed on which GPU at the latest poll (`listed.rs`).
    listed: Listed,
    /// FxHash, like every PID-keyed map (docs/design.md): `join` looks up
    /// every listed process here each poll.
    reports: FxHashMap<u32, Report>,
    buckets: FxHashMap<u32, Bucket>,
    /// Holder tables of the GPUs that have a reporting process, as of the
    /// latest poll: what an OOM event shows.
    tables: HashMap<String, Table>,
    /// OOM events recorded with no table (the first report of a GPU's
    /// first reporter): the next poll fills them.
    pending: usize,
    events: Events,
}

/// Shared between the receiver thread and the pipeline (behind an `Arc`).
#[derive(Debug)]
pub struct AllocatorState {
    max_bytes: usize,
    rate: f64,
    stale_after: f64,
    inner: Mutex<Inner>,
    counts: [AtomicU64; 8],
    /// Where reporting processes can be asked to record their memory history.
    pub recorder: super::recorder::Recorder,
}

impl AllocatorState {
    pub fn new(cfg: &AllocatorConfig) -> Self {
        let inner = Inner {
            events: Events::new(cfg.events),
            ..Inner::default()
        };
        Self {
            max_bytes: usize::try_from(cfg.max_message_bytes.0).unwrap_or(usize::MAX),
            rate: cfg.rate_limit,
            stale_after: cfg.stale_after.get().as_secs_f64(),
            inner: Mutex::new(inner),
            counts: Default::default(),
            recorder: super::recorder::Recorder::default(),
        }
    }

    /// The largest datagram accepted, for the receiver's buffer.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain maps behind: still usable.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, o: Outcome) -> Outcome {
        if let Some(c) = self.counts.get(o as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        o
    }

    /// One datagram from the socket: `pid` as the kernel gave it, `len` its
    /// full length (may exceed `bytes` when the kernel cut it), received at
    /// Unix time `now`. Counts and returns the outcome.
    pub fn receive(&self, pid: Option<u32>, bytes: &[u8], len: usize, now: f64) -> Outcome {
        let Some(pid) = pid.filter(|&p| p != 0) else {
            return self.count(Outcome::NoCredentials);
        };
        if len > self.max_bytes || bytes.len() < len {
            return self.count(Outcome::Oversize);
        }
        if let Err(drop) = self.admit(pid, now) {
            return self.count(drop);
        }
        let devices = match message::parse(bytes) {
            Ok(d) => d,
            Err(MessageError::Version(_)) => return self.count(Outcome::Version),
            Err(MessageError::Malformed(_)) => return self.count(Outcome::Malformed),
        };
        let outcome = self.record(pid, devices, now);
        if let (Outcome::Accepted, Some(path)) = (outcome, message::snapshot(bytes)) {
            self.lock().events.link_snapshot(pid, now, path);
        }
        self.count(outcome)
    }

    /// Whether `pid` is listed and within its rate (taking a token), before
    /// any parsing: a flood costs a lookup per datagram. Buckets exist only
    /// for listed PIDs, so a sender cannot grow the map.
    fn admit(&self, pid: u32, now: f64) -> Result<(), Outcome> {
        let mut g = self.lock();
        if !g.listed.contains(pid) {
            return Err(Outcome::UnknownPid);
        }
        let cap = self.rate * 4.0;
        let b = g.buckets.entry(pid).or_insert(Bucket { tokens: cap, at: now });
        b.tokens = (b.tokens + (now - b.at).max(0.0) * self.rate).min(cap);
        b.at = now;
        if b.tokens < 1.0 {
            return Err(Outcome::RateLimited);
        }
        b.tokens -= 1.0;
        Ok(())
    }

    /// Stores a parsed report of `pid` (from the socket, or from the demo
    /// feeder, which has no socket). Does not count it.
    pub fn record(&self, pid: u32, mut devices: Vec<DeviceReport>, now: f64) -> Outcome {
        let mut g = self.lock();
        if !g.listed.contains(pid) {
            return Outcome::UnknownPid;
        }
        for d in &mut devices {
            match nvml_uuid(g.listed.uuids_of(pid), &d.uuid) {
                Some(u) if u != d.uuid => d.uuid = u.to_string(),
                Some(_) => {}
                None => return Outcome::ForeignGpu,
            }
        }
        let prev = g.reports.remove(&pid);
        let mut last_oom = Vec::with_capacity(devices.len());
        let mut last_retry = Vec::with_capacity(devices.len());
        for d in &devices {
            let before = prev
                .as_ref()
                .and_then(|r| r.devices.iter().position(|p| p.uuid == d.uuid).map(|i| (r, i)));
            let old = |at: fn(&Report) -> &Vec<Option<f64>>| before.and_then(|(r, i)| at(r).get(i).copied().flatten());
            let (old_ooms, old_retries) =
                before.map_or((0, 0), |(r, i)| (r.devices[i].ooms, r.devices[i].alloc_retries));
            if d.ooms > old_ooms {
                last_oom.push(Some(now));
                let mut ev = OomEvent::new(now, pid, d, g.tables.get(&d.uuid).cloned().unwrap_or_default());
                if let Some((comm, user)) = g.listed.names(pid).filter(|_| ev.gpu.processes.is_empty()) {
                    // No table yet: the next poll fills it (`join`).
                    ev.name(comm, user);
                    g.pending += 1;
                }
                g.events.push(ev);
            } else {
                last_oom.push(old(|r| &r.last_oom));
            }
            let rose = d.alloc_retries > old_retries;
            last_retry.push(if rose { Some(now) } else { old(|r| &r.last_retry) });
        }
        let report = Report {
            at: now,
            devices,
            last_oom,
            last_retry,
        };
        g.reports.insert(pid, report);
        Outcome::Accepted
    }

    /// Called by the pipeline after each poll: notes which PIDs use which
    /// GPUs, forgets PIDs NVML no longer lists, and sets each reporting
    /// process's figures (fresh ones only) on `devices`.
    pub fn join(&self, devices: &mut [Device], now: f64) {
        let mut g = self.lock();
        let Inner {
            listed,
            reports,
            buckets,
            tables,
            pending,
            events,
        } = &mut *g;
        tables.clear();
        // A report of a PID no longer listed matches no process here, so
        // forgetting it after the walk changes nothing.
        for d in devices.iter_mut() {
            let mut any = false;
            for p in &mut d.processes {
                p.allocator = reports
                    .get(&p.pid)
                    .filter(|r| now - r.at <= self.stale_after)
                    .and_then(|r| figures(r, &d.uuid, p.used_bytes))
                    .map(Box::new);
                any |= p.allocator.is_some();
            }
            if any {
                tables.insert(d.uuid.clone(), Table::of(d, now));
            }
        }
        listed.refill(devices);
        reports.retain(|&pid, _| listed.contains(pid));
        buckets.retain(|&pid, _| listed.contains(pid));
        if std::mem::take(pending) > 0 {
            // This poll is the first after those OOMs: their tables.
            events.fill_pending(|uuid| {
                let d = devices.iter().find(|d| d.uuid == uuid)?;
                Some(tables.get(uuid).cloned().unwrap_or_else(|| Table::of(d, now)))
            });
        }
        for d in devices.iter_mut() {
            d.ooms = events.recent(&d.uuid, now - OOM_RECENT_SECONDS);
        }
    }

    /// `(result, count)` for every outcome, in a fixed order.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        Outcome::ALL
            .iter()
            .map(|&o| (o.as_str(), self.counts[o as usize].load(Ordering::Relaxed)))
            .collect()
    }

    /// The OOM events kept, oldest first.
    pub fn events(&self) -> Vec<OomEvent> {
        self.lock().events.list()
    }

    /// PIDs with a report, a rate bucket or a listing: what is held.
    pub fn tracked(&self) -> (usize, usize, usize) {
        let mut g = self.lock();
        (g.reports.len(), g.buckets.len(), g.listed.pids())
    }
}

/// NVML's UUID for a report's `uuid` among the GPUs the sender is listed
/// on: the same text, or else the same UUID under another prefix. A MIG
/// job's torch gives the instance's UUID bare, the package cannot tell it
/// from a GPU's and writes `GPU-`, while NVML lists `MIG-` (docs/design.md).
fn nvml_uuid<'a>(mine: impl Iterator<Item = &'a str>, uuid: &str) -> Option<&'a str> {
    let want = bare(uuid);
    let mut by_bare = None;
    for u in mine {
        if u == uuid {
            return Some(u);
        }
        if by_bare.is_none() && bare(u) == want {
            by_bare = Some(u);
        }
    }
    by_bare
}

/// The snapshot's figures of one device of a report, with NVML's figure
/// (`used`) split into tensors, cache and the rest.
fn figures(r: &Report, uuid: &str, used: Option<u64>) -> Option<AllocatorFigures> {
    let i = r.devices.iter().position(|d| d.uuid == uuid)?;
    let d = &r.devices[i];
    Some(AllocatorFigures {
        allocated: d.allocated,
        reserved: d.reserved,
        active: d.active,
        inactive_split: d.inactive_split,
        alloc_retries: d.alloc_retries,
        ooms: d.ooms,
        reported_at: r.at,
        last_oom_at: r.last_oom.get(i).copied().flatten(),
        last_retry_at: r.last_retry.get(i).copied().flatten(),
        tensors_bytes: d.allocated.current,
        cache_bytes: d.reserved.current.saturating_sub(d.allocated.current),
        other_bytes: used.map(|u| u.saturating_sub(d.reserved.current)),
        growth: None,
    })
}
