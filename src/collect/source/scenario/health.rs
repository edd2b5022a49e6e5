//! A simulated GPU's memory health (`[gpu.health]` in a scenario): ECC
//! errors that rise with scenario time, a row remap that becomes pending,
//! memory temperature and Xid events at given times. Parsing and the
//! reading at one instant; no clocks (time comes from the caller).

use serde::Deserialize;

use super::Secs;
use crate::data::snapshot::health::{Ecc, EccCounts, Health, Remap};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimHealth {
    /// ECC on (the counters are only read with ECC on).
    pub ecc: bool,
    /// Corrected errors per minute of scenario time.
    pub corrected_per_minute: f64,
    /// Uncorrected errors from `uncorrected_after` on.
    pub uncorrected: u64,
    pub uncorrected_after: Secs,
    /// A row remap waits for a reset from this scenario time on.
    pub remap_pending_after: Option<Secs>,
    pub remap_failed: bool,
    pub memory_temp: Option<u32>,
    /// Xid events: `{ at = "20s", code = 63 }`.
    pub xid: Vec<SimXid>,
}

impl Default for SimHealth {
    fn default() -> Self {
        Self {
            ecc: true,
            corrected_per_minute: 0.0,
            uncorrected: 0,
            uncorrected_after: Secs(0.0),
            remap_pending_after: None,
            remap_failed: false,
            memory_temp: None,
            xid: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimXid {
    pub at: Secs,
    pub code: u64,
}

impl SimHealth {
    /// The health at scenario time `t` and the Xid codes of events in
    /// (`prev`, `t`]: those that arrived since the previous poll.
    pub fn at(&self, t: f64, prev: f64) -> (Health, Vec<u64>) {
        let corrected = (self.corrected_per_minute.max(0.0) * t / 60.0) as u64;
        let uncorrected = if t >= self.uncorrected_after.0 {
            self.uncorrected
        } else {
            0
        };
        // The counters are only read with ECC on.
        let counts = |n: u64| EccCounts {
            volatile: self.ecc.then_some(n),
            aggregate: self.ecc.then_some(n),
        };
        let ecc = Ecc {
            enabled: self.ecc,
            pending_enabled: self.ecc,
            corrected: counts(corrected),
            uncorrected: counts(uncorrected),
        };
        let pending = self.remap_pending_after.is_some_and(|a| t >= a.0);
        let health = Health {
            ecc: Some(ecc),
            remap: Some(Remap {
                correctable: 0,
                uncorrectable: u64::from(pending),
                pending,
                failed: self.remap_failed,
            }),
            memory_temperature_celsius: self.memory_temp,
            xid_watched: true,
            ..Health::default()
        };
        let events = self
            .xid
            .iter()
            .filter(|x| x.at.0 > prev && x.at.0 <= t)
            .map(|x| x.code)
            .collect();
        (health, events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_rise_and_events_arrive_once() {
        let h = SimHealth {
            corrected_per_minute: 6.0,
            remap_pending_after: Some(Secs(20.0)),
            xid: vec![SimXid {
                at: Secs(20.0),
                code: 63,
            }],
            ..SimHealth::default()
        };
        let (early, ev) = h.at(10.0, 9.0);
        assert_eq!(early.ecc.and_then(|e| e.corrected.volatile), Some(1));
        assert_eq!(early.remap.map(|r| r.pending), Some(false));
        assert!(ev.is_empty());
        let (late, ev) = h.at(20.0, 19.0);
        assert_eq!(late.ecc.and_then(|e| e.corrected.volatile), Some(2));
        assert_eq!(late.remap.map(|r| r.pending), Some(true));
        assert_eq!(ev, [63]);
        assert!(h.at(21.0, 20.0).1.is_empty());
    }
}
