//! The C allocator's shape for a long-running daemon, set once
//! at start by the binary. glibc keeps up to 8 arenas per core and keeps
//! freed memory in each; at 64 GPUs x 1000 processes the poll thread and
//! the async workers each grow their own, and `--demo large` holds about
//! 14 MiB more (docs/log/2026-12-03-round6.md) than with one arena and a
//! fixed 1 MiB trim threshold (and blocks up to 4 MiB
//! from the heap: see `MMAP_THRESHOLD`). The daemon allocates
//! little per poll, so the shared arena's lock costs nothing
//! measurable. An operator's `MALLOC_ARENA_MAX` / `MALLOC_TRIM_THRESHOLD_`
//! and `MALLOC_MMAP_THRESHOLD_` win. Other C libraries (musl) are left alone. Owns that call only.

/// Blocks below this come from the heap rather than their own mapping.
/// Setting the trim threshold fixes glibc's mmap threshold at 128 KiB, and
/// each GPU's process list (224 KB at 1000 processes) then got a fresh
/// mapping every poll and was unmapped a poll later: 5,000 page faults a
/// second at 64 x 1000. From the heap, the blocks the previous snapshot
/// freed are reused.
const MMAP_THRESHOLD: i32 = 4 << 20;

/// Applies the settings unless the environment already chose.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use libc::{M_ARENA_MAX, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD};
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            // SAFETY: mallopt only changes allocator parameters; called
            // before any thread is started.
            unsafe { libc::mallopt(M_ARENA_MAX, 1) };
        }
        if std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe { libc::mallopt(M_TRIM_THRESHOLD, 1 << 20) };
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe { libc::mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
        }
    }
}
