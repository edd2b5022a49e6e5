//! [`WriteLog`]: the PIDs an in-memory `/proc` wrote, in order, for
//! [`ProcTree::changed`](crate::attribution::ProcTree::changed). Owns the
//! log and its bound only; must not know what was written.
//!
//! Every write is logged, not only exits: a reader that trusts a watched
//! PID's stat between its own re-reads then never sees a state the tree no
//! longer shows (the demo's zombies, tests' state changes), so a reader on
//! this tree sees what reading every poll would.

/// Entries kept; past it the older half is dropped, and a reader that had
/// not caught up is told it cannot trust anything it watches.
const KEPT: usize = 1 << 16;

#[derive(Debug, Default)]
pub(super) struct WriteLog {
    pids: Vec<u32>,
    /// The number of the first entry in `pids` (entries are numbered from
    /// the tree's start).
    start: u64,
}

impl WriteLog {
    pub(super) fn push(&mut self, pid: u32) {
        if self.pids.len() >= KEPT {
            self.pids.drain(..KEPT / 2);
            self.start += (KEPT / 2) as u64;
        }
        self.pids.push(pid);
    }

    /// Appends the PIDs written from entry `*seen` on and moves `*seen` to
    /// the end; false (and nothing appended) when some of them were
    /// dropped.
    pub(super) fn since(&self, seen: &mut u64, out: &mut Vec<u32>) -> bool {
        let end = self.start + self.pids.len() as u64;
        let from = std::mem::replace(seen, end);
        let Some(skip) = from.checked_sub(self.start).and_then(|s| usize::try_from(s).ok()) else {
            return false;
        };
        out.extend(self.pids.iter().skip(skip));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_each_write_once_or_hears_it_fell_behind() {
        let mut log = WriteLog::default();
        let (mut a, mut b, mut out) = (0, 0, Vec::new());
        log.push(7);
        log.push(8);
        assert!(log.since(&mut a, &mut out));
        assert_eq!(out, [7, 8]);
        out.clear();
        assert!(log.since(&mut a, &mut out));
        assert!(out.is_empty(), "nothing new");
        log.push(9);
        assert!(log.since(&mut a, &mut out));
        assert_eq!(out, [9]);
        // Reader b lags past the bound: told, then caught up.
        for pid in 0..KEPT as u32 {
            log.push(pid);
        }
        out.clear();
        assert!(!log.since(&mut b, &mut out));
        assert!(out.is_empty());
        log.push(42);
        assert!(log.since(&mut b, &mut out));
        assert_eq!(out, [42]);
    }
}
