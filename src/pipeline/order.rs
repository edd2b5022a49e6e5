//! The order of a GPU's processes in the snapshot: largest first, then by
//! PID, ties in the source's order. Owns that sort only; must not look at
//! anything but the processes' sizes and PIDs.

use crate::snapshot::Process;

/// Largest first, then by PID, ties in the source's order (as a stable
/// sort of the source's list). Sorts small keys, then moves each `Process`
/// into place by following the permutation's cycles: no second vector (a
/// fresh 224 KB one per GPU and poll was a page fault per 4 KiB at 64 x
/// 1000) and no placeholder values, and moving whole values through a
/// sort would move each one log n times.
pub(super) fn by_size(processes: &mut [Process]) {
    let mut order: Vec<(std::cmp::Reverse<Option<u64>>, u32, u32)> = processes
        .iter()
        .enumerate()
        .map(|(i, p)| (std::cmp::Reverse(p.used_bytes), p.pid, i as u32))
        .collect();
    order.sort_unstable();
    // `from[k]`: where the value that belongs at `k` is now; a slot is set
    // to itself once its value is in place.
    let mut from: Vec<u32> = order.into_iter().map(|(_, _, i)| i).collect();
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
