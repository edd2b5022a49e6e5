//! Byte-seconds of GPU memory held by idle processes, per user, for
//! `gpumem_user_idle_held_byte_seconds_total{user}`.
//!
//! Owns: the bound on its cardinality. The first [`TOP_USERS`] users seen
//! holding memory idle keep a series of their own for the daemon's life;
//! later ones add to `user="other"`. Series never move between names, so
//! each one only grows, as a counter must. Must not: decide what idle is
//! (the pipeline's `idle` flag does).

use arcstr::ArcStr;

/// Users with a series of their own.
pub const TOP_USERS: usize = 20;
/// The series of every user past [`TOP_USERS`].
pub const OTHER_USER: &str = "other";

#[derive(Debug, Default)]
pub(super) struct UserIdle {
    named: Vec<(ArcStr, f64)>,
    other: Option<f64>,
}

impl UserIdle {
    pub(super) fn add(&mut self, user: &ArcStr, byte_seconds: f64) {
        if let Some((_, v)) = self.named.iter_mut().find(|(u, _)| u == user) {
            *v += byte_seconds;
        } else if self.named.len() < TOP_USERS && user.as_str() != OTHER_USER {
            self.named.push((user.clone(), byte_seconds));
        } else {
            *self.other.get_or_insert(0.0) += byte_seconds;
        }
    }

    pub(super) fn list(&self) -> Vec<(String, f64)> {
        self.named
            .iter()
            .map(|(u, v)| (u.to_string(), *v))
            .chain(self.other.map(|v| (OTHER_USER.to_string(), v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_past_the_bound_add_to_other_and_no_series_moves() {
        let mut idle = UserIdle::default();
        for i in 0..TOP_USERS + 5 {
            idle.add(&ArcStr::from(format!("u{i}")), 2.0);
        }
        idle.add(&ArcStr::from("u0"), 1.0);
        idle.add(&ArcStr::from(OTHER_USER), 1.0);
        let list = idle.list();
        assert_eq!(list.len(), TOP_USERS + 1);
        assert_eq!(list[0], ("u0".to_string(), 3.0));
        assert_eq!(
            list[TOP_USERS],
            (OTHER_USER.to_string(), 11.0),
            "5 late users and one named other"
        );
    }
}
