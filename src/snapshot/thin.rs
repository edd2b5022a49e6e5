//! [`ThinText`]: a shared immutable string behind one pointer, for a
//! process's cmdline.
//!
//! Owns: the type. Must not: depend on the rest of the crate, or allow
//! mutation in place (a shared value edited for one process would change
//! every process that shares it).
//!
//! Why not [`Text`](super::Text): a `Text` is two words (start and length)
//! and `Option<Text>` sixteen bytes in every `Process`, though the cmdline is
//! off by default (`[processes] cmdline`) and almost always `None`. An
//! `Arc` of a boxed `str` is one pointer, so an `Option<ThinText>` is eight
//! bytes: 1 MB less at 64 GPUs x 1000 processes, two snapshot generations
//! (issue 21, round 10). It costs a second heap block (the `Arc`'s, holding
//! the box) beside the string's, made once per process identity by
//! attribution and shared by every poll's snapshot: safe code in place of
//! a hand-written one-block reference count, for a field that is off by
//! default.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A shared immutable string, one pointer wide. Compares, hashes, prints
/// and serializes as its `str`.
#[derive(Clone)]
pub struct ThinText(Arc<Box<str>>);

impl ThinText {
    /// A copy of `s`.
    pub fn new(s: &str) -> ThinText {
        ThinText(Arc::new(Box::from(s)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for ThinText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ThinText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for ThinText {
    fn from(s: &str) -> Self {
        ThinText::new(s)
    }
}

impl From<String> for ThinText {
    fn from(s: String) -> Self {
        ThinText::new(&s)
    }
}

impl PartialEq for ThinText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ThinText {}

impl PartialEq<str> for ThinText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ThinText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for ThinText {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl fmt::Debug for ThinText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ThinText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl Serialize for ThinText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ThinText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(ThinText::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pointer_and_none_is_free() {
        assert_eq!(std::mem::size_of::<ThinText>(), 8);
        assert_eq!(std::mem::size_of::<Option<ThinText>>(), 8);
    }

    #[test]
    fn it_holds_its_string_exactly() {
        for s in [
            "",
            "a",
            "python train.py --lr <redacted>",
            "ü…→ 日本",
            &"x".repeat(4097),
        ] {
            let t = ThinText::from(s);
            assert_eq!((t.as_str(), t.len()), (s, s.len()));
            assert_eq!(t, s);
            assert_eq!(format!("{t:?}|{t}"), format!("{s:?}|{s}"));
        }
    }

    #[test]
    fn clones_share_one_block_and_the_last_frees_it() {
        let a = ThinText::from("shared");
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(Arc::strong_count(&a.0), 2);
        drop(a);
        assert_eq!((Arc::strong_count(&b.0), b.as_str()), (1, "shared"));
        // Clones dropped on other threads leave the count right.
        let c = b.clone();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = c.clone();
                std::thread::spawn(move || (0..1000).map(|_| t.clone()).filter(|x| x == "shared").count())
            })
            .collect();
        let seen: usize = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
        assert_eq!((seen, Arc::strong_count(&b.0)), (4000, 2));
    }

    #[test]
    fn json_is_a_plain_string_both_ways() {
        let t = Some(ThinText::from("a \"quoted\"\narg"));
        let json = serde_json::to_string(&t).unwrap_or_default();
        assert_eq!(json, r#""a \"quoted\"\narg""#);
        let back: Option<Option<ThinText>> = serde_json::from_str(&json).ok();
        assert_eq!(back, Some(t));
        let none: Option<Option<ThinText>> = serde_json::from_str("null").ok();
        assert_eq!(none, Some(None));
    }

    #[test]
    fn equal_strings_hash_alike() {
        use std::collections::HashSet;
        let set: HashSet<ThinText> = ["x", "y", "x"].into_iter().map(ThinText::from).collect();
        assert_eq!(set.len(), 2);
        assert!(set.contains(&ThinText::from("y")));
    }
}
