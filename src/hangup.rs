//! SIGHUP held back from the program's first instruction until `run` has
//! its reload handler in: part of the `gpumemd` binary (not the library),
//! because the constructor below must be linked into the executable. Owns
//! only the signal mask; it must not handle the signal itself (the
//! daemon's shutdown/reload code does).

/// SIGHUP held back from the first code the program runs (the loader calls
/// `.init_array` entries before the Rust runtime's own start and `main`), so
/// one sent right after the start (a reload racing the start-up) stays
/// pending instead of killing the process with the default action while
/// arguments are parsed and the runtime is built. `run` lets it through once
/// its handler is in; every other command at once. Threads started
/// meanwhile keep it blocked, which is fine: the main thread takes it.
// SAFETY: a plain function pointer in the constructor section; the function
// only calls pthread_sigmask, which needs nothing initialised.
#[used]
#[unsafe(link_section = ".init_array")]
static HOLD_HANGUP_AT_LOAD: extern "C" fn() = hold_hangup_at_load;

extern "C" fn hold_hangup_at_load() {
    hold(true);
}

/// Blocks (`true`) or unblocks SIGHUP for the calling thread; a failure
/// (never expected) only leaves the older, shorter-lived window open.
pub fn hold(hold: bool) {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let how = if hold {
        SigmaskHow::SIG_BLOCK
    } else {
        SigmaskHow::SIG_UNBLOCK
    };
    let mut set = SigSet::empty();
    set.add(Signal::SIGHUP);
    let _ = pthread_sigmask(how, Some(&set), None);
}
