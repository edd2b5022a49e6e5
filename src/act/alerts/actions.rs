//! What an evaluation's outcome asks of the notifiers and the reclaimer:
//! alerts as notification payloads, and the processes of alerts that fired
//! with `action = "terminate"` or `"suspend"` as reclaim targets. Pure conversions beside
//! the alert engine; delivering and signalling stay in `notify/` and
//! `reclaim/`, and nothing here spawns, blocks or keeps state.

use crate::act::notify::{AlertPayload, AlertStatus};
use crate::act::reclaim::Target;
use crate::judge::rules::RuleAction;
use crate::judge::rules::eval::{Alert, State, Transition};

/// An alert as the notifiers send it.
pub fn payload(a: &Alert) -> AlertPayload {
    AlertPayload {
        labels: a.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        annotations: a.annotations(),
        status: if a.state == State::Resolved {
            AlertStatus::Resolved
        } else {
            AlertStatus::Firing
        },
        starts_at: a.fired_at.unwrap_or(a.active_at),
        ends_at: a.resolved_at,
        value: Some(a.value),
        generator_url: String::new(),
    }
}

/// Payloads for the transitions a receiver hears about: fired and resolved.
/// Pending is gpumemd's own business, as it is in Prometheus.
pub fn changed_payloads(transitions: &[Transition]) -> Vec<AlertPayload> {
    transitions
        .iter()
        .filter(|t| t.to != State::Pending)
        .map(|t| payload(&t.alert))
        .collect()
}

/// The processes of alerts that just fired with `action = "terminate"`.
pub fn reclaim_targets(transitions: &[Transition]) -> Vec<Target> {
    targets_of(transitions, RuleAction::Terminate)
}

/// The processes of alerts that just fired with `action`.
pub fn targets_of(transitions: &[Transition], action: RuleAction) -> Vec<Target> {
    transitions
        .iter()
        .filter(|t| t.to == State::Firing && t.alert.action == Some(action))
        .flat_map(|t| t.alert.targets.iter().cloned())
        .collect()
}

/// The processes of firing alerts (e.g. the engine's firing set) with
/// `action`: what a refused suspend is retried on.
pub fn firing_targets_of<'a>(alerts: impl Iterator<Item = &'a Alert>, action: RuleAction) -> Vec<Target> {
    alerts
        .filter(|a| a.state == State::Firing && a.action == Some(action))
        .flat_map(|a| a.targets.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::judge::rules::eval::Annotations;

    fn alert(state: State, action: Option<RuleAction>, pids: &[u32]) -> Alert {
        Alert {
            rule: "R".into(),
            labels: BTreeMap::from([("alertname".into(), "R".into()), ("uuid".into(), "GPU-a".into())]),
            notes: Annotations::fixed(BTreeMap::from([("summary".into(), "s".into())])),
            state,
            active_at: 10.0,
            fired_at: (state != State::Pending).then_some(20.0),
            resolved_at: (state == State::Resolved).then_some(30.0),
            value: 7.5,
            since_mono: 0.0,
            targets: pids
                .iter()
                .map(|&pid| Target {
                    gpu_uuid: "GPU-a".into(),
                    rule: "R".into(),
                    pid,
                    start_time: Some(1.0),
                    start_ticks: Some(100 + u64::from(pid)),
                    uid: Some(1000),
                    user: "alice".into(),
                    comm: "python".into(),
                    used_bytes: Some(1 << 30),
                })
                .collect(),
            action,
        }
    }

    fn to(state: State, action: Option<RuleAction>, pids: &[u32]) -> Transition {
        Transition {
            from: None,
            to: state,
            at: 20.0,
            alert: alert(state, action, pids),
        }
    }

    #[test]
    fn payload_carries_status_times_and_value() {
        let firing = payload(&alert(State::Firing, None, &[]));
        assert_eq!(firing.status, AlertStatus::Firing);
        assert_eq!((firing.starts_at, firing.ends_at), (20.0, None));
        assert_eq!(firing.value, Some(7.5));
        assert_eq!(firing.labels.get("uuid").map(String::as_str), Some("GPU-a"));
        let resolved = payload(&alert(State::Resolved, None, &[]));
        assert_eq!(resolved.status, AlertStatus::Resolved);
        assert_eq!(resolved.ends_at, Some(30.0));
        // A pending alert has not fired: it starts when it became active.
        assert_eq!(payload(&alert(State::Pending, None, &[])).starts_at, 10.0);
    }

    #[test]
    fn receivers_hear_of_fired_and_resolved_not_pending() {
        let ts = [
            to(State::Pending, None, &[]),
            to(State::Firing, None, &[]),
            to(State::Resolved, None, &[]),
        ];
        let statuses: Vec<AlertStatus> = changed_payloads(&ts).iter().map(|p| p.status).collect();
        assert_eq!(statuses, [AlertStatus::Firing, AlertStatus::Resolved]);
    }

    #[test]
    fn only_terminate_alerts_that_just_fired_give_targets() {
        let t = Some(RuleAction::Terminate);
        let ts = [
            to(State::Firing, t, &[1, 2]),
            to(State::Firing, None, &[3]),
            to(State::Pending, t, &[4]),
            to(State::Resolved, t, &[5]),
        ];
        let got = reclaim_targets(&ts);
        assert_eq!(got.iter().map(|t| t.pid).collect::<Vec<_>>(), [1, 2]);
        let s = Some(RuleAction::Suspend);
        let mixed = [to(State::Firing, s, &[6]), to(State::Firing, t, &[7])];
        let suspend: Vec<u32> = targets_of(&mixed, RuleAction::Suspend).iter().map(|t| t.pid).collect();
        assert_eq!(suspend, [6], "each action gets only its own alerts' processes");
        assert_eq!(got[0].start_ticks, Some(101));
        assert_eq!((got[0].rule.as_str(), got[0].gpu_uuid.as_str()), ("R", "GPU-a"));
        assert_eq!(got[1].uid, Some(1000));
    }
}
