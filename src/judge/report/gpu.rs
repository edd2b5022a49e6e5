//! What a report keeps of one subject on one GPU while it runs, and what it
//! says of it when the subject ends: peak, p95, time near full, allocator
//! peaks, OOMs, idle holding, memory left behind, and the request to ask
//! for next time.
//!
//! Owns: the per-GPU accumulator ([`GpuAcc`], about 300 bytes: its p95
//! histogram is 101 two-byte counts) and the suggested request's rounding.
//! Must not: read the snapshot's structure (the tracker hands it figures)
//! or keep anything that grows with time.

use serde::{Deserialize, Serialize};

/// Share of the GPU above which a poll counts as "near full".
const NEAR_FULL: f64 = 0.9;
/// Margin added to the peak for a suggested request: a tenth, at least 1 GiB.
const MARGIN_SHARE: f64 = 0.10;
const MARGIN_MIN: u64 = 1 << 30;
const GIB: f64 = (1u64 << 30) as f64;

/// A fixed histogram of a subject's memory as a share of the GPU, one
/// bucket per percent (0 to 100): p95 is then known to within 1 % of the
/// GPU, from 202 bytes whatever the job's length. Counts are halved
/// together when one would overflow, which keeps their ratios.
#[derive(Debug, Clone)]
struct Percentiles {
    counts: [u16; 101],
}

impl Default for Percentiles {
    fn default() -> Self {
        Percentiles { counts: [0; 101] }
    }
}

impl Percentiles {
    fn add(&mut self, share: f64) {
        // At most 100; NaN casts to 0.
        let i = (share.clamp(0.0, 1.0) * 100.0).floor() as usize;
        if self.counts[i] == u16::MAX {
            for c in &mut self.counts {
                *c /= 2;
            }
        }
        self.counts[i] += 1;
    }

    /// The upper edge of the bucket that holds quantile `q`, as a share.
    fn quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.counts.iter().map(|&c| u64::from(c)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(((i + 1) as f64 / 100.0).min(1.0));
            }
        }
        Some(1.0)
    }
}

/// What one poll says of a subject on one GPU.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PollFigures {
    /// Bytes its live processes hold.
    pub live_bytes: u64,
    /// Whether any of its processes there is live.
    pub live: bool,
    /// Whether every live one is flagged idle (`[processes] idle_after`).
    pub idle: bool,
    /// Bytes its listed but exited or zombie processes hold.
    pub departed_bytes: u64,
    /// Sums of the allocator's peaks of its processes that report them.
    pub reserved_peak: Option<u64>,
    pub allocated_peak: Option<u64>,
    pub ooms: u64,
    pub retries: u64,
}

/// One subject on one GPU, while it runs and after.
#[derive(Debug, Clone, Default)]
pub(super) struct GpuAcc {
    pub uuid: String,
    pub index: Option<u32>,
    pub total: u64,
    peak: u64,
    hist: Percentiles,
    polls: u32,
    above_90: f64,
    idle_seconds: f64,
    idle_byte_seconds: f64,
    reserved_peak: Option<u64>,
    allocated_peak: Option<u64>,
    ooms: u64,
    retries: u64,
    /// Bytes held at the last live poll, and the device's unattributed
    /// memory then: memory its processes leave behind unlisted shows as a
    /// rise in unattributed memory.
    last_bytes: u64,
    unattributed_at_last: u64,
    left_bytes: u64,
    /// When memory was first seen gone after the subject ended.
    left_clear: Option<f64>,
}

impl GpuAcc {
    pub(super) fn new(uuid: &str, index: Option<u32>, total: u64) -> Self {
        GpuAcc {
            uuid: uuid.to_string(),
            index,
            total,
            ..GpuAcc::default()
        }
    }

    /// One poll where the subject is live here; `dt` is the time since the
    /// previous poll (0 at its first), counted with this poll's figures.
    pub(super) fn live(&mut self, f: &PollFigures, unattributed: u64, dt: f64) {
        let b = f.live_bytes;
        self.peak = self.peak.max(b);
        if self.total > 0 {
            self.hist.add(b as f64 / self.total as f64);
            if b as f64 >= NEAR_FULL * self.total as f64 {
                self.above_90 += dt;
            }
        }
        self.polls = self.polls.saturating_add(1);
        if f.idle && b > 0 {
            self.idle_seconds += dt;
            self.idle_byte_seconds += b as f64 * dt;
        }
        // None orders below any Some: the larger peak, or the one known.
        self.reserved_peak = self.reserved_peak.max(f.reserved_peak);
        self.allocated_peak = self.allocated_peak.max(f.allocated_peak);
        self.ooms = self.ooms.max(f.ooms);
        self.retries = self.retries.max(f.retries);
        self.last_bytes = b.saturating_add(f.departed_bytes);
        self.unattributed_at_last = unattributed;
    }

    /// One poll after the subject ended: whether memory is still left
    /// behind here (its listed exited processes, or unattributed memory
    /// that rose by at least half of what it held, as late release judges).
    pub(super) fn after_end(&mut self, f: &PollFigures, unattributed: u64, now: f64) -> bool {
        if self.left_clear.is_some() {
            return false;
        }
        let rise = unattributed.saturating_sub(self.unattributed_at_last);
        let unlisted = if self.last_bytes > 0 && rise >= self.last_bytes / 2 {
            rise.min(self.last_bytes)
        } else {
            0
        };
        let left = f.departed_bytes.saturating_add(unlisted);
        if left > 0 {
            self.left_bytes = self.left_bytes.max(left);
            true
        } else {
            self.left_clear = Some(now);
            false
        }
    }

    /// The GPU's part of the report; `ended` is when the subject was first
    /// seen gone, `now` the closing poll.
    pub(super) fn report(&self, ended: Option<f64>, now: f64) -> GpuReport {
        let p95 = self
            .hist
            .quantile(0.95)
            .map(|s| ((s * self.total as f64) as u64).min(self.peak));
        let left_behind_seconds = match (ended, self.left_bytes) {
            (Some(e), b) if b > 0 => (self.left_clear.unwrap_or(now) - e).max(0.0),
            _ => 0.0,
        };
        GpuReport {
            uuid: self.uuid.clone(),
            index: self.index,
            total_bytes: self.total,
            peak_bytes: self.peak,
            p95_bytes: p95,
            polls: self.polls,
            above_90_seconds: self.above_90,
            idle_seconds: self.idle_seconds,
            idle_gib_hours: self.idle_byte_seconds / GIB / 3600.0,
            allocator_reserved_peak_bytes: self.reserved_peak,
            allocator_allocated_peak_bytes: self.allocated_peak,
            ooms: self.ooms,
            alloc_retries: self.retries,
            left_behind_bytes: self.left_bytes,
            left_behind_seconds,
            left_behind_ongoing: self.left_bytes > 0 && ended.is_some() && self.left_clear.is_none(),
        }
    }
}

/// A subject's figures on one GPU, as served and persisted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuReport {
    pub uuid: String,
    pub index: Option<u32>,
    pub total_bytes: u64,
    pub peak_bytes: u64,
    /// The 95th percentile over its polls, to within 1 % of the GPU (never
    /// under the true value, never over the peak).
    pub p95_bytes: Option<u64>,
    pub polls: u32,
    /// Seconds it held at least 90 % of the GPU.
    pub above_90_seconds: f64,
    /// Seconds it held memory while flagged idle (no SM activity for
    /// `[processes] idle_after`), and the GiB-hours held so.
    pub idle_seconds: f64,
    pub idle_gib_hours: f64,
    pub allocator_reserved_peak_bytes: Option<u64>,
    pub allocator_allocated_peak_bytes: Option<u64>,
    pub ooms: u64,
    pub alloc_retries: u64,
    /// The most memory seen still used after it ended, and for how long.
    pub left_behind_bytes: u64,
    pub left_behind_seconds: f64,
    /// Still left behind when the report was written.
    pub left_behind_ongoing: bool,
}

/// A request that would have fit: the peak plus a margin (a tenth, at
/// least 1 GiB), rounded up the way schedulers take it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Suggestion {
    pub bytes: u64,
    /// Slurm `--gres=gpumem:` style: whole GiB, e.g. "40G".
    pub gres_gpumem: String,
    /// Share of the GPU in steps of 0.05, at most 1 (fractional-GPU schedulers).
    pub gpu_fraction: f64,
    /// vLLM's `--gpu-memory-utilization`, in steps of 0.01, at most 1.
    pub vllm_gpu_memory_utilization: f64,
}

/// The suggestion for a peak of `peak` bytes on a GPU of `total` bytes;
/// none when nothing was held.
pub fn suggest(peak: u64, total: u64) -> Option<Suggestion> {
    if peak == 0 || total == 0 {
        return None;
    }
    let margin = ((peak as f64 * MARGIN_SHARE) as u64).max(MARGIN_MIN);
    let bytes = peak.saturating_add(margin).min(total);
    let gib = (bytes as f64 / GIB).ceil() as u64;
    let share = bytes as f64 / total as f64;
    Some(Suggestion {
        bytes,
        gres_gpumem: format!("{gib}G"),
        gpu_fraction: round_up(share, 20.0),
        vllm_gpu_memory_utilization: round_up(share, 100.0),
    })
}

/// `x` rounded up to a multiple of `1/per`, at most 1; a hair of float
/// error over a step does not take the next one.
fn round_up(x: f64, per: f64) -> f64 {
    (((x * per) - 1e-9).ceil() / per).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p95_is_the_upper_edge_of_its_percent() {
        let mut h = Percentiles::default();
        for _ in 0..95 {
            h.add(0.10);
        }
        for _ in 0..5 {
            h.add(0.905);
        }
        assert_eq!(h.quantile(0.95), Some(0.11));
        assert_eq!(h.quantile(0.96), Some(0.91));
        assert_eq!(Percentiles::default().quantile(0.95), None);
    }

    #[test]
    fn full_counts_halve_and_keep_their_ratio() {
        let mut h = Percentiles::default();
        for _ in 0..u32::from(u16::MAX) + 10 {
            h.add(0.5);
        }
        h.add(0.2);
        assert!(h.counts[50] > 30_000 && h.counts[20] == 1);
        assert_eq!(h.quantile(0.95), Some(0.51));
    }

    #[test]
    fn suggestions_round_up_the_way_schedulers_take_them() {
        let g = 1u64 << 30;
        let s = suggest(3 * g, 80 * g).expect("held");
        assert_eq!((s.bytes, s.gres_gpumem.as_str()), (4 * g, "4G"));
        assert_eq!((s.gpu_fraction, s.vllm_gpu_memory_utilization), (0.05, 0.05));
        let s = suggest(30 * g, 80 * g).expect("held");
        assert_eq!((s.bytes, s.gres_gpumem.as_str()), (33 * g, "33G"));
        assert_eq!((s.gpu_fraction, s.vllm_gpu_memory_utilization), (0.45, 0.42));
        let s = suggest(76 * g, 80 * g).expect("held");
        assert_eq!((s.gres_gpumem.as_str(), s.gpu_fraction), ("80G", 1.0));
        assert_eq!(suggest(0, 80 * g), None);
    }
}
