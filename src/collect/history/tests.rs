//! Unit tests of `history.rs`: alignment, bounds, filters and what is not recorded.

use super::*;
use crate::data::snapshot::{Device, Holders, Memory, Process, Who};

impl History {
    /// Every point of one device (all when `None`) after `since`.
    fn view(&self, gpu: Option<&str>, since: Option<f64>) -> HistoryView {
        self.view_with(&ViewOptions {
            gpu,
            since,
            points: None,
            processes: true,
        })
    }

    /// Series and points held now, to check the bounds.
    fn sizes(&self) -> (usize, usize, usize) {
        let processes = self.devices.values().map(|s| s.processes.len()).sum();
        (self.times.len(), self.devices.len(), processes)
    }
}

fn proc(pid: u32, mib: u64) -> Process {
    Process {
        pid,
        used_bytes: Some(mib << 20),
        who: Who::shared(format!("p{pid}"), "", None),
        start_time: Some(1000.0 + f64::from(pid)),
        ..Process::default()
    }
}

fn snap(seq: u64, devices: Vec<(&str, u64, Vec<Process>)>) -> Snapshot {
    Snapshot {
        seq,
        timestamp: 100.0 + seq as f64,
        devices: devices
            .into_iter()
            .map(|(uuid, used_mib, processes)| Device {
                uuid: uuid.into(),
                up: true,
                memory: Some(Memory {
                    total_bytes: 80 << 30,
                    used_bytes: used_mib << 20,
                    free_bytes: 0,
                    reserved_bytes: None,
                }),
                holders: Some(Holders {
                    live: used_mib << 20,
                    ..Holders::default()
                }),
                processes,
                ..Device::default()
            })
            .collect(),
        ..Snapshot::default()
    }
}

#[test]
fn series_stay_aligned_and_bounded() {
    let mut h = History::new(3, 10);
    for seq in 1..=5 {
        h.record(&snap(seq, vec![("GPU-a", seq * 10, vec![proc(7, seq)])]));
    }
    let v = h.view(None, None);
    assert_eq!(v.timestamps, vec![103.0, 104.0, 105.0]);
    assert_eq!(
        v.devices[0].used_bytes,
        vec![Some(30 << 20), Some(40 << 20), Some(50 << 20)]
    );
    assert_eq!(v.devices[0].held_bytes["live"], v.devices[0].used_bytes);
    assert_eq!(v.devices[0].held_bytes["zombie"], vec![Some(0); 3]);
    assert_eq!(
        v.processes[0].used_bytes,
        vec![Some(3 << 20), Some(4 << 20), Some(5 << 20)]
    );
    assert_eq!(h.sizes(), (3, 1, 1));
}

#[test]
fn series_grow_to_the_window_and_no_further() {
    let mut h = History::new(900, 10);
    for seq in 1..=1000 {
        h.record(&snap(seq, vec![("GPU-a", seq, vec![proc(7, seq), proc(8, 5)])]));
    }
    assert_eq!(h.view(None, None).timestamps.len(), 900);
    let s = &h.devices["GPU-a"];
    assert!(s.holders.iter().all(|p| p.len() == 900));
    assert!(
        h.devices
            .values()
            .flat_map(|s| s.processes.values())
            .all(|p| p.used.len() == 900)
    );
    assert_eq!(h.view(None, None).processes[1].used_bytes, vec![Some(5 << 20); 900]);
}

#[test]
fn a_series_that_starts_late_or_leaves_is_null_there_and_dropped_after_the_window() {
    let mut h = History::new(3, 10);
    h.record(&snap(1, vec![("GPU-a", 1, vec![])]));
    h.record(&snap(2, vec![("GPU-a", 2, vec![proc(7, 5)])]));
    h.record(&snap(3, vec![("GPU-a", 3, vec![])]));
    let v = h.view(Some("GPU-a"), None);
    assert_eq!(v.processes[0].used_bytes, vec![None, Some(5 << 20), None]);
    h.record(&snap(4, vec![("GPU-a", 4, vec![])]));
    h.record(&snap(5, vec![("GPU-a", 5, vec![])]));
    assert_eq!(h.sizes(), (3, 1, 0), "gone for a whole window: dropped");
    h.record(&snap(6, vec![]));
    h.record(&snap(7, vec![]));
    h.record(&snap(8, vec![]));
    assert_eq!(h.sizes(), (3, 0, 0), "a device gone for a whole window is dropped");
}

#[test]
fn since_and_gpu_filter_the_view() {
    let mut h = History::new(10, 10);
    for seq in 1..=4 {
        h.record(&snap(
            seq,
            vec![("GPU-a", seq, vec![proc(1, 1)]), ("GPU-b", seq, vec![proc(2, 9)])],
        ));
    }
    let v = h.view(Some("GPU-b"), Some(102.0));
    assert_eq!(v.timestamps, vec![103.0, 104.0]);
    assert_eq!(v.devices.len(), 1);
    assert_eq!(v.devices[0].uuid, "GPU-b");
    assert_eq!(v.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![2]);
    let all = h.view(None, None);
    assert_eq!(
        all.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![2, 1],
        "largest first"
    );
}

#[test]
fn placeholders_stale_snapshots_and_repeats_add_nothing() {
    let mut h = History::new(10, 10);
    h.record(&Snapshot::default());
    h.record(&snap(1, vec![("GPU-a", 1, vec![])]));
    h.record(&snap(1, vec![("GPU-a", 1, vec![])]));
    let mut stale = snap(2, vec![("GPU-a", 1, vec![])]);
    stale.stale = true;
    h.record(&stale);
    assert_eq!(h.sizes().0, 1);
}

#[test]
fn only_the_top_n_of_a_device_and_at_most_the_cap_get_series() {
    let mut h = History::new(5, 2);
    h.record(&snap(1, vec![("GPU-a", 1, vec![proc(1, 9), proc(2, 8), proc(3, 7)])]));
    assert_eq!(h.sizes().2, 2);
    let mut big = History::new(2, usize::MAX);
    let many: Vec<Process> = (0..(MAX_PROCESS_SERIES as u32 + 10)).map(|p| proc(p, 1)).collect();
    big.record(&snap(1, vec![("GPU-a", 1, many)]));
    assert_eq!(big.sizes().2, MAX_PROCESS_SERIES);
}

#[test]
fn points_for_a_span() {
    use std::time::Duration;
    assert_eq!(
        History::points_for(Duration::from_secs(900), Duration::from_secs(1)),
        900
    );
    assert_eq!(History::points_for(Duration::from_secs(10), Duration::from_secs(3)), 4);
    assert_eq!(History::points_for(Duration::ZERO, Duration::from_secs(1)), 1);
}

#[test]
fn points_thin_the_view_evenly_keeping_the_latest() {
    let mut h = History::new(100, 10);
    for seq in 1..=10 {
        h.record(&snap(seq, vec![("GPU-a", seq, vec![proc(1, seq)])]));
    }
    let at = |points: Option<usize>, since: Option<f64>| {
        h.view_with(&ViewOptions {
            points,
            since,
            processes: false,
            ..ViewOptions::default()
        })
    };
    // (points, since) -> timestamps.
    let cases: Vec<(Option<usize>, Option<f64>, Vec<f64>)> = vec![
        (None, None, (101..=110).map(f64::from).collect()),
        (Some(3), None, vec![102.0, 106.0, 110.0]),
        (Some(5), None, vec![102.0, 104.0, 106.0, 108.0, 110.0]),
        (Some(20), None, (101..=110).map(f64::from).collect()),
        (Some(2), Some(107.0), vec![108.0, 110.0]),
        (Some(1), Some(107.0), vec![110.0]),
        (Some(0), None, vec![110.0]),
        (Some(3), Some(110.0), vec![]),
        // 10 points in 7: a step of 2 reaches past the first point.
        (Some(7), None, vec![102.0, 104.0, 106.0, 108.0, 110.0]),
    ];
    for (points, since, want) in cases {
        let v = at(points, since);
        assert_eq!(v.timestamps, want, "points {points:?} since {since:?}");
        let used: Vec<Option<u64>> = want.iter().map(|t| Some(((*t - 100.0) as u64) << 20)).collect();
        assert_eq!(v.devices[0].used_bytes, used, "values follow their timestamps");
        assert!(v.processes.is_empty(), "processes = false");
    }
    let with = h.view_with(&ViewOptions {
        points: Some(2),
        processes: true,
        ..ViewOptions::default()
    });
    assert_eq!(with.processes[0].used_bytes, vec![Some(5 << 20), Some(10 << 20)]);
}
