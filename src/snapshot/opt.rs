//! [`Opt`]: an optional number in the number's own size, for the figures
//! every [`Process`](super::Process) carries (used and peak bytes, start
//! ticks and time, growth, idle seconds, parent PID).
//!
//! Owns: the type, its sentinels and its serde. Must not: depend on the
//! rest of the crate, or let a sentinel out as a value (`get` is the only
//! way in or out, and it says `None`).
//!
//! Why (issue 21, round 10): an `Option<u64>` or `Option<f64>` is 16 bytes
//! and an `Option<u32>` 8, the tag padded to the number's alignment. Seven
//! of them made up 104 of a `Process`'s 152 bytes, and at 64 GPUs x 1000
//! processes two snapshot generations hold 128,000 processes: 8 bytes each
//! is 1 MB. Stored with a sentinel they take 56.
//!
//! The sentinels, and what a real value equal to one becomes:
//! - `u64::MAX`: NVML's own "not available" (`NVML_VALUE_NOT_AVAILABLE`),
//!   which the NVML source already turned into `None` before a process was
//!   built; no byte count, tick count or peak reaches it otherwise. Reads
//!   as `None`, as the history's `ABSENT_U64` does.
//! - `u32::MAX`: no PID is that large (Linux caps them at 2^22). Reads as
//!   `None`.
//! - NaN (any NaN): no figure that is set is NaN (start times, growth and
//!   idle seconds are finite), and where one was, the JSON API already
//!   wrote `null` for it (serde_json has no NaN). Reads as `None`, so a
//!   metric of it is left out rather than written as `NaN`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number with one value set aside to mean "absent".
pub trait Niche: Copy {
    /// The value stored for `None`.
    const NONE: Self;
    /// Whether `self` is (one of) the value(s) stored for `None`.
    fn is_niche(self) -> bool;
}

impl Niche for u64 {
    const NONE: u64 = u64::MAX;
    fn is_niche(self) -> bool {
        self == u64::MAX
    }
}

impl Niche for u32 {
    const NONE: u32 = u32::MAX;
    fn is_niche(self) -> bool {
        self == u32::MAX
    }
}

impl Niche for f64 {
    const NONE: f64 = f64::NAN;
    fn is_niche(self) -> bool {
        self.is_nan()
    }
}

/// An `Option<T>` in `size_of::<T>()` bytes. Reads like one (`get`, `map`,
/// `unwrap_or`, ...), compares with one, and (de)serializes as one: `null`
/// or the number. A `Some` of the sentinel is stored as `None` (see the
/// module header for why that loses nothing).
#[derive(Clone, Copy)]
pub struct Opt<T: Niche>(T);

impl<T: Niche> Opt<T> {
    pub const NONE: Opt<T> = Opt(T::NONE);

    /// `Some(v)`, or `None` where `v` is the sentinel.
    pub const fn some(v: T) -> Self {
        Opt(v)
    }

    pub fn get(self) -> Option<T> {
        (!self.0.is_niche()).then_some(self.0)
    }

    pub fn is_some(self) -> bool {
        !self.0.is_niche()
    }

    pub fn is_none(self) -> bool {
        self.0.is_niche()
    }

    pub fn is_some_and(self, f: impl FnOnce(T) -> bool) -> bool {
        self.get().is_some_and(f)
    }

    pub fn is_none_or(self, f: impl FnOnce(T) -> bool) -> bool {
        self.get().is_none_or(f)
    }

    pub fn and_then<U>(self, f: impl FnOnce(T) -> Option<U>) -> Option<U> {
        self.get().and_then(f)
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Option<U> {
        self.get().map(f)
    }

    pub fn map_or<U>(self, default: U, f: impl FnOnce(T) -> U) -> U {
        self.get().map_or(default, f)
    }

    pub fn unwrap_or(self, default: T) -> T {
        self.get().unwrap_or(default)
    }
}

impl<T: Niche> Default for Opt<T> {
    fn default() -> Self {
        Opt::NONE
    }
}

impl<T: Niche> From<Option<T>> for Opt<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Opt::NONE, Opt)
    }
}

impl<T: Niche> From<Opt<T>> for Option<T> {
    fn from(v: Opt<T>) -> Self {
        v.get()
    }
}

/// Equal as the `Option`s are: every `None` (every NaN) is one.
impl<T: Niche + PartialEq> PartialEq for Opt<T> {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl<T: Niche + PartialEq> PartialEq<Option<T>> for Opt<T> {
    fn eq(&self, other: &Option<T>) -> bool {
        self.get() == *other
    }
}

impl<T: Niche + Eq> Eq for Opt<T> {}

/// As the `Option`: `Some(5)` or `None`, so test failures and logs read as
/// they did.
impl<T: Niche + fmt::Debug> fmt::Debug for Opt<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl<T: Niche + Serialize> Serialize for Opt<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

impl<'de, T: Niche + Deserialize<'de>> Deserialize<'de> for Opt<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(d).map(Opt::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_is_the_size_of_its_number() {
        assert_eq!(std::mem::size_of::<Opt<u64>>(), 8);
        assert_eq!(std::mem::size_of::<Opt<f64>>(), 8);
        assert_eq!(std::mem::size_of::<Opt<u32>>(), 4);
    }

    #[test]
    fn it_reads_as_the_option_it_was_made_from() {
        for v in [None, Some(0u64), Some(7), Some(u64::MAX - 1)] {
            let o = Opt::from(v);
            assert_eq!((o.get(), o.is_some(), o.is_none()), (v, v.is_some(), v.is_none()));
            assert_eq!(o, v);
            assert_eq!(o.map(|x| x / 2), v.map(|x| x / 2));
            assert_eq!(o.unwrap_or(3), v.unwrap_or(3));
            assert_eq!(o.map_or(1, |x| x.wrapping_add(1)), v.map_or(1, |x| x.wrapping_add(1)));
            assert_eq!(o.is_some_and(|x| x > 5), v.is_some_and(|x| x > 5));
            assert_eq!(o.is_none_or(|x| x > 5), v.is_none_or(|x| x > 5));
            assert_eq!(o.and_then(|x| x.checked_add(1)), v.and_then(|x| x.checked_add(1)));
            assert_eq!(format!("{o:?}"), format!("{v:?}"));
        }
        assert_eq!(Opt::<u32>::default().get(), None);
        assert_eq!(Opt::some(4u32).get(), Some(4));
        assert_eq!(Opt::from(Some(-0.5f64)), Some(-0.5));
    }

    #[test]
    fn a_sentinel_value_reads_as_absent() {
        assert_eq!(Opt::from(Some(u64::MAX)).get(), None);
        assert_eq!(Opt::some(u32::MAX).get(), None);
        assert_eq!(Opt::from(Some(f64::NAN)).get(), None);
        // Any NaN, not only the one `NONE` stores.
        assert!(Opt::some(-f64::NAN).is_none());
        assert!(Opt::some(f64::from_bits(f64::NAN.to_bits() | 1)).is_none());
        // Infinities and the extremes are values.
        for v in [f64::INFINITY, f64::NEG_INFINITY, f64::MAX, 0.0, -0.0] {
            assert_eq!(Opt::some(v).get(), Some(v));
        }
        assert_eq!(Opt::some(u32::MAX - 1).get(), Some(u32::MAX - 1));
    }

    #[test]
    fn absent_values_are_equal_whatever_nan_holds_them() {
        assert_eq!(Opt::some(f64::NAN), Opt::<f64>::NONE);
        assert_eq!(Opt::some(-f64::NAN), Opt::<f64>::default());
        assert_ne!(Opt::some(1.0), Opt::<f64>::NONE);
        assert_ne!(Opt::some(1u64), Opt::some(2u64));
    }

    fn json<T: Serialize>(v: &T) -> String {
        serde_json::to_string(v).unwrap_or_default()
    }

    #[test]
    fn json_is_the_options_json_both_ways() {
        let u: [Option<u64>; 4] = [None, Some(0), Some(1 << 40), Some(u64::MAX - 1)];
        for v in u {
            assert_eq!(json(&Opt::from(v)), json(&v));
            let back: Option<Opt<u64>> = serde_json::from_str(&json(&v)).ok();
            assert_eq!(back.map(Opt::get), Some(v));
        }
        let f: [Option<f64>; 4] = [None, Some(1.5), Some(-2.25e-9), Some(1_700_000_000.125)];
        for v in f {
            assert_eq!(json(&Opt::from(v)), json(&v));
            let back: Option<Opt<f64>> = serde_json::from_str(&json(&v)).ok();
            assert_eq!(back.map(Opt::get), Some(v));
        }
        // NaN: `null` both ways, as serde_json wrote `Some(NaN)`.
        assert_eq!(json(&Opt::some(f64::NAN)), json(&Some(f64::NAN)));
        assert_eq!(json(&Opt::some(f64::NAN)), "null");
        // A u32 field reads `null`, a number, and rejects what
        // `Option<u32>` rejected.
        let p: Option<Opt<u32>> = serde_json::from_str("null").ok();
        assert_eq!(p, Some(Opt::NONE));
        let p: Option<Opt<u32>> = serde_json::from_str("4194304").ok();
        assert_eq!(p, Some(Opt::some(4_194_304)));
        assert!(serde_json::from_str::<Opt<u32>>("-1").is_err());
        assert!(serde_json::from_str::<Opt<u32>>("\"7\"").is_err());
    }
}
