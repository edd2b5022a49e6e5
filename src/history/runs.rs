//! A bounded series of points kept as runs: a point equal to the one before
//! it costs nothing until the run ends, so a process whose memory holds
//! still for the whole window (what PyTorch's caching allocator does
//! between phases) costs two entries, not 900 (issue 21, round 11).
//!
//! Owns the encoding only: a value entry, then at most one repeat entry
//! counting how many more times it came. A series that changes at every
//! point costs what a plain deque of its points did, never more. It knows
//! nothing of devices, processes or what an absent point means.

use std::collections::VecDeque;

/// A point type: the top bit marks a repeat entry, so stored values stay
/// below it (larger ones are stored as [`Point::TOP`]).
pub trait Point: Copy + Eq {
    /// The largest value a series holds.
    const TOP: Self;
    fn is_repeat(self) -> bool;
    /// How many more times the value before it came.
    fn count(self) -> usize;
    fn repeat(n: usize) -> Self;
}

macro_rules! point {
    ($t:ty) => {
        impl Point for $t {
            const TOP: Self = <$t>::MAX >> 1;
            fn is_repeat(self) -> bool {
                self > Self::TOP
            }
            fn count(self) -> usize {
                (self & Self::TOP) as usize
            }
            fn repeat(n: usize) -> Self {
                // A window is at most 100,001 points: far below the top bit.
                (n as $t).min(Self::TOP) | !Self::TOP
            }
        }
    };
}
point!(u32);
point!(u64);

#[derive(Debug, Default)]
pub struct Runs<T> {
    entries: VecDeque<T>,
    len: usize,
}

impl<T: Point> Runs<T> {
    /// Points in the series.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Entries held: what the series costs, at most one per point.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    /// Room held for entries (for the bound tests).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Appends `x` (at most [`Point::TOP`]). `max` bounds the entries this
    /// series ever needs (its window), so growth by doubling stops there.
    pub fn push(&mut self, x: T, max: usize) {
        let x = if x.is_repeat() { T::TOP } else { x };
        self.len += 1;
        let n = self.entries.len();
        let last = self.entries.back().copied();
        match last {
            Some(r) if r.is_repeat() && n >= 2 && self.entries.get(n - 2) == Some(&x) => {
                if let Some(b) = self.entries.back_mut() {
                    *b = T::repeat(r.count() + 1);
                }
            }
            Some(v) if v == x => self.append(T::repeat(1), max),
            _ => self.append(x, max),
        }
    }

    fn append(&mut self, e: T, max: usize) {
        let v = &mut self.entries;
        if v.len() == v.capacity() {
            // Doubling as a `VecDeque` does, but not past the window: a full
            // 900-point window doubled to 1,024 left an eighth as slack.
            let want = (2 * v.len()).max(4).min(max).max(v.len() + 1);
            v.reserve_exact(want - v.len());
        }
        v.push_back(e);
    }

    /// Appends `fill` until the series has `len` points.
    pub fn pad_to(&mut self, len: usize, fill: T, max: usize) {
        while self.len < len {
            self.push(fill, max);
        }
    }

    /// Drops the oldest point.
    pub fn pop_front(&mut self) {
        if self.entries.is_empty() {
            return;
        }
        self.len -= 1;
        // Entry 0 is always a value; a repeat after it is used up first.
        match self.entries.get_mut(1) {
            Some(r) if r.is_repeat() && r.count() > 1 => *r = T::repeat(r.count() - 1),
            Some(r) if r.is_repeat() => {
                self.entries.remove(1);
            }
            _ => {
                self.entries.pop_front();
            }
        }
    }

    /// The points in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        let mut prev = T::TOP;
        self.entries.iter().flat_map(move |&e| {
            let (v, n) = if e.is_repeat() { (prev, e.count()) } else { (e, 1) };
            prev = v;
            std::iter::repeat_n(v, n)
        })
    }

    /// The points at `picked` (ascending indices), `None` past the end.
    pub fn at(&self, picked: &[usize]) -> Vec<Option<T>> {
        let mut out = Vec::with_capacity(picked.len());
        let mut points = self.iter().enumerate();
        for &i in picked {
            out.push(points.by_ref().find(|&(j, _)| j == i).map(|(_, v)| v));
        }
        out
    }

    /// Whether any point is not `x`.
    pub fn any_but(&self, x: T) -> bool {
        self.entries.iter().any(|&e| !e.is_repeat() && e != x)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A small deterministic generator: runs of equal values of random
    /// length, jumps, and values at and past the top.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
    }

    #[test]
    fn runs_read_back_as_the_plain_series_they_stand_for() {
        let mut g = Gen(7);
        let max = 50;
        let mut runs: Runs<u32> = Runs::default();
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut value = 0u32;
        for step in 0..20_000 {
            match g.next() % 10 {
                0..=5 => {
                    if g.next() % 3 == 0 {
                        value = match g.next() % 8 {
                            0 => u32::MAX,
                            1 => u32::TOP,
                            _ => (g.next() % 4) as u32,
                        };
                    }
                    runs.push(value, max);
                    model.push_back(value.min(u32::TOP));
                }
                6 => {
                    let to = runs.len() + (g.next() % 4) as usize;
                    runs.pad_to(to, 9, max);
                    model.resize(to, 9);
                }
                _ => {
                    runs.pop_front();
                    model.pop_front();
                }
            }
            while model.len() > max {
                runs.pop_front();
                model.pop_front();
            }
            assert_eq!(runs.len(), model.len(), "step {step}");
            assert!(runs.entries() <= model.len(), "step {step}: more entries than points");
            assert!(runs.capacity() <= max.max(4), "step {step}: {}", runs.capacity());
            let all: Vec<u32> = runs.iter().collect();
            assert_eq!(all, Vec::from(model.clone()), "step {step}");
            let picked: Vec<usize> = (0..model.len() + 2).filter(|i| i % 3 != 1).collect();
            let want: Vec<Option<u32>> = picked.iter().map(|&i| model.get(i).copied()).collect();
            assert_eq!(runs.at(&picked), want, "step {step}");
            assert_eq!(runs.any_but(9), model.iter().any(|&v| v != 9), "step {step}");
        }
    }

    #[test]
    fn a_series_that_always_changes_costs_one_entry_a_point() {
        let mut runs: Runs<u64> = Runs::default();
        for i in 0..900u64 {
            runs.push(i % 2, 901);
        }
        assert_eq!((runs.len(), runs.entries()), (900, 900));
        let mut still: Runs<u64> = Runs::default();
        for _ in 0..900 {
            still.push(u64::MAX, 901);
        }
        assert_eq!((still.len(), still.entries()), (900, 2));
        assert!(still.iter().all(|v| v == u64::TOP));
    }
}
