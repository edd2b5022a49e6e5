//! The leak verdict of processes that report their allocator (gpumemd-torch).
//!
//! Owns: how a second leak tracker (the pipeline keeps it) is fed, with
//! `allocated` (bytes in live tensors) instead of NVML's figure, and the rule that for such processes
//! it alone decides `leak_suspected`: tensors that grow are a leak, a
//! cache that grows is not. `AllocatorFigures::growth` says which one NVML's
//! growth was ("tensors" when flagged; "cache" when NVML's own trend called
//! a leak that the tensors do not show). Same method, window and threshold
//! as `leak.rs` (docs/leak-detection.md).
//!
//! A process that does not report but that the driver-call ledger books
//! is judged the same way by its driver allocations
//! (`DriverFigures::growth`: "allocations" or "other"): for a program
//! without a caching allocator they are its own; for one with, its cache.
//!
//! Must not: read clocks or anything but the process it is given; processes
//! without figures keep NVML's verdict untouched.

use super::ProcKey;
use super::leak::LeakTracker;
use crate::data::snapshot::Process;

/// Judges `p` by `tracker`'s trend of its tensors when it reports them. Until
/// that trend has a verdict (a window of history), nothing is suspected:
/// NVML's figure of such a process includes the cache, which is what
/// grows in a warm-up.
pub fn judge(tracker: &mut LeakTracker<ProcKey>, key: &ProcKey, p: &mut Process, now: f64) {
    // The figure judged, where its verdict goes, and its names for a
    // growth it shows and for one only NVML's figure shows.
    let (bytes, growth, [own, other]) = if let Some(a) = p.allocator.as_mut() {
        (a.allocated.current, &mut a.growth, ["tensors", "cache"])
    } else if let Some(d) = p.driver.as_mut().filter(|d| d.gpus <= 1) {
        // By the ledger's live driver allocations, for a process listed
        // on one GPU (a process on several shows its books on one of them).
        (d.live_bytes, &mut d.growth, ["allocations", "other"])
    } else {
        return;
    };
    let t = tracker.observe_and_assess(key, now, Some(bytes));
    let grows = t.is_some_and(|t| t.suspected);
    *growth = if grows {
        Some(own)
    } else {
        p.leak_suspected.then_some(other)
    };
    p.leak_suspected = grows;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::diagnosis::leak::LeakConfig;
    use crate::data::snapshot::{AllocPair, AllocatorFigures, DriverFigures};

    const MIB: u64 = 1 << 20;

    /// Feeds 2 windows of polls, one a second: NVML's verdict is the given
    /// one (the pipeline's NVML tracker is tested in leak/tests.rs), the
    /// tensors grow at `tensor_rate` bytes/s. Returns the last verdict.
    fn run(nvml_suspects: bool, tensor_rate: u64) -> (bool, Option<&'static str>) {
        let cfg = LeakConfig {
            window: 60.0,
            ..LeakConfig::default()
        };
        let mut t = LeakTracker::new(cfg);
        let mut last = (false, None);
        for s in 0..120u64 {
            let mut p = Process {
                pid: 1,
                leak_suspected: nvml_suspects,
                allocator: Some(Box::new(AllocatorFigures {
                    allocated: AllocPair {
                        current: 1000 * MIB + s * tensor_rate,
                        peak: 0,
                    },
                    ..AllocatorFigures::default()
                })),
                ..Process::default()
            };
            judge(&mut t, &(0, 1, 0), &mut p, s as f64);
            t.retain_seen();
            last = (p.leak_suspected, p.allocator.and_then(|a| a.growth));
        }
        last
    }

    #[test]
    fn tensors_decide_and_say_which() {
        let cases = [
            ("tensors grow", true, 4 * MIB, (true, Some("tensors"))),
            ("tensors grow, NVML blind yet", false, 4 * MIB, (true, Some("tensors"))),
            ("only the cache grows", true, 0, (false, Some("cache"))),
            ("nothing grows", false, 0, (false, None)),
        ];
        for (name, nvml, rate, want) in cases {
            assert_eq!(run(nvml, rate), want, "{name}");
        }
    }

    /// As `run`, for a process the ledger books but that does not report.
    fn run_driver(nvml_suspects: bool, rate: u64, gpus: u32) -> (bool, Option<&'static str>) {
        let mut t = LeakTracker::new(LeakConfig {
            window: 60.0,
            ..LeakConfig::default()
        });
        let mut last = (nvml_suspects, None);
        for s in 0..120u64 {
            let mut p = Process {
                pid: 2,
                leak_suspected: nvml_suspects,
                driver: Some(Box::new(DriverFigures {
                    live_bytes: 500 * MIB + s * rate,
                    gpus,
                    ..DriverFigures::default()
                })),
                ..Process::default()
            };
            judge(&mut t, &(0, 2, 0), &mut p, s as f64);
            t.retain_seen();
            last = (p.leak_suspected, p.driver.and_then(|d| d.growth));
        }
        last
    }

    #[test]
    fn without_a_reporter_the_driver_allocations_decide_and_say_so() {
        let cases = [
            ("allocations grow", true, 4 * MIB, 1, (true, Some("allocations"))),
            (
                "allocations grow, NVML blind yet",
                false,
                4 * MIB,
                1,
                (true, Some("allocations")),
            ),
            ("only NVML's figure grows", true, 0, 1, (false, Some("other"))),
            ("nothing grows", false, 0, 1, (false, None)),
            ("on two GPUs: NVML's verdict stands", true, 0, 2, (true, None)),
        ];
        for (name, nvml, rate, gpus, want) in cases {
            assert_eq!(run_driver(nvml, rate, gpus), want, "{name}");
        }
    }

    #[test]
    fn processes_without_figures_keep_nvmls_verdict() {
        let mut t = LeakTracker::new(LeakConfig::default());
        let mut p = Process {
            leak_suspected: true,
            ..Process::default()
        };
        judge(&mut t, &(0, 1, 0), &mut p, 1.0);
        assert!(p.leak_suspected && t.is_empty());
    }
}
