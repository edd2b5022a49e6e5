//! [`Who`]: the part of a [`Process`] that attribution keeps between polls
//! (comm, user, uid, placement), and the process's JSON, which shows those fields
//! where they always were.
//!
//! Owns: `Who`, and `Process`'s serde (field names and order, and reading
//! another daemon's JSON back). Must not: depend on the rest of the crate,
//! or hand out a way to edit a shared `Who` in place (one process's edit
//! would change every process that shares it).
//!
//! Why: as four fields they would be 48 bytes in every `Process` and
//! three reference counts per process and poll (comm, user, placement). A
//! `Who` is built once per process by attribution's cache and shared with
//! each poll's snapshot: 8 bytes and one count.

use std::sync::Arc;

use arcstr::ArcStr;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{AllocatorFigures, DriverFigures, Holder, Placement, Process, ProcessState, ProcessType};

/// Who a process is, as the snapshot shows it; shared between
/// attribution's cache and the snapshots that show the process. Read back
/// flattened into a process's JSON (`ProcessIn`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Who {
    pub comm: ArcStr,
    /// Name from passwd, else the uid as text, else "" when `uid` is `None`.
    pub user: ArcStr,
    pub uid: Option<u32>,
    /// Container, pod, unit and job; flattened into the process's JSON.
    #[serde(flatten)]
    pub placement: Placement,
}

impl Who {
    /// A `Who` of its own, for processes built outside attribution
    /// (tests, fixtures, JSON read back).
    pub fn shared(comm: impl Into<ArcStr>, user: impl Into<ArcStr>, uid: Option<u32>) -> Arc<Who> {
        Arc::new(Who {
            comm: comm.into(),
            user: user.into(),
            uid,
            placement: Placement::default(),
        })
    }
}

/// A process reads its shared identity's fields as its own (`p.comm`,
/// `p.placement.job`): readers did so before the fields moved. Read only:
/// there is no `DerefMut`, so a shared `Who` cannot be edited through one
/// process.
impl std::ops::Deref for Process {
    type Target = Who;
    fn deref(&self) -> &Who {
        &self.who
    }
}

/// A process's JSON, in the order the fields had when they were all
/// `Process`'s own (the `Who` fields sit after `type` and `start_time`).
#[derive(Serialize)]
struct ProcessOut<'a> {
    pid: u32,
    used_bytes: Option<u64>,
    used_max_bytes: Option<u64>,
    #[serde(rename = "type")]
    kind: ProcessType,
    comm: &'a ArcStr,
    user: &'a ArcStr,
    uid: Option<u32>,
    ppid: Option<u32>,
    state: ProcessState,
    holder: Option<Holder>,
    start_time: Option<f64>,
    #[serde(flatten)]
    placement: &'a Placement,
    #[serde(skip_serializing_if = "Option::is_none")]
    cmdline: Option<&'a ArcStr>,
    growth_bytes_per_second: Option<f64>,
    leak_suspected: bool,
    sm_util_percent: Option<u8>,
    idle_seconds: Option<f64>,
    idle: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    allocator: Option<&'a AllocatorFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver: Option<&'a DriverFigures>,
}

impl Serialize for Process {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let who = &*self.who;
        ProcessOut {
            pid: self.pid,
            used_bytes: self.used_bytes,
            used_max_bytes: self.used_max_bytes,
            kind: self.kind,
            comm: &who.comm,
            user: &who.user,
            uid: who.uid,
            ppid: self.ppid,
            state: self.state,
            holder: self.holder,
            start_time: self.start_time,
            placement: &who.placement,
            cmdline: self.cmdline.as_ref(),
            growth_bytes_per_second: self.growth_bytes_per_second,
            leak_suspected: self.leak_suspected,
            sm_util_percent: self.sm_util_percent,
            idle_seconds: self.idle_seconds,
            idle: self.idle,
            allocator: self.allocator.as_deref(),
            driver: self.driver.as_deref(),
        }
        .serialize(s)
    }
}

/// A process's JSON as read back: every field optional, as `Process`'s
/// derived serde had it (`start_ticks` is never written, so never read).
#[derive(Default, Deserialize)]
#[serde(default)]
struct ProcessIn {
    pid: u32,
    used_bytes: Option<u64>,
    used_max_bytes: Option<u64>,
    #[serde(rename = "type")]
    kind: ProcessType,
    #[serde(flatten)]
    who: Who,
    ppid: Option<u32>,
    state: ProcessState,
    holder: Option<Holder>,
    start_time: Option<f64>,
    cmdline: Option<ArcStr>,
    growth_bytes_per_second: Option<f64>,
    leak_suspected: bool,
    sm_util_percent: Option<u32>,
    idle_seconds: Option<f64>,
    idle: bool,
    allocator: Option<Box<AllocatorFigures>>,
    driver: Option<Box<DriverFigures>>,
}

impl<'de> Deserialize<'de> for Process {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = ProcessIn::deserialize(d)?;
        Ok(Process {
            pid: p.pid,
            used_bytes: p.used_bytes,
            used_max_bytes: p.used_max_bytes,
            kind: p.kind,
            // A `Who` per process: a snapshot read back is printed once, not
            // kept, so sharing alike processes' would save nothing that lasts.
            who: Arc::new(p.who),
            ppid: p.ppid,
            state: p.state,
            holder: p.holder,
            start_time: p.start_time,
            start_ticks: None,
            cmdline: p.cmdline,
            growth_bytes_per_second: p.growth_bytes_per_second,
            leak_suspected: p.leak_suspected,
            sm_util_percent: p.sm_util_percent.map(Process::percent),
            idle_seconds: p.idle_seconds,
            idle: p.idle,
            allocator: p.allocator,
            driver: p.driver,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field set, so each one's name and place shows in the JSON.
    fn full() -> Process {
        let who = Who {
            comm: "python".into(),
            user: "alice".into(),
            uid: Some(1000),
            placement: Placement {
                container: "c0ffee".into(),
                container_runtime: "docker".into(),
                pod_uid: "pod-1".into(),
                qos_class: "burstable".into(),
                unit: "train.service".into(),
                slice: "user.slice".into(),
                job: "4242".into(),
            },
        };
        Process {
            pid: 7,
            used_bytes: Some(1024),
            used_max_bytes: Some(2048),
            kind: ProcessType::of_lists(true, true, false),
            who: Arc::new(who),
            ppid: Some(1),
            state: ProcessState::Sleeping,
            holder: Some(Holder::Live),
            start_time: Some(1.5),
            start_ticks: None,
            cmdline: Some("python train.py".into()),
            growth_bytes_per_second: Some(2.5),
            leak_suspected: true,
            sm_util_percent: Some(40),
            idle_seconds: Some(3.5),
            idle: true,
            allocator: None,
            driver: None,
        }
    }

    #[test]
    fn the_json_keeps_every_field_name_and_its_place() {
        let json = serde_json::to_string(&full()).unwrap_or_default();
        let want = concat!(
            r#"{"pid":7,"used_bytes":1024,"used_max_bytes":2048,"type":"compute+graphics","#,
            r#""comm":"python","user":"alice","uid":1000,"ppid":1,"state":"sleeping","holder":"live","#,
            r#""start_time":1.5,"container":"c0ffee","container_runtime":"docker","pod_uid":"pod-1","#,
            r#""qos_class":"burstable","unit":"train.service","slice":"user.slice","job":"4242","#,
            r#""cmdline":"python train.py","growth_bytes_per_second":2.5,"leak_suspected":true,"#,
            r#""sm_util_percent":40,"idle_seconds":3.5,"idle":true}"#
        );
        assert_eq!(json, want);
    }

    #[test]
    fn json_reads_back_into_the_same_process_and_missing_fields_default() {
        let p = full();
        let json = serde_json::to_string(&p).unwrap_or_default();
        let back: Option<Process> = serde_json::from_str(&json).ok();
        assert_eq!(back.as_ref(), Some(&p));
        let bare: Option<Process> = serde_json::from_str(r#"{"pid":3,"state":"napping"}"#).ok();
        let bare = bare.unwrap_or_default();
        assert_eq!(
            (bare.pid, bare.state, bare.comm.as_str()),
            (3, ProcessState::Unknown, "")
        );
        assert_eq!(bare.placement, Placement::default());
        // A percentage past a byte (never sent) saturates, not fails.
        let odd: Option<Process> = serde_json::from_str(r#"{"sm_util_percent":300}"#).ok();
        assert_eq!(odd.and_then(|p| p.sm_util_percent), Some(255));
    }

    #[test]
    fn a_process_reads_its_shared_identity_as_its_own() {
        let p = full();
        let q = p.clone();
        assert!(Arc::ptr_eq(&p.who, &q.who));
        assert_eq!(
            (p.comm.as_str(), p.uid, p.placement.job.as_str()),
            ("python", Some(1000), "4242")
        );
    }
}
