//! Threshold rules: the `[[rule]]` config, its validation, the built-in
//! default rule set, and (in `eval.rs`) the pure evaluation of rules against
//! a snapshot. Owns rule semantics; it must not deliver notifications, signal
//! processes or read clocks (time comes from the snapshot).

pub mod annotations;
pub mod eval;
mod grouped;
mod health;
mod instances;
mod subject;
pub mod template;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arcstr::ArcStr;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::data::snapshot::{GroupBy, Holder};
use crate::data::units::{parse_duration, parse_size};
use annotations::Notes;
pub use instances::Target;

/// What a rule measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    DeviceUsedRatio,
    DeviceUsedBytes,
    DeviceFreeBytes,
    DeviceUnattributedBytes,
    DeviceHeldBytes,
    DeviceLost,
    ProcessUsedBytes,
    ProcessGrowthRate,
    ProcessLeakSuspected,
    ProcessIdleHolder,
    /// Share of the allocator's reserved memory not in tensors, while its
    /// allocation retries climb (the allocator view).
    ProcessFragmentation,
    /// A process reported an out-of-memory error in the last ten minutes.
    ProcessOom,
    GroupUsedBytes,
    PollFailing,
    /// Uncorrected ECC errors since the driver loaded (NVML's volatile count).
    DeviceEccUncorrected,
    /// A row remap waits for a GPU reset.
    DeviceRowRemapPending,
    /// A row remap failed: no spare row left.
    DeviceRowRemapFailed,
    /// Memory-related Xid events in the last 15 minutes.
    DeviceMemoryXid,
    /// Seconds until the GPU's free memory runs out at its holders'
    /// confirmed growth (`full_in_seconds`); no instance while nothing grows.
    /// Its thresholds are durations (`below = "30m"`).
    DeviceFullForecast,
}

impl RuleKind {
    /// Kinds whose condition is a state, not a comparison with a threshold.
    pub fn is_boolean(self) -> bool {
        matches!(
            self,
            RuleKind::DeviceLost
                | RuleKind::ProcessLeakSuspected
                | RuleKind::PollFailing
                | RuleKind::ProcessIdleHolder
                | RuleKind::ProcessOom
                | RuleKind::DeviceRowRemapPending
                | RuleKind::DeviceRowRemapFailed
        )
    }

    /// Kinds about a GPU's memory health (see `health.rs`).
    pub fn is_health(self) -> bool {
        matches!(
            self,
            RuleKind::DeviceEccUncorrected
                | RuleKind::DeviceRowRemapPending
                | RuleKind::DeviceRowRemapFailed
                | RuleKind::DeviceMemoryXid
        )
    }

    pub fn is_process(self) -> bool {
        matches!(
            self,
            RuleKind::ProcessUsedBytes
                | RuleKind::ProcessGrowthRate
                | RuleKind::ProcessLeakSuspected
                | RuleKind::ProcessIdleHolder
                | RuleKind::ProcessFragmentation
        )
    }
}

/// A threshold: a number, a size ("20GiB"; per second for growth rates), a
/// percentage ("90%") or, for `device_full_forecast`, a duration ("30m").
/// The second field is the text read as seconds, when it reads as a
/// duration (a number does): "5m" is 5 MiB to a size and 300 s to a
/// duration, and only the rule's kind says which ([`Rule::new`]).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Threshold(pub f64, pub Option<f64>);

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Threshold;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a number, a size such as \"20GiB\", a percentage such as \"90%\" or a duration such as \"30m\"",
                )
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Threshold, E> {
                Ok(Threshold(v, Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Threshold, E> {
                Ok(Threshold(v as f64, Some(v as f64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Threshold, E> {
                if let Some(p) = v.trim().strip_suffix('%') {
                    let n: f64 = p
                        .trim()
                        .parse()
                        .map_err(|_| E::custom(format!("`{v}` is not a percentage")))?;
                    return Ok(Threshold(n / 100.0, None));
                }
                let secs = parse_duration(v).ok().map(|d| d.get().as_secs_f64());
                match (parse_size(v), secs) {
                    (Ok(b), secs) => Ok(Threshold(b.0 as f64, secs)),
                    (Err(_), Some(secs)) => Ok(Threshold(f64::NAN, Some(secs))),
                    (Err(e), None) => Err(E::custom(e)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Threshold {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

/// A duration that may be zero (`for = "0s"` fires at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
pub struct For(pub f64);

impl<'de> Deserialize<'de> for For {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim() == "0" || s.trim() == "0s" {
            return Ok(For(0.0));
        }
        parse_duration(&s)
            .map(|d| For(d.get().as_secs_f64()))
            .map_err(de::Error::custom)
    }
}

impl Serialize for For {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(std::time::Duration::from_secs_f64(self.0)).to_string())
    }
}

/// Which devices, processes or groups a rule applies to; empty means all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Matchers {
    /// GPU indexes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu: Vec<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uuid: Vec<String>,
    /// Glob on the device name, e.g. "*H100*".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub user: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub container: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unit: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub job: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    /// SIGTERM, then SIGKILL after `[reclaim] grace` (only with `[reclaim] enabled`).
    Terminate,
    /// Lock and checkpoint with CUDA's checkpoint API, parking the memory in
    /// host RAM; the process lives on (`[reclaim.suspend]`, process rules only).
    Suspend,
}

/// What a process rule's alert is about (`per`): without it, one alert
/// per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// One alert per GPU: its value is the count of processes meeting the
    /// condition, `{{ top }}` names the largest.
    Gpu,
}

/// One `[[rule]]` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    pub name: String,
    pub kind: RuleKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<Threshold>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<Threshold>,
    /// Hysteresis: once active, the alert stays active until the value
    /// crosses this (below `above`, or above `below`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear: Option<Threshold>,
    #[serde(rename = "for", default)]
    pub for_: For,
    #[serde(default = "default_severity")]
    pub severity: String,
    #[serde(rename = "match", default)]
    pub matchers: Matchers,
    /// For `device_held_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// For `group_used_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<GroupBy>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<RuleAction>,
    /// Process rules: one alert per GPU instead of one per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<Per>,
}

fn default_severity() -> String {
    "warning".into()
}

/// A validated rule, ready to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub cfg: RuleConfig,
    /// The parsed annotation templates, shared by the rule's alerts.
    pub notes: Arc<Notes>,
    /// `cfg.name`, shared by the rule's alerts.
    pub name: ArcStr,
    /// The labels the rule gives its alerts, in the order they are
    /// merged (a later name replaces an earlier one): alertname,
    /// severity, then its own.
    pub labels: Vec<(ArcStr, ArcStr)>,
}

/// Why a `[[rule]]` is refused; the texts name the key that is wrong (the
/// config loader adds the rule's name and line).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleError {
    #[error("name `{0}` must be letters, digits and _ (it becomes the alertname label)")]
    BadName(String),
    #[error("device_held_bytes needs `holder`")]
    NoHolder,
    #[error("group_used_bytes needs `group_by`")]
    NoGroupBy,
    #[error("`holder` only applies to device_held_bytes")]
    StrayHolder,
    #[error("`group_by` only applies to group_used_bytes")]
    StrayGroupBy,
    #[error("`action` needs a rule about processes or groups (it names the processes to terminate)")]
    ActionWithoutTargets,
    #[error("`action = \"suspend\"` needs a rule about processes (it checkpoints one process at a time)")]
    SuspendWithoutProcess,
    #[error("`per = \"gpu\"` needs a rule about processes (it counts them per GPU)")]
    PerWithoutProcess,
    #[error("`per` and `action` do not go together: an action names one process per alert")]
    PerWithAction,
    #[error("a duration ({0} s) is a threshold only for device_full_forecast; give a size, a number or a percentage")]
    NotASize(f64),
    #[error("device_full_forecast thresholds are durations such as \"30m\", not `{0}`")]
    NotADuration(String),
    #[error("label name `{0}` is not a valid Prometheus label name")]
    BadLabelName(String),
    #[error("annotation `{key}`: {source}")]
    Annotation {
        key: String,
        source: template::TemplateError,
    },
    #[error("{}", format!("{:?} is a state, it takes no above/below/clear", .0).to_lowercase())]
    StateWithThreshold(RuleKind),
    #[error("give either `above` or `below`, not both")]
    BothThresholds,
    #[error("needs a threshold: `above` or `below`")]
    NoThreshold,
    #[error("threshold must be a finite number")]
    NotFinite,
    #[error("{kind} threshold {threshold} is outside 0..1; write 0.9 or \"90%\"")]
    RatioOutOfRange { kind: &'static str, threshold: f64 },
    #[error("`clear` ({clear}) must not be above `above` ({threshold})")]
    ClearAboveAbove { clear: f64, threshold: f64 },
    #[error("`clear` ({clear}) must not be below `below` ({threshold})")]
    ClearBelowBelow { clear: f64, threshold: f64 },
    #[error("{0}")]
    Toml(String),
    #[error("rule {name}: {source}")]
    InSet { name: String, source: Box<RuleError> },
}

impl Rule {
    /// Checks a rule as written; the error names what is wrong (the caller
    /// adds the rule's name and line).
    ///
    /// # Errors
    /// What is wrong, naming the offending key.
    pub fn new(cfg: RuleConfig) -> Result<Rule, RuleError> {
        let cfg = thresholds_of_kind(cfg)?;
        check_thresholds(&cfg)?;
        if cfg.name.is_empty() || !cfg.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(RuleError::BadName(cfg.name));
        }
        match (cfg.kind, cfg.holder, cfg.group_by) {
            (RuleKind::DeviceHeldBytes, None, _) => return Err(RuleError::NoHolder),
            (RuleKind::GroupUsedBytes, _, None) => return Err(RuleError::NoGroupBy),
            (k, Some(_), _) if k != RuleKind::DeviceHeldBytes => return Err(RuleError::StrayHolder),
            (k, _, Some(_)) if k != RuleKind::GroupUsedBytes => return Err(RuleError::StrayGroupBy),
            _ => {}
        }
        if cfg.action.is_some() && !cfg.kind.is_process() && cfg.kind != RuleKind::GroupUsedBytes {
            return Err(RuleError::ActionWithoutTargets);
        }
        if cfg.action == Some(RuleAction::Suspend) && !cfg.kind.is_process() {
            return Err(RuleError::SuspendWithoutProcess);
        }
        if cfg.per.is_some() && !cfg.kind.is_process() {
            return Err(RuleError::PerWithoutProcess);
        }
        if cfg.per.is_some() && cfg.action.is_some() {
            return Err(RuleError::PerWithAction);
        }
        if let Some(k) = cfg.labels.keys().find(|k| !valid_label_name(k)) {
            return Err(RuleError::BadLabelName(k.clone()));
        }
        let notes = Arc::new(Notes::new(&cfg)?);
        let name = ArcStr::from(&cfg.name);
        let mut labels = vec![
            (arcstr::literal!("alertname"), name.clone()),
            (arcstr::literal!("severity"), ArcStr::from(&cfg.severity)),
        ];
        labels.extend(cfg.labels.iter().map(|(k, v)| (ArcStr::from(k), ArcStr::from(v))));
        Ok(Rule {
            cfg,
            notes,
            name,
            labels,
        })
    }
}

/// A forecast's thresholds read as durations; every other kind's as
/// written (a size, a number or a ratio), which must then be a number.
fn thresholds_of_kind(mut cfg: RuleConfig) -> Result<RuleConfig, RuleError> {
    let forecast = cfg.kind == RuleKind::DeviceFullForecast;
    for t in [&mut cfg.above, &mut cfg.below, &mut cfg.clear].into_iter().flatten() {
        if forecast {
            let secs = t.1.ok_or_else(|| RuleError::NotADuration(format!("{}", t.0)))?;
            *t = Threshold(secs, Some(secs));
        } else if t.0.is_nan() {
            return Err(RuleError::NotASize(t.1.unwrap_or_default()));
        }
    }
    Ok(cfg)
}

fn check_thresholds(cfg: &RuleConfig) -> Result<(), RuleError> {
    if cfg.kind.is_boolean() {
        if cfg.above.is_some() || cfg.below.is_some() || cfg.clear.is_some() {
            return Err(RuleError::StateWithThreshold(cfg.kind));
        }
        return Ok(());
    }
    let (t, above) = match (cfg.above, cfg.below) {
        (Some(a), None) => (a.0, true),
        (None, Some(b)) => (b.0, false),
        (Some(_), Some(_)) => return Err(RuleError::BothThresholds),
        (None, None) => return Err(RuleError::NoThreshold),
    };
    if !t.is_finite() {
        return Err(RuleError::NotFinite);
    }
    if matches!(cfg.kind, RuleKind::DeviceUsedRatio | RuleKind::ProcessFragmentation) && !(0.0..=1.0).contains(&t) {
        let kind = if cfg.kind == RuleKind::DeviceUsedRatio {
            "device_used_ratio"
        } else {
            "process_fragmentation"
        };
        return Err(RuleError::RatioOutOfRange { kind, threshold: t });
    }
    if let Some(c) = cfg.clear {
        if above && c.0 > t {
            return Err(RuleError::ClearAboveAbove {
                clear: c.0,
                threshold: t,
            });
        }
        if !above && c.0 < t {
            return Err(RuleError::ClearBelowBelow {
                clear: c.0,
                threshold: t,
            });
        }
    }
    Ok(())
}

fn valid_label_name(k: &str) -> bool {
    let mut c = k.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !k.starts_with("__")
}

/// The default rule set an operator expects; `[alerting] default_rules =
/// false` turns it off. Mirrored by deploy/prometheus/gpumemd.rules.yml.
pub const DEFAULT_RULES: &str = include_str!("defaults.toml");

/// The demo's rules: the same alerts with windows short enough to see within
/// a minute.
pub const DEMO_RULES: &str = include_str!("demo.toml");

/// Parses a rule-set file of `[[rule]]` tables (the defaults, or the demo's).
///
/// # Errors
/// The first rule that does not parse or validate.
pub fn parse_rule_set(text: &str) -> Result<Vec<RuleConfig>, RuleError> {
    #[derive(Deserialize)]
    struct Set {
        rule: Vec<RuleConfig>,
    }
    let set: Set = toml::from_str(text).map_err(|e| RuleError::Toml(e.message().to_string()))?;
    for r in &set.rule {
        Rule::new(r.clone()).map_err(|e| RuleError::InSet {
            name: r.name.clone(),
            source: Box::new(e),
        })?;
    }
    Ok(set.rule)
}

#[cfg(test)]
mod allocator_tests;
#[cfg(test)]
mod grouped_tests;
#[cfg(test)]
mod health_tests;
#[cfg(test)]
mod tests;
