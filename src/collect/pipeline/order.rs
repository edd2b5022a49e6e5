//! The order of a GPU's processes in the snapshot: largest first, then by
//! PID, ties in the source's order. Owns that sort only; must not look at
//! anything but the processes' sizes and PIDs.

use crate::data::snapshot::Process;

/// Largest first, then by PID, ties in the source's order (as a stable
/// sort of the source's list). Sorts small keys, then moves each `Process`
/// into place by following the permutation's cycles: no second vector (a
/// fresh 224 KB one per GPU and poll was a page fault per 4 KiB at 64 x
/// 1000) and no placeholder values, and moving whole values through a
/// sort would move each one log n times.
pub(super) fn by_size(processes: &mut [Process]) {
    // One 128-bit key per process, so the sort compares integers rather
    // than an `Option` and two fields (a tuple sort costs 10 % of a 64 x
    // 1000 `Pipeline::build`): the bytes inverted (largest first), then
    // the PID, then the list position.
    let mut order: Vec<u128> = processes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let rank = p.used_bytes.map_or(u64::MAX, |b| !b);
            (u128::from(rank) << 64) | (u128::from(p.pid) << 32) | i as u128
        })
        .collect();
    order.sort_unstable();
    // Used 0 and unknown share the last rank; unknown goes after.
    let last = order.partition_point(|&k| (k >> 64) as u64 != u64::MAX);
    order[last..].sort_unstable_by_key(|&k| (processes[position(k)].used_bytes.is_none(), k));
    // `from[k]`: where the value that belongs at `k` is now; a slot is set
    // to itself once its value is in place.
    let mut from: Vec<u32> = order.into_iter().map(|k| position(k) as u32).collect();
    for start in 0..from.len() {
        let mut k = start;
        // Each swap puts one value in place and carries the displaced one
        // (first the value that was at `start`) along the cycle.
        while from[k] as usize != k {
            let src = from[k] as usize;
            from[k] = k as u32;
            if src == start {
                break;
            }
            processes.swap(k, src);
            k = src;
        }
    }
}

/// The list position a key of `by_size` carries (its low 32 bits).
fn position(key: u128) -> usize {
    (key & u128::from(u32::MAX)) as usize
}
