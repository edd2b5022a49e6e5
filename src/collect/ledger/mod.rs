//! The driver-call ledger: eBPF uprobes on the libcuda that CUDA processes
//! actually map, keeping per process the driver's live allocations, counts,
//! the largest allocation and failed allocations, for every CUDA process
//! whether or not it reports its allocator (docs/ebpf.md). Owns the
//! `[ebpf]` section, finding the libraries (`maps.rs`), the probes and
//! their reader thread (`probe.rs`), the books (`book.rs`) and turning
//! them into the snapshot's `driver` figures and OOM events. It must not
//! call NVML or render anything; the pipeline calls [`Ledger::join`] after
//! each poll, off which nothing here blocks but a short lock.

pub mod book;
pub mod config;
pub mod event;
pub mod maps;
pub mod probe;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::{FxHashMap, FxHashSet};

pub use book::{Account, Book};
pub use config::EbpfConfig;
use probe::{Probes, Reader};

use crate::collect::allocator::events::Table;
use crate::data::events::{Event, EventLog};
use crate::data::snapshot::{Device, DriverFailure, DriverFigures, RecentOom};

/// How long a driver OOM stays on its device in the snapshot (what the
/// OOM alert rule sees), as for the allocator's: ten minutes.
const OOM_RECENT_SECONDS: f64 = crate::collect::allocator::state::OOM_RECENT_SECONDS;

#[derive(Debug, Default)]
struct Attach {
    probes: Option<Probes>,
    /// Library files probed (device, inode), with the Unix time of attaching.
    libraries: FxHashMap<(String, u64), f64>,
    /// Files that could not be probed: tried once.
    refused: FxHashSet<(String, u64)>,
    /// PIDs whose maps were read, with when their library was first probed.
    scanned: FxHashMap<u32, Option<f64>>,
    /// Driver OOMs of the last ten minutes: (time, uuid, pid, comm, user, others).
    recent: Vec<(String, RecentOom)>,
}

/// The ledger, shared by the pipeline and the metrics.
#[derive(Debug)]
pub struct Ledger {
    cfg: EbpfConfig,
    proc_root: PathBuf,
    up: AtomicBool,
    book: Arc<Mutex<Book>>,
    attach: Mutex<Attach>,
    /// Records read off the ring buffer.
    read: Arc<AtomicU64>,
    events: Option<Arc<EventLog>>,
    reader: Mutex<Option<Reader>>,
}

impl Ledger {
    /// Loads the probes when `[ebpf]` is enabled. Never fails: without the
    /// capabilities, BTF or an x86_64 kernel it logs one line and stays down
    /// (`gpumem_ebpf_up 0`), and monitoring goes on.
    pub fn start(cfg: &EbpfConfig, proc_root: PathBuf, events: Option<Arc<EventLog>>) -> Arc<Ledger> {
        let ledger = Ledger {
            cfg: cfg.clone(),
            proc_root,
            up: AtomicBool::new(false),
            book: Arc::new(Mutex::new(Book::new(cfg.max_allocations, cfg.max_processes))),
            attach: Mutex::new(Attach::default()),
            read: Arc::new(AtomicU64::new(0)),
            events,
            reader: Mutex::new(None),
        };
        if cfg.enabled {
            ledger.load();
        }
        Arc::new(ledger)
    }

    fn load(&self) {
        let ring = u32::try_from(self.cfg.ring_buffer.0).unwrap_or(1 << 22);
        let loaded = Probes::load(ring)
            .map_err(|e| e.to_string())
            .and_then(|(probes, ring)| {
                let reader = Reader::spawn(ring, self.book.clone(), self.read.clone()).map_err(|e| e.to_string())?;
                Ok((probes, reader))
            });
        match loaded {
            Ok((probes, reader)) => {
                self.lock_attach().probes = Some(probes);
                *self.reader.lock().unwrap_or_else(PoisonError::into_inner) = Some(reader);
                self.up.store(true, Ordering::Relaxed);
                tracing::info!("driver-call ledger loaded; probing the libcuda of each CUDA process");
            }
            Err(e) => tracing::warn!("driver-call ledger off ([ebpf]): {e}; monitoring goes on without it"),
        }
    }

    fn lock_attach(&self) -> std::sync::MutexGuard<'_, Attach> {
        self.attach.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the probes are loaded (`gpumem_ebpf_up`).
    pub fn up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// (library files probed, records read, records lost in the kernel).
    pub fn counts(&self) -> (usize, u64, u64) {
        let a = self.lock_attach();
        let dropped = a.probes.as_ref().map_or(0, Probes::dropped);
        (a.libraries.len(), self.read.load(Ordering::Relaxed), dropped)
    }

    /// Reads the maps of each PID not scanned before and probes the driver
    /// libraries it maps that are not probed yet.
    pub fn scan(&self, pids: impl IntoIterator<Item = u32>) {
        if !self.up() {
            return;
        }
        let now = crate::data::clock::unix_now();
        let mut a = self.lock_attach();
        for pid in pids {
            if a.scanned.contains_key(&pid) {
                continue;
            }
            let libs = maps::of_pid(&self.proc_root, pid, &self.cfg.libraries);
            let mut since: Option<f64> = None;
            for lib in libs {
                if let Some(&at) = a.libraries.get(&lib.id) {
                    since = Some(since.map_or(at, |s| s.min(at)));
                    continue;
                }
                if a.refused.contains(&lib.id) {
                    continue;
                }
                let Some(probes) = a.probes.as_mut() else { return };
                match probes.attach(&lib.path) {
                    Ok(n) => {
                        tracing::info!("driver-call ledger: probing {} ({n} calls)", lib.path.display());
                        a.libraries.insert(lib.id, now);
                        since = Some(since.map_or(now, |s| s.min(now)));
                    }
                    Err(e) => {
                        tracing::warn!("driver-call ledger: cannot probe {e}");
                        a.refused.insert(lib.id);
                    }
                }
            }
            a.scanned.insert(pid, since);
        }
    }

    /// The books of `pid` as the snapshot shows them, before NVML's split.
    pub fn figures(&self, pid: u32) -> Option<DriverFigures> {
        let b = self.lock_book();
        b.get(pid).map(figures_of)
    }

    /// Called by the pipeline after each poll (after the allocator view's
    /// join): probes new CUDA processes, sets each one's `driver` figures,
    /// turns failed allocations into OOM events and forgets gone PIDs.
    pub fn join(&self, devices: &mut [Device], now: f64) {
        if !self.up() && self.held().0 == 0 {
            return;
        }
        let mut gpus: FxHashMap<u32, u32> = FxHashMap::default();
        for d in devices.iter() {
            for p in &d.processes {
                *gpus.entry(p.pid).or_default() += 1;
            }
        }
        self.scan(gpus.keys().copied());
        let mut fresh: Vec<(String, RecentOom)> = Vec::new();
        {
            let scanned = &self.lock_attach().scanned;
            let mut book = self.lock_book();
            let mut first: FxHashSet<u32> = FxHashSet::default();
            for d in devices.iter_mut() {
                let table = book
                    .pids()
                    .any(|pid| gpus.contains_key(&pid))
                    .then(|| Table::of(d, now));
                for i in 0..d.processes.len() {
                    let pid = d.processes[i].pid;
                    if !first.insert(pid) {
                        continue;
                    }
                    let Some(acct) = book.get(pid) else { continue };
                    let p = &d.processes[i];
                    let mut f = figures_of(acct);
                    f.gpus = gpus.get(&pid).copied().unwrap_or(1);
                    f.other_bytes = p
                        .used_bytes
                        .filter(|_| f.gpus == 1)
                        .map(|u| u.saturating_sub(f.live_bytes));
                    f.complete = match (scanned.get(&pid).copied().flatten(), p.start_time) {
                        (Some(at), Some(start)) => start >= at,
                        _ => false,
                    };
                    let reporter = p.allocator.as_ref().map(|a| a.reserved.current);
                    f.reporter_diff_bytes = reporter.map(|r| {
                        i64::try_from(f.live_bytes).unwrap_or(i64::MAX) - i64::try_from(r).unwrap_or(i64::MAX)
                    });
                    let failures = book.take_failures(pid);
                    // Where the process reports its allocator, its own OOM
                    // event (with its allocator figures) is the one kept.
                    if reporter.is_none() {
                        for fail in failures.iter().filter(|f| f.code == event::OUT_OF_MEMORY) {
                            let t = table.clone().unwrap_or_else(|| Table::of(d, now));
                            fresh.push((d.uuid.clone(), self.oom_event(now, &d.uuid, p, fail, t)));
                        }
                    }
                    d.processes[i].driver = Some(Box::new(f));
                }
            }
            // PIDs gone from /proc lose their books; a PID NVML stopped
            // listing keeps them while it lives (it may allocate again).
            let root = &self.proc_root;
            book.retain(|pid| gpus.contains_key(&pid) || root.join(pid.to_string()).exists());
        }
        let mut a = self.lock_attach();
        a.scanned.retain(|pid, _| gpus.contains_key(pid));
        a.recent.retain(|(_, r)| r.time >= now - OOM_RECENT_SECONDS);
        a.recent.extend(fresh);
        // Beside the allocator view's (set by its join); once each, should
        // the same devices be joined again.
        for d in devices.iter_mut() {
            for (_, r) in a.recent.iter().filter(|(u, _)| *u == d.uuid) {
                if !d.ooms.iter().any(|o| o.pid == r.pid && o.time == r.time) {
                    d.ooms.push(r.clone());
                }
            }
        }
    }

    /// Pushes one OOM event (the allocator's kind, `source = "ebpf"`) and
    /// returns the snapshot's note of it.
    fn oom_event(
        &self,
        now: f64,
        uuid: &str,
        p: &crate::data::snapshot::Process,
        fail: &book::Failure,
        gpu: Table,
    ) -> RecentOom {
        if let Some(log) = &self.events {
            let e = Event::new("oom", now, uuid)
                .with("source", "ebpf")
                .with("pid", p.pid)
                .with("comm", p.who.comm.as_str())
                .with("user", p.who.user.as_str())
                .with("call", fail.call.symbol())
                .with("code", fail.code)
                .with("requested_bytes", fail.size)
                .with("gpu", serde_json::to_value(&gpu).unwrap_or_default());
            log.push(e);
        }
        RecentOom {
            time: now,
            pid: p.pid,
            comm: p.who.comm.to_string(),
            user: p.who.user.to_string(),
            others: gpu.biggest_except(p.pid, 3).join(", "),
        }
    }

    /// Books decoded events as the reader thread does (tests, benches).
    pub fn apply(&self, events: &[event::Event]) {
        let mut b = self.lock_book();
        events.iter().for_each(|e| b.apply(e));
    }

    /// (processes booked, allocations remembered): what is held.
    pub fn held(&self) -> (usize, usize) {
        self.lock_book().held()
    }
}

fn figures_of(a: &Account) -> DriverFigures {
    DriverFigures {
        live_bytes: a.live_bytes,
        managed_bytes: a.managed_bytes,
        live_allocations: a.live_allocations() as u64,
        largest_bytes: a.largest(),
        allocations: a.allocations,
        frees: a.frees,
        failures: a.failures,
        untracked: a.untracked,
        last_failure: a.last_failure.map(|f| DriverFailure {
            call: f.call.symbol().to_string(),
            code: f.code,
            requested_bytes: f.size,
        }),
        gpus: 1,
        ..DriverFigures::default()
    }
}

#[cfg(test)]
mod tests;
