//! The flight recorder's back channel: asks a reporting PyTorch process
//! to start `torch.cuda.memory._record_memory_history` (a bounded ring) or
//! to dump its snapshot now, by a datagram to the address its reports came
//! from (`gpumemd-torch` binds an abstract one), and keeps the spool the
//! snapshots go to bounded.
//!
//! Owns: the PID to reply-address map (learned only from reports the
//! kernel vouched for: `SCM_CREDENTIALS` names the PID), the command's
//! wire form, and the per-user spool directories (`spool/<uid>`, mode
//! 0700, owned by the user, who writes there; at most
//! [`MAX_SNAPSHOTS_PER_USER`] files, none older than [`RETENTION`], so one
//! user can never fill it for others). Must not: act without a request
//! (the HTTP handler checks the lifecycle switch), or follow a link.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use rustc_hash::FxHashMap;

/// Reply addresses remembered at most (one per reporting process).
const MAX_PEERS: usize = 4096;
/// Snapshots kept per user; the oldest go first.
pub const MAX_SNAPSHOTS_PER_USER: usize = 4;
/// Snapshots older than this are removed: 7 days.
pub const RETENTION: Duration = Duration::from_secs(7 * 86_400);
/// The ring PyTorch keeps while recording (its own default is 100 000).
pub const MAX_ENTRIES: u64 = 100_000;

/// What a process is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Start recording; dump on the next out-of-memory error.
    Record,
    /// Dump the snapshot now (starting to record if it was not).
    Dump,
    /// Stop recording.
    Stop,
}

impl Ask {
    pub fn as_str(self) -> &'static str {
        match self {
            Ask::Record => "record",
            Ask::Dump => "dump",
            Ask::Stop => "stop",
        }
    }
}

/// Why a request could not be passed on.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("PID {0} has not reported over the allocator socket with a reply address (gpumemd-torch 0.2 or later)")]
    NotReporting(u32),
    #[error("spool {}: {source}", path.display())]
    Spool { path: PathBuf, source: std::io::Error },
    #[error("cannot reach PID {pid}: {source}")]
    Send { pid: u32, source: std::io::Error },
}

/// The reply addresses and the socket commands go out on.
#[derive(Debug, Default)]
pub struct Recorder {
    peers: Mutex<FxHashMap<u32, Vec<u8>>>,
}

impl Recorder {
    /// Remembers that `pid` (as the kernel says) reports from the abstract
    /// address `name`.
    pub fn note(&self, pid: u32, name: &[u8]) {
        let mut peers = self.peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if peers.get(&pid).is_some_and(|n| n.as_slice() == name) {
            return;
        }
        if peers.len() >= MAX_PEERS && !peers.contains_key(&pid) {
            // The oldest PIDs are the likeliest gone; any one will do.
            if let Some(&old) = peers.keys().next() {
                peers.remove(&old);
            }
        }
        peers.insert(pid, name.to_vec());
    }

    fn peer(&self, pid: u32) -> Option<Vec<u8>> {
        let peers = self.peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        peers.get(&pid).cloned()
    }

    /// Asks `pid` (running as `uid`) to `ask`; snapshots go to
    /// `spool_root/<uid>`. Returns that directory.
    ///
    /// # Errors
    /// The process never reported with a reply address, the spool cannot
    /// be made, or the datagram cannot be sent.
    pub fn ask(&self, pid: u32, uid: u32, ask: Ask, spool_root: &Path) -> Result<PathBuf, RecordError> {
        let name = self.peer(pid).ok_or(RecordError::NotReporting(pid))?;
        let dir = user_spool(spool_root, uid)?;
        prune(&dir, SystemTime::now());
        let body = serde_json::json!({
            "v": 1,
            "cmd": ask.as_str(),
            "max_entries": MAX_ENTRIES,
            "spool": dir,
        });
        let send = |e| RecordError::Send { pid, source: e };
        let addr = SocketAddr::from_abstract_name(&name).map_err(send)?;
        let sock = UnixDatagram::unbound().map_err(send)?;
        sock.set_nonblocking(true).map_err(send)?;
        sock.send_to_addr(body.to_string().as_bytes(), &addr).map_err(send)?;
        Ok(dir)
    }
}

/// `root/<uid>`, made if missing: mode 0700, owned by `uid` (who writes
/// there). A directory that exists is used as it is only when `uid` owns it.
fn user_spool(root: &Path, uid: u32) -> Result<PathBuf, RecordError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = root.join(uid.to_string());
    let err = |source| RecordError::Spool {
        path: dir.clone(),
        source,
    };
    // The spool itself, under the existing state dir (never made here).
    match std::fs::create_dir(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    match std::fs::create_dir(&dir) {
        Ok(()) => {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
            std::os::unix::fs::chown(&dir, Some(uid), None).map_err(err)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(err)?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(err(std::io::Error::other(format!(
            "not a directory owned by uid {uid}; not using it"
        ))));
    }
    Ok(dir)
}

/// Keeps the newest [`MAX_SNAPSHOTS_PER_USER`] files of `dir` younger
/// than [`RETENTION`]; removes the rest (never following a link).
pub fn prune(dir: &Path, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let m = e.path().symlink_metadata().ok()?;
            (!m.is_dir()).then(|| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), e.path()))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    for (i, (at, path)) in files.iter().enumerate() {
        let old = now.duration_since(*at).is_ok_and(|age| age > RETENTION);
        if i >= MAX_SNAPSHOTS_PER_USER || old {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn my_uid() -> u32 {
        rustix::process::getuid().as_raw()
    }

    #[test]
    fn a_noted_process_gets_the_command_and_its_spool() {
        let r = Recorder::default();
        let name = format!("gpumemd-test-{}", std::process::id());
        let listener = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).expect("addr"))
            .expect("bind abstract");
        let root = tempfile::tempdir().expect("tempdir");
        assert!(matches!(
            r.ask(7, my_uid(), Ask::Record, root.path()),
            Err(RecordError::NotReporting(7))
        ));
        r.note(7, name.as_bytes());
        let dir = r.ask(7, my_uid(), Ask::Dump, root.path()).expect("asked");
        let mut buf = [0u8; 512];
        let n = listener.recv(&mut buf).expect("command");
        let v: serde_json::Value = serde_json::from_slice(&buf[..n]).expect("json");
        assert_eq!(
            (v["cmd"].as_str(), v["max_entries"].as_u64()),
            (Some("dump"), Some(MAX_ENTRIES))
        );
        assert_eq!(v["spool"].as_str(), dir.to_str());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).expect("spool").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "only its user may read the snapshots");
    }

    #[test]
    fn a_spool_owned_by_someone_else_is_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let other = my_uid().wrapping_add(1);
        std::fs::create_dir(root.path().join(other.to_string())).expect("dir");
        assert!(matches!(user_spool(root.path(), other), Err(RecordError::Spool { .. })));
    }

    #[test]
    fn the_spool_keeps_the_newest_few_and_nothing_past_retention() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = SystemTime::now();
        for i in 0..(MAX_SNAPSHOTS_PER_USER + 2) {
            let p = dir.path().join(format!("snap-{i}.pickle"));
            std::fs::write(&p, b"x").expect("write");
            let f = std::fs::File::options().write(true).open(&p).expect("open");
            f.set_modified(base - Duration::from_secs(100 - i as u64))
                .expect("mtime");
        }
        prune(dir.path(), base);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["snap-2.pickle", "snap-3.pickle", "snap-4.pickle", "snap-5.pickle"]
        );
        prune(dir.path(), base + RETENTION + Duration::from_secs(1000));
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
