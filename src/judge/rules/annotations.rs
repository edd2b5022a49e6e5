//! An alert's annotations, rendered when read rather than stored: the
//! rule's parsed templates (shared by all its alerts) plus what only the
//! alert knows (its labels and value, the GPU model, an OOM's other
//! holders). At `--demo large`'s 12,800 firing alerts, stored text was
//! most of each alert's bytes, twice (engine and view). Owns the
//! placeholder values (`value`, `value_human`, ...); the template syntax
//! is `template`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use arcstr::ArcStr;

use super::template::Template;
use super::{RuleConfig, RuleError, RuleKind};
use crate::data::units::human;

/// An alert's label names and values, shared with the snapshot and the
/// rule where they come from.
pub type Labels = BTreeMap<ArcStr, ArcStr>;

/// A rule's annotation templates and what rendering them needs from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notes {
    kind: RuleKind,
    /// `per = "gpu"`: the value is a count of processes.
    counts: bool,
    threshold: Option<f64>,
    templates: Vec<(String, Template)>,
}

impl Notes {
    /// Parses the annotations of `cfg`.
    ///
    /// # Errors
    /// The first template that does not parse, naming its annotation.
    pub fn new(cfg: &RuleConfig) -> Result<Notes, RuleError> {
        let templates = cfg
            .annotations
            .iter()
            .map(|(k, v)| {
                Template::parse(v)
                    .map(|t| (k.clone(), t))
                    .map_err(|source| RuleError::Annotation { key: k.clone(), source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Notes {
            kind: cfg.kind,
            counts: cfg.per.is_some(),
            threshold: cfg.above.or(cfg.below).map(|t| t.0),
            templates,
        })
    }
}

/// What an alert's annotations are rendered from, besides its labels and
/// value.
#[derive(Debug, Clone)]
pub struct Annotations {
    pub notes: Arc<Notes>,
    /// The GPU's name, for `{{ model }}`.
    pub model: ArcStr,
    /// `process_oom`: the largest other holders then.
    pub others: Option<ArcStr>,
    /// `device_full_forecast`: who grows; `per = "gpu"`: the largest of
    /// the processes counted.
    pub top: Option<ArcStr>,
}

/// Equal when they render the same for the same alert; a rule's shared
/// templates compare by address first.
impl PartialEq for Annotations {
    fn eq(&self, o: &Self) -> bool {
        (Arc::ptr_eq(&self.notes, &o.notes) || self.notes == o.notes)
            && self.model == o.model
            && self.others == o.others
            && self.top == o.top
    }
}

impl Annotations {
    /// Annotations given as text (alerts built by hand, not by a rule).
    pub fn fixed(map: BTreeMap<String, String>) -> Annotations {
        let notes = Notes {
            kind: RuleKind::DeviceLost,
            counts: false,
            threshold: None,
            templates: map.into_iter().map(|(k, v)| (k, Template::text(v))).collect(),
        };
        Annotations {
            notes: Arc::new(notes),
            model: ArcStr::new(),
            others: None,
            top: None,
        }
    }

    /// Every annotation, rendered for an alert with `labels` and `value`.
    pub fn render(&self, labels: &Labels, value: f64) -> BTreeMap<String, String> {
        self.notes
            .templates
            .iter()
            .map(|(k, t)| (k.clone(), self.fill(t, labels, value)))
            .collect()
    }

    /// One annotation, rendered; `None` when there is none by that name.
    pub fn get(&self, name: &str, labels: &Labels, value: f64) -> Option<String> {
        let (_, t) = self.notes.templates.iter().find(|(k, _)| k == name)?;
        Some(self.fill(t, labels, value))
    }

    fn fill(&self, t: &Template, labels: &Labels, value: f64) -> String {
        let (kind, threshold, counts) = (self.notes.kind, self.notes.threshold, self.notes.counts);
        let mut out = String::new();
        // These names win over a label of the same name.
        t.render_with(&mut out, |name, out| match name {
            "value" => out.push_str(&format_num(value)),
            "value_human" if counts => out.push_str(&format_num(value)),
            "value_human" => out.push_str(&humanize(kind, value)),
            "threshold" => out.push_str(&threshold.map(format_num).unwrap_or_default()),
            "threshold_human" => out.push_str(&threshold.map(|t| humanize(kind, t)).unwrap_or_default()),
            "model" => out.push_str(&self.model),
            "others" => out.push_str(self.others.as_deref().unwrap_or_default()),
            "top" => out.push_str(self.top.as_deref().unwrap_or_default()),
            _ => out.push_str(labels.get(name).map_or("", ArcStr::as_str)),
        });
        out
    }
}

fn format_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

pub(super) fn humanize(kind: RuleKind, v: f64) -> String {
    match kind {
        RuleKind::DeviceFullForecast => {
            humantime::format_duration(std::time::Duration::from_secs(v.max(0.0).round() as u64)).to_string()
        }
        RuleKind::DeviceUsedRatio | RuleKind::ProcessFragmentation => format!("{:.1}%", v * 100.0),
        RuleKind::ProcessGrowthRate => format!("{}/s", human(v.max(0.0) as u64)),
        RuleKind::DeviceLost | RuleKind::ProcessLeakSuspected | RuleKind::PollFailing | RuleKind::ProcessOom => {
            format_num(v)
        }
        k if k.is_health() => format_num(v),
        _ => human(v.max(0.0) as u64),
    }
}
