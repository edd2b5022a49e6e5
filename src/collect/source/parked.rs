//! [`ParkedSource`]: the demo's GPU, as a real one looks after a CUDA
//! checkpoint. Wraps a simulated source and hides the processes the
//! simulated driver holds checkpointed: they leave the process lists and
//! their bytes leave the device's used memory, as NVML shows on a GPU.
//!
//! Owns: that subtraction. Must not: wrap real hardware (NVML itself shows
//! the effect there) or change anything it does not hide.

use std::sync::Arc;

use super::{GpuSource, RawPoll, SourceError};
use crate::collect::attribution::ProcTree;
use crate::collect::cuda::SimHandle;

pub struct ParkedSource {
    inner: Box<dyn GpuSource>,
    cuda: SimHandle,
}

impl ParkedSource {
    pub fn new(inner: Box<dyn GpuSource>, cuda: SimHandle) -> Self {
        ParkedSource { inner, cuda }
    }
}

impl GpuSource for ParkedSource {
    fn poll(&mut self, sample_utilization: bool) -> Result<RawPoll, SourceError> {
        let mut poll = self.inner.poll(sample_utilization)?;
        let parked = self.cuda.checkpointed();
        if parked.is_empty() {
            return Ok(poll);
        }
        for d in &mut poll.devices {
            let hidden: u64 = d
                .processes
                .iter()
                .filter(|p| parked.contains(&p.pid))
                .filter_map(|p| p.used_bytes)
                .fold(0u64, u64::saturating_add);
            d.processes.retain(|p| !parked.contains(&p.pid));
            if let Some(m) = d.device.memory.as_mut() {
                m.used_bytes = m.used_bytes.saturating_sub(hidden);
                m.free_bytes = m.free_bytes.saturating_add(hidden).min(m.total_bytes);
            }
        }
        if let Some(u) = poll.utilization.as_mut() {
            for per_dev in u.values_mut() {
                per_dev.retain(|pid, _| !parked.contains(pid));
            }
        }
        Ok(poll)
    }

    fn demo_name(&self) -> Option<String> {
        self.inner.demo_name()
    }

    fn proc_tree(&self) -> Option<Arc<dyn ProcTree>> {
        self.inner.proc_tree()
    }

    fn simulated_cuda(&self) -> Option<SimHandle> {
        Some(self.cuda.clone())
    }

    fn simulated_kill(&self) -> Option<super::SimKill> {
        self.inner.simulated_kill()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::cuda::{Checkpointer, SimulatedCuda};
    use crate::collect::source::{RawDevice, RawProcess};
    use crate::data::snapshot::{Device, Memory};

    struct One;

    impl GpuSource for One {
        fn poll(&mut self, _: bool) -> Result<RawPoll, SourceError> {
            let p = |pid, gib: u64| RawProcess {
                pid,
                used_bytes: Some(gib << 30),
                ..RawProcess::default()
            };
            Ok(RawPoll {
                devices: vec![RawDevice {
                    device: Device {
                        memory: Some(Memory {
                            total_bytes: 80 << 30,
                            used_bytes: 30 << 30,
                            free_bytes: 50 << 30,
                            reserved_bytes: None,
                        }),
                        ..Device::default()
                    },
                    processes: vec![p(10, 20), p(11, 10)],
                    ..RawDevice::default()
                }],
                ..RawPoll::default()
            })
        }
    }

    #[test]
    fn a_checkpointed_process_leaves_the_list_and_its_bytes_the_device() {
        let h = SimHandle::default();
        let mut s = ParkedSource::new(Box::new(One), h.clone());
        assert_eq!(s.poll(false).expect("poll").devices[0].processes.len(), 2);
        let mut cuda = SimulatedCuda::new(h);
        cuda.lock(10, std::time::Duration::from_secs(1)).expect("lock");
        cuda.checkpoint(10).expect("checkpoint");
        let d = &s.poll(false).expect("poll").devices[0];
        assert_eq!(d.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [11]);
        let m = d.device.memory.expect("memory");
        assert_eq!((m.used_bytes, m.free_bytes), (10 << 30, 70 << 30));
    }
}
