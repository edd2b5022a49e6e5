//! The memory-health families (ECC, row remapping, retired pages, memory
//! temperature, Xid events), as a table over devices. Owns their names,
//! labels and help texts. A GPU that is down, a GPU that was not read for
//! health, and a part the GPU does not support give no sample: absent, not
//! 0. Reads only the snapshot.

use super::device::by_uuid;
use super::family::Family;
use super::text::{Digits, Kind};
use crate::data::snapshot::Device;
use crate::data::snapshot::health::{Health, MEMORY_XIDS};

fn health(d: &Device) -> Option<&Health> {
    d.health.as_ref().filter(|_| d.up)
}

pub(super) const HEALTH: &[Family<Device>] = &[
    Family::new(
        "gpumem_device_ecc_enabled",
        Kind::Gauge,
        "",
        "1 if ECC is on: mode current now, mode pending after the next GPU reset.",
        |d, e| {
            let Some(ecc) = health(d).and_then(|h| h.ecc) else {
                return;
            };
            e(&[("uuid", &d.uuid), ("mode", "current")], ecc.enabled.into());
            e(&[("uuid", &d.uuid), ("mode", "pending")], ecc.pending_enabled.into());
        },
    ),
    Family::new(
        "gpumem_device_ecc_errors_total",
        Kind::Counter,
        "",
        "ECC errors by severity (corrected, uncorrected) and NVML counter (volatile: since the driver loaded; aggregate: GPU lifetime).",
        |d, e| {
            let Some(ecc) = health(d).and_then(|h| h.ecc) else {
                return;
            };
            for (severity, c) in [("corrected", ecc.corrected), ("uncorrected", ecc.uncorrected)] {
                for (counter, v) in [("volatile", c.volatile), ("aggregate", c.aggregate)] {
                    if let Some(v) = v {
                        e(
                            &[("uuid", &d.uuid), ("severity", severity), ("counter", counter)],
                            v.into(),
                        );
                    }
                }
            }
        },
    ),
    Family::new(
        "gpumem_device_remapped_rows",
        Kind::Gauge,
        "",
        "Memory rows remapped to spare rows, by the severity of the errors that caused it (correctable, uncorrectable).",
        |d, e| {
            let Some(r) = health(d).and_then(|h| h.remap) else {
                return;
            };
            e(&[("uuid", &d.uuid), ("severity", "correctable")], r.correctable.into());
            e(
                &[("uuid", &d.uuid), ("severity", "uncorrectable")],
                r.uncorrectable.into(),
            );
        },
    ),
    Family::new(
        "gpumem_device_row_remap_pending",
        Kind::Gauge,
        "",
        "1 if a row remap waits for a GPU reset before the spare row is used.",
        |d, e| by_uuid(d, health(d).and_then(|h| h.remap).map(|r| r.pending), e),
    ),
    Family::new(
        "gpumem_device_row_remap_failed",
        Kind::Gauge,
        "",
        "1 if a row remap failed (no spare row left): the GPU should be replaced.",
        |d, e| by_uuid(d, health(d).and_then(|h| h.remap).map(|r| r.failed), e),
    ),
    Family::new(
        "gpumem_device_retired_pages",
        Kind::Gauge,
        "",
        "Retired memory pages by cause (single_bit_ecc: repeated single-bit errors, double_bit_ecc); GPUs before Ampere.",
        |d, e| {
            let Some(r) = health(d).and_then(|h| h.retired) else {
                return;
            };
            for (cause, v) in [("single_bit_ecc", r.single_bit), ("double_bit_ecc", r.double_bit)] {
                if let Some(v) = v {
                    e(&[("uuid", &d.uuid), ("cause", cause)], v.into());
                }
            }
        },
    ),
    Family::new(
        "gpumem_device_retired_pages_pending",
        Kind::Gauge,
        "",
        "1 if pages wait for a reboot (or GPU reset) to be retired.",
        |d, e| by_uuid(d, health(d).and_then(|h| h.retired).and_then(|r| r.pending), e),
    ),
    Family::new(
        "gpumem_device_memory_temperature_celsius",
        Kind::Gauge,
        "celsius",
        "Memory (HBM) temperature in degrees Celsius.",
        |d, e| {
            let t = health(d).and_then(|h| h.memory_temperature_celsius);
            by_uuid(d, t.map(u64::from), e);
        },
    ),
    Family::new(
        "gpumem_device_xid_errors_total",
        Kind::Counter,
        "",
        "Critical Xid events by code since gpumemd started; the memory-related codes are always present (0 until seen).",
        |d, e| {
            let Some(h) = health(d).filter(|h| h.xid_watched) else {
                return;
            };
            let memory = MEMORY_XIDS.iter().map(|(c, _, _)| *c);
            let mut codes: Vec<u64> = memory.chain(h.xid_counts.keys().copied()).collect();
            codes.sort_unstable();
            codes.dedup();
            for code in codes {
                let n = h.xid_counts.get(&code).copied().unwrap_or(0);
                let xid = Digits::new(code);
                e(&[("uuid", &d.uuid), ("xid", xid.as_str())], n.into());
            }
        },
    ),
];
