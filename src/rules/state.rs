//! What an evaluation reuses from the last one: its buffers and, per
//! rule, how the alert labels merge. Owns that layout; what the alert
//! state means (transitions, `for`) is `eval`'s.

use std::sync::Arc;

use super::Rule;
use super::labels::{Labels, Shape, sort_last_wins_by};
use super::subject::LabelBuf;

/// Buffers reused from one evaluation to the next (a pass over unchanged
/// alerts allocates nothing).
#[derive(Debug, Clone, Default)]
pub(super) struct Scratch {
    pub(super) labels: LabelBuf,
    /// One per rule, by position.
    pub(super) plans: Vec<Plan>,
}

/// Where an alert label's value comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Src {
    Inst(usize),
    Alertname,
    Severity,
    Instance,
    Rule(usize),
}

/// How a rule's alert labels merge: the instance's (names as `names`),
/// then alertname, severity and instance, then the rule's own, sorted by
/// name, a later name replacing an earlier one. The same for every
/// instance of a rule, so it is worked out once, not sorted per alert, and
/// its alerts share one [`Shape`].
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    /// The rule it was made for (held, so the address is not reused).
    rule: Option<Arc<str>>,
    names: Vec<&'static str>,
    instance: String,
    pub(super) order: Vec<Src>,
    shape: Arc<Shape>,
}

impl Plan {
    pub(super) fn fit(&mut self, rule: &Rule, buf: &LabelBuf, instance: &str) {
        let same_rule = self.rule.as_ref().is_some_and(|r| Arc::ptr_eq(r, &rule.name));
        if same_rule && self.names.iter().copied().eq(buf.names()) && self.instance == instance {
            return;
        }
        let mut v: Vec<(&str, Src)> = buf.names().enumerate().map(|(i, n)| (n, Src::Inst(i))).collect();
        v.extend([
            ("alertname", Src::Alertname),
            ("severity", Src::Severity),
            ("instance", Src::Instance),
        ]);
        v.extend(
            rule.cfg
                .labels
                .keys()
                .enumerate()
                .map(|(j, k)| (k.as_str(), Src::Rule(j))),
        );
        sort_last_wins_by(&mut v, |p| p.0);
        self.order = v.into_iter().map(|p| p.1).collect();
        self.names = buf.names().collect();
        self.rule = Some(rule.name.clone());
        self.instance = instance.to_string();
        self.shape = Shape::new(
            pairs(&self.order, rule, buf, instance)
                .zip(&self.order)
                .map(|((k, v), s)| {
                    let fixed = !matches!(s, Src::Inst(_));
                    (k, fixed.then_some(v))
                }),
        );
    }
}

/// An instance's labels as its rule's plan merges them, before any are
/// built: an alert whose labels did not change builds nothing.
pub(super) struct Merged<'a> {
    pub(super) plan: &'a Plan,
    pub(super) rule: &'a Rule,
    pub(super) buf: &'a LabelBuf,
    pub(super) instance: &'a str,
}

impl<'a> Merged<'a> {
    /// The instance's own values, in the order the shape leaves them open.
    fn open(&self) -> impl Iterator<Item = &'a str> + Clone + use<'a> {
        let buf = self.buf;
        self.plan.order.iter().filter_map(move |s| match *s {
            Src::Inst(i) => Some(buf.value(i)),
            _ => None,
        })
    }

    pub(super) fn build(&self) -> Labels {
        Labels::shaped(&self.plan.shape, self.open())
    }

    /// Whether `labels` are these (one built from another plan of the same
    /// rule, as after a reload, is compared pair by pair).
    pub(super) fn same_as(&self, labels: &Labels) -> bool {
        labels
            .same_as_shaped(&self.plan.shape, self.open())
            .unwrap_or_else(|| labels.same_as_iter(pairs(&self.plan.order, self.rule, self.buf, self.instance)))
    }
}

/// The alert's labels, sorted, as `plan` merges them.
pub(super) fn pairs<'a>(
    order: &'a [Src],
    rule: &'a Rule,
    buf: &'a LabelBuf,
    instance: &'a str,
) -> impl Iterator<Item = (&'a str, &'a str)> + Clone + 'a {
    order.iter().map(move |s| match *s {
        Src::Inst(i) => (buf.name(i), buf.value(i)),
        Src::Alertname => ("alertname", rule.cfg.name.as_str()),
        Src::Severity => ("severity", rule.cfg.severity.as_str()),
        Src::Instance => ("instance", instance),
        Src::Rule(j) => rule
            .cfg
            .labels
            .iter()
            .nth(j)
            .map_or(("", ""), |(k, v)| (k.as_str(), v.as_str())),
    })
}
