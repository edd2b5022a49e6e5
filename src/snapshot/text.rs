//! [`Text`]: an immutable string that is cheap to clone, for the label
//! values a snapshot repeats for every process every poll (user, comm,
//! container, unit, job, state, type).
//!
//! Owns: the type and its conversions. Must not: depend on anything else in
//! the crate (it is part of the leaf `snapshot`; attribution and the
//! metrics use it too), or
//! allow mutation in place (a shared value edited for one process would
//! change every process that shares it).
//!
//! Why not `String`: at 64 GPUs x 1000 processes a poll built about twelve
//! strings per process from the attribution cache, 768,000 allocations and
//! as many frees a second, and each snapshot held its own copies. A `Text`
//! clone is a reference count (or nothing, for a `&'static str`), and the
//! processes of one user or job share one allocation.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A shared or static immutable string. Compares, hashes and orders as its
/// `str`, whichever way it is stored.
#[derive(Clone)]
pub enum Text {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Text {
    /// The empty string, without allocating.
    pub const EMPTY: Text = Text::Static("");

    /// A static string, without allocating.
    pub const fn from_static(s: &'static str) -> Self {
        Text::Static(s)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Text::Static(s) => s,
            Text::Shared(s) => s,
        }
    }
}

impl Default for Text {
    fn default() -> Self {
        Text::EMPTY
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        if s.is_empty() {
            Text::EMPTY
        } else {
            Text::Shared(Arc::from(s))
        }
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        if s.is_empty() {
            Text::EMPTY
        } else {
            Text::Shared(Arc::from(s))
        }
    }
}

impl From<&String> for Text {
    fn from(s: &String) -> Self {
        Text::from(s.as_str())
    }
}

impl From<Arc<str>> for Text {
    fn from(s: Arc<str>) -> Self {
        Text::Shared(s)
    }
}

impl From<Text> for String {
    fn from(t: Text) -> Self {
        t.as_str().to_string()
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Text> for str {
    fn eq(&self, other: &Text) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Text> for String {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Text {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    // `pad`, not `write_str`: the snapshot table aligns its columns with
    // width specifiers, which `write_str` ignores.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl serde::Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_shared_compare_hash_and_print_as_their_str() {
        use std::collections::hash_map::DefaultHasher;
        let a = Text::from_static("alice");
        let b = Text::from(String::from("alice"));
        assert_eq!(a, b);
        let owned = String::from("alice");
        assert!(a == "alice" && "alice" == b && b == owned && owned == a);
        let h = |t: &Text| {
            let mut s = DefaultHasher::new();
            t.hash(&mut s);
            s.finish()
        };
        assert_eq!(h(&a), h(&b));
        assert_eq!(format!("{a}/{b:?}"), "alice/\"alice\"");
        let bob = Text::from("bob");
        assert!(bob > a && a.cmp(&b) == std::cmp::Ordering::Equal);
    }

    #[test]
    fn display_honours_width_and_alignment_like_str() {
        for t in [Text::from_static("ab"), Text::from("ab")] {
            assert_eq!(
                format!("{t:<5}|{t:>4}|{t:.1}"),
                format!("{:<5}|{:>4}|{:.1}", "ab", "ab", "ab")
            );
        }
    }

    #[test]
    fn clones_share_one_allocation_and_empty_allocates_nothing() {
        let a = Text::from("job-12345");
        let b = a.clone();
        assert!(std::ptr::eq(a.as_str().as_ptr(), b.as_str().as_ptr()));
        assert!(matches!(Text::from(String::new()), Text::Static("")));
        assert!(Text::default().is_empty());
    }

    #[test]
    fn serde_round_trips_as_a_plain_string() {
        let t = Text::from("gpu-user");
        let json = serde_json::to_string(&t).unwrap_or_default();
        assert_eq!(json, "\"gpu-user\"");
        let back: Text = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(back, t);
    }
}
