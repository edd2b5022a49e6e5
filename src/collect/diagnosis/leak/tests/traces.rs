//! Leak detector tests on real traces: the committed H200 PyTorch CSVs
//! replayed as the daemon would see them, one leaking and several not.

use super::*;

/// `(t, pid, used_bytes)` rows of one trace.
fn read_trace(name: &str) -> Vec<(f64, u32, u64)> {
    let path = format!("{TRACE_DIR}{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 3, "{path}: bad row {l:?}");
            let parse = |s: &str| s.trim().parse::<f64>().unwrap_or_else(|e| panic!("{path}: {l:?}: {e}"));
            (parse(f[0]), parse(f[1]) as u32, parse(f[2]) as u64)
        })
        .collect()
}

/// What the replay of one (trace, pid) saw.
#[derive(Debug, Clone, Copy)]
struct TraceOutcome {
    trace: usize,
    pid: u32,
    /// Times of its first and last samples.
    start: f64,
    end: f64,
    first_suspected: Option<f64>,
    growth_at_first_suspected: Option<f64>,
    last: Option<Trend>,
}

impl TraceOutcome {
    fn new(trace: usize, pid: u32, t: f64) -> Self {
        let (first_suspected, growth_at_first_suspected, last) = (None, None, None);
        let (start, end) = (t, t);
        Self {
            trace,
            pid,
            start,
            end,
            first_suspected,
            growth_at_first_suspected,
            last,
        }
    }
}

/// Replays traces as the daemon would: one snapshot per distinct `t` (the
/// files share the poll times of `device.csv`), then `retain` of the pids in
/// it. Returns the outcomes and the keys still tracked at the end.
fn replay_traces(names: &[&str], window: f64) -> (Vec<TraceOutcome>, Vec<(usize, u32)>) {
    let mut rows: Vec<(f64, usize, u32, u64)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let trace = read_trace(name);
        rows.extend(trace.into_iter().map(|(t, pid, b)| (t, i, pid, b)));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut tracker = LeakTracker::new(LeakConfig::with_window(window));
    let mut seen: Vec<TraceOutcome> = Vec::new();
    for snapshot in rows.chunk_by(|a, b| a.0 == b.0) {
        for &(t, trace, pid, bytes) in snapshot {
            tracker.observe(&(trace, pid), t, bytes);
            let pos = seen.iter().position(|o| (o.trace, o.pid) == (trace, pid));
            let pos = pos.unwrap_or_else(|| {
                seen.push(TraceOutcome::new(trace, pid, t));
                seen.len() - 1
            });
            let o = &mut seen[pos];
            o.end = t;
            if let Some(trend) = tracker.assess(&(trace, pid)) {
                if trend.suspected && o.first_suspected.is_none() {
                    o.first_suspected = Some(t);
                    o.growth_at_first_suspected = Some(trend.growth_bytes_per_second);
                }
                o.last = Some(trend);
            }
        }
        tracker.retain(|k| snapshot.iter().any(|r| (r.1, r.2) == *k));
    }
    let mut left: Vec<(usize, u32)> = tracker.series.keys().copied().collect();
    left.sort_unstable();
    (seen, left)
}

#[test]
fn real_leak_trace_is_suspected_within_the_window_at_about_64_mib_per_s() {
    let window = 30.0;
    let (res, _) = replay_traces(&["leak.csv"], window);
    assert_eq!(res.len(), 1, "one pid in leak.csv");
    let o = res[0];
    let detected = o.first_suspected.expect("leak.csv must be suspected");
    let delay = detected - o.start;
    let at_detection = o.growth_at_first_suspected.unwrap_or(0.0) / MIB;
    let at_end = o.last.expect("assessed").growth_bytes_per_second / MIB;
    eprintln!(
        "leak.csv: first sample {:.1}s, suspected at {detected:.1}s (delay {delay:.1}s, window {window}s), \
         growth {at_detection:.1} MiB/s then, {at_end:.1} MiB/s at the end",
        o.start
    );
    assert!(delay <= window, "delay {delay}");
    for g in [at_detection, at_end] {
        assert!((g - 64.0).abs() <= 0.2 * 64.0, "growth {g} MiB/s");
    }
}

#[test]
fn real_non_leaking_traces_are_never_suspected() {
    let names = ["train.csv", "sawtooth.csv", "varlen.csv", "orphan.csv", "exit.csv"];
    for name in names {
        for o in replay_traces(&[name], 30.0).0 {
            let g = o.last.map(|t| t.growth_bytes_per_second / MIB);
            eprintln!(
                "{name} pid {}: growth {g:?} MiB/s, suspected at {:?}",
                o.pid, o.first_suspected
            );
            assert_eq!(o.first_suspected, None, "{name} pid {} suspected", o.pid);
        }
    }
}

#[test]
fn real_traces_replayed_together_flag_only_the_leak() {
    let names = [
        "leak.csv",
        "train.csv",
        "sawtooth.csv",
        "varlen.csv",
        "orphan.csv",
        "exit.csv",
    ];
    let (outcomes, left) = replay_traces(&names, 30.0);
    for o in &outcomes {
        let name = names[o.trace];
        assert_eq!(o.first_suspected.is_some(), o.trace == 0, "{name} pid {}", o.pid);
    }
    // Only the pids of the final snapshot are still tracked: exit.csv's
    // process (gone at ~24 s) and leak.csv's (gone at ~89 s) are dropped.
    let end = outcomes.iter().map(|o| o.end).fold(f64::MIN, f64::max);
    let mut live: Vec<(usize, u32)> = outcomes
        .iter()
        .filter(|o| o.end == end)
        .map(|o| (o.trace, o.pid))
        .collect();
    live.sort_unstable();
    assert_eq!(left, live);
    assert!(!left.iter().any(|k| k.0 == 5 || k.0 == 0), "gone pids still tracked");
}
