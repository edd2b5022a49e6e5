//! `/proc/<pid>/cgroup` -> [`CgroupInfo`]: container, pod, systemd unit and
//! slice, Slurm job.
//!
//! Owns: recognising the path layouts of docker, containerd (CRI and
//! nerdctl), CRI-O, podman, kubelet (systemd and cgroupfs drivers), systemd
//! and Slurm (v1 and v2). Must not: touch the filesystem or ask a runtime;
//! everything comes from the path text, so unknown layouts yield `None`s.
//!
//! Which line: cgroup v1 prints one line per hierarchy and they can
//! disagree (Slurm v1 puts jobs only under `memory`/`cpuset`/..., while
//! `name=systemd` still says `slurmd.service`; a v1 user session is often
//! `/user.slice` under `memory` but a scope under `name=systemd`). So each
//! distinct path is classified and the most specific one wins: first the
//! one naming the most workloads (container, pod, job), then the one with
//! the most fields set; ties go to the unified `0::` line, then `memory`,
//! then `name=systemd`, then the rest in file order. One line wins whole:
//! fields are not mixed across lines, which would pair a job with its
//! daemon's unit.

use arcstr::ArcStr;

use super::{CgroupInfo, Runtime};

/// Container scope/dir prefixes, longest first where they share a start.
pub(super) const CONTAINER_PREFIXES: &[(&str, Runtime)] = &[
    ("docker-", Runtime::Docker),
    ("cri-containerd-", Runtime::Containerd),
    ("nerdctl-", Runtime::Containerd),
    ("crio-", Runtime::CriO),
    ("libpod-", Runtime::Podman),
];

/// Parses the whole file (v1, v2 or hybrid). Never fails: unknown or
/// malformed lines are skipped.
pub fn parse_cgroup(contents: &str) -> CgroupInfo {
    let mut candidates: Vec<(u8, &str)> = contents
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (hierarchy, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            // v2 marks a removed cgroup (zombie left behind) with " (deleted)".
            let path = path.trim_end();
            let path = path.strip_suffix(" (deleted)").unwrap_or(path);
            Some((line_rank(hierarchy, controllers), path))
        })
        .collect();
    // Stable sort: same rank keeps file order.
    candidates.sort_by_key(|&(rank, _)| rank);

    let mut seen: Vec<&str> = Vec::new();
    candidates.retain(|&(_, path)| {
        let first = !seen.contains(&path);
        seen.push(path);
        first
    });
    // `rev`: of equally specific paths, `max_by_key` keeps the last it sees.
    let infos = candidates.into_iter().rev().map(|(_, path)| parse_path(path));
    infos.max_by_key(score).unwrap_or_default()
}

fn line_rank(hierarchy: &str, controllers: &str) -> u8 {
    let has = |name: &str| controllers.split(',').any(|c| c == name);
    if hierarchy == "0" && controllers.is_empty() {
        0
    } else if has("memory") {
        1
    } else if has("name=systemd") {
        2
    } else {
        3
    }
}

/// (workloads named, fields set): larger is more specific.
fn score(info: &CgroupInfo) -> (usize, usize) {
    let workloads = [&info.container_id, &info.pod_uid, &info.job];
    let others = [&info.qos_class, &info.unit, &info.slice, &info.job_step];
    let set = |fields: &[&Option<ArcStr>]| fields.iter().filter(|f| f.is_some()).count();
    let runtime = usize::from(info.container_runtime.is_some());
    (set(&workloads), set(&workloads) + set(&others) + runtime)
}

/// Classifies one cgroup path, walking from the root down.
fn parse_path(path: &str) -> CgroupInfo {
    let mut info = CgroupInfo::default();
    // Paths seen through a cgroup namespace can start with "/../..".
    // "slice:prefix:id" segments (runc's systemd cgroupsPath used as a plain
    // path when systemd does not manage it) are split into their parts.
    let segments: Vec<&str> = path
        .split(['/', ':'])
        .filter(|s| !s.is_empty() && *s != "." && *s != "..")
        .collect();
    let mut workload_at: Option<usize> = None;
    let mut unit_at: Option<(usize, &str)> = None;
    let mut in_kubepods = false;
    let mut in_slurm = false;
    for (i, &seg) in segments.iter().enumerate() {
        // No runtime, systemd or Slurm names a cgroup with control
        // characters, but a user with a delegated subtree can: such a
        // segment names nothing, so it never reaches a label.
        if seg.contains(char::is_control) {
            continue;
        }
        let parent = i.checked_sub(1).and_then(|p| segments.get(p)).copied();
        let found_workload = classify_workload(seg, parent, in_kubepods, in_slurm, &mut info);
        if found_workload {
            workload_at.get_or_insert(i);
        }
        in_kubepods |= seg.starts_with("kubepods") || seg.contains("-kubepods");
        in_slurm |= seg.contains("slurm");
        if seg.ends_with(".slice") {
            info.slice = Some(ArcStr::from(seg));
        }
        if !found_workload && is_real_unit(seg) {
            unit_at = Some((i, seg));
        }
    }
    // A unit above the workload (containerd.service, slurmstepd.scope,
    // user@1000.service hosting rootless podman) is infrastructure, not what
    // the user ran; one inside a container is kept.
    info.unit = match (unit_at, workload_at) {
        (Some((u, _)), Some(w)) if u < w => None,
        (unit, _) => unit.map(|(_, name)| ArcStr::from(name)),
    };
    info
}

/// Fills container/pod/job fields from one segment; true when it named one
/// (so it is not also taken as a systemd unit).
fn classify_workload(
    seg: &str,
    parent: Option<&str>,
    in_kubepods: bool,
    in_slurm: bool,
    info: &mut CgroupInfo,
) -> bool {
    if let Some((id, runtime)) = container(seg, parent) {
        // Outermost container wins: it is the one the host's runtime knows.
        if info.container_id.is_none() {
            info.container_id = Some(ArcStr::from(id));
            info.container_runtime = runtime;
        }
        return true;
    }
    if let Some((uid, qos)) = pod(seg, parent, in_kubepods) {
        if info.pod_uid.is_none() {
            info.pod_uid = Some(ArcStr::from(uid));
            info.qos_class = Some(ArcStr::from(qos));
        }
        return true;
    }
    if in_slurm {
        if let Some(job) = seg.strip_prefix("job_").filter(|j| is_digits(j)) {
            info.job.get_or_insert_with(|| ArcStr::from(job));
            return true;
        }
        if let Some(step) = seg.strip_prefix("step_").filter(|s| !s.is_empty())
            && info.job.is_some()
            && info.job_step.is_none()
        {
            info.job_step = Some(ArcStr::from(step));
        }
    }
    false
}

/// `docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>`,
/// `libpod-<id>`, `nerdctl-<id>.scope`, `docker/<id>`, `cri-containerd:<id>`
/// or a bare `<id>` (kubelet cgroupfs driver, containerd namespaces:
/// runtime unknown).
fn container<'a>(seg: &'a str, parent: Option<&str>) -> Option<(&'a str, Option<Runtime>)> {
    let name = seg.strip_suffix(".scope").unwrap_or(seg);
    for (prefix, runtime) in CONTAINER_PREFIXES {
        if let Some(id) = name.strip_prefix(prefix).filter(|id| is_container_id(id)) {
            return Some((id, Some(*runtime)));
        }
    }
    // `docker/<id>` (cgroupfs driver), `...slice:cri-containerd:<id>`.
    let runtime = CONTAINER_PREFIXES
        .iter()
        .find(|(prefix, _)| parent.is_some_and(|p| prefix.strip_suffix('-') == Some(p)))
        .map(|&(_, runtime)| runtime);
    is_container_id(seg).then_some((seg, runtime))
}

/// systemd driver: `kubepods-burstable-pod<uid_with_underscores>.slice`,
/// `kubepods-pod<uid>.slice` (guaranteed, no QoS slice); cgroupfs driver:
/// `pod<uid>` under `kubepods/`, `kubepods/burstable/` or `kubepods/besteffort/`.
fn pod(seg: &str, parent: Option<&str>, in_kubepods: bool) -> Option<(String, &'static str)> {
    if let Some(name) = seg.strip_suffix(".slice") {
        if !name.contains("kubepods") {
            return None;
        }
        // The uid's dashes became underscores, so the last '-' part is it.
        let uid = name.rsplit('-').next()?.strip_prefix("pod")?;
        // A QoS is a '-' part after the first (the last is the pod's).
        let qos = qos_class(|q| name.split('-').skip(1).any(|part| part == q));
        return Some((pod_uid(uid)?, qos));
    }
    let uid = pod_uid(seg.strip_prefix("pod").filter(|_| in_kubepods)?)?;
    Some((uid, qos_class(|q| parent == Some(q))))
}

/// "burstable" or "besteffort" when `named` says so, else "guaranteed".
fn qos_class(named: impl Fn(&str) -> bool) -> &'static str {
    ["burstable", "besteffort"]
        .into_iter()
        .find(|q| named(q))
        .unwrap_or("guaranteed")
}

/// A UUID (36) or a static pod's hash (32 hex); underscores back to dashes.
fn pod_uid(raw: &str) -> Option<String> {
    let ok = (32..=36).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    ok.then(|| raw.replace('_', "-"))
}

/// A service, or a scope that is not a runtime's own per-container scope
/// (`crio-conmon-<id>.scope`, `libpod-conmon-<id>.scope` included).
fn is_real_unit(seg: &str) -> bool {
    seg.ends_with(".service")
        || (seg.ends_with(".scope") && !CONTAINER_PREFIXES.iter().any(|(prefix, _)| seg.starts_with(prefix)))
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}
