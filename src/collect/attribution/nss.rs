//! uid -> user name through the system's name service (getpwuid_r: files,
//! LDAP, SSSD, whatever nsswitch.conf says), resolved on a thread of its own
//! into a bounded cache.
//!
//! Owns: the cache, the resolver thread and its bounded queue. Must not: let
//! the caller (the poll thread) wait on NSS. A directory that takes seconds
//! to answer only delays the name: the caller sees the uid as a number until
//! the answer is in, and never more than the lock that guards a map insert.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A name service lookup: `Some(name)`, or `None` when the uid is unknown
/// or the service failed.
pub type Lookup = Arc<dyn Fn(u32) -> Option<String> + Send + Sync>;

/// At most this many uids are kept (a node sees far fewer users); past it
/// the cache starts over rather than grow.
const MAX_NAMES: usize = 16_384;
/// Lookups waiting for the resolver; more are dropped and asked again later.
const QUEUE: usize = 256;
/// A name is asked again after this long (renames are rare).
const REFRESH: Duration = Duration::from_secs(3600);
/// An unknown uid (e.g. a container's) is asked again after this long.
const RETRY_UNKNOWN: Duration = Duration::from_secs(300);

/// The system's own lookup: getpwuid_r(3) through nix.
pub fn system_lookup() -> Lookup {
    Arc::new(|uid| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name)
    })
}

struct Entry {
    name: Option<String>,
    at: Instant,
}

#[derive(Default)]
struct State {
    names: HashMap<u32, Entry>,
    pending: HashSet<u32>,
}

/// The cache and its resolver, whose thread ends when this is dropped.
pub struct NssNames {
    state: Arc<Mutex<State>>,
    tx: Option<SyncSender<u32>>,
}

impl std::fmt::Debug for NssNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NssNames")
    }
}

fn locked(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic in a lookup cannot leave the map half-written: keep using it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl NssNames {
    /// Starts the resolver thread. If the thread cannot start, names stay
    /// numeric (logged once).
    pub fn start(lookup: Lookup) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let shared = state.clone();
        let spawned = std::thread::Builder::new()
            .name("gpumemd-nss".into())
            .spawn(move || resolve(&rx, &shared, &lookup));
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the user name resolver; users show as uids");
                None
            }
        };
        NssNames { state, tx }
    }

    /// The cached name of `uid`, or `None` (then shown as the number). A
    /// missing or stale entry is queued for the resolver without waiting.
    pub fn get(&self, uid: u32) -> Option<String> {
        let mut st = locked(&self.state);
        let (name, due) = st.names.get(&uid).map_or((None, true), |e| {
            let ttl = if e.name.is_some() { REFRESH } else { RETRY_UNKNOWN };
            (e.name.clone(), e.at.elapsed() >= ttl)
        });
        // A failed send (full: the resolver is slow; disconnected: it died)
        // leaves the uid unpending, so a later poll asks again.
        if due && !st.pending.contains(&uid) && self.tx.as_ref().is_some_and(|tx| tx.try_send(uid).is_ok()) {
            st.pending.insert(uid);
        }
        name
    }
}

fn resolve(rx: &Receiver<u32>, state: &Mutex<State>, lookup: &Lookup) {
    while let Ok(uid) = rx.recv() {
        // The slow part runs without the lock.
        let name = lookup(uid);
        let mut st = locked(state);
        st.pending.remove(&uid);
        if st.names.len() >= MAX_NAMES && !st.names.contains_key(&uid) {
            st.names.clear();
        }
        st.names.insert(
            uid,
            Entry {
                name,
                at: Instant::now(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::wait_true;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_slow_directory_never_blocks_the_caller() {
        // The lookup blocks until the test opens the gate: a hung LDAP.
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().expect("gate");
        let calls = Arc::new(AtomicUsize::new(0));
        let (g, c) = (gate.clone(), calls.clone());
        let names = NssNames::start(Arc::new(move |uid| {
            c.fetch_add(1, Ordering::SeqCst);
            let _wait = g.lock();
            (uid == 5000).then(|| "ldapuser".to_string())
        }));
        let started = Instant::now();
        for _ in 0..1000 {
            assert_eq!(names.get(5000), None, "numeric until resolved");
            assert_eq!(names.get(5001), None);
        }
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        wait_true("the first lookup to start", || calls.load(Ordering::SeqCst) >= 1);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one lookup in flight, none repeated");
        drop(held);
        wait_true("the name", || names.get(5000).is_some());
        assert_eq!(names.get(5000).as_deref(), Some("ldapuser"));
        wait_true("5001 asked", || calls.load(Ordering::SeqCst) >= 2);
        assert_eq!(calls.load(Ordering::SeqCst), 2, "each uid asked once, not per call");
    }

    #[test]
    fn the_queue_is_bounded() {
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().expect("gate");
        let g = gate.clone();
        let names = NssNames::start(Arc::new(move |uid| {
            let _wait = g.lock();
            Some(format!("u{uid}"))
        }));
        for uid in 0..10_000 {
            assert_eq!(names.get(uid), None);
        }
        let pending = locked(&names.state).pending.len();
        assert!(pending <= QUEUE + 1, "{pending} pending");
        drop(held);
        wait_true("the queue to drain", || locked(&names.state).pending.is_empty());
        assert!(locked(&names.state).names.len() <= MAX_NAMES);
        // Uids dropped while the queue was full are asked at a later call.
        wait_true("a late uid", || names.get(9_999).is_some());
    }

    #[test]
    fn the_system_lookup_knows_root() {
        // Every Linux name service answers uid 0.
        assert_eq!(system_lookup()(0).as_deref(), Some("root"));
    }
}
