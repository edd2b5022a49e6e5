//! Skipping the per-process utilisation call while the whole GPU is idle.
//! On an H200 that call costs about 1.5 ms of CPU in the
//! driver, once per `utilization_interval`, against about 40 us for the
//! device's own utilisation over its last sample period. While the last
//! per-process answer showed no process active, the device reading is
//! taken every poll; if every one of them since says 0 %, no process ran
//! a kernel then either, and the sample is what NVML's "no sample newer
//! than that" answer gives (the device sampled, nobody active) without the
//! call. Any activity, a failed reading or a device that cannot answer
//! (MIG) ends the watch until a per-process answer shows no activity again,
//! so a busy GPU pays nothing extra. What a watch can miss is a kernel that
//! ran only between two of the device's sample periods, poll after poll.
//!
//! Owns: that watch, per device. Must not: decide idleness (the pipeline
//! does, from the samples) or read anything else.

use nvml_wrapper::Device;

use super::PollCtx;
use super::reads::sample_util;

/// One device's watch between two per-process samples.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct IdleWatch {
    /// The last per-process answer showed no process active.
    watching: bool,
    /// A device reading since then showed activity, or failed.
    busy: bool,
}

/// This poll's part: one device reading while watching, then the
/// per-process sample when one is due (`ctx.utilization`).
pub(super) fn poll(device: &Device<'_>, uuid: &str, ctx: &mut PollCtx<'_>, w: &mut IdleWatch) {
    if w.watching && !w.busy {
        let reading = device.utilization_rates();
        w.busy = !matches!(reading, Ok(ref u) if u.gpu == 0);
        if w.busy {
            tracing::debug!(uuid, ?reading, "idle watch ended: the GPU's own utilisation");
        }
    }
    let Some(util) = ctx.utilization.as_deref_mut() else {
        return;
    };
    if w.watching && !w.busy {
        util.entry(uuid.to_string()).or_default();
        return;
    }
    let active = sample_util(device, uuid, ctx);
    tracing::debug!(uuid, ?active, "per-process utilisation sampled");
    *w = IdleWatch {
        watching: active == Some(false),
        busy: false,
    };
}
