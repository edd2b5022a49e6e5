//! Time to full per GPU: from the growth of every holder of its memory
//! (live, zombie and exited processes, and memory no listed process
//! accounts for, where late releases end up) and its free memory.
//!
//! Owns: which holders count as growing and the arithmetic of the
//! forecast. Must not: keep state, read clocks or know about rules or
//! metrics; the growth verdicts come from the leak tracker (`leak.rs`).
//!
//! A holder counts only while the leak detector suspects it: its kept
//! floor rose in every third of the window and is still rising, with
//! hysteresis. A warm-up (rise, then flat), a sawtooth (floor flat) or one
//! big step never does, so the forecast cannot flap on them; the price is
//! that a grower is forecast one leak window after it starts growing.

use arcstr::ArcStr;

use super::leak::Trend;
use crate::data::snapshot::{Device, Grower, Holder};

/// Growers a device lists: enough to name who to call.
pub const MAX_GROWERS: usize = 5;

/// The forecast of one device: seconds until its free memory runs out and
/// who grows, fastest first. `None` when nothing grows (or the device's
/// memory is unknown). `unattributed` is the trend of the device's
/// unattributed bytes.
pub fn forecast(dev: &Device, unattributed: Option<Trend>) -> Option<(f64, Vec<Grower>)> {
    let m = dev.memory.filter(|_| dev.up)?;
    let mut growers: Vec<Grower> = dev
        .processes
        .iter()
        .filter(|p| p.leak_suspected)
        .filter_map(|p| {
            let rate = p.growth_bytes_per_second.filter(|r| r.is_finite() && *r > 0.0)?;
            Some(Grower {
                pid: Some(p.pid),
                comm: p.comm.clone(),
                user: p.user.clone(),
                holder: p.holder,
                bytes_per_second: rate,
            })
        })
        .collect();
    if let Some(t) = unattributed.filter(|t| t.suspected && t.growth_bytes_per_second > 0.0) {
        growers.push(Grower {
            pid: None,
            comm: ArcStr::new(),
            user: ArcStr::new(),
            holder: Some(Holder::Unattributed),
            bytes_per_second: t.growth_bytes_per_second,
        });
    }
    let rate: f64 = growers.iter().map(|g| g.bytes_per_second).sum();
    if growers.is_empty() || rate.is_nan() || rate <= 0.0 {
        return None;
    }
    growers.sort_by(|a, b| b.bytes_per_second.total_cmp(&a.bytes_per_second));
    growers.truncate(MAX_GROWERS);
    Some((m.free_bytes as f64 / rate, growers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::snapshot::{Memory, Process};

    fn trend(growth: f64, suspected: bool) -> Trend {
        Trend {
            growth_bytes_per_second: growth,
            suspected,
            spread: 1.0,
            floor_rise_bytes: 0.0,
            kept_rise_bytes: 0.0,
            window_covered: 1.0,
        }
    }

    fn proc(pid: u32, growth: f64, suspected: bool) -> Process {
        Process {
            pid,
            used_bytes: Some(1 << 30),
            holder: Some(Holder::Live),
            growth_bytes_per_second: Some(growth),
            leak_suspected: suspected,
            ..Process::default()
        }
    }

    fn device(free: u64, processes: Vec<Process>) -> Device {
        Device {
            up: true,
            memory: Some(Memory {
                total_bytes: 80 << 30,
                used_bytes: (80 << 30) - free,
                free_bytes: free,
                reserved_bytes: None,
            }),
            processes,
            ..Device::default()
        }
    }

    #[test]
    fn sums_confirmed_growers_and_names_the_fastest_first() {
        let mib = f64::from(1 << 20);
        let d = device(
            10 << 30,
            vec![
                proc(1, 4.0 * mib, true),
                proc(2, 50.0 * mib, false),
                proc(3, 6.0 * mib, true),
            ],
        );
        let (secs, growers) = forecast(&d, Some(trend(2.0 * mib, true))).expect("a forecast");
        // 10 GiB at 4 + 6 + 2 MiB/s; pid 2's slope is not a confirmed growth.
        assert!((secs - 10240.0 / 12.0).abs() < 1e-6, "{secs}");
        let pids: Vec<Option<u32>> = growers.iter().map(|g| g.pid).collect();
        assert_eq!(pids, [Some(3), Some(1), None]);
        assert_eq!(growers[2].holder, Some(Holder::Unattributed));
    }

    #[test]
    fn absent_when_nothing_grows_or_memory_is_unknown() {
        let d = device(10 << 30, vec![proc(1, 0.0, true), proc(2, 8.0e6, false)]);
        assert_eq!(forecast(&d, Some(trend(5.0e6, false))), None);
        let mut lost = device(10 << 30, vec![proc(1, 8.0e6, true)]);
        lost.up = false;
        assert_eq!(forecast(&lost, None), None);
    }

    #[test]
    fn bounded_list_of_growers() {
        let d = device(1 << 30, (1..=20).map(|i| proc(i, f64::from(i) * 1e6, true)).collect());
        let (_, growers) = forecast(&d, None).expect("a forecast");
        assert_eq!(growers.len(), MAX_GROWERS);
        assert_eq!(growers[0].pid, Some(20));
    }
}
