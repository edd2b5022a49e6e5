//! The daemon's configuration: typed sections, built-in and demo defaults, and
//! loading a TOML file into them once. Everything downstream takes these typed
//! values; nothing else in the crate reads TOML or re-validates. This module
//! must not start anything or touch the network.

mod checks;
mod error;
mod locate;
mod overrides;
pub mod redact;
mod restart;
pub mod status_page;
pub use crate::data::units;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::data::files;

pub use crate::collect::pipeline::{ProcessMode, Processes};
pub use crate::data::snapshot::GroupBy;
pub use checks::{ListenAddr, ListenError, MAX_POLL_INTERVAL, parse_listen};
pub use error::ConfigError;
pub use overrides::Overrides;
pub use restart::{RestartOnly, needs_restart};
pub use units::{ByteSize, PositiveDuration, Ratio};

/// Where the daemon looks when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpumemd/gpumemd.toml";

/// The whole configuration. Unknown keys are errors so a typo never silently
/// falls back to a default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: Server,
    pub poll: Poll,
    pub nvml: Nvml,
    pub processes: Processes,
    pub state: State,
    pub alerting: Alerting,
    pub notify: crate::act::notify::NotifyConfig,
    pub reclaim: crate::act::reclaim::ReclaimConfig,
    pub allocator: crate::collect::allocator::AllocatorConfig,
    pub ebpf: crate::collect::ledger::EbpfConfig,
    pub links: crate::data::links::LinksConfig,
    pub health: crate::collect::health::HealthConfig,
    pub status_page: status_page::StatusPageConfig,
    /// `[[rule]]` tables: threshold rules evaluated by the daemon itself.
    #[serde(rename = "rule", skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<crate::judge::rules::RuleConfig>,
    /// The file this config came from, for reloads (not a config key).
    #[serde(skip)]
    pub source_path: Option<PathBuf>,
    /// Whether it was layered over the demo defaults (not a config key).
    #[serde(skip)]
    pub demo: bool,
    /// Command-line settings applied over the file, again at each reload.
    #[serde(skip)]
    pub overrides: Overrides,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Alerting {
    /// Evaluate the built-in rule set (src/judge/rules/defaults.toml) besides any
    /// `[[rule]]`; a `[[rule]]` with the same name replaces a built-in one.
    pub default_rules: bool,
    /// The `instance` label of alerts; the host name when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// How many recent transitions `/api/v1/alerts` keeps.
    pub recent_transitions: usize,
}

impl Default for Alerting {
    fn default() -> Self {
        Self {
            default_rules: true,
            instance: None,
            recent_transitions: 100,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// `host:port`; an empty host (":9947") means every interface.
    pub listen: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config_file: Option<PathBuf>,
    /// Allows `POST /-/reload` (Prometheus convention: off by default).
    pub enable_lifecycle: bool,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            listen: ":9947".into(),
            web_config_file: None,
            enable_lifecycle: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Poll {
    pub interval: PositiveDuration,
    /// Deadline of one poll; must be below `interval`. When unset it is 80 %
    /// of the interval, at most 5 s (see docs/design.md).
    pub timeout: Option<PositiveDuration>,
    /// The `_max_bytes` series report the peak over this sliding window.
    pub peak_window: PositiveDuration,
    /// How far back `GET /api/v1/history` reaches, at poll resolution.
    pub history: PositiveDuration,
}

impl Default for Poll {
    fn default() -> Self {
        Self {
            interval: PositiveDuration::secs(1),
            timeout: None,
            peak_window: PositiveDuration::secs(60),
            history: PositiveDuration::secs(15 * 60),
        }
    }
}

impl Poll {
    /// The deadline actually used for each poll.
    pub fn effective_timeout(&self) -> Duration {
        match self.timeout {
            Some(t) => t.get(),
            None => self.interval.get().mul_f64(0.8).min(Duration::from_secs(5)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Nvml {
    /// Library name or path handed to the dynamic loader.
    pub library: String,
}

impl Default for Nvml {
    fn default() -> Self {
        Self {
            library: "libnvidia-ml.so.1".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct State {
    pub dir: PathBuf,
}

impl Default for State {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/lib/gpumemd"),
        }
    }
}

/// Short windows for `--demo`, so a leak, a late release and an idle holder
/// show within a minute. A `--config` file given with `--demo` overrides them.
const DEMO_DEFAULTS: &str = r#"
[processes]
group_by = ["user", "container", "job"]
leak_window = "30s"
late_release_after = "8s"
utilization_interval = "2s"
idle_after = "20s"
"#;

impl Config {
    /// Parses and validates a config text; `origin` names it in errors and
    /// `demo` layers the text over the demo defaults instead of the built-ins.
    ///
    /// # Errors
    /// `ConfigError::Invalid` naming the line and key of the first problem.
    pub fn from_toml(text: &str, origin: &str, demo: bool) -> Result<Config, ConfigError> {
        // Deserialize the text alone first: its errors then carry positions in
        // the file the operator wrote, not in a merged document.
        let located = |e: toml::de::Error| ConfigError::from_toml(origin, text, &e);
        let own: Config = toml::from_str(text).map_err(located)?;
        let mut cfg = if demo {
            let mut base: toml::Table = toml::from_str(DEMO_DEFAULTS)
                .map_err(|e| ConfigError::from_toml("demo defaults", DEMO_DEFAULTS, &e))?;
            merge(&mut base, toml::from_str(text).map_err(located)?);
            toml::Value::Table(base).try_into().map_err(located)?
        } else {
            own
        };
        cfg.demo = demo;
        cfg.validate(origin, text)
    }

    /// Built-in defaults (or the demo's), as if from an empty file.
    pub fn defaults(demo: bool) -> Config {
        // An empty document always parses; fall back to plain defaults rather
        // than panic if that ever changed.
        Config::from_toml("", "defaults", demo).unwrap_or_default()
    }

    /// Loads `path`, a regular file (reload and `check-config`: a FIFO could
    /// only hang them, so it is refused before it is opened); see
    /// [`Config::from_toml`].
    ///
    /// # Errors
    /// `NotFound`/`Read` when the file cannot be read or is not a regular
    /// file, else as `from_toml`.
    pub fn load(path: &Path, demo: bool) -> Result<Config, ConfigError> {
        let text = files::read_regular(path, files::MAX_CONFIG_BYTES).map_err(|e| read_error(path, e))?;
        Config::from_file_text(&text, path, demo)
    }

    /// The config at start: a FIFO is read too (`--config <(...)`), with
    /// the read given up after `deadline` (a FIFO nobody writes or a hung
    /// mount must not hold the start).
    ///
    /// # Errors
    /// As `load`, plus `Read` when the deadline passed.
    pub fn load_within(path: &Path, demo: bool, deadline: Duration) -> Result<Config, ConfigError> {
        let text = files::read_text_within(path, files::MAX_CONFIG_BYTES, deadline).map_err(|e| read_error(path, e))?;
        Config::from_file_text(&text, path, demo)
    }

    fn from_file_text(text: &str, path: &Path, demo: bool) -> Result<Config, ConfigError> {
        let mut cfg = Config::from_toml(text, &path.display().to_string(), demo)?;
        cfg.source_path = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// The rules to evaluate: the built-in set (or the demo's) unless turned
    /// off, with `[[rule]]`s replacing built-ins of the same name.
    pub fn effective_rules(&self) -> Vec<crate::judge::rules::Rule> {
        use crate::judge::rules::{DEFAULT_RULES, DEMO_RULES, parse_rule_set};
        let set = if self.demo { DEMO_RULES } else { DEFAULT_RULES };
        let base = if self.alerting.default_rules {
            parse_rule_set(set).unwrap_or_default()
        } else {
            Vec::new()
        };
        // Built-in rules link to their runbook section (absolute, for
        // receivers that know nothing of gpumemd's docs).
        let host = crate::data::links::hostname();
        let port = parse_listen(&self.server.listen).map_or(0, |a| a.port);
        let mut out: Vec<crate::judge::rules::RuleConfig> = base
            .into_iter()
            .filter(|b| !self.rules.iter().any(|r| r.name == b.name))
            .map(|mut b| {
                let url = self.links.runbook_url(&b.name, &host, port);
                b.annotations.entry("runbook_url".into()).or_insert(url);
                b
            })
            .collect();
        out.extend(self.rules.iter().cloned());
        // Every rule was validated at load; a failure here cannot happen,
        // and dropping the rule is safer than panicking.
        out.into_iter()
            .filter_map(|r| crate::judge::rules::Rule::new(r).ok())
            .collect()
    }
}

/// Deep-merges `over` into `base`: tables merge key by key, anything else is replaced.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn read_error(path: &Path, source: files::ReadError) -> ConfigError {
    let path = path.to_path_buf();
    if source.is_not_found() {
        ConfigError::NotFound { path }
    } else {
        ConfigError::Read { path, source }
    }
}

#[cfg(test)]
mod tests;
