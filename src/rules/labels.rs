//! An alert's label set: names sorted as a `BTreeMap<String, String>`
//! would sort them, as a shared [`Shape`] (the names, and the values every
//! alert of a rule has: alertname, severity, instance, the rule's own) and
//! one shared text of the other values, so the engine's state, the
//! published view and transitions share one copy and a rule's alerts share
//! the rest (12,800 firing alerts at `--demo large` held ~4 KB each as
//! maps, cloned into every view; then ~240 bytes in three allocations, now
//! ~100 in one). It owns the layout and its conversions; which labels an
//! alert carries is `eval`'s and `instances`'s business.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};

/// Label names and values, sorted by name, each name at most once.
#[derive(Clone)]
pub struct Labels {
    shape: Arc<Shape>,
    /// The values `shape` leaves open, in order, each after its length: a
    /// length is little-endian groups of 6 bits, one ASCII byte each,
    /// `CONTINUED` set on all but the last (one byte below 64), so the
    /// whole stays text and slicing it needs no unchecked code.
    open: Arc<str>,
}

/// The names of a label set, in order, each with its value when every set
/// of this shape has that value (`None`: the set's own).
#[derive(Debug, Default, PartialEq)]
pub struct Shape(Box<[Name]>);

/// A name, and its value when fixed.
type Name = (Box<str>, Option<Box<str>>);

impl Shape {
    pub fn new<'a>(pairs: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> Arc<Shape> {
        Arc::new(Shape(pairs.map(|(k, v)| (Box::from(k), v.map(Box::from))).collect()))
    }
}

/// Set on a length byte that another follows.
const CONTINUED: u8 = 0x40;

impl Labels {
    /// From pairs in any order; a name given twice keeps its last value
    /// (as repeated `BTreeMap::insert` would).
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Labels {
        let mut v: Vec<(&str, &str)> = pairs.into_iter().collect();
        sort_last_wins(&mut v);
        Labels::from_sorted(&v)
    }

    /// From pairs already sorted by name with no name repeated (what
    /// [`sort_last_wins`] leaves).
    pub fn from_sorted(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_sorted_iter(pairs.iter().copied())
    }

    /// As [`Labels::from_sorted`], from an iterator walked twice, so that
    /// no list of pairs is built first; every value is the set's own.
    pub fn from_sorted_iter<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Labels {
        let shape = Shape::new(pairs.clone().map(|(k, _)| (k, None)));
        Labels::shaped(&shape, pairs.map(|(_, v)| v))
    }

    /// The set of `shape` whose open values, in order, are `values`
    /// (walked twice: sizes, then text).
    pub fn shaped<'a>(shape: &Arc<Shape>, values: impl Iterator<Item = &'a str> + Clone) -> Labels {
        let len = values.clone().fold(0, |l, v| l + len_bytes(v.len()) + v.len());
        let mut text = String::with_capacity(len);
        for s in values {
            let mut n = s.len();
            while n >= usize::from(CONTINUED) {
                text.push(char::from((n & 0x3f) as u8 | CONTINUED));
                n >>= 6;
            }
            text.push(char::from(n as u8));
            text.push_str(s);
        }
        Labels {
            shape: shape.clone(),
            // Built to its exact length: `Arc::from` copies it into the
            // one allocation that holds the counts too.
            open: Arc::from(text.as_str()),
        }
    }

    /// Whether this is the set `shaped(shape, values)` would give, without
    /// building it; `None` when this set has another shape.
    pub fn same_as_shaped<'a>(&self, shape: &Arc<Shape>, mut values: impl Iterator<Item = &'a str>) -> Option<bool> {
        if !Arc::ptr_eq(&self.shape, shape) {
            return None;
        }
        let mut open = Open(&self.open);
        Some(values.all(|v| open.next_str() == Some(v)) && open.0.is_empty())
    }

    /// Name and value pairs, sorted by name.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            names: self.shape.0.iter(),
            open: Open(&self.open),
        }
    }

    pub fn len(&self) -> usize {
        self.shape.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shape.0.is_empty()
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Whether this set holds exactly `pairs` (sorted, no repeats): lets
    /// an alert that did not change keep its shared set.
    pub fn same_as(&self, pairs: &[(&str, &str)]) -> bool {
        self.same_as_iter(pairs.iter().copied())
    }

    /// As [`Labels::same_as`], for pairs given by an iterator.
    pub fn same_as_iter<'a>(&self, mut pairs: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
        let mut it = self.iter();
        pairs.all(|p| it.next() == Some(p)) && it.next().is_none()
    }

    /// An owned map, for payloads that leave the engine.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
}

/// The bytes that write a length of `n`.
fn len_bytes(mut n: usize) -> usize {
    let mut b = 1;
    while n >= usize::from(CONTINUED) {
        n >>= 6;
        b += 1;
    }
    b
}

/// The pairs of a [`Labels`], in order.
pub struct Iter<'a> {
    names: std::slice::Iter<'a, Name>,
    open: Open<'a>,
}

/// What is left of a set's open values.
struct Open<'a>(&'a str);

impl<'a> Open<'a> {
    fn next_str(&mut self) -> Option<&'a str> {
        let (mut n, mut shift, mut at) = (0usize, 0, 0);
        loop {
            let b = *self.0.as_bytes().get(at)?;
            at += 1;
            n |= usize::from(b & 0x3f) << shift;
            shift += 6;
            if b & CONTINUED == 0 {
                break;
            }
        }
        // Lengths were taken from whole strings written after them, so
        // each cut falls on a character boundary; `get` keeps it checked.
        let s = self.0.get(at..at + n)?;
        self.0 = self.0.get(at + n..)?;
        Some(s)
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let (name, fixed) = self.names.next()?;
        let value = match fixed {
            Some(v) => v,
            None => self.open.next_str()?,
        };
        Some((name, value))
    }
}

/// Sorts `pairs` by name and keeps the last of each name given twice.
pub fn sort_last_wins(pairs: &mut Vec<(&str, &str)>) {
    sort_last_wins_by(pairs, |p| p.0);
}

/// [`sort_last_wins`] for anything with a name.
pub fn sort_last_wins_by<T: Copy, F: Fn(&T) -> &str>(items: &mut Vec<T>, name: F) {
    // Stable, so equal names stay in insertion order; the last is kept.
    items.sort_by(|a, b| name(a).cmp(name(b)));
    let mut out = 0;
    for i in 0..items.len() {
        if i + 1 < items.len() && name(&items[i + 1]) == name(&items[i]) {
            continue;
        }
        items[out] = items[i];
        out += 1;
    }
    items.truncate(out);
}

impl Default for Labels {
    fn default() -> Self {
        Labels::from_sorted(&[])
    }
}

/// Equal when the pairs are, whatever the shapes.
impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        if Arc::ptr_eq(&self.shape, &other.shape) {
            return self.open == other.open;
        }
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Labels {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_usize(self.len());
        for (k, v) in self.iter() {
            k.hash(h);
            v.hash(h);
        }
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(m: BTreeMap<String, String>) -> Self {
        let pairs: Vec<(&str, &str)> = m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Labels::from_sorted(&pairs)
    }
}

/// Shown as the map it stands for (the alert log line prints it).
impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Serialised as the map it stands for: JSON output is unchanged.
impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_the_map_it_replaces() {
        let long = "x".repeat(300);
        let (longer, y, z) = ("\u{e9}".repeat(3000), "y".repeat(63), "z".repeat(64));
        let cases: &[&[(&str, &str)]] = &[
            &[("a", &long), (&long, "b"), ("c", "")],
            &[("a", &longer), (&y, &z), ("\u{e9}", "\u{7f}")],
            &[],
            &[("b", "2"), ("a", "1")],
            &[
                ("user", "x"),
                ("alertname", "A"),
                ("user", "y"),
                ("", ""),
                ("é", "v\"q"),
            ],
            &[("pid", "42"), ("gpu", ""), ("pid", "43"), ("pid", "44")],
        ];
        for pairs in cases {
            let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let l = Labels::new(pairs.iter().copied());
            assert_eq!(l.to_map(), map, "{pairs:?}");
            assert_eq!(l.len(), map.len());
            assert_eq!(format!("{l:?}"), format!("{map:?}"));
            assert_eq!(
                serde_json::to_string(&l).ok(),
                serde_json::to_string(&map).ok(),
                "{pairs:?}"
            );
            for (k, v) in &map {
                assert_eq!(l.get(k), Some(v.as_str()));
            }
            assert_eq!(l.get("missing"), None);
            assert_eq!(Labels::from(map.clone()), l);
            let sorted: Vec<(&str, &str)> = map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert!(l.same_as(&sorted));
        }
    }

    #[test]
    fn a_shape_shares_names_and_fixed_values() {
        let shape = Shape::new([("a", None), ("b", Some("fixed")), ("c", None)].into_iter());
        let l = Labels::shaped(&shape, ["1", "3"].into_iter());
        let plain = Labels::new([("c", "3"), ("a", "1"), ("b", "fixed")]);
        assert_eq!(l, plain);
        assert_eq!(l.to_map(), plain.to_map());
        assert_eq!(l.len(), 3);
        assert_eq!(l.same_as_shaped(&shape, ["1", "3"].into_iter()), Some(true));
        assert_eq!(l.same_as_shaped(&shape, ["1", "4"].into_iter()), Some(false));
        assert_eq!(l.same_as_shaped(&shape, ["1"].into_iter()), Some(false));
        assert_eq!(plain.same_as_shaped(&shape, ["1", "3"].into_iter()), None);
        assert!(plain.same_as(&[("a", "1"), ("b", "fixed"), ("c", "3")]));
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        assert_eq!(state.hash_one(&l), state.hash_one(&plain));
        assert_ne!(l, Labels::shaped(&shape, ["1", "4"].into_iter()));
    }

    #[test]
    fn differs_where_a_map_would() {
        let a = Labels::new([("a", "1"), ("b", "2")]);
        assert_ne!(a, Labels::new([("a", "1"), ("b", "3")]));
        // Same text, different split between name and value.
        assert_ne!(Labels::new([("ab", "c")]), Labels::new([("a", "bc")]));
        assert!(!a.same_as(&[("a", "1")]));
        assert!(!a.same_as(&[("a", "1"), ("b", "2"), ("c", "3")]));
    }
}
