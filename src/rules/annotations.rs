//! An alert's annotations, rendered when read rather than stored: the
//! rule's parsed templates (shared by all its alerts) plus what only the
//! alert knows (its labels and value, the GPU model, an OOM's other
//! holders). Reading one gives the same text an eager render at
//! evaluation gave, for the same inputs; holding 12,800 alerts no longer
//! holds 25,600 rendered strings. Owns the placeholder values (`value`,
//! `value_human`, ...); the template syntax is `template`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::labels::Labels;
use super::template::Template;
use super::{RuleConfig, RuleError, RuleKind};
use crate::units::human;

/// A rule's annotation templates and what rendering them needs from it.
#[derive(Debug, PartialEq)]
pub struct Notes {
    kind: RuleKind,
    threshold: Option<f64>,
    templates: Vec<(String, Template)>,
    uses_model: bool,
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
            uses_model: templates.iter().any(|(_, t)| t.uses("model")),
            templates,
        })
    }

    /// Whether an alert must keep its GPU's model to render these.
    pub fn uses_model(&self) -> bool {
        self.uses_model
    }
}

/// What an alert's annotations are made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotations(Source);

#[derive(Debug, Clone)]
enum Source {
    /// Text given whole (built by hand, not from a rule).
    Fixed(Arc<BTreeMap<String, String>>),
    /// The rule's templates, filled from the alert when read.
    Rule {
        notes: Arc<Notes>,
        /// `None` when the templates need neither: most alerts keep no
        /// text of their own here (16 bytes an alert, not 40).
        vars: Option<Arc<Vars>>,
    },
}

/// What only the alert knows, of what its templates use.
#[derive(Debug, PartialEq)]
struct Vars {
    model: Option<Box<str>>,
    others: Option<Box<str>>,
}

impl Source {
    fn vars(&self) -> (Option<&str>, Option<&str>) {
        match self {
            Source::Rule { vars: Some(v), .. } => (v.model.as_deref(), v.others.as_deref()),
            _ => (None, None),
        }
    }
}

/// Equal when they render the same for the same alert; a rule's shared
/// templates compare by address first (an evaluation compares every
/// alert with its previous self).
impl PartialEq for Source {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Source::Fixed(a), Source::Fixed(b)) => a == b,
            (Source::Rule { notes, .. }, Source::Rule { notes: n, .. }) => {
                (Arc::ptr_eq(notes, n) || notes == n) && self.vars() == other.vars()
            }
            _ => false,
        }
    }
}

impl Annotations {
    /// Annotations given as text.
    pub fn fixed(map: BTreeMap<String, String>) -> Annotations {
        Annotations(Source::Fixed(Arc::new(map)))
    }

    /// Annotations rendered from `notes`; `model` is kept only where the
    /// templates use it.
    pub fn from_rule(notes: &Arc<Notes>, model: Option<&str>, others: Option<&str>) -> Annotations {
        let model = model.filter(|_| notes.uses_model);
        let vars = (model.is_some() || others.is_some()).then(|| {
            Arc::new(Vars {
                model: model.map(Box::from),
                others: others.map(Box::from),
            })
        });
        Annotations(Source::Rule {
            notes: notes.clone(),
            vars,
        })
    }

    /// Whether these are what `from_rule(notes, model, others)` would
    /// give, without building them (an unchanged alert builds nothing).
    pub fn is_from(&self, notes: &Arc<Notes>, model: &str, others: Option<&str>) -> bool {
        match &self.0 {
            Source::Rule { notes: n, .. } => {
                (Arc::ptr_eq(notes, n) || **notes == **n)
                    && self.0.vars() == (Some(model).filter(|_| notes.uses_model), others)
            }
            Source::Fixed(_) => false,
        }
    }

    /// Every annotation, rendered for an alert with `labels` and `value`.
    pub fn render(&self, labels: &Labels, value: f64) -> BTreeMap<String, String> {
        match &self.0 {
            Source::Fixed(m) => (**m).clone(),
            Source::Rule { notes, .. } => notes
                .templates
                .iter()
                .map(|(k, t)| (k.clone(), self.fill(t, labels, value)))
                .collect(),
        }
    }

    /// One annotation, rendered; `None` when the alert has none by that name.
    pub fn get(&self, name: &str, labels: &Labels, value: f64) -> Option<String> {
        match &self.0 {
            Source::Fixed(m) => m.get(name).cloned(),
            Source::Rule { notes, .. } => notes
                .templates
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, t)| self.fill(t, labels, value)),
        }
    }

    fn fill(&self, t: &Template, labels: &Labels, value: f64) -> String {
        let Source::Rule { notes, .. } = &self.0 else {
            return String::new();
        };
        let (model, others) = self.0.vars();
        let mut out = String::new();
        // These names win over a label of the same name, as they did when
        // they were inserted into the variables after the labels.
        t.render_with(&mut out, |name, out| match name {
            "value" => out.push_str(&format_num(value)),
            "value_human" => out.push_str(&humanize(notes.kind, value)),
            "threshold" => out.push_str(&notes.threshold.map(format_num).unwrap_or_default()),
            "threshold_human" => {
                out.push_str(&notes.threshold.map(|t| humanize(notes.kind, t)).unwrap_or_default());
            }
            "model" => out.push_str(model.unwrap_or_default()),
            "others" => out.push_str(others.unwrap_or_default()),
            _ => out.push_str(labels.get(name).unwrap_or_default()),
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
