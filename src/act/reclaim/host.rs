//! [`Host`]: which processes the reclaimer reads and signals, chosen once,
//! at construction.
//!
//! Owns: the choice between this machine (real `/proc`, pidfd signals, the
//! configured CUDA driver) and a simulated fleet (its `/proc`, its kill
//! function, its simulated driver). Must not: have a default, or let a
//! simulated fleet reach the real kernel, `/proc` or driver.

use std::path::PathBuf;
use std::sync::Arc;

use super::Kill;

/// Which processes the reclaimer acts on. There is no default: the caller
/// says, so a simulated fleet can never fall through to the real kernel.
pub enum Host {
    /// This machine: `/proc` at this path, pidfd signals, the configured
    /// CUDA driver.
    Real(PathBuf),
    /// A simulated fleet: its in-memory `/proc`, its kill function and its
    /// simulated CUDA driver (`None`: suspend finds no driver). Nothing
    /// reaches the host's `/proc`, kernel or driver.
    Simulated {
        tree: Arc<dyn crate::collect::attribution::ProcTree>,
        kill: Option<Kill>,
        cuda: Option<crate::collect::cuda::SimHandle>,
    },
}

#[cfg(test)]
impl Host {
    pub fn is_simulated(&self) -> bool {
        matches!(self, Host::Simulated { .. })
    }
}

/// Where processes are read and how they are signalled, fixed at
/// construction.
#[derive(Debug)]
pub(super) enum Procs {
    Real(PathBuf),
    Simulated(Arc<dyn crate::collect::attribution::ProcTree>),
}
