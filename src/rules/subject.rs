//! What an instance is about (a device, a process on a device, an OOM
//! report, a group, or the poller itself), its key and its own labels.
//! Owns what identifies each kind and its label names; which instances
//! exist is `instances`'s.

use std::collections::BTreeMap;

use crate::snapshot::{Device, GroupBy, Holder, Process, RecentOom};

/// An instance's subject, borrowed from the snapshot.
pub(super) enum Subject<'a> {
    /// `poll_failing`: no labels, an empty key.
    Poller,
    /// A GPU as a whole; `holder` for `device_held_bytes`, `xid` for the
    /// latest memory Xid.
    Device {
        d: &'a Device,
        holder: Option<Holder>,
        xid: Option<u64>,
    },
    Process {
        d: &'a Device,
        p: &'a Process,
    },
    Oom {
        d: &'a Device,
        o: &'a RecentOom,
    },
    Group {
        by: GroupBy,
        name: String,
    },
}

impl Subject<'_> {
    /// The instance's key within its rule. PIDs are reused: a process's
    /// start time (its bits) keeps a new one from inheriting the old one's
    /// pending time.
    pub(super) fn key(&self) -> String {
        match self {
            Subject::Poller => String::new(),
            Subject::Device { d, .. } => d.uuid.to_string(),
            Subject::Process { d, p } => {
                format!("{}/{}/{}", d.uuid, p.pid, p.start_time.map_or(0, f64::to_bits))
            }
            Subject::Oom { d, o } => format!("{}/{}/{}", d.uuid, o.pid, o.time.to_bits()),
            Subject::Group { name, .. } => name.clone(),
        }
    }

    /// The instance's own labels (`eval` adds the rule's).
    pub(super) fn labels(&self) -> BTreeMap<String, String> {
        let mut l = BTreeMap::new();
        let mut put = |k: &str, v: &str| l.insert(k.to_string(), v.to_string());
        match self {
            Subject::Poller => {}
            Subject::Device { d, holder, xid } => {
                device_labels(d, &mut put);
                if let Some(h) = holder {
                    put("holder", h.as_str());
                }
                if let Some(x) = xid {
                    put("xid", &x.to_string());
                }
            }
            Subject::Process { d, p } => {
                device_labels(d, &mut put);
                put("pid", &p.pid.to_string());
                put("comm", &p.comm);
                put("user", &p.user);
            }
            Subject::Oom { d, o } => {
                device_labels(d, &mut put);
                put("pid", &o.pid.to_string());
                put("comm", &o.comm);
                put("user", &o.user);
            }
            Subject::Group { by, name } => {
                put("group_by", by.as_str());
                put("group", name);
            }
        }
        l
    }
}

/// `uuid`, and `gpu`: the index, or the MIG profile of an instance without one.
fn device_labels(d: &Device, put: &mut impl FnMut(&str, &str) -> Option<String>) {
    put("uuid", &d.uuid);
    match d.index {
        Some(i) => put("gpu", &i.to_string()),
        None => put("gpu", &d.mig_profile),
    };
}
