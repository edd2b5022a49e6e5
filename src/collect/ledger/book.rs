//! The books the ledger keeps from decoded events: per process, the live
//! driver allocations (address or handle to size), their total and the
//! largest, counts of allocations, frees and failures, and failed calls not
//! yet turned into OOM events. Bounded by `[ebpf] max_allocations` and
//! `max_processes`. Pure data: it must not read /proc, BPF or NVML.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::event::{Call, Event, Kind};

/// One live allocation.
#[derive(Debug, Clone, Copy)]
struct Live {
    size: u64,
    managed: bool,
}

/// A failed allocation, waiting for the next poll to name its GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub call: Call,
    pub code: i32,
    pub size: u64,
}

/// One process's books.
#[derive(Debug, Default)]
pub struct Account {
    /// (is a handle, address or handle) to the allocation.
    live: FxHashMap<(bool, u64), Live>,
    /// Live sizes as a multiset (size to count): the largest in O(log n).
    sizes: BTreeMap<u64, u32>,
    pub live_bytes: u64,
    /// Of `live_bytes`, what cuMemAllocManaged gave (NVML may not show it).
    pub managed_bytes: u64,
    pub allocations: u64,
    pub frees: u64,
    pub failures: u64,
    /// Allocations not remembered (the bound was reached): their frees
    /// cannot be matched, so `live_bytes` is a lower bound while non-zero.
    pub untracked: u64,
    pub last_failure: Option<Failure>,
    /// Failures since the pipeline last took them.
    pending: Vec<Failure>,
}

impl Account {
    /// The largest live allocation, bytes.
    pub fn largest(&self) -> u64 {
        self.sizes.last_key_value().map_or(0, |(s, _)| *s)
    }

    pub fn live_allocations(&self) -> usize {
        self.live.len()
    }

    /// Drops the live allocation at `key` from every sum; whether there
    /// was one.
    fn forget(&mut self, key: &(bool, u64)) -> bool {
        let Some(old) = self.live.remove(key) else {
            return false;
        };
        self.live_bytes -= old.size;
        if old.managed {
            self.managed_bytes -= old.size;
        }
        if let Some(n) = self.sizes.get_mut(&old.size) {
            *n -= 1;
            if *n == 0 {
                self.sizes.remove(&old.size);
            }
        }
        true
    }
}

/// Failures one process keeps for the next poll; more within one poll
/// interval are counted but make no further events.
const PENDING_PER_PROCESS: usize = 4;

/// All processes' books.
#[derive(Debug)]
pub struct Book {
    max_allocations: usize,
    max_processes: usize,
    accounts: FxHashMap<u32, Account>,
    /// Live allocations remembered, all processes.
    remembered: usize,
    /// Events of processes not booked (over `max_processes`).
    pub unbooked: u64,
}

impl Book {
    pub fn new(max_allocations: usize, max_processes: usize) -> Self {
        Book {
            max_allocations,
            max_processes,
            accounts: FxHashMap::default(),
            remembered: 0,
            unbooked: 0,
        }
    }

    fn account(&mut self, pid: u32) -> Option<&mut Account> {
        if !self.accounts.contains_key(&pid) && self.accounts.len() >= self.max_processes {
            self.unbooked += 1;
            return None;
        }
        Some(self.accounts.entry(pid).or_default())
    }

    pub fn apply(&mut self, e: &Event) {
        let room = self.remembered < self.max_allocations;
        let Some(a) = self.account(e.pid) else { return };
        let key = (e.call.is_handle(), e.addr);
        let mut remembered: isize = 0;
        match e.kind {
            Kind::Alloc => {
                a.allocations += 1;
                let managed = e.call == Call::Managed;
                // The same key again means its free was missed (a lost
                // event): the old entry goes, so it is not counted twice.
                if a.forget(&key) {
                    remembered -= 1;
                }
                if room || remembered < 0 {
                    a.live.insert(key, Live { size: e.size, managed });
                    *a.sizes.entry(e.size).or_default() += 1;
                    a.live_bytes += e.size;
                    if managed {
                        a.managed_bytes += e.size;
                    }
                    remembered += 1;
                } else {
                    a.untracked += 1;
                }
            }
            Kind::Free => {
                a.frees += 1;
                if a.forget(&key) {
                    remembered -= 1;
                }
            }
            Kind::Fail => {
                a.failures += 1;
                let f = Failure {
                    call: e.call,
                    code: e.code,
                    size: e.size,
                };
                a.last_failure = Some(f);
                if a.pending.len() < PENDING_PER_PROCESS {
                    a.pending.push(f);
                }
            }
        }
        self.remembered = self.remembered.saturating_add_signed(remembered);
    }

    pub fn get(&self, pid: u32) -> Option<&Account> {
        self.accounts.get(&pid)
    }

    /// Takes the failures of `pid` not yet taken.
    pub fn take_failures(&mut self, pid: u32) -> Vec<Failure> {
        self.accounts
            .get_mut(&pid)
            .map(|a| std::mem::take(&mut a.pending))
            .unwrap_or_default()
    }

    /// Forgets every process `alive` says is gone.
    pub fn retain(&mut self, mut alive: impl FnMut(u32) -> bool) {
        let mut dropped = 0;
        self.accounts.retain(|&pid, a| {
            let keep = alive(pid);
            if !keep {
                dropped += a.live.len();
            }
            keep
        });
        self.remembered = self.remembered.saturating_sub(dropped);
    }

    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.accounts.keys().copied()
    }

    /// (processes booked, allocations remembered).
    pub fn held(&self) -> (usize, usize) {
        (self.accounts.len(), self.remembered)
    }
}
