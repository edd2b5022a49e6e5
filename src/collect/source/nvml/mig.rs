//! MIG on the NVML source: whether a GPU is in MIG mode (memoised, the
//! call is costly and the mode only changes with a GPU reset) and the
//! reads of its instances, each reported as its own device under the
//! parent. Part of the NVML source (it may name `nvml_wrapper`); it must
//! not decide whether the parent GPU is up.

use nvml_wrapper::Device;
use nvml_wrapper::error::NvmlError;

use super::reads::{read_memory, sample_util};
use super::{Memo, PollCtx, describe};
use crate::collect::source::RawDevice;

/// Polls between re-reads of a GPU's MIG mode. Measured on an H200 (driver
/// 580, `examples/nvml_calls.rs`), `nvmlDeviceGetMigMode` costs about 80 us,
/// as much as the compute process list, and the mode only changes with a
/// GPU reset, which no process survives.
const MIG_RECHECK_POLLS: u64 = 30;

/// The instances of a GPU in MIG mode, each read as a device of its own;
/// failures to list them are recorded on `gpu`. Processes live on the
/// instances; listing them on the parent as well would count their memory
/// twice.
pub(super) fn read_instances(device: &Device<'_>, gpu: &mut RawDevice, ctx: &mut PollCtx<'_>) -> Vec<RawDevice> {
    let mut out = Vec::new();
    let count = device.mig_device_count().unwrap_or_else(|e| {
        gpu.device.errors.push(format!("mig instance count: {}", describe(&e)));
        0
    });
    for slot in 0..count {
        match device.mig_device_by_index(slot) {
            Ok(mig) => out.push(read_mig(&mig, gpu, ctx)),
            Err(NvmlError::NotFound) => {}
            Err(e) => gpu.device.errors.push(format!("mig instance {slot}: {}", describe(&e))),
        }
    }
    out
}

/// Whether MIG is on, re-read every `MIG_RECHECK_POLLS`. NotSupported is an
/// answer (no MIG on this GPU) and is remembered; any other error is
/// recorded, keeps the last known mode for this poll and is retried next
/// poll, never remembered as "off".
pub(super) fn mig_mode(device: &Device<'_>, memo: &mut Memo, poll: u64, errors: &mut Vec<String>) -> bool {
    if let Some((on, at)) = memo.mig
        && poll.saturating_sub(at) < MIG_RECHECK_POLLS
    {
        return on;
    }
    let on = match device.mig_mode() {
        Ok(m) => m.current == 1,
        Err(NvmlError::NotSupported) => false,
        Err(e) => {
            errors.push(format!("mig mode: {}", describe(&e)));
            return memo.mig.is_some_and(|(on, _)| on);
        }
    };
    memo.mig = Some((on, poll));
    on
}

fn read_mig(mig: &Device<'_>, parent: &RawDevice, ctx: &mut PollCtx<'_>) -> RawDevice {
    let mut errors = Vec::new();
    let name = mig.name().unwrap_or_else(|e| {
        errors.push(format!("name: {}", describe(&e)));
        String::new()
    });
    let uuid = mig.uuid().unwrap_or_else(|e| {
        errors.push(format!("mig instance uuid: {}", describe(&e)));
        String::new()
    });
    let mut dev = RawDevice {
        device: crate::data::snapshot::Device {
            up: !uuid.is_empty(),
            uuid,
            index: None,
            mig_profile: mig_profile(&name),
            name,
            pci_bus_id: parent.device.pci_bus_id.clone(),
            parent_uuid: parent.device.uuid.clone(),
            errors,
            ..crate::data::snapshot::Device::default()
        },
        ..RawDevice::default()
    };
    if !dev.device.up {
        return dev;
    }
    let (poll, refresh) = (ctx.poll, ctx.refresh);
    let memo = ctx.known.memo.entry(dev.device.uuid.clone()).or_default();
    let result = read_memory(mig, &mut dev).and_then(|()| super::gate::processes(mig, &mut dev, memo, poll, refresh));
    if let Err(e) = result {
        dev.device.up = false;
        dev.device.errors.push(format!("device: {}", describe(&e)));
    }
    let uuid = dev.device.uuid.clone();
    // MIG instances answer no device-level utilisation: no idle watch.
    let _ = sample_util(mig, &uuid, ctx);
    dev
}

/// "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb".
fn mig_profile(name: &str) -> String {
    name.rsplit_once(" MIG ")
        .map(|(_, p)| p.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profile_from_name() {
        assert_eq!(mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), "1g.10gb");
        assert_eq!(mig_profile("NVIDIA A100-SXM4-40GB MIG 3g.20gb"), "3g.20gb");
        assert_eq!(mig_profile("NVIDIA H200"), "");
    }
}
