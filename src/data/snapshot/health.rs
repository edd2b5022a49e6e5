//! Memory health as plain data: ECC mode and counters, row remapping,
//! retired pages, memory temperature and Xid events, per device; the
//! one-line summary the table and status page show; which Xid codes are
//! memory-related and what each asks of an operator. Part of the snapshot
//! leaf: it must not use anything else of the crate, talk to hardware or
//! name metric types. A value the driver did not give is `None`, never 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// ECC error counts of one severity (NVML's corrected / uncorrected).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EccCounts {
    /// Since the last driver load (NVML's volatile counter).
    pub volatile: Option<u64>,
    /// Over the GPU's lifetime (NVML's aggregate counter, kept in the inforom).
    pub aggregate: Option<u64>,
}

/// ECC state: the mode and the error counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ecc {
    /// Whether ECC is on now.
    pub enabled: bool,
    /// Whether ECC will be on after the next reset.
    pub pending_enabled: bool,
    pub corrected: EccCounts,
    pub uncorrected: EccCounts,
}

/// Row remapping (Ampere and newer): spare rows swapped in for bad ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remap {
    /// Rows remapped after correctable errors.
    pub correctable: u64,
    /// Rows remapped after uncorrectable errors.
    pub uncorrectable: u64,
    /// A remap waits for a GPU reset before the spare row is used.
    pub pending: bool,
    /// A remap failed: no spare row left; the GPU should be replaced.
    pub failed: bool,
}

/// Retired pages (before Ampere; Hopper answers NOT_SUPPORTED).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retired {
    /// Pages retired after multiple single-bit errors.
    pub single_bit: Option<u64>,
    /// Pages retired after a double-bit error.
    pub double_bit: Option<u64>,
    /// Pages wait for a reboot to be retired.
    pub pending: Option<bool>,
}

/// One device's memory health, as read this poll. Each part is `None` when
/// the GPU does not support it (or it could not be read this time).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
// Fields left out when empty read back as empty (`snapshot --url`).
#[serde(default)]
pub struct Health {
    pub ecc: Option<Ecc>,
    pub remap: Option<Remap>,
    pub retired: Option<Retired>,
    pub memory_temperature_celsius: Option<u32>,
    /// Xid events per code since the daemon started (or the device appeared).
    pub xid_counts: BTreeMap<u64, u64>,
    /// The most recent Xid events, oldest first (`[health] recent_events`
    /// of them, of any code).
    pub xid_recent: Vec<XidEvent>,
    /// The memory-related Xid events of the last `MEMORY_XID_WINDOW`,
    /// oldest first, kept apart from `xid_recent` so that other codes or a
    /// small `recent_events` cannot push them out: what the `memory_xid`
    /// rule kind counts. Daemon-side only (not in the JSON).
    #[serde(skip)]
    pub memory_xids: Vec<XidEvent>,
    /// Whether Xid events are being received for this device at all;
    /// without it `xid_counts` is unknown, not zero.
    pub xid_watched: bool,
    /// `find_problems()` as of this poll, for the JSON API and status page.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl Health {
    /// What an operator should look at, as short phrases; empty when all is
    /// well. Correctable errors alone are listed too: they are the early sign.
    pub fn find_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = &self.remap {
            if r.failed {
                out.push("row remap FAILED (replace GPU)".to_string());
            }
            if r.pending {
                out.push("row remap pending (reset GPU)".to_string());
            }
        }
        if let Some(e) = &self.ecc {
            let unc = e.uncorrected.volatile.unwrap_or(0);
            let cor = e.corrected.volatile.unwrap_or(0);
            if unc > 0 {
                out.push(count(unc, "uncorrected ECC error"));
            }
            if cor > 0 {
                out.push(count(cor, "corrected ECC error"));
            }
        }
        if self.retired.and_then(|r| r.pending) == Some(true) {
            out.push("pages pending retirement (reboot)".to_string());
        }
        let memory_xids: u64 = self
            .xid_counts
            .iter()
            .filter(|(code, _)| memory_related(**code))
            .map(|(_, n)| *n)
            .fold(0u64, u64::saturating_add);
        if memory_xids > 0 {
            let last = self.xid_recent.iter().rev().find(|e| memory_related(e.xid));
            let last = last.map(|e| format!(" (last: Xid {})", e.xid)).unwrap_or_default();
            out.push(format!("{}{last}", count(memory_xids, "memory Xid event")));
        }
        out
    }

    /// The problems as one line, `None` when there are none.
    pub fn summary(&self) -> Option<String> {
        let p = self.find_problems();
        (!p.is_empty()).then(|| p.join("; "))
    }
}

/// One Xid event: its code and when it was read (Unix seconds, at poll
/// resolution: NVML gives no time of its own).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct XidEvent {
    pub xid: u64,
    pub time: f64,
}

/// How far back the `memory_xid` rule kind counts memory-related Xid
/// events; the shipped Prometheus rule uses the same window
/// (`increase(...[15m])`).
pub const MEMORY_XID_WINDOW: f64 = 15.0 * 60.0;

/// The memory-related Xid codes: (code, meaning, what to do). The same text
/// is in docs/runbook.md; `memory_related` is what the `memory_xid` rule kind
/// and the status summary count.
pub const MEMORY_XIDS: &[(u64, &str, &str)] = &[
    (
        31,
        "GPU memory page fault (MMU fault)",
        "usually the application (illegal address); if several applications hit it, drain and run diagnostics",
    ),
    (
        48,
        "double-bit (uncorrectable) ECC error",
        "the application on the GPU is lost; drain, reset the GPU; replace if it recurs",
    ),
    (
        63,
        "page retirement or row remapping recorded",
        "drain and reset the GPU so the retirement or remap takes effect",
    ),
    (
        64,
        "page retirement or row remapping failed",
        "no spare left: drain and replace the GPU",
    ),
    (
        92,
        "high single-bit ECC error rate",
        "watch the corrected-error rate; schedule diagnostics",
    ),
    (
        94,
        "contained ECC error",
        "only the affected application was stopped; reset the GPU when it is idle",
    ),
    (
        95,
        "uncontained ECC error",
        "every application on the GPU is affected: drain the node and reset the GPU",
    ),
];

/// Whether `xid` is one of `MEMORY_XIDS`.
pub fn memory_related(xid: u64) -> bool {
    MEMORY_XIDS.iter().any(|(c, _, _)| *c == xid)
}

/// "1 thing", "3 things".
fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_healthy_or_unknown_device_has_no_summary() {
        assert_eq!(Health::default().summary(), None);
        let ok = Health {
            ecc: Some(Ecc {
                enabled: true,
                ..Ecc::default()
            }),
            remap: Some(Remap::default()),
            ..Health::default()
        };
        assert_eq!(ok.summary(), None);
    }

    #[test]
    fn problems_name_what_to_do() {
        let h = Health {
            remap: Some(Remap {
                pending: true,
                failed: true,
                ..Remap::default()
            }),
            ecc: Some(Ecc {
                corrected: EccCounts {
                    volatile: Some(3),
                    aggregate: Some(9),
                },
                ..Ecc::default()
            }),
            xid_counts: [(48, 2), (13, 5)].into_iter().collect(),
            xid_recent: vec![XidEvent { xid: 48, time: 1.0 }, XidEvent { xid: 13, time: 2.0 }],
            ..Health::default()
        };
        assert_eq!(
            h.find_problems(),
            [
                "row remap FAILED (replace GPU)",
                "row remap pending (reset GPU)",
                "3 corrected ECC errors",
                "2 memory Xid events (last: Xid 48)",
            ]
        );
    }

    #[test]
    fn memory_codes() {
        for code in [31, 48, 63, 64, 92, 94, 95] {
            assert!(memory_related(code), "{code}");
        }
        assert!(!memory_related(13) && !memory_related(79));
    }
}
