//! The per-device families and the daemon's own poll families, as tables.
//! Owns their names, help texts and which device state gives a sample: a
//! GPU that is down has only `info` and `up`, and a value the driver did
//! not give has no sample rather than a zero. Reads only the snapshot.

use super::BuildInfo;
use super::family::{Emit, Family, Num};
use super::text::{Digits, Kind};
use crate::collect::source::PollErrorReason;
use crate::data::snapshot::{Device, Holder, Memory, Snapshot};

/// One `uuid`-labelled sample, when there is a value.
pub(super) fn by_uuid(d: &Device, v: Option<impl Into<Num>>, e: &mut Emit<'_>) {
    if let Some(v) = v {
        e(&[("uuid", &d.uuid)], v.into());
    }
}

/// The memory reading of a device that was read this poll.
fn memory(d: &Device) -> Option<&Memory> {
    d.memory.as_ref().filter(|_| d.up)
}

const fn gauge(
    name: &'static str,
    unit: &'static str,
    help: &'static str,
    samples: fn(&Device, &mut Emit<'_>),
) -> Family<Device> {
    Family::new(name, Kind::Gauge, unit, help, samples)
}

pub(super) const DEVICE: &[Family<Device>] = &[
    gauge(
        "gpumem_device_info",
        "",
        "GPU or MIG instance identity; value is always 1.",
        |d, e| {
            let index = d.index.map(|i| Digits::new(u64::from(i)));
            let labels = [
                ("uuid", d.uuid.as_str()),
                ("index", index.as_ref().map_or("", Digits::as_str)),
                ("name", &d.name),
                ("pci_bus_id", &d.pci_bus_id),
                ("parent_uuid", &d.parent_uuid),
                ("mig_profile", &d.mig_profile),
            ];
            e(&labels, 1u64.into());
        },
    ),
    gauge(
        "gpumem_device_up",
        "",
        "1 if the device was read this poll, 0 if it failed (lost, driver error).",
        |d, e| by_uuid(d, Some(d.up), e),
    ),
    gauge(
        "gpumem_device_memory_total_bytes",
        "bytes",
        "Total device memory in bytes.",
        |d, e| by_uuid(d, memory(d).map(|m| m.total_bytes), e),
    ),
    gauge(
        "gpumem_device_memory_used_bytes",
        "bytes",
        "Used device memory in bytes (NVML v2: excludes reserved).",
        |d, e| by_uuid(d, memory(d).map(|m| m.used_bytes), e),
    ),
    gauge(
        "gpumem_device_memory_used_max_bytes",
        "bytes",
        "Peak used device memory over [poll] peak_window, in bytes: spikes between scrapes.",
        |d, e| by_uuid(d, d.used_max_bytes.filter(|_| d.up), e),
    ),
    gauge(
        "gpumem_device_memory_free_bytes",
        "bytes",
        "Free device memory in bytes.",
        |d, e| by_uuid(d, memory(d).map(|m| m.free_bytes), e),
    ),
    gauge(
        "gpumem_device_memory_reserved_bytes",
        "bytes",
        "Memory reserved by the driver and firmware, in bytes.",
        |d, e| by_uuid(d, memory(d).and_then(|m| m.reserved_bytes), e),
    ),
    gauge(
        "gpumem_device_memory_held_bytes",
        "bytes",
        "Used memory by holder: live processes, zombie (state Z or X, or stuck in D past stuck_after), exited (listed by NVML, gone from /proc), unattributed. Adds up to used.",
        |d, e| {
            let Some(h) = d.holders.filter(|_| d.up) else { return };
            for holder in Holder::ALL {
                e(&[("uuid", &d.uuid), ("holder", holder.as_str())], h.get(holder).into());
            }
        },
    ),
    gauge(
        "gpumem_device_memory_unreleased_bytes",
        "bytes",
        "Memory still used after its holder left the process list for longer than late_release_after.",
        |d, e| {
            let known = d.up && d.holders.is_some();
            by_uuid(
                d,
                known.then(|| d.unreleased.iter().fold(0u64, |a, u| a.saturating_add(u.bytes))),
                e,
            );
        },
    ),
    gauge(
        "gpumem_device_memory_full_in_seconds",
        "seconds",
        "Seconds until free memory runs out at the growth of the holders whose growth the leak detector confirms (live, zombie, exited, unattributed); absent when nothing grows.",
        // Whole seconds: a forecast is not finer, and a scrape's text stays short.
        |d, e| by_uuid(d, d.full_in_seconds.filter(|_| d.up).map(|s| s.max(0.0).round()), e),
    ),
    gauge(
        "gpumem_device_processes",
        "",
        "Processes with a context on the device.",
        |d, e| {
            let known = d.up && !d.processes_unreadable;
            by_uuid(d, known.then_some(d.processes.len() as u64), e);
        },
    ),
];

pub(super) const POLL: &[Family<Snapshot>] = &[
    Family::new(
        "gpumem_nvml_up",
        Kind::Gauge,
        "",
        "1 if NVML is initialised and answering.",
        |s, e| e(&[], s.nvml_up.into()),
    ),
    Family::<Snapshot>::new(
        "gpumem_driver_info",
        Kind::Gauge,
        "",
        "Driver, NVML and CUDA versions; value is always 1.",
        |s, e| {
            let Some(d) = &s.driver else { return };
            let labels = [
                ("driver_version", d.driver_version.as_str()),
                ("nvml_version", &d.nvml_version),
                ("cuda_version", &d.cuda_version),
            ];
            e(&labels, 1u64.into());
        },
    )
    .optional(),
    Family::new(
        "gpumem_poll_duration_seconds",
        Kind::Gauge,
        "seconds",
        "Duration of the latest poll.",
        |s, e| e(&[], s.poll.duration_seconds.into()),
    ),
    Family::new(
        "gpumem_poll_source_duration_seconds",
        Kind::Gauge,
        "seconds",
        "Part of the latest poll spent reading the GPU source (NVML calls); the rest is gpumemd's own work.",
        |s, e| e(&[], s.poll.source_seconds.into()),
    ),
    Family::<Snapshot>::new(
        "gpumem_last_poll_timestamp_seconds",
        Kind::Gauge,
        "seconds",
        "Unix time of the latest successful poll.",
        |s, e| {
            if let Some(t) = s.poll.last_success_timestamp {
                e(&[], t.into());
            }
        },
    )
    .optional(),
    Family::new(
        "gpumem_poll_success",
        Kind::Gauge,
        "",
        "1 if the latest poll succeeded.",
        |s, e| e(&[], s.poll.success.into()),
    ),
    Family::new("gpumem_polls_total", Kind::Counter, "", "Polls started.", |s, e| {
        e(&[], s.poll.polls_total.into());
    }),
    Family::new(
        "gpumem_poll_errors_total",
        Kind::Counter,
        "",
        "Polls or devices that failed, by reason.",
        |s, e| {
            for reason in PollErrorReason::ALL.map(PollErrorReason::as_str) {
                let v = s.poll.errors_total.get(reason).copied().unwrap_or(0);
                e(&[("reason", reason)], v.into());
            }
        },
    ),
    Family::new(
        "gpumem_poll_overruns_total",
        Kind::Counter,
        "",
        "Poll ticks skipped because the previous poll was still running.",
        |s, e| e(&[], s.poll.overruns_total.into()),
    ),
];

pub(super) const BUILD: Family<BuildInfo> = Family::new(
    "gpumem_build_info",
    Kind::Gauge,
    "",
    "gpumemd version and revision; value is always 1.",
    |b, e| e(&[("version", b.version), ("revision", b.revision)], 1u64.into()),
);
