//! Follows every subject (process, Slurm job, pod, systemd unit, container)
//! that holds GPU memory, poll by poll, and closes its report when it has
//! left its GPUs: none of its processes live, and what it left behind
//! released (or still there after [`LEFT_BEHIND_LIMIT`]).
//!
//! Owns: the open subjects (at most [`MAX_OPEN`], each a few hundred bytes
//! a GPU) and the per-user idle counter's input. Must not: read /proc,
//! clocks or files (times come from the snapshot), or judge a subject on a
//! poll that could not see its GPUs (a failed poll ends nothing).

use arcstr::ArcStr;
use rustc_hash::{FxHashMap, FxHashSet};

use super::gpu::{GpuAcc, PollFigures, suggest};
use super::{Report, ReportState, Subject};
use crate::data::snapshot::{Device, Holder, Process, Snapshot};

/// Open subjects followed at once; more are not reported (logged once).
pub const MAX_OPEN: usize = 4096;
/// PIDs remembered per subject, to find what they left behind.
const MAX_PIDS: usize = 32;
/// A poll gap longer than this counts as this long (a stopped daemon
/// must not credit a job with the time it was not watched).
const MAX_DT: f64 = 60.0;
/// Memory still left behind this long after the subject ended: the report
/// is written anyway, marked ongoing.
pub const LEFT_BEHIND_LIMIT: f64 = 3600.0;

/// Who a figure belongs to: a process (PID and start ticks, as PIDs are
/// reused) or a group named by its placement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Process(u32, u64),
    Group(Subject, ArcStr),
}

/// One subject while it holds memory or its memory is left behind.
#[derive(Debug, Default)]
struct Open {
    user: ArcStr,
    comm: ArcStr,
    pids: Vec<u32>,
    started: f64,
    /// The latest poll that found it live.
    last_live: f64,
    /// The first poll that found none of its processes live.
    ended: Option<f64>,
    gpus: Vec<GpuAcc>,
}

/// The open subjects and the time of the previous poll.
#[derive(Debug, Default)]
pub struct Tracker {
    open: FxHashMap<Key, Open>,
    prev: Option<f64>,
    full_logged: bool,
}

/// The subjects a process belongs to.
fn keys(p: &Process) -> impl Iterator<Item = Key> + '_ {
    let pl = &p.who.placement;
    let groups = [
        (Subject::Job, &pl.job),
        (Subject::Pod, &pl.pod_uid),
        (Subject::Unit, &pl.unit),
        (Subject::Container, &pl.container),
    ];
    std::iter::once(Key::Process(p.pid, p.start_ticks.unwrap_or(0))).chain(
        groups
            .into_iter()
            .filter(|(_, id)| !id.is_empty())
            .map(|(s, id)| Key::Group(s, id.clone())),
    )
}

/// One subject's figures of one poll: per device index, the figures and
/// whether a live process of it there was not flagged idle; and who its
/// first live process is.
#[derive(Default)]
struct Seen {
    per_dev: Vec<(usize, PollFigures, bool)>,
    user: ArcStr,
    comm: ArcStr,
}

type Figures = FxHashMap<Key, Seen>;

impl Tracker {
    /// Subjects followed now.
    #[cfg(test)]
    pub fn open_len(&self) -> usize {
        self.open.len()
    }

    /// Follows one snapshot; returns the reports it closed and, per user,
    /// the byte-seconds held idle since the previous poll.
    pub fn observe(&mut self, snap: &Snapshot) -> (Vec<Report>, Vec<(ArcStr, f64)>) {
        if !snap.has_polled() || !snap.nvml_up || snap.stale {
            return (Vec::new(), Vec::new());
        }
        let now = snap.timestamp;
        let dt = self.prev.map_or(0.0, |p| (now - p).clamp(0.0, MAX_DT));
        self.prev = Some(now);
        let unattributed: Vec<u64> = snap
            .devices
            .iter()
            .map(|d| d.holders.map_or(0, |h| h.unattributed))
            .collect();
        let mut idle_users: FxHashMap<ArcStr, f64> = FxHashMap::default();
        // Subjects past MAX_OPEN are not followed, so their figures are
        // not gathered either: a poll's work stays bounded by the cap.
        let mut room = MAX_OPEN.saturating_sub(self.open.len());
        let mut refused = false;
        let open = &self.open;
        let figs = live_figures(&snap.devices, dt, &mut idle_users, |k, figs| {
            if figs.contains_key(k) || open.contains_key(k) {
                return true;
            }
            let Some(left) = room.checked_sub(1) else {
                refused = true;
                return false;
            };
            room = left;
            true
        });
        if refused && !std::mem::replace(&mut self.full_logged, true) {
            tracing::warn!(
                limit = MAX_OPEN,
                "too many GPU memory holders to report on; new ones are not reported"
            );
        }
        let mut live_now = FxHashSet::default();
        for (key, seen) in figs {
            let Seen { per_dev, user, comm } = seen;
            let o = self.open.entry(key.clone()).or_insert_with(|| Open {
                user,
                comm,
                started: now,
                ..Open::default()
            });
            o.ended = None;
            o.last_live = now;
            for (i, mut f, busy) in per_dev {
                f.idle = !busy;
                let d = &snap.devices[i];
                let (at, dt) = match o.gpus.iter().position(|g| g.uuid == d.uuid) {
                    Some(at) => (at, dt),
                    None => {
                        let total = d.memory.map_or(0, |m| m.total_bytes);
                        o.gpus.push(GpuAcc::new(&d.uuid, d.index, total));
                        // Its first poll on this GPU counts no time.
                        (o.gpus.len() - 1, 0.0)
                    }
                };
                o.gpus[at].live(&f, unattributed[i], dt);
            }
            live_now.insert(key);
        }
        self.note_pids(snap, &live_now);
        let closed = self.judge_ended(snap, &live_now, &unattributed, now);
        (closed, idle_users.into_iter().collect())
    }

    /// Remembers the PIDs of live subjects (up to [`MAX_PIDS`] each).
    fn note_pids(&mut self, snap: &Snapshot, live: &FxHashSet<Key>) {
        for p in snap.devices.iter().flat_map(|d| &d.processes) {
            if p.holder != Some(Holder::Live) {
                continue;
            }
            for k in keys(p).filter(|k| live.contains(k)) {
                if let Some(o) = self.open.get_mut(&k)
                    && o.pids.len() < MAX_PIDS
                    && !o.pids.contains(&p.pid)
                {
                    o.pids.push(p.pid);
                }
            }
        }
    }

    /// Follows the subjects not live this poll; closes those whose memory
    /// is gone from every GPU (or has been left behind too long).
    fn judge_ended(&mut self, snap: &Snapshot, live: &FxHashSet<Key>, unattributed: &[u64], now: f64) -> Vec<Report> {
        let by_uuid: FxHashMap<&str, usize> = snap
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.uuid.as_str(), i))
            .collect();
        // Bytes listed processes still hold after exiting, per PID and device.
        let mut departed: FxHashMap<(u32, usize), u64> = FxHashMap::default();
        for (i, d) in snap.devices.iter().enumerate() {
            for p in &d.processes {
                if matches!(p.holder, Some(Holder::Exited | Holder::Zombie)) {
                    *departed.entry((p.pid, i)).or_default() += p.used_bytes.unwrap_or(0);
                }
            }
        }
        let mut closed = Vec::new();
        let mut gone = Vec::new();
        for (key, o) in self.open.iter_mut().filter(|(k, _)| !live.contains(*k)) {
            let at: Vec<Option<usize>> = o.gpus.iter().map(|g| by_uuid.get(g.uuid.as_str()).copied()).collect();
            // A GPU that could not be read this poll says nothing.
            let unreadable = at.iter().flatten().any(|&i| {
                let d = &snap.devices[i];
                !d.up || d.processes_unreadable
            });
            if unreadable {
                continue;
            }
            let ended = *o.ended.get_or_insert(now);
            let mut left = false;
            for (g, i) in o.gpus.iter_mut().zip(at) {
                let f = PollFigures {
                    departed_bytes: i.map_or(0, |i| {
                        o.pids
                            .iter()
                            .map(|p| departed.get(&(*p, i)).copied().unwrap_or(0))
                            .sum()
                    }),
                    ..PollFigures::default()
                };
                // A GPU gone from the list: nothing is seen left behind there.
                left |= g.after_end(&f, i.map_or(0, |i| unattributed[i]), now);
            }
            if !left || now - ended >= LEFT_BEHIND_LIMIT {
                closed.push(o.report(key, ReportState::Ended, now));
                gone.push(key.clone());
            }
        }
        for k in gone {
            self.open.remove(&k);
        }
        closed
    }

    /// The open subjects as reports so far ("running" or "ending").
    pub fn open_reports(&self, now: f64) -> Vec<Report> {
        self.open
            .iter()
            .map(|(k, o)| {
                let state = if o.ended.is_some() {
                    ReportState::Ending
                } else {
                    ReportState::Running
                };
                o.report(k, state, now)
            })
            .collect()
    }
}

/// Each subject's figures of one poll, per readable device, for the
/// subjects `follow` admits; adds each idle live process's byte-seconds to
/// its user in `idle_users`.
fn live_figures(
    devices: &[Device],
    dt: f64,
    idle_users: &mut FxHashMap<ArcStr, f64>,
    mut follow: impl FnMut(&Key, &Figures) -> bool,
) -> Figures {
    let mut figs: Figures = FxHashMap::default();
    let readable = |d: &Device| d.up && !d.processes_unreadable && d.memory.is_some();
    for (i, d) in devices.iter().enumerate().filter(|(_, d)| readable(d)) {
        for p in d.processes.iter().filter(|p| p.holder == Some(Holder::Live)) {
            let used = p.used_bytes.unwrap_or(0);
            if p.idle && used > 0 && dt > 0.0 {
                *idle_users.entry(p.who.user.clone()).or_default() += used as f64 * dt;
            }
            for k in keys(p) {
                if !follow(&k, &figs) {
                    continue;
                }
                let seen = figs.entry(k).or_default();
                if seen.per_dev.is_empty() {
                    seen.user = p.who.user.clone();
                    seen.comm = p.who.comm.clone();
                }
                let list = &mut seen.per_dev;
                if list.last().is_none_or(|(at, _, _)| *at != i) {
                    list.push((i, PollFigures::default(), false));
                }
                let Some((_, f, busy)) = list.last_mut() else { continue };
                f.live = true;
                f.live_bytes = f.live_bytes.saturating_add(used);
                *busy |= !p.idle;
                if let Some(a) = &p.allocator {
                    f.reserved_peak = Some(f.reserved_peak.unwrap_or(0) + a.reserved.peak);
                    f.allocated_peak = Some(f.allocated_peak.unwrap_or(0) + a.allocated.peak);
                    f.ooms += a.ooms;
                    f.retries += a.alloc_retries;
                }
            }
        }
    }
    figs
}

impl Open {
    fn report(&self, key: &Key, state: ReportState, now: f64) -> Report {
        let (subject, id) = match key {
            Key::Process(pid, _) => (Subject::Process, pid.to_string()),
            Key::Group(s, id) => (*s, id.to_string()),
        };
        let ended = self.ended;
        let gpus: Vec<_> = self.gpus.iter().map(|g| g.report(ended, now)).collect();
        // The GPU it filled most sizes the request.
        let fullest = gpus.iter().filter(|g| g.total_bytes > 0).max_by(|a, b| {
            let share = |g: &super::GpuReport| g.peak_bytes as f64 / g.total_bytes as f64;
            share(a).total_cmp(&share(b))
        });
        Report {
            subject,
            id,
            user: self.user.to_string(),
            comm: self.comm.to_string(),
            pids: self.pids.clone(),
            state,
            started: self.started,
            last_live: self.last_live,
            ended,
            closed: (state == ReportState::Ended).then_some(now),
            peak_bytes: gpus.iter().map(|g| g.peak_bytes).max().unwrap_or(0),
            ooms: gpus.iter().map(|g| g.ooms).sum(),
            alloc_retries: gpus.iter().map(|g| g.alloc_retries).sum(),
            idle_gib_hours: gpus.iter().map(|g| g.idle_gib_hours).sum(),
            left_behind_bytes: gpus.iter().map(|g| g.left_behind_bytes).sum(),
            suggested: fullest.and_then(|g| suggest(g.peak_bytes, g.total_bytes)),
            gpus,
        }
    }
}
