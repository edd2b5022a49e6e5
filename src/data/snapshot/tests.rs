//! Tests of the snapshot types: a poll becomes a snapshot one way, a
//! `Process` stays within its size, holders by class.

use super::*;

#[test]
fn a_poll_becomes_a_snapshot_one_way() {
    let dev = Device {
        uuid: "GPU-1".into(),
        up: true,
        ..Device::default()
    };
    let at = |nvml| PollOutcome {
        seq: 7,
        timestamp: 100.0,
        monotonic: 3.0,
        nvml,
    };
    let up = Snapshot::of_poll(at(Ok((None, vec![dev.clone()]))), None, PollStats::default());
    assert!(up.nvml_up && up.has_polled() && !up.stale);
    assert_eq!((up.seq, up.devices.len(), up.nvml_error), (7, 1, None));
    let down = Snapshot::of_poll(at(Err("gone".into())), Some("demo".into()), PollStats::default());
    assert!(!down.nvml_up && down.devices.is_empty());
    assert_eq!(down.nvml_error.as_deref(), Some("gone"));
    assert_eq!(down.demo.as_deref(), Some("demo"));
    assert!(!Snapshot::placeholder(None).has_polled());
}

#[test]
fn holders_by_class() {
    let h = Holders {
        live: 1,
        zombie: 2,
        exited: 3,
        unattributed: 4,
    };
    let got: Vec<u64> = Holder::ALL.iter().map(|&c| h.get(c)).collect();
    assert_eq!(got, [1, 2, 3, 4]);
}
