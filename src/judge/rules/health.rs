//! The memory-health rule kinds: uncorrected ECC errors since the driver
//! loaded, a row remap pending, a row remap failure, and memory-related Xid
//! events within the last `MEMORY_XID_WINDOW`. Gives each GPU's instance
//! (value, whether a state holds, labels); it must not keep state or decide
//! transitions (that is `eval`). A GPU that reports no such health part
//! has no instance, so an alert about it resolves rather than reads 0.

use super::instances::{Instance, device_matches};
use super::subject::Subject;
use super::{Rule, RuleKind};
pub use crate::data::snapshot::health::MEMORY_XID_WINDOW;
use crate::data::snapshot::{Device, Snapshot};

/// Hands `f` the instances of a health rule: one per matching GPU that
/// reports the part the rule is about.
pub(super) fn for_each<'a>(rule: &Rule, snap: &'a Snapshot, f: &mut dyn FnMut(Instance<'a>)) {
    for d in snap.devices.iter().filter(|d| device_matches(&rule.cfg.matchers, d)) {
        if let Some(i) = instance(rule.cfg.kind, d, snap.timestamp) {
            f(i);
        }
    }
}

/// The instance of a health kind for one GPU at Unix time `now`.
fn instance(kind: RuleKind, d: &Device, now: f64) -> Option<Instance<'_>> {
    let h = d.health.as_ref().filter(|_| d.up)?;
    let mut xid = None;
    let (value, holds) = match kind {
        RuleKind::DeviceEccUncorrected => (h.ecc?.uncorrected.volatile? as f64, None),
        RuleKind::DeviceRowRemapPending => {
            let p = h.remap?.pending;
            (f64::from(u8::from(p)), Some(p))
        }
        RuleKind::DeviceRowRemapFailed => {
            let f = h.remap?.failed;
            (f64::from(u8::from(f)), Some(f))
        }
        RuleKind::DeviceMemoryXid => {
            if !h.xid_watched {
                return None;
            }
            // `memory_xids`, not `xid_recent`: the recent list is bounded
            // by `recent_events` over every code, so other Xids would push
            // a memory Xid out of it before the window ends.
            let mut recent = h.memory_xids.iter().filter(|e| now - e.time <= MEMORY_XID_WINDOW);
            xid = recent.next_back().map(|e| e.xid);
            let n = recent.count() + usize::from(xid.is_some());
            (n as f64, None)
        }
        _ => return None,
    };
    Some(Instance::new(Subject::Device { d, holder: None, xid }, value, holds))
}
