//! [`NamePairs`]: the (comm, user) pairs of a list of processes, each kept
//! once and named by a 4-byte number, for tables that hold a row per
//! process (the allocator join's listing, late release's previous poll).
//!
//! Owns: the pairs and the lookup that finds a pair already held. Must not:
//! know what the rows are, or keep a pair beyond [`NamePairs::clear`].
//!
//! Why (issue 21): two name strings (24 bytes each when this was written, 16
//! since main's two-word string type) were most of such a row, 64,000 times
//! over at 64 GPUs x 1000 processes, though the processes of one user and
//! program share their names (the
//! attribution cache interns them; `--demo large` has a few dozen pairs).
//! A pair is found by the addresses and lengths of its two strings, as
//! `allocator::listed`'s fingerprint compares them: an `ArcStr` never changes,
//! and the table holds a clone of each, so an address it knows cannot be
//! reused for another string while it is there. Strings equal in content
//! at other addresses get their own entry: still correct, only not shared.

use arcstr::ArcStr;
use rustc_hash::FxHashMap;

/// Where two names lie: (address, length) of each.
type Addr = [usize; 4];

fn addr(comm: &ArcStr, user: &ArcStr) -> Addr {
    [comm.as_ptr() as usize, comm.len(), user.as_ptr() as usize, user.len()]
}

/// Distinct (comm, user) pairs, by number.
#[derive(Debug, Default)]
pub struct NamePairs {
    pairs: Vec<(ArcStr, ArcStr)>,
}

/// Scratch for filling a [`NamePairs`]: where each pair added so far is.
/// One serves every table, one fill at a time; only a fill needs it.
#[derive(Debug, Default)]
pub struct Lookup(FxHashMap<Addr, u32>);

/// A [`NamePairs`] being filled (see [`NamePairs::refill`]).
pub struct Filling<'a> {
    pairs: &'a mut Vec<(ArcStr, ArcStr)>,
    by_addr: &'a mut FxHashMap<Addr, u32>,
}

impl NamePairs {
    /// Forgets every pair (their numbers mean nothing after this) and
    /// fills the table anew through `lookup`.
    pub fn refill<'a>(&'a mut self, lookup: &'a mut Lookup) -> Filling<'a> {
        self.pairs.clear();
        lookup.0.clear();
        Filling {
            pairs: &mut self.pairs,
            by_addr: &mut lookup.0,
        }
    }

    /// Forgets every pair, keeping the room they took.
    pub fn clear(&mut self) {
        self.pairs.clear();
    }

    /// The pair numbered `id`, when it is one of this table's.
    pub fn get(&self, id: u32) -> Option<(&ArcStr, &ArcStr)> {
        self.pairs.get(id as usize).map(|(c, u)| (c, u))
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

impl Filling<'_> {
    /// The number of (`comm`, `user`), added when not held yet.
    pub fn id(&mut self, comm: &ArcStr, user: &ArcStr) -> u32 {
        let next = u32::try_from(self.pairs.len()).unwrap_or(u32::MAX);
        let id = *self.by_addr.entry(addr(comm, user)).or_insert(next);
        if id == next {
            self.pairs.push((comm.clone(), user.clone()));
        }
        id
    }
}

impl Drop for Filling<'_> {
    /// A table that shrank keeps at most twice what it holds.
    fn drop(&mut self) {
        if self.pairs.capacity() > 2 * self.pairs.len().max(8) {
            self.pairs.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_held_once_whichever_row_names_it() {
        let (a, b): (ArcStr, ArcStr) = ("python".to_string().into(), "alice".to_string().into());
        let c: ArcStr = "bob".to_string().into();
        let (mut t, mut lookup) = (NamePairs::default(), Lookup::default());
        let mut f = t.refill(&mut lookup);
        let first = f.id(&a, &b);
        assert_eq!(f.id(&a.clone(), &b.clone()), first, "clones share an address");
        let other = f.id(&a, &c);
        assert_ne!(other, first);
        // Equal text elsewhere is a separate entry, but reads the same.
        let copy: ArcStr = "python".to_string().into();
        let third = f.id(&copy, &b);
        drop(f);
        assert_eq!(t.len(), 3);
        let read = |t: &NamePairs, id| t.get(id).map(|(c, u)| (c.to_string(), u.to_string()));
        assert_eq!(read(&t, third), Some(("python".into(), "alice".into())));
        assert_eq!(read(&t, other), Some(("python".into(), "bob".into())));
        assert_eq!(t.get(99), None);
        // A refill starts from nothing.
        let mut f = t.refill(&mut lookup);
        assert_eq!(f.id(&a, &c), 0);
        drop(f);
        assert_eq!(t.len(), 1);
    }
}
