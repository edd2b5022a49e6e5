//! The daemon's own alert state: runs the rules on every snapshot, keeps
//! pending and firing alerts and recent transitions, and publishes a view
//! for `/api/v1/alerts`, `gpumem_alerts` and the status page. Rule
//! semantics live in `rules/`; delivery in `notify/`; this file only holds
//! state between evaluations and survives reloads; `actions.rs` turns its
//! outcome into notification payloads and reclaim targets.

mod actions;

use std::collections::VecDeque;

use serde::Serialize;

/// The host name for the `instance` label.
pub use crate::data::links::hostname;
use crate::data::snapshot::Snapshot;
use crate::judge::rules::Rule;
use crate::judge::rules::eval::{self, Alert, EvalState, State, Transition};
pub use actions::{changed_payloads, firing_targets_of, payload, reclaim_targets, targets_of};

/// What readers see: active alerts and the latest transitions.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AlertsView {
    /// Pending and firing alerts.
    pub alerts: Vec<Alert>,
    /// Newest first.
    pub transitions: Vec<Transition>,
    /// Rules evaluated, by name.
    pub rules: Vec<String>,
}

/// Transitions one evaluation's buffer keeps room for between storms.
const OUT_KEPT: usize = 64;

/// Rule state between evaluations.
pub struct AlertEngine {
    rules: Vec<Rule>,
    state: EvalState,
    recent: VecDeque<Transition>,
    keep_recent: usize,
    instance: String,
    /// Whether the view changed since [`AlertEngine::take_changed`].
    changed: bool,
    /// The transitions of one evaluation, its buffer kept.
    out: Vec<Transition>,
}

impl AlertEngine {
    pub fn new(rules: Vec<Rule>, instance: String, keep_recent: usize) -> Self {
        Self {
            rules,
            state: EvalState::new(),
            recent: VecDeque::new(),
            keep_recent,
            instance,
            changed: true,
            out: Vec::new(),
        }
    }

    /// Replaces the rules after a reload. Alerts of rules that are unchanged
    /// keep their state (pending time, firing); alerts of removed or changed
    /// rules are dropped, and a firing one is reported resolved.
    pub fn set_rules(&mut self, rules: Vec<Rule>, now: f64) -> Vec<Transition> {
        let mut out = Vec::new();
        let kept: Vec<String> = rules
            .iter()
            .filter(|r| self.rules.iter().any(|o| o.cfg == r.cfg))
            .map(|r| r.cfg.name.clone())
            .collect();
        self.changed = true;
        self.state.retain(|rule, a| {
            let keep = kept.iter().any(|n| n == rule);
            if !keep {
                eval::resolve(a, now, &mut out);
            }
            keep
        });
        self.rules = rules;
        self.remember(&out);
        out
    }

    /// Evaluates every rule on `snap`; returns the transitions it caused.
    pub fn evaluate(&mut self, snap: &Snapshot) -> &[Transition] {
        self.out.clear();
        // A storm's buffer is not kept for every evaluation after it: the
        // 12,800 alerts `--demo large` fires at once left 2 MB of
        // transitions' room held for good.
        self.out.shrink_to(OUT_KEPT);
        self.changed |= eval::update(&self.rules, &mut self.state, snap, &self.instance, &mut self.out);
        let out = std::mem::take(&mut self.out);
        self.remember(&out);
        self.out = out;
        &self.out
    }

    /// The transitions of the last [`AlertEngine::evaluate`].
    pub fn last_transitions(&self) -> &[Transition] {
        &self.out
    }

    /// Whether alerts, transitions or rules changed since the last call:
    /// an evaluation that changed nothing needs no new view published.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    fn remember(&mut self, transitions: &[Transition]) {
        // Only the newest `keep_recent` can stay.
        let newest = &transitions[transitions.len().saturating_sub(self.keep_recent)..];
        for t in newest {
            self.recent.push_front(t.clone());
        }
        self.recent.truncate(self.keep_recent);
    }

    pub fn view(&self) -> AlertsView {
        AlertsView {
            alerts: self.active(),
            transitions: self.recent.iter().cloned().collect(),
            rules: self.rules.iter().map(|r| r.cfg.name.clone()).collect(),
        }
    }

    /// The active alerts, in a list sized to them (grown by doubling,
    /// 12,800 alerts left room for 3,584 more).
    fn active(&self) -> Vec<Alert> {
        let mut v = Vec::with_capacity(self.state.values().count());
        v.extend(self.state.values().cloned());
        v
    }

    /// Firing alerts (for notifier resends).
    pub fn firing(&self) -> impl Iterator<Item = &Alert> {
        self.state.values().filter(|a| a.state == State::Firing)
    }
}

#[cfg(test)]
mod tests;
