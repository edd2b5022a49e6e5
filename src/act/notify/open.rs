//! The alerts handed to the notifiers as firing and not yet as resolved,
//! kept in `<state dir>/outbox/open.json`. The rule engine starts empty after
//! a restart, so an alert that fired before a stop and cleared during it
//! would never be resolved at a webhook; with this set, the first evaluation
//! after start resolves every open alert that is not firing (one that is
//! still pending fires again later). It must not deliver anything itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::outbox::write_atomic;
use super::{AlertPayload, AlertStatus};

pub(crate) struct OpenAlerts {
    path: PathBuf,
    /// By fingerprint.
    alerts: BTreeMap<String, AlertPayload>,
    /// Whether the first evaluation of this run has been seen.
    reconciled: bool,
}

impl OpenAlerts {
    /// Loads the set a previous run left; a missing file is an empty set, an
    /// unreadable one is logged and treated as empty.
    pub fn load(outbox_root: &Path) -> Self {
        let path = outbox_root.join("open.json");
        let alerts = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Vec<AlertPayload>>(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), error = %e, "open alerts of the previous run unreadable; none resolved");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        Self {
            alerts: alerts.into_iter().map(|a| (a.fingerprint(), a)).collect(),
            path,
            reconciled: false,
        }
    }

    /// Books one evaluation (`changed`: its transitions, `firing`: the firing
    /// set) and returns the resolutions to add to `changed`: on the first
    /// evaluation of a run, every alert left open that is not firing now.
    ///
    /// Only what fired is booked (and saved) here, before the notifiers
    /// queue it: a crash after this leaves an alert open that may never
    /// have been sent, which a restart resolves harmlessly. What resolved
    /// is booked by [`Self::settle`] once the notifiers have queued it, so
    /// a crash in between cannot lose the resolution.
    pub fn track(&mut self, changed: &[AlertPayload], firing: &[AlertPayload], now: f64) -> Vec<AlertPayload> {
        let mut extra = Vec::new();
        if !self.reconciled {
            self.reconciled = true;
            let live: BTreeSet<String> = firing
                .iter()
                .chain(changed)
                .filter(|a| a.status == AlertStatus::Firing)
                .map(AlertPayload::fingerprint)
                .collect();
            for (fp, a) in &self.alerts {
                if !live.contains(fp) {
                    let mut resolved = a.clone();
                    resolved.status = AlertStatus::Resolved;
                    resolved.ends_at = Some(now);
                    extra.push(resolved);
                }
            }
        }
        let mut dirty = false;
        for a in changed.iter().filter(|a| a.status == AlertStatus::Firing) {
            dirty |= self.alerts.insert(a.fingerprint(), a.clone()).is_none();
        }
        if dirty {
            self.save();
        }
        extra
    }

    /// Books the resolutions in `delivered` (the evaluation's transitions
    /// with `track`'s additions), after the notifiers queued them.
    pub fn settle(&mut self, delivered: &[AlertPayload]) {
        let mut dirty = false;
        for a in delivered.iter().filter(|a| a.status == AlertStatus::Resolved) {
            dirty |= self.alerts.remove(&a.fingerprint()).is_some();
        }
        if dirty {
            self.save();
        }
    }

    fn save(&self) {
        let list: Vec<&AlertPayload> = self.alerts.values().collect();
        let written = serde_json::to_vec(&list).map_err(std::io::Error::other).and_then(|b| {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            write_atomic(&self.path, &b)
        });
        if let Err(e) = written {
            // Kept in memory and written with the next change; the outbox
            // counts and reports the disk's trouble.
            tracing::debug!(file = %self.path.display(), error = %e, "open alerts not saved");
        }
    }
}
