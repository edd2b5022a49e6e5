//! `gpumemd check`: judges one snapshot (the running daemon's
//! `/api/v1/snapshot`, or one poll) for GPU memory left behind, for Slurm
//! epilogs and node health checks. Owns the criteria and the one-line
//! verdict with its exit code (here, tested on fixtures alone); it must
//! not poll NVML, ask the daemon (the shared client does, `--url` as a
//! base URL or the full path) or print (main.rs does).
//!
//! Exit codes: 0 nothing left behind, 1 memory left behind (the line says
//! where and by whom), 2 cannot tell (GPU or NVML down, bad answer).

use serde::Deserialize;

use crate::data::units::human;

/// What counts as left behind. Exited and zombie holders always do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Criteria {
    /// The finished job's processes (any selector matching): any of them
    /// still holding memory is left behind.
    pub scope: Scope,
    /// When not empty, a live holder matching none of these is left behind
    /// too (a node that should be idle but for these).
    pub allow: Scope,
    /// Unattributed memory per GPU above this is left behind.
    pub max_unattributed: u64,
}

/// Processes picked by Slurm job, PID, uid or user name (any one matches).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    pub jobs: Vec<String>,
    pub pids: Vec<u32>,
    pub uids: Vec<u32>,
    pub users: Vec<String>,
}

impl Scope {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.pids.is_empty() && self.uids.is_empty() && self.users.is_empty()
    }

    fn matches(&self, p: &Process) -> bool {
        (!p.job.is_empty() && self.jobs.contains(&p.job))
            || self.pids.contains(&p.pid)
            || p.uid.is_some_and(|u| self.uids.contains(&u))
            || (!p.user.is_empty() && self.users.contains(&p.user))
    }
}

/// The fields of `/api/v1/snapshot` the check reads; the rest is ignored,
/// so a newer daemon's additions do not break an older `check`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct View {
    pub nvml_up: bool,
    pub nvml_error: Option<String>,
    pub devices: Vec<Device>,
}

#[derive(Debug, Deserialize)]
pub struct Device {
    pub uuid: String,
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub up: bool,
    #[serde(default)]
    pub holders: Option<Holders>,
    #[serde(default)]
    pub processes: Vec<Process>,
}

#[derive(Debug, Deserialize)]
pub struct Holders {
    pub unattributed: u64,
}

#[derive(Debug, Deserialize)]
pub struct Process {
    pub pid: u32,
    #[serde(default)]
    pub used_bytes: Option<u64>,
    #[serde(default)]
    pub comm: String,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    pub job: String,
}

/// The answer: exit code and one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub code: u8,
    pub line: String,
}

impl Verdict {
    /// Exit 2: `UNKNOWN: ` and why it cannot tell.
    pub fn unknown(line: String) -> Self {
        Verdict {
            code: 2,
            line: format!("UNKNOWN: {line}"),
        }
    }
}

/// One thing left behind, worst (largest) first when reported.
struct Finding {
    bytes: u64,
    text: String,
}

fn gpu_name(d: &Device) -> String {
    match d.index {
        Some(i) => format!("GPU {i}"),
        None => d.uuid.clone(),
    }
}

fn describe(p: &Process, why: &str) -> String {
    let mut who = vec![p.comm.clone()];
    if !p.user.is_empty() {
        who.push(format!("user {}", p.user));
    }
    if !p.job.is_empty() {
        who.push(format!("job {}", p.job));
    }
    who.retain(|s| !s.is_empty());
    format!("pid {} ({}) {why}", p.pid, who.join(", "))
}

/// Judges `view` against `c`.
pub fn judge(view: &View, c: &Criteria) -> Verdict {
    if !view.nvml_up {
        let why = view.nvml_error.as_deref().unwrap_or("NVML is not answering");
        return Verdict::unknown(format!("cannot tell: {why}"));
    }
    if let Some(d) = view.devices.iter().find(|d| !d.up) {
        return Verdict::unknown(format!("cannot tell: {} ({}) is not answering", gpu_name(d), d.uuid));
    }
    let mut found = Vec::new();
    for d in &view.devices {
        findings(d, c, &mut found);
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.bytes));
    // Saturating: the figures come from the daemon's JSON, unchecked.
    let total: u64 = found.iter().map(|f| f.bytes).fold(0, u64::saturating_add);
    match found.split_first() {
        None => Verdict {
            code: 0,
            line: format!("OK: no GPU memory left behind on {} GPU(s)", view.devices.len()),
        },
        Some((first, rest)) => {
            let more = match rest.len() {
                0 => String::new(),
                n => format!(" (and {n} more, {} in all)", human(total)),
            };
            Verdict {
                code: 1,
                line: format!("LEFT: {}{more}", first.text),
            }
        }
    }
}

fn findings(d: &Device, c: &Criteria, out: &mut Vec<Finding>) {
    let gpu = gpu_name(d);
    for p in &d.processes {
        let bytes = p.used_bytes.unwrap_or(0);
        let why = match p.holder.as_deref() {
            Some("exited") => Some("exited and still holds it".to_string()),
            Some("zombie") => Some("is a zombie (or stuck in D) and still holds it".to_string()),
            _ if !c.scope.is_empty() && c.scope.matches(p) => Some("still holds it after its job".to_string()),
            _ if !c.allow.is_empty() && !c.allow.matches(p) => Some("holds it and is not allowed".to_string()),
            _ => None,
        };
        if let Some(why) = why {
            out.push(Finding {
                bytes,
                text: format!("{} on {gpu}: {}", human(bytes), describe(p, &why)),
            });
        }
    }
    if let Some(h) = &d.holders
        && h.unattributed > c.max_unattributed
    {
        out.push(Finding {
            bytes: h.unattributed,
            text: format!(
                "{} on {gpu} held by no listed process (tolerance {})",
                human(h.unattributed),
                human(c.max_unattributed)
            ),
        });
    }
}

/// Judges the JSON text of `/api/v1/snapshot`; a body that is not one is
/// "cannot tell".
pub fn judge_json(body: &str, c: &Criteria) -> Verdict {
    match serde_json::from_str::<View>(body) {
        Ok(v) => judge(&v, c),
        Err(e) => Verdict::unknown(format!("cannot tell: the answer is not a gpumemd snapshot ({e})")),
    }
}

#[cfg(test)]
mod tests;
