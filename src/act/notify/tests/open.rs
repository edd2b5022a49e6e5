//! The open-alert set across a crash: a resolution is removed from disk only
//! after the notifiers have queued it, so a kill in between sends it again
//! after the restart instead of losing it.

use super::alert;
use crate::act::notify::AlertStatus;
use crate::act::notify::open::OpenAlerts;

#[test]
fn a_resolution_stays_open_on_disk_until_the_notifiers_have_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let firing = alert("GpuMemoryHigh", AlertStatus::Firing);
    let resolved = alert("GpuMemoryHigh", AlertStatus::Resolved);
    let mut run1 = OpenAlerts::load(dir.path());
    assert!(
        run1.track(std::slice::from_ref(&firing), std::slice::from_ref(&firing), 1.0)
            .is_empty()
    );
    // The alert resolves; the daemon dies before the notifiers queue it
    // (no settle).
    run1.track(std::slice::from_ref(&resolved), &[], 2.0);
    let mut run2 = OpenAlerts::load(dir.path());
    let again = run2.track(&[], &[], 3.0);
    assert_eq!(again.len(), 1, "the restart resolves it: {again:?}");
    assert_eq!(again[0].status, AlertStatus::Resolved);
    // Once queued (settled), it is gone for good.
    run2.settle(&again);
    let mut run3 = OpenAlerts::load(dir.path());
    assert!(run3.track(&[], &[], 4.0).is_empty(), "nothing left open");
}
