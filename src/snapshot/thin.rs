//! [`ThinText`]: a shared immutable string behind one pointer, for a
//! process's cmdline.
//!
//! Owns: the type, its allocation and its reference count. Must not:
//! depend on the rest of the crate, or allow mutation in place (a shared
//! value edited for one process would change every process that shares it).
//!
//! Why not [`Text`](super::Text): a `Text` is two words (start and length)
//! and `Option<Text>` sixteen bytes in every `Process`, though the cmdline is
//! off by default (`[processes] cmdline`) and almost always `None`. A
//! `ThinText` keeps its length on the heap, next to the count, so an
//! `Option<ThinText>` is eight bytes: 1 MB less at 64 GPUs x 1000 processes,
//! two snapshot generations (issue 21, round 10). Its heap block is the one
//! an `Arc<str>` would have (count, then length where the weak count was,
//! then the bytes), made once per process identity by attribution and
//! shared by every poll's snapshot.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering, fence};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The heap block's start; the string's bytes follow it.
#[repr(C)]
struct Head {
    count: AtomicUsize,
    len: usize,
}

/// Where the bytes start in the block: `Head` is two words, align 8, and
/// bytes need no alignment, so right after it.
const BYTES_AT: usize = std::mem::size_of::<Head>();

/// The block for `len` bytes; `None` past `isize::MAX` (never a real
/// cmdline: attribution cuts them to `cmdline_max_bytes`).
fn layout(len: usize) -> Option<Layout> {
    let size = BYTES_AT.checked_add(len)?;
    Layout::from_size_align(size, std::mem::align_of::<Head>()).ok()
}

/// A shared immutable string, one pointer wide. Compares, hashes, prints
/// and serializes as its `str`.
pub struct ThinText {
    head: NonNull<Head>,
}

// SAFETY: the block is immutable but for its atomic count, as an
// `Arc<str>`'s, which is `Send` and `Sync`.
unsafe impl Send for ThinText {}
// SAFETY: as above.
unsafe impl Sync for ThinText {}

impl ThinText {
    /// A copy of `s` in a block of its own.
    pub fn new(s: &str) -> ThinText {
        let Some(layout) = layout(s.len()) else {
            // Only a string within 16 bytes of `isize::MAX` gets here, and
            // no such string exists: allocation sizes are below it.
            handle_alloc_error(Layout::new::<Head>());
        };
        // SAFETY: `layout` has a non-zero size (at least the `Head`).
        let raw = unsafe { alloc(layout) };
        let Some(block) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        let head = block.cast::<Head>();
        // SAFETY: the block is fresh, aligned for `Head` and `BYTES_AT +
        // s.len()` bytes long: room for the head, then the bytes.
        unsafe {
            head.as_ptr().write(Head {
                count: AtomicUsize::new(1),
                len: s.len(),
            });
            std::ptr::copy_nonoverlapping(s.as_ptr(), raw.add(BYTES_AT), s.len());
        }
        ThinText { head }
    }

    fn head(&self) -> &Head {
        // SAFETY: `self` holds one count, so the block is live.
        unsafe { self.head.as_ref() }
    }

    pub fn as_str(&self) -> &str {
        let len = self.head().len;
        // SAFETY: `new` copied `len` bytes of a `str` (UTF-8) right after
        // the head, never written since; the block lives while `self` does.
        unsafe {
            let bytes = self.head.as_ptr().cast::<u8>().add(BYTES_AT);
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(bytes, len))
        }
    }
}

impl Clone for ThinText {
    fn clone(&self) -> Self {
        // Relaxed as `Arc::clone`: holding a count already orders the block.
        let before = self.head().count.fetch_add(1, Ordering::Relaxed);
        if before > isize::MAX as usize {
            // As `Arc`: billions of clones leaked; wrapping would free a
            // block still in use.
            std::process::abort();
        }
        ThinText { head: self.head }
    }
}

impl Drop for ThinText {
    fn drop(&mut self) {
        if self.head().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // The last count: see every other holder's use of the block before
        // freeing it (as `Arc::drop`).
        fence(Ordering::Acquire);
        let len = self.head().len;
        if let Some(layout) = layout(len) {
            // SAFETY: the block was allocated with this layout (`len` is
            // the one `new` stored) and no count is left.
            unsafe { dealloc(self.head.as_ptr().cast::<u8>(), layout) };
        }
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
        assert_eq!(a.head, b.head);
        assert_eq!(a.head().count.load(Ordering::Relaxed), 2);
        drop(a);
        assert_eq!((b.head().count.load(Ordering::Relaxed), b.as_str()), (1, "shared"));
        // Clones dropped on other threads leave the count right.
        let c = b.clone();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = c.clone();
                std::thread::spawn(move || (0..1000).map(|_| t.clone()).filter(|x| x == "shared").count())
            })
            .collect();
        let seen: usize = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
        assert_eq!((seen, b.head().count.load(Ordering::Relaxed)), (4000, 2));
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
