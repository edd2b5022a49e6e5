//! The part of the config that only takes effect at start: everything that
//! `lib::run` hands to a component once (poller, NVML source, listener, web
//! config path, state dir, notifiers, the pipeline's attribution and
//! diagnosis settings, the alert engine's instance and history size). A
//! reload compares this view of the old and new config; what differs is
//! reported as needing a restart. It must not decide anything else.
//!
//! Live settings, by contrast, are read from the current config each time:
//! rules and `alerting.default_rules` (alert loop), `[reclaim]` (reclaim
//! follower), `server.enable_lifecycle` (HTTP handlers), and
//! `processes.mode`/`group_by`/`top_n`/`min_bytes` (metrics, at scrape time).

use std::path::Path;

use serde::Serialize;

use super::{ByteSize, Config, Nvml, Poll, PositiveDuration, State};

/// The restart-only settings of one config. Add a field here when a
/// component starts reading a setting only at construction.
#[derive(Debug, PartialEq, Serialize)]
pub struct RestartOnly<'a> {
    poll: &'a Poll,
    nvml: &'a Nvml,
    server: Server<'a>,
    state: &'a State,
    notify: &'a crate::act::notify::NotifyConfig,
    alerting: Alerting<'a>,
    processes: Pipeline<'a>,
    /// The receiver binds its socket and sizes its limits once.
    allocator: &'a crate::collect::allocator::AllocatorConfig,
    /// The probes are loaded and their maps sized once.
    ebpf: &'a crate::collect::ledger::EbpfConfig,
    health: &'a crate::collect::health::HealthConfig,
}

#[derive(Debug, PartialEq, Serialize)]
struct Server<'a> {
    listen: &'a str,
    web_config_file: Option<&'a Path>,
}

#[derive(Debug, PartialEq, Serialize)]
struct Alerting<'a> {
    instance: Option<&'a str>,
    recent_transitions: usize,
}

/// What `Pipeline::new` copies. `label_max_bytes` is here because the
/// pipeline cuts command lines with the value it was built with.
#[derive(Debug, PartialEq, Serialize)]
struct Pipeline<'a> {
    proc_root: &'a Path,
    passwd_file: &'a Path,
    cmdline: bool,
    label_max_bytes: usize,
    leak_window: PositiveDuration,
    leak_min_rate: ByteSize,
    late_release_after: PositiveDuration,
    utilization_interval: PositiveDuration,
    idle_after: PositiveDuration,
}

impl<'a> RestartOnly<'a> {
    pub fn of(c: &'a Config) -> Self {
        let p = &c.processes;
        RestartOnly {
            poll: &c.poll,
            nvml: &c.nvml,
            server: Server {
                listen: &c.server.listen,
                web_config_file: c.server.web_config_file.as_deref(),
            },
            state: &c.state,
            notify: &c.notify,
            alerting: Alerting {
                instance: c.alerting.instance.as_deref(),
                recent_transitions: c.alerting.recent_transitions,
            },
            health: &c.health,
            processes: Pipeline {
                proc_root: &p.proc_root,
                passwd_file: &p.passwd_file,
                cmdline: p.cmdline,
                label_max_bytes: p.label_max_bytes,
                leak_window: p.leak_window,
                leak_min_rate: p.leak_min_rate,
                late_release_after: p.late_release_after,
                utilization_interval: p.utilization_interval,
                idle_after: p.idle_after,
            },
            allocator: &c.allocator,
            ebpf: &c.ebpf,
        }
    }
}

/// Dotted names of the restart-only settings that differ between `old` and
/// `new`; empty when a reload can apply everything.
pub fn needs_restart(old: &Config, new: &Config) -> Vec<String> {
    let (a, b) = (RestartOnly::of(old), RestartOnly::of(new));
    if a == b {
        return Vec::new();
    }
    let mut out = Vec::new();
    // The names come from the view's own shape, so they cannot drift from it.
    if let (Ok(x), Ok(y)) = (toml::Value::try_from(&a), toml::Value::try_from(&b)) {
        diff("", &x, &y, &mut out);
    }
    if out.is_empty() {
        // Only something that prints redacted (a secret) changed.
        out.push("notify (a secret)".into());
    }
    out
}

fn diff(prefix: &str, a: &toml::Value, b: &toml::Value, out: &mut Vec<String>) {
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => diff(&name, v, w, out),
                    (None, None) => {}
                    _ => out.push(name),
                }
            }
        }
        _ if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        Config::from_toml(text, "t", false).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn restart_only_changes_are_named_and_live_ones_are_not() {
        let base = cfg("");
        let cases: &[(&str, &[&str])] = &[
            ("", &[]),
            ("[processes]\nlabel_max_bytes = 64", &["processes.label_max_bytes"]),
            ("[processes]\ntop_n = 3\nmode = \"grouped\"", &[]),
            ("[processes]\ncmdline = true", &["processes.cmdline"]),
            ("[poll]\ninterval = \"2s\"", &["poll.interval", "poll.timeout"]),
            ("[server]\nlisten = \":1\"", &["server.listen"]),
            ("[server]\nenable_lifecycle = true", &[]),
            ("[nvml]\nlibrary = \"x.so\"", &["nvml.library"]),
            (
                "[alerting]\ninstance = \"h\"\ndefault_rules = false",
                &["alerting.instance"],
            ),
            ("[state]\ndir = \"/x\"", &["state.dir"]),
            ("[notify.webhook]\nurl = \"http://localhost:1/\"", &["notify.webhook"]),
            ("[reclaim]\ndry_run = false", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(needs_restart(&base, &cfg(text)), *want, "for {text:?}");
        }
    }

    #[test]
    fn the_same_overrides_need_no_restart() {
        let o = super::super::Overrides {
            nvml_lib: Some("/lib/fake.so".into()),
            cuda_lib: None,
            listen: Some("127.0.0.1:0".into()),
            web_config_file: None,
            telemetry_path: None,
            tls: false,
        };
        let (mut a, mut b) = (cfg(""), cfg("[processes]\ntop_n = 5"));
        o.apply(&mut a);
        o.apply(&mut b);
        assert!(needs_restart(&a, &b).is_empty());
        assert_eq!(needs_restart(&cfg(""), &a), ["nvml.library", "server.listen"]);
    }
}
