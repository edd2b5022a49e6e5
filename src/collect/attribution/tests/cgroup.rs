//! Table of real-world `/proc/<pid>/cgroup` contents -> expected CgroupInfo.

use arcstr::ArcStr;

use super::super::{CgroupInfo, Runtime, parse_cgroup};

const ID: &str = "3f1c9a7be20d44c8a5f6e1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f50";
const ID2: &str = "9e8d7c6b5a49382716059f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a";
const POD: &str = "1c4e0f2a-9b7d-4c1e-8a3f-2b6d5e7f9a01";
const POD_: &str = "1c4e0f2a_9b7d_4c1e_8a3f_2b6d5e7f9a01";

fn some(s: &str) -> Option<ArcStr> {
    Some(ArcStr::from(s))
}

fn container(runtime: Option<Runtime>, id: &str) -> CgroupInfo {
    CgroupInfo {
        container_id: some(id),
        container_runtime: runtime,
        ..Default::default()
    }
}

fn pod(qos: &str, runtime: Option<Runtime>, slice: Option<ArcStr>) -> CgroupInfo {
    CgroupInfo {
        pod_uid: some(POD),
        qos_class: some(qos),
        slice,
        ..container(runtime, ID)
    }
}

fn unit(unit: &str, slice: &str) -> CgroupInfo {
    CgroupInfo {
        unit: some(unit),
        slice: some(slice),
        ..Default::default()
    }
}

fn slurm(job: &str, step: &str) -> CgroupInfo {
    CgroupInfo {
        job: some(job),
        job_step: some(step),
        ..Default::default()
    }
}

fn with_slice(info: CgroupInfo, slice: &str) -> CgroupInfo {
    CgroupInfo {
        slice: some(slice),
        ..info
    }
}

/// (what, file contents, expected)
type Case = (&'static str, String, CgroupInfo);

/// Docker.
fn docker_cases() -> Vec<Case> {
    use Runtime::*;
    vec![
        (
            "docker v2 systemd driver",
            format!("0::/system.slice/docker-{ID}.scope\n"),
            with_slice(container(Some(Docker), ID), "system.slice"),
        ),
        (
            "docker v2 cgroupfs driver",
            format!("0::/docker/{ID}\n"),
            container(Some(Docker), ID),
        ),
        (
            "docker v1 cgroupfs with name=systemd",
            format!(
                "12:pids:/docker/{ID}\n11:memory:/docker/{ID}\n4:cpu,cpuacct:/docker/{ID}\n\
                     1:name=systemd:/docker/{ID}\n0::/system.slice/containerd.service\n"
            ),
            container(Some(Docker), ID),
        ),
        (
            "docker v1 systemd driver",
            format!("11:memory:/system.slice/docker-{ID}.scope\n1:name=systemd:/system.slice/docker-{ID}.scope\n"),
            with_slice(container(Some(Docker), ID), "system.slice"),
        ),
        (
            "docker v2 dead cgroup",
            format!("0::/system.slice/docker-{ID}.scope (deleted)\n"),
            with_slice(container(Some(Docker), ID), "system.slice"),
        ),
        (
            "docker in docker: outer container",
            format!("0::/docker/{ID}/docker/{ID2}\n"),
            container(Some(Docker), ID),
        ),
        (
            "systemd inside a container keeps its unit",
            format!("0::/docker/{ID}/system.slice/nginx.service\n"),
            CgroupInfo {
                unit: some("nginx.service"),
                slice: some("system.slice"),
                ..container(Some(Docker), ID)
            },
        ),
    ]
}

/// Kubernetes, systemd driver.
fn k8s_systemd_cases() -> Vec<Case> {
    use Runtime::*;
    let ks = |qos: &str| some(&format!("kubepods-{qos}-pod{POD_}.slice"));
    vec![
        (
            "k8s v2 containerd burstable",
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/cri-containerd-{ID}.scope\n"
            ),
            pod("burstable", Some(Containerd), ks("burstable")),
        ),
        (
            "k8s v2 cri-o besteffort",
            format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice/crio-{ID}.scope\n"
            ),
            pod("besteffort", Some(CriO), ks("besteffort")),
        ),
        (
            "k8s v2 guaranteed has no qos slice",
            format!("0::/kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{ID}.scope\n"),
            pod(
                "guaranteed",
                Some(Containerd),
                some(&format!("kubepods-pod{POD_}.slice")),
            ),
        ),
        (
            "k8s v1 docker burstable",
            format!(
                "11:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/docker-{ID}.scope\n\
                     1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/docker-{ID}.scope\n"
            ),
            pod("burstable", Some(Docker), ks("burstable")),
        ),
        (
            "k8s seen through a cgroup namespace",
            format!("0::/../../kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{ID}.scope\n"),
            pod(
                "guaranteed",
                Some(Containerd),
                some(&format!("kubepods-pod{POD_}.slice")),
            ),
        ),
        (
            "kind: runc cgroupsPath under containerd.service",
            format!("0::/system.slice/containerd.service/kubepods-burstable-pod{POD_}.slice:cri-containerd:{ID}\n"),
            pod("burstable", Some(Containerd), ks("burstable")),
        ),
        (
            "cri-o conmon is neither container nor unit",
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/crio-conmon-{ID}.scope\n"
            ),
            CgroupInfo {
                container_id: None,
                ..pod("burstable", None, ks("burstable"))
            },
        ),
    ]
}

/// Kubernetes, cgroupfs driver.
fn k8s_cgroupfs_cases() -> Vec<Case> {
    use Runtime::*;
    vec![
        (
            "k8s v1 cgroupfs besteffort",
            format!("11:memory:/kubepods/besteffort/pod{POD}/{ID}\n"),
            pod("besteffort", None, None),
        ),
        (
            "k8s v2 cgroupfs burstable",
            format!("0::/kubepods/burstable/pod{POD}/{ID}\n"),
            pod("burstable", None, None),
        ),
        (
            "k8s v1 cgroupfs guaranteed",
            format!("11:memory:/kubepods/pod{POD}/{ID}\n"),
            pod("guaranteed", None, None),
        ),
        (
            "k8s cgroupfs cri-o",
            format!("0::/kubepods/burstable/pod{POD}/crio-{ID}\n"),
            pod("burstable", Some(CriO), None),
        ),
        (
            "k8s static pod hash uid",
            format!("0::/kubepods/burstable/pod0123456789abcdef0123456789abcdef/{ID}\n"),
            CgroupInfo {
                pod_uid: some("0123456789abcdef0123456789abcdef"),
                ..pod("burstable", None, None)
            },
        ),
    ]
}

/// Podman, containerd without Kubernetes.
fn podman_containerd_cases() -> Vec<Case> {
    use Runtime::*;
    vec![
        (
            "podman rootful v2",
            format!("0::/machine.slice/libpod-{ID}.scope\n"),
            with_slice(container(Some(Podman), ID), "machine.slice"),
        ),
        (
            "podman rootless v2",
            format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n"),
            with_slice(container(Some(Podman), ID), "user.slice"),
        ),
        (
            "podman v1 cgroupfs",
            format!("10:memory:/libpod_parent/libpod-{ID}\n"),
            container(Some(Podman), ID),
        ),
        (
            "nerdctl systemd",
            format!("0::/system.slice/nerdctl-{ID}.scope\n"),
            with_slice(container(Some(Containerd), ID), "system.slice"),
        ),
        (
            "containerd namespace dir",
            format!("0::/default/{ID}\n"),
            container(None, ID),
        ),
        (
            "containerd shim is its service",
            "0::/system.slice/containerd.service\n".into(),
            unit("containerd.service", "system.slice"),
        ),
        (
            "not a container id",
            "0::/docker/abc123\n".into(),
            CgroupInfo::default(),
        ),
        (
            "uppercase id is not a container",
            format!("0::/system.slice/docker-{}.scope\n", ID.to_uppercase()),
            CgroupInfo {
                slice: some("system.slice"),
                ..Default::default()
            },
        ),
    ]
}

/// systemd.
fn systemd_cases() -> Vec<Case> {
    vec![
        ("system service", "0::/system.slice/jupyter.service\n".into(), unit("jupyter.service", "system.slice")),
        ("login session", "0::/user.slice/user-1000.slice/session-3.scope\n".into(), unit("session-3.scope", "user-1000.slice")),
        ("user manager app scope",
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-5f1e.scope\n".into(),
            unit("vte-spawn-5f1e.scope", "app-org.gnome.Terminal.slice")),
        ("user service", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n".into(),
            unit("jupyter.service", "app.slice")),
        ("init", "0::/init.scope\n".into(), CgroupInfo { unit: some("init.scope"), ..Default::default() }),
        ("v1 session: coarse memory line loses to name=systemd",
            "12:memory:/user.slice\n1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n".into(),
            unit("session-3.scope", "user-1000.slice")),
        ("hybrid: unified line wins a tie",
            "12:memory:/system.slice/a.service\n1:name=systemd:/system.slice/b.service\n0::/system.slice/c.service\n".into(),
            unit("c.service", "system.slice")),
    ]
}

/// Slurm.
fn slurm_cases() -> Vec<Case> {
    vec![
        (
            "slurm v1 step 0, systemd line names slurmd",
            "12:memory:/slurm/uid_1000/job_42/step_0/task_0\n11:cpuset:/slurm/uid_1000/job_42/step_0\n\
             4:freezer:/slurm/uid_1000/job_42/step_0\n1:name=systemd:/system.slice/slurmd.service\n"
                .into(),
            slurm("42", "0"),
        ),
        (
            "slurm v1 batch step",
            "7:memory:/slurm/uid_1000/job_42/step_batch/task_0\n".into(),
            slurm("42", "batch"),
        ),
        (
            "slurm v1 multiple slurmd",
            "7:memory:/slurm_node01/uid_0/job_5/step_0\n".into(),
            slurm("5", "0"),
        ),
        (
            "slurm v1 job level",
            "7:memory:/slurm/uid_1000/job_42\n".into(),
            CgroupInfo {
                job: some("42"),
                ..Default::default()
            },
        ),
        (
            "slurm v2 user task",
            "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n".into(),
            with_slice(slurm("42", "0"), "system.slice"),
        ),
        (
            "slurm v2 extern step daemon",
            "0::/system.slice/slurmstepd.scope/job_7/step_extern/slurm\n".into(),
            with_slice(slurm("7", "extern"), "system.slice"),
        ),
        (
            "slurm v2 interactive",
            "0::/system.slice/node1_slurmstepd.scope/job_99/step_interactive/user/task_0\n".into(),
            with_slice(slurm("99", "interactive"), "system.slice"),
        ),
        (
            "job_ outside slurm is nothing",
            "0::/system.slice/batch.slice/job_42\n".into(),
            CgroupInfo {
                slice: some("batch.slice"),
                ..Default::default()
            },
        ),
    ]
}

/// Degenerate input.
fn degenerate_cases() -> Vec<Case> {
    vec![
        ("root cgroup", "0::/\n".into(), CgroupInfo::default()),
        ("empty", String::new(), CgroupInfo::default()),
        (
            "garbage",
            "garbage\n\n::\n0::\n:::::\n\u{1F600}\n".into(),
            CgroupInfo::default(),
        ),
        (
            "a segment with a control character names nothing",
            "0::/user.slice/\ruser-1000.slice/session-3.scope\x1b\n".into(),
            CgroupInfo {
                slice: some("user.slice"),
                ..Default::default()
            },
        ),
    ]
}

fn cases() -> Vec<Case> {
    [
        docker_cases(),
        k8s_systemd_cases(),
        k8s_cgroupfs_cases(),
        podman_containerd_cases(),
        systemd_cases(),
        slurm_cases(),
        degenerate_cases(),
    ]
    .concat()
}

#[test]
fn cgroup_table() {
    let mut failures = Vec::new();
    for (what, contents, want) in cases() {
        let got = parse_cgroup(&contents);
        if got != want {
            failures.push(format!("{what}:\n  got  {got:?}\n  want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn runtime_labels() {
    let labels: Vec<ArcStr> = [Runtime::Docker, Runtime::Containerd, Runtime::CriO, Runtime::Podman]
        .iter()
        .map(Runtime::as_str)
        .collect();
    assert_eq!(labels, ["docker", "containerd", "cri-o", "podman"]);
}
