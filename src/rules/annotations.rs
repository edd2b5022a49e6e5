//! An alert's annotations: the rule's parsed templates, rendered at
//! evaluation from what the alert knows (its labels and value, the GPU
//! model, an OOM's other holders). Owns the placeholder values (`value`,
//! `value_human`, ...); the template syntax is `template`'s.

use std::collections::BTreeMap;

use super::template::Template;
use super::{RuleConfig, RuleError, RuleKind};
use crate::units::human;

/// A rule's annotation templates and what rendering them needs from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notes {
    kind: RuleKind,
    threshold: Option<f64>,
    templates: Vec<(String, Template)>,
}

/// What only the alert knows, of what its templates may use.
pub struct Vars<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub value: f64,
    pub model: &'a str,
    pub others: Option<&'a str>,
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
            threshold: cfg.above.or(cfg.below).map(|t| t.0),
            templates,
        })
    }

    /// Every annotation, rendered for an alert.
    pub fn render(&self, v: &Vars) -> BTreeMap<String, String> {
        self.templates
            .iter()
            .map(|(k, t)| (k.clone(), self.fill(t, v)))
            .collect()
    }

    fn fill(&self, t: &Template, v: &Vars) -> String {
        let mut out = String::new();
        // These names win over a label of the same name.
        t.render_with(&mut out, |name, out| match name {
            "value" => out.push_str(&format_num(v.value)),
            "value_human" => out.push_str(&humanize(self.kind, v.value)),
            "threshold" => out.push_str(&self.threshold.map(format_num).unwrap_or_default()),
            "threshold_human" => {
                out.push_str(&self.threshold.map(|t| humanize(self.kind, t)).unwrap_or_default());
            }
            "model" => out.push_str(v.model),
            "others" => out.push_str(v.others.unwrap_or_default()),
            _ => out.push_str(v.labels.get(name).map_or("", String::as_str)),
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

fn humanize(kind: RuleKind, v: f64) -> String {
    match kind {
        RuleKind::DeviceUsedRatio | RuleKind::ProcessFragmentation => format!("{:.1}%", v * 100.0),
        RuleKind::ProcessGrowthRate => format!("{}/s", human(v.max(0.0) as u64)),
        RuleKind::DeviceLost | RuleKind::ProcessLeakSuspected | RuleKind::PollFailing | RuleKind::ProcessOom => {
            format_num(v)
        }
        k if k.is_health() => format_num(v),
        _ => human(v.max(0.0) as u64),
    }
}
