//! What an instance is about (a device, a process on a device, an OOM
//! report, a group, a GPU with the processes it names, or the poller
//! itself), its key and its own labels.
//! Owns what identifies each kind and its label names; which instances
//! exist is `instances`'s.

use arcstr::{ArcStr, literal};

use super::annotations::Labels;
use crate::data::snapshot::{Device, GroupBy, Holder, Process, RecentOom};

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
    /// A GPU as a whole, with a list of the processes the alert is about:
    /// a forecast's growers, or the largest of the processes a `per =
    /// "gpu"` rule counts (`{{ top }}`).
    Gpu {
        d: &'a Device,
        top: String,
    },
}

/// A device's label values and model, made once for the run of instances
/// on it and shared by their alerts (at 64 GPUs x 1000 processes, 12,800
/// alerts name 64 UUIDs).
#[derive(Default)]
pub(super) struct DevLabels {
    uuid: ArcStr,
    index: Option<u32>,
    /// `gpu`: the index, or the MIG profile of an instance without one.
    gpu: ArcStr,
    pub(super) model: ArcStr,
}

impl DevLabels {
    /// The values of `d`, made again only when they differ from the last
    /// device's.
    pub(super) fn of(&mut self, d: &Device) -> &DevLabels {
        let same = self.uuid == d.uuid
            && self.index == d.index
            && self.model == d.name
            && (d.index.is_some() || self.gpu == d.mig_profile);
        if !same {
            *self = DevLabels {
                uuid: d.uuid.as_str().into(),
                index: d.index,
                gpu: d
                    .index
                    .map_or_else(|| d.mig_profile.as_str().into(), |i| i.to_string().into()),
                model: d.name.as_str().into(),
            };
        }
        self
    }
}

impl Subject<'_> {
    /// The instance's key within its rule. PIDs are reused: a process's
    /// start time (its bits) keeps a new one from inheriting the old one's
    /// pending time.
    pub(super) fn key(&self) -> String {
        match self {
            Subject::Poller => String::new(),
            Subject::Device { d, .. } | Subject::Gpu { d, .. } => d.uuid.to_string(),
            Subject::Process { d, p } => {
                format!("{}/{}/{}", d.uuid, p.pid, p.start_time.map_or(0, f64::to_bits))
            }
            // Like its labels, which name no time: one alert per process
            // and GPU however many OOMs it reported (`oom_instances`).
            Subject::Oom { d, o } => format!("{}/{}/0", d.uuid, o.pid),
            Subject::Group { name, .. } => name.clone(),
        }
    }

    /// The device the instance is on, if any.
    pub(super) fn device(&self) -> Option<&Device> {
        match self {
            Subject::Device { d, .. }
            | Subject::Process { d, .. }
            | Subject::Oom { d, .. }
            | Subject::Gpu { d, .. } => Some(d),
            Subject::Poller | Subject::Group { .. } => None,
        }
    }

    /// `process_oom`: the largest other holders when the OOM was reported.
    pub(super) fn others(&self) -> Option<&str> {
        match self {
            Subject::Oom { o, .. } => Some(&o.others),
            _ => None,
        }
    }

    /// `device_full_forecast` and `per = "gpu"`: who the alert is about.
    pub(super) fn top(&self) -> Option<&str> {
        match self {
            Subject::Gpu { top, .. } => Some(top),
            _ => None,
        }
    }

    /// The instance's own labels (`eval` adds the rule's); `dev` holds the
    /// values of [`Subject::device`].
    pub(super) fn labels(&self, dev: Option<&DevLabels>) -> Labels {
        let mut l = Labels::new();
        if let Some(dev) = dev {
            l.insert(literal!("uuid"), dev.uuid.clone());
            l.insert(literal!("gpu"), dev.gpu.clone());
        }
        match self {
            Subject::Poller | Subject::Gpu { .. } => {}
            Subject::Device { holder, xid, .. } => {
                if let Some(h) = holder {
                    l.insert(literal!("holder"), h.as_str().into());
                }
                if let Some(x) = xid {
                    l.insert(literal!("xid"), x.to_string().into());
                }
            }
            Subject::Process { p, .. } => {
                l.insert(literal!("pid"), p.pid.to_string().into());
                l.insert(literal!("comm"), p.comm.clone());
                l.insert(literal!("user"), p.user.clone());
            }
            Subject::Oom { o, .. } => {
                l.insert(literal!("pid"), o.pid.to_string().into());
                l.insert(literal!("comm"), o.comm.as_str().into());
                l.insert(literal!("user"), o.user.as_str().into());
            }
            Subject::Group { by, name } => {
                l.insert(literal!("group_by"), by.as_str().into());
                l.insert(literal!("group"), name.as_str().into());
            }
        }
        l
    }
}
