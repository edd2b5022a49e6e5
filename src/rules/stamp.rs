//! A wall-clock time that may be absent, in 8 bytes instead of an
//! `Option<f64>`'s 16 (an alert holds two: 32 bytes of each of 12,800
//! alerts at `--demo large`). Owns that encoding; what the times mean is
//! `eval`'s.

use std::fmt;

use serde::{Serialize, Serializer};

/// Unix seconds, or none (stored as NaN, which no clock reading is).
#[derive(Clone, Copy)]
pub struct Stamp(f64);

impl Stamp {
    pub const NONE: Stamp = Stamp(f64::NAN);

    pub fn get(self) -> Option<f64> {
        (!self.0.is_nan()).then_some(self.0)
    }

    /// The time, or `or` when there is none.
    pub fn unwrap_or(self, or: f64) -> f64 {
        self.get().unwrap_or(or)
    }

    pub fn is_some(self) -> bool {
        self.get().is_some()
    }
}

impl From<Option<f64>> for Stamp {
    fn from(t: Option<f64>) -> Self {
        t.map_or(Stamp::NONE, Stamp)
    }
}

impl From<f64> for Stamp {
    fn from(t: f64) -> Self {
        Stamp(t)
    }
}

impl PartialEq for Stamp {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl PartialEq<Option<f64>> for Stamp {
    fn eq(&self, other: &Option<f64>) -> bool {
        self.get() == *other
    }
}

/// Shown and serialised as the `Option<f64>` it stands for.
impl fmt::Debug for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for Stamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stands_for_an_option() {
        for t in [None, Some(0.0), Some(-1.5), Some(1.7e9), Some(f64::INFINITY)] {
            let s = Stamp::from(t);
            assert_eq!(s.get(), t);
            assert_eq!(s, t);
            assert_eq!(format!("{s:?}"), format!("{t:?}"));
            assert_eq!(serde_json::to_string(&s).ok(), serde_json::to_string(&t).ok());
            assert_eq!(s.unwrap_or(7.0), t.unwrap_or(7.0));
        }
        assert_ne!(Stamp::NONE, Stamp::from(1.0));
        assert_eq!(std::mem::size_of::<Stamp>(), 8);
    }
}
