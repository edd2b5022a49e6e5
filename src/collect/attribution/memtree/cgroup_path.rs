//! [`cgroup_path`]: the cgroup v2 path the in-memory `/proc` shows for a
//! workload. Owns that rendering only; must not parse (`cgroup.rs` does,
//! and the round trip is tested there and in `tests/memtree.rs`).

use std::fmt::Write as _;

use super::super::CgroupInfo;
use super::super::cgroup::CONTAINER_PREFIXES;

/// A cgroup v2 path that [`parse_cgroup`](crate::collect::attribution::parse_cgroup) reads back as
/// `info` (fields it cannot name, such as a container id that is not 64 hex
/// digits, come back `None`): `/<slice>/slurm/job_<id>/step_<s>`, then
/// `/kubepods/<qos>/pod<uid>` (cgroupfs driver, so no slice is added), then
/// the container as its runtime names it, then the unit.
pub fn cgroup_path(info: &CgroupInfo) -> String {
    let mut path = String::new();
    if let Some(slice) = &info.slice {
        let _ = write!(path, "/{slice}");
    }
    if let Some(job) = &info.job {
        let _ = write!(path, "/slurm/job_{job}");
        if let Some(step) = &info.job_step {
            let _ = write!(path, "/step_{step}");
        }
    }
    if let Some(pod) = &info.pod_uid {
        path.push_str("/kubepods");
        if let Some(q @ ("burstable" | "besteffort")) = info.qos_class.as_deref() {
            let _ = write!(path, "/{q}");
        }
        let _ = write!(path, "/pod{pod}");
    }
    if let Some(id) = &info.container_id {
        // The first prefix of its runtime: containerd's is `cri-containerd-`.
        let prefix = CONTAINER_PREFIXES
            .iter()
            .find(|&&(_, r)| Some(r) == info.container_runtime)
            .map_or("", |&(prefix, _)| prefix);
        let _ = write!(path, "/{prefix}{id}");
    }
    if let Some(unit) = &info.unit {
        let _ = write!(path, "/{unit}");
    }
    if path.is_empty() {
        path.push('/');
    }
    path
}
