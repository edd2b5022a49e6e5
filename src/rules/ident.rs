//! An alert instance's identity as the engine's map keys it: a process
//! (or an OOM report) as its GPU's shared UUID, its PID and a stamp; any
//! other instance as its text. Ordered exactly as the text
//! `uuid/pid/stamp` (PID and stamp in decimal) sorts, so the view keeps the
//! order the string keys gave; a lookup borrows from the snapshot and
//! builds nothing. Owns that layout and order; which identity an instance
//! has is `subject`'s.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt::Write as _;
use std::sync::Arc;

/// A stored identity (24 bytes in the map instead of a ~100-byte string
/// of rule name, UUID and numbers per alert: 1.3 MB at 12,800 alerts).
#[derive(Debug, Clone)]
pub(super) enum Ident {
    Text(Box<str>),
    Proc { dev: Dev, pid: u32, stamp: u64 },
}

/// A GPU's UUID, one copy shared by the keys of all its instances.
pub(super) type Dev = Arc<Box<str>>;

/// An identity borrowed from a snapshot, to look up or store.
#[derive(Debug, Clone, Copy)]
pub(super) enum IdRef<'a> {
    Text(&'a str),
    Proc { dev: &'a str, pid: u32, stamp: u64 },
}

impl IdRef<'_> {
    /// The text the string keys held.
    fn write(self, out: &mut String) {
        match self {
            IdRef::Text(s) => out.push_str(s),
            // Writing to a String cannot fail.
            IdRef::Proc { dev, pid, stamp } => drop(write!(out, "{dev}/{pid}/{stamp}")),
        }
    }
}

impl Ord for IdRef<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        match (*self, *other) {
            (IdRef::Text(a), IdRef::Text(b)) => a.cmp(b),
            (
                IdRef::Proc {
                    dev: a,
                    pid: p,
                    stamp: s,
                },
                IdRef::Proc {
                    dev: b,
                    pid: q,
                    stamp: t,
                },
            ) => match cmp_dev(a, b) {
                Some(Ordering::Equal) => cmp_decimal(p.into(), q.into()).then_with(|| cmp_decimal(s, t)),
                Some(o) => o,
                None => cmp_text(*self, *other),
            },
            // Not within one rule; exact, if slow.
            _ => cmp_text(*self, *other),
        }
    }
}

fn cmp_text(a: IdRef, b: IdRef) -> Ordering {
    let (mut x, mut y) = (String::new(), String::new());
    a.write(&mut x);
    b.write(&mut y);
    x.cmp(&y)
}

/// `a + "/"` against `b + "/"`, when that decides the whole text's order
/// (or says they are equal); `None` when a `/` inside a UUID would make
/// the split ambiguous.
fn cmp_dev(a: &str, b: &str) -> Option<Ordering> {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len().min(b.len());
    match a[..n].cmp(&b[..n]) {
        Ordering::Equal if a.len() == b.len() => Some(Ordering::Equal),
        Ordering::Equal => {
            let (c, longer_first) = if a.len() > b.len() { (a[n], true) } else { (b[n], false) };
            // The shorter one has '/' here: it sorts first unless the
            // longer one's byte is below '/'.
            let o = match c.cmp(&b'/') {
                Ordering::Equal => return None,
                Ordering::Greater => Ordering::Greater,
                Ordering::Less => Ordering::Less,
            };
            Some(if longer_first { o } else { o.reverse() })
        }
        o => Some(o),
    }
}

/// The order of the decimal texts of `a` and `b` (not of the numbers: "10"
/// sorts before "9"), each followed by '/' or the end, both below digits.
fn cmp_decimal(a: u64, b: u64) -> Ordering {
    let (da, db) = (digits(a), digits(b));
    // Pad the shorter with zeros to the same width; if that makes them
    // equal, the shorter (a prefix of the other) sorts first.
    let (x, y) = match da.cmp(&db) {
        Ordering::Less => (u128::from(a) * 10u128.pow(db - da), u128::from(b)),
        Ordering::Greater => (u128::from(a), u128::from(b) * 10u128.pow(da - db)),
        Ordering::Equal => (u128::from(a), u128::from(b)),
    };
    x.cmp(&y).then(da.cmp(&db))
}

fn digits(v: u64) -> u32 {
    v.checked_ilog10().map_or(1, |d| d + 1)
}

impl PartialOrd for IdRef<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for IdRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for IdRef<'_> {}

/// What a map of [`Ident`]s is searched by: a stored key or a borrowed one.
pub(super) trait Key {
    fn id(&self) -> IdRef<'_>;
}

impl Key for Ident {
    fn id(&self) -> IdRef<'_> {
        match self {
            Ident::Text(s) => IdRef::Text(s),
            Ident::Proc { dev, pid, stamp } => IdRef::Proc {
                dev: dev.as_ref(),
                pid: *pid,
                stamp: *stamp,
            },
        }
    }
}

impl Key for IdRef<'_> {
    fn id(&self) -> IdRef<'_> {
        *self
    }
}

impl<'a> Borrow<dyn Key + 'a> for Ident {
    fn borrow(&self) -> &(dyn Key + 'a) {
        self
    }
}

impl Ord for dyn Key + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.id().cmp(&other.id())
    }
}

impl PartialOrd for dyn Key + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn Key + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for dyn Key + '_ {}

impl Ord for Ident {
    fn cmp(&self, other: &Self) -> Ordering {
        self.id().cmp(&other.id())
    }
}

impl PartialOrd for Ident {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ident {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ident {}

/// The UUIDs the keys share, one copy each.
#[derive(Debug, Clone, Default)]
pub(super) struct Devs(Vec<Dev>);

impl Devs {
    /// The stored identity of `id`, sharing its UUID.
    pub(super) fn own(&mut self, id: IdRef) -> Ident {
        match id {
            IdRef::Text(s) => Ident::Text(s.into()),
            IdRef::Proc { dev, pid, stamp } => {
                let dev = match self.0.binary_search_by(|d| (***d).cmp(dev)) {
                    Ok(i) => self.0[i].clone(),
                    Err(i) => {
                        let d: Dev = Arc::new(Box::from(dev));
                        self.0.insert(i, d.clone());
                        d
                    }
                };
                Ident::Proc { dev, pid, stamp }
            }
        }
    }

    /// Forgets UUIDs no key holds (a GPU removed).
    pub(super) fn prune(&mut self) {
        self.0.retain(|d| Arc::strong_count(d) > 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(id: IdRef) -> String {
        let mut s = String::new();
        id.write(&mut s);
        s
    }

    #[test]
    fn sorts_as_the_text_keys_did() {
        let devs = [
            "GPU-a", "GPU-ab", "GPU-a-1", "GPU-a.1", "GPU-a/x", "GPU-a/", "", "GPU-b",
        ];
        let nums = [0, 1, 9, 10, 12, 19, 100, 123, 4_000_000_000, u64::MAX];
        let mut ids = Vec::new();
        for dev in devs {
            for &pid in &[0u32, 1, 9, 10, 12, 123, u32::MAX] {
                for &stamp in &nums {
                    ids.push(IdRef::Proc { dev, pid, stamp });
                }
            }
        }
        ids.extend([
            IdRef::Text(""),
            IdRef::Text("GPU-a"),
            IdRef::Text("GPU-a/1/0"),
            IdRef::Text("z"),
        ]);
        for a in &ids {
            for b in &ids {
                assert_eq!(a.cmp(b), text(*a).cmp(&text(*b)), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn a_stored_key_is_found_by_a_borrowed_one() {
        let mut devs = Devs::default();
        let mut m = std::collections::BTreeMap::new();
        for pid in [3, 20, 100] {
            m.insert(
                devs.own(IdRef::Proc {
                    dev: "GPU-x",
                    pid,
                    stamp: 7,
                }),
                pid,
            );
        }
        let probe = IdRef::Proc {
            dev: "GPU-x",
            pid: 20,
            stamp: 7,
        };
        assert_eq!(m.get(&probe as &dyn Key), Some(&20));
        assert_eq!(m.values().copied().collect::<Vec<_>>(), [100, 20, 3]);
        assert_eq!(devs.0.len(), 1);
        drop(m);
        devs.prune();
        assert!(devs.0.is_empty());
    }
}
