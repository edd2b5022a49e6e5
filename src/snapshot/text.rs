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
use std::ptr::NonNull;
use std::sync::Arc;

/// A shared or static immutable string. Compares, hashes and orders as its
/// `str`, whichever way it is stored.
///
/// Two words, not the three of an enum of `&'static str` and `Arc<str>`:
/// a `Process` holds six of them, and at 64 x 1000 two snapshot generations
/// hold 128,000 processes (issue 21). The words are the string's start and
/// its length, whose top bit (never set in a real length: no allocation
/// exceeds `isize::MAX`) says whether an `Arc<str>` owns the bytes. The
/// pointer is never null, so `Option<Text>` is two words as well.
pub struct Text {
    ptr: NonNull<u8>,
    tagged_len: usize,
}

/// The length bit that marks bytes owned by an `Arc<str>`.
const SHARED: usize = 1 << (usize::BITS - 1);

// SAFETY: a `Text` is either a `&'static str` or an `Arc<str>`, both `Send`
// and `Sync`; it never hands out mutable access.
unsafe impl Send for Text {}
// SAFETY: as above.
unsafe impl Sync for Text {}

impl Text {
    /// The empty string, without allocating.
    pub const EMPTY: Text = Text::from_static("");

    /// A static string, without allocating.
    pub const fn from_static(s: &'static str) -> Self {
        // SAFETY: a reference's pointer is never null, even for "".
        let ptr = unsafe { NonNull::new_unchecked(s.as_ptr().cast_mut()) };
        Text {
            ptr,
            tagged_len: s.len(),
        }
    }

    fn from_arc(s: Arc<str>) -> Self {
        let len = s.len();
        let raw = Arc::into_raw(s);
        // SAFETY: `Arc::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(raw as *const u8 as *mut u8) };
        Text {
            ptr,
            tagged_len: len | SHARED,
        }
    }

    fn len_bytes(&self) -> usize {
        self.tagged_len & !SHARED
    }

    fn is_shared(&self) -> bool {
        self.tagged_len & SHARED != 0
    }

    /// The `Arc<str>` pointer this was made from (shared texts only).
    fn raw_arc(&self) -> *const str {
        std::ptr::slice_from_raw_parts(self.ptr.as_ptr().cast_const(), self.len_bytes()) as *const str
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: `ptr` and the length came from a `&'static str` or from
        // an `Arc<str>` this value holds a count of, so the bytes are live,
        // immutable and UTF-8 for as long as `self` is borrowed.
        unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(
                self.ptr.as_ptr().cast_const(),
                self.len_bytes(),
            ))
        }
    }
}

impl Clone for Text {
    fn clone(&self) -> Self {
        if self.is_shared() {
            // SAFETY: `raw_arc` is the pointer `Arc::into_raw` returned, and
            // `self` holds one count, so the allocation is live.
            unsafe { Arc::increment_strong_count(self.raw_arc()) };
        }
        Text {
            ptr: self.ptr,
            tagged_len: self.tagged_len,
        }
    }
}

impl Drop for Text {
    fn drop(&mut self) {
        if self.is_shared() {
            // SAFETY: gives back the one count this value holds, once.
            unsafe { Arc::decrement_strong_count(self.raw_arc()) };
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
            Text::from_arc(Arc::from(s))
        }
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        if s.is_empty() {
            Text::EMPTY
        } else {
            Text::from_arc(Arc::from(s))
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
        Text::from_arc(s)
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
        assert!(!Text::from(String::new()).is_shared());
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

    #[test]
    fn counts_follow_clones_and_drops_and_the_layout_is_two_words() {
        let arc: Arc<str> = Arc::from("user0");
        let t = Text::from(Arc::clone(&arc));
        assert_eq!(Arc::strong_count(&arc), 2);
        let copies: Vec<Text> = (0..5).map(|_| t.clone()).collect();
        assert_eq!(Arc::strong_count(&arc), 7);
        assert!(copies.iter().all(|c| c == "user0" && c.as_ptr() == arc.as_ptr()));
        drop(copies);
        drop(t);
        assert_eq!(Arc::strong_count(&arc), 1);
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<Text>(), 2 * word);
        assert_eq!(std::mem::size_of::<Option<Text>>(), 2 * word);
        let s = Text::from_static("static");
        assert!(!s.is_shared() && s.clone() == "static" && Text::EMPTY.is_empty());
    }

    #[test]
    fn a_text_moved_to_another_thread_keeps_its_bytes() {
        let t = Text::from(String::from("crosses threads"));
        let back = std::thread::spawn(move || t.as_str().to_owned())
            .join()
            .unwrap_or_default();
        assert_eq!(back, "crosses threads");
    }
}
