//! What an instance is about (a device, a process on a device, an OOM
//! report, a group, or the poller itself) and how its key and labels are
//! written: into buffers the evaluation reuses, so an alert whose labels did
//! not change costs no allocation (at `--demo large` every pass rebuilt the
//! key and five label strings of 12,800 firing idle holders). Owns what
//! identifies each kind and its label layout; which instances exist is
//! `instances`'s.

use std::fmt::Write as _;
use std::ops::Range;

use super::ident::IdRef;
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

/// Label values written back to back, with each one's name and span.
#[derive(Debug, Clone, Default)]
pub(super) struct LabelBuf {
    text: String,
    spans: Vec<(&'static str, Range<usize>)>,
}

impl LabelBuf {
    pub(super) fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
    }

    fn push(&mut self, name: &'static str, value: &str) {
        let start = self.text.len();
        self.text.push_str(value);
        self.spans.push((name, start..self.text.len()));
    }

    fn push_num(&mut self, name: &'static str, value: u64) {
        let start = self.text.len();
        // Writing to a String cannot fail.
        let _ = write!(self.text, "{value}");
        self.spans.push((name, start..self.text.len()));
    }

    /// The names, in the order written.
    pub(super) fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.spans.iter().map(|(n, _)| *n)
    }

    pub(super) fn name(&self, i: usize) -> &'static str {
        self.spans.get(i).map_or("", |(n, _)| n)
    }

    pub(super) fn value(&self, i: usize) -> &str {
        self.spans
            .get(i)
            .and_then(|(_, r)| self.text.get(r.clone()))
            .unwrap_or_default()
    }
}

impl Subject<'_> {
    /// The instance's identity. PIDs are reused: a process's start time
    /// keeps a new one from inheriting the old one's pending time.
    pub(super) fn id(&self) -> IdRef<'_> {
        match self {
            Subject::Poller => IdRef::Text(""),
            Subject::Device { d, .. } => IdRef::Text(&d.uuid),
            Subject::Process { d, p } => IdRef::Proc {
                dev: &d.uuid,
                pid: p.pid,
                stamp: p.start_time.map_or(0, f64::to_bits),
            },
            // Like its labels, which name no time: one alert per process
            // and GPU however many OOMs it reported (`oom_instances`).
            Subject::Oom { d, o } => IdRef::Proc {
                dev: &d.uuid,
                pid: o.pid,
                stamp: 0,
            },
            Subject::Group { name, .. } => IdRef::Text(name),
        }
    }

    /// Writes the instance's own labels (in any order; `eval` merges them
    /// with the rule's).
    pub(super) fn write_labels(&self, buf: &mut LabelBuf) {
        match self {
            Subject::Poller => {}
            Subject::Device { d, holder, xid } => {
                device_labels(d, buf);
                if let Some(h) = holder {
                    buf.push("holder", h.as_str());
                }
                if let Some(x) = xid {
                    buf.push_num("xid", *x);
                }
            }
            Subject::Process { d, p } => {
                device_labels(d, buf);
                buf.push_num("pid", u64::from(p.pid));
                buf.push("comm", &p.comm);
                buf.push("user", &p.user);
            }
            Subject::Oom { d, o } => {
                device_labels(d, buf);
                buf.push_num("pid", u64::from(o.pid));
                buf.push("comm", &o.comm);
                buf.push("user", &o.user);
            }
            Subject::Group { by, name } => {
                buf.push("group_by", by.as_str());
                buf.push("group", name);
            }
        }
    }
}

/// `uuid`, and `gpu`: the index, or the MIG profile of an instance without one.
fn device_labels(d: &Device, buf: &mut LabelBuf) {
    buf.push("uuid", &d.uuid);
    match d.index {
        Some(i) => buf.push_num("gpu", u64::from(i)),
        None => buf.push("gpu", &d.mig_profile),
    }
}
