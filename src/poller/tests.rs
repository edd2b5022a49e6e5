//! Unit tests of the poller's tick grid.
use super::*;

/// On time (within `LATE`) the next tick is a period on; late, it is
/// the next grid point after now, with the missed ones skipped.
#[test]
fn a_late_tick_goes_back_onto_the_grid() {
    let t0 = Instant::now();
    let period = Duration::from_secs(1);
    let mut t = Ticks { next: t0, period };
    t.fire(t0 + Duration::from_millis(1));
    assert_eq!(t.next, t0 + period);
    t.fire(t0 + Duration::from_millis(3500));
    assert_eq!(t.next, t0 + 4 * period);
    t.fire(t0 + 4 * period + Duration::from_millis(4));
    assert_eq!(t.next, t0 + 5 * period);
}
