//! The driver-call ledger's families: `gpumem_ebpf_*` (whether the probes
//! are loaded, what they read and lost) and the per-process
//! `gpumem_process_driver_*` from the snapshot's `driver` figures. Reads
//! only the ledger's counts and the snapshot; a process without driver
//! figures gets no sample (unknown, not zero), and with none at all the
//! per-process families are left out.

use super::family::Family;
use super::text::{Digits, Kind, Writer};
use crate::collect::ledger::Ledger;
use crate::data::snapshot::{Device, DriverFigures, Process};

/// One exported process, as the per-process families pick them: its
/// device, itself, and its pid as a label value.
type Exported<'a> = (&'a Device, &'a Process, Digits);

/// The ledger's state at scrape time.
#[derive(Debug, Clone, Copy)]
pub(super) struct LedgerStats {
    up: bool,
    libraries: u64,
    read: u64,
    lost: u64,
}

impl LedgerStats {
    pub(super) fn of(l: &Ledger) -> Self {
        let (libraries, read, lost) = l.counts();
        LedgerStats {
            up: l.up(),
            libraries: libraries as u64,
            read,
            lost,
        }
    }
}

pub(super) const LEDGER: &[Family<LedgerStats>] = &[
    Family::new(
        "gpumem_ebpf_up",
        Kind::Gauge,
        "",
        "1 if the driver-call ledger's eBPF probes are loaded ([ebpf]); 0 if loading failed (see the log).",
        |s, e| e(&[], s.up.into()),
    ),
    Family::new(
        "gpumem_ebpf_libraries_probed",
        Kind::Gauge,
        "",
        "Distinct CUDA driver library files (device and inode) the ledger's uprobes are attached to.",
        |s, e| e(&[], s.libraries.into()),
    ),
    Family::new(
        "gpumem_ebpf_events_total",
        Kind::Counter,
        "",
        "Driver allocation, free and failure records the ledger read from the kernel.",
        |s, e| e(&[], s.read.into()),
    ),
    Family::new(
        "gpumem_ebpf_events_lost_total",
        Kind::Counter,
        "",
        "Records lost because the ring buffer was full ([ebpf] ring_buffer); the books may then be off.",
        |s, e| e(&[], s.lost.into()),
    ),
];

type Of = fn(&DriverFigures) -> u64;

pub(super) fn driver_families(w: &mut Writer, rows: &[Exported<'_>]) {
    let with = || {
        rows.iter()
            .filter_map(|(d, p, pid)| Some((p.driver.as_deref()?, d.uuid.as_str(), pid.as_str())))
    };
    if with().next().is_none() {
        return;
    }
    let families: [(&str, Kind, &str, Of); 5] = [
        (
            "gpumem_process_driver_allocated_bytes",
            Kind::Gauge,
            "Bytes the CUDA driver's allocation calls gave the process and no free returned, as the eBPF ledger saw them (per process, on its first GPU).",
            |f| f.live_bytes,
        ),
        (
            "gpumem_process_driver_managed_bytes",
            Kind::Gauge,
            "Of the driver-allocated bytes, managed (unified) memory, which NVML may not count.",
            |f| f.managed_bytes,
        ),
        (
            "gpumem_process_driver_allocations",
            Kind::Gauge,
            "Live driver allocations of the process.",
            |f| f.live_allocations,
        ),
        (
            "gpumem_process_driver_largest_allocation_bytes",
            Kind::Gauge,
            "The process's largest live driver allocation.",
            |f| f.largest_bytes,
        ),
        (
            "gpumem_process_driver_alloc_failures_total",
            Kind::Counter,
            "Driver allocation calls of the process that failed (any CUresult; 2 is out of memory).",
            |f| f.failures,
        ),
    ];
    for (name, kind, help, get) in families {
        w.family(name, kind, help);
        for (f, uuid, pid) in with() {
            w.sample(name, &[("uuid", uuid), ("pid", pid)], get(f));
        }
    }
}
