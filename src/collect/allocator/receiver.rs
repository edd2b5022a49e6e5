//! The socket side of the allocator view: binds the Unix datagram socket
//! with `SO_PASSCRED`, so every datagram carries the kernel's word for its
//! sender (`SCM_CREDENTIALS`: the real PID unless the sender is privileged),
//! and hands each datagram with that PID to [`AllocatorState::receive`] on
//! its own thread. It must not parse reports or hold the state's lock
//! itself, and never runs on the poll thread or the async workers. The
//! thread blocks in `recvmsg` with no timeout (no wake-ups while idle);
//! a [`Stopper`] ends it at shutdown.

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::net::Shutdown;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg, sockopt};
use thiserror::Error;
use tokio::sync::watch;

use super::config::AllocatorConfig;
use super::state::AllocatorState;
use crate::data::clock::unix_now;

/// The pause after a failed receive, so a persistent error cannot spin;
/// also how often the loop looks at the shutdown flag where no
/// [`Stopper`] can be armed (no async runtime).
const PAUSE: Duration = Duration::from_millis(250);

/// Why the receiver did not start (monitoring goes on without it).
#[derive(Debug, Error)]
pub enum ReceiverError {
    #[error(
        "allocator socket {path}: directory {dir} does not exist; create it (systemd: RuntimeDirectory=gpumemd) or set [allocator] socket"
    )]
    NoDir { path: PathBuf, dir: PathBuf },
    #[error("allocator socket {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("allocator socket {path}: {message}")]
    Config { path: PathBuf, message: String },
}

/// The bound socket; the file is removed when this is dropped.
#[derive(Debug)]
pub struct Receiver {
    sock: UnixDatagram,
    path: PathBuf,
    stopped: Arc<AtomicBool>,
}

/// Ends a blocked [`Receiver::run`]: marks it stopped, removes the socket
/// file, then shuts the socket's read side down, which wakes `recvmsg` (it
/// returns at once from then on).
#[derive(Debug)]
pub struct Stopper {
    sock: UnixDatagram,
    path: PathBuf,
    stopped: Arc<AtomicBool>,
}

impl Stopper {
    /// Stops the receiver (idempotent). The file goes here, not only when
    /// the receive thread ends: at shutdown the process may exit before
    /// that thread runs again, and the file would be left behind.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _ = std::fs::remove_file(&self.path);
        let _ = self.sock.shutdown(Shutdown::Read);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Receiver {
    /// Binds the socket of `cfg`, replacing a stale socket file (a left-over
    /// of a previous run) but never another kind of file.
    ///
    /// # Errors
    /// A missing or unwritable directory, a non-socket file in the way, a
    /// bad mode or group.
    pub fn bind(cfg: &AllocatorConfig) -> Result<Receiver, ReceiverError> {
        let path = cfg.socket.clone();
        let io = |what, source| ReceiverError::Io {
            path: cfg.socket.clone(),
            what,
            source,
        };
        let config = |message| ReceiverError::Config {
            path: cfg.socket.clone(),
            message,
        };
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        if !dir.is_dir() {
            return Err(ReceiverError::NoDir { path, dir });
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_socket() => {
                std::fs::remove_file(&path).map_err(|e| io("removing the old socket", e))?
            }
            Ok(_) => return Err(config("exists and is not a socket; not replacing it".into())),
            Err(_) => {}
        }
        let sock = UnixDatagram::bind(&path).map_err(|e| io("cannot bind (is the directory writable?)", e))?;
        let rx = Receiver {
            sock,
            path,
            stopped: Arc::new(AtomicBool::new(false)),
        };
        sockopt::set_socket_passcred(&rx.sock, true).map_err(|e| io("SO_PASSCRED", e.into()))?;
        let mode = cfg.mode_bits().map_err(|e| config(e.to_string()))?;
        std::fs::set_permissions(&rx.path, std::fs::Permissions::from_mode(mode)).map_err(|e| io("chmod", e))?;
        if !cfg.group.is_empty() {
            let gid = group_id(&cfg.group).ok_or_else(|| {
                config(format!(
                    "no group `{}` (a name in /etc/group or a numeric gid)",
                    cfg.group
                ))
            })?;
            std::os::unix::fs::chown(&rx.path, None, Some(gid)).map_err(|e| io("chown", e))?;
        }
        Ok(rx)
    }

    /// A handle that ends [`Receiver::run`] from another thread.
    ///
    /// # Errors
    /// The socket could not be duplicated (out of descriptors).
    pub fn stopper(&self) -> std::io::Result<Stopper> {
        Ok(Stopper {
            sock: self.sock.try_clone()?,
            path: self.path.clone(),
            stopped: self.stopped.clone(),
        })
    }

    /// Without a [`Stopper`] the loop must look at `shutdown` now and then.
    ///
    /// # Errors
    /// Setting the socket's receive timeout failed.
    pub fn poll_shutdown(&self) -> std::io::Result<()> {
        self.sock.set_read_timeout(Some(PAUSE))
    }

    /// Receives until `shutdown` turns true or a [`Stopper`] stops it, on
    /// the calling thread. Blocks while no datagram comes: whoever turns
    /// `shutdown` true must also stop it (or call `poll_shutdown` first).
    pub fn run(self, state: &AllocatorState, shutdown: &watch::Receiver<bool>) {
        // One byte more than the limit, so an oversize datagram is seen as
        // such even where the kernel does not report its full length.
        let mut buf = vec![0u8; state.max_bytes() + 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
        let mut logged = false;
        while !*shutdown.borrow() && !self.stopped.load(Ordering::Acquire) {
            let mut cmsg = RecvAncillaryBuffer::new(&mut space);
            let got = recvmsg(
                &self.sock,
                &mut [IoSliceMut::new(&mut buf)],
                &mut cmsg,
                RecvFlags::TRUNC,
            );
            let msg = match got {
                Ok(m) => m,
                Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => continue,
                Err(e) => {
                    if !logged {
                        tracing::warn!(error = %e, "allocator socket: receive failed");
                        logged = true;
                    }
                    std::thread::sleep(PAUSE);
                    continue;
                }
            };
            if self.stopped.load(Ordering::Acquire) {
                break;
            }
            let mut pid = None;
            for m in cmsg.drain() {
                if let RecvAncillaryMessage::ScmCredentials(c) = m {
                    pid = u32::try_from(c.pid.as_raw_nonzero().get()).ok();
                }
            }
            let kept = msg.bytes.min(buf.len());
            let outcome = state.receive(pid, &buf[..kept], msg.bytes, unix_now());
            // A report the kernel vouched for, from an abstract address: the
            // flight recorder's requests go back there.
            if let (super::Outcome::Accepted, Some(p)) = (outcome, pid) {
                let from = msg.address.and_then(|a| rustix::net::SocketAddrUnix::try_from(a).ok());
                if let Some(name) = from.as_ref().and_then(|u| u.abstract_name()) {
                    state.recorder.note(p, name);
                }
            }
            tracing::trace!(?pid, bytes = msg.bytes, result = outcome.as_str(), "allocator report");
        }
    }
}

/// Stops the receiver and removes the socket file when dropped: the daemon
/// holds it until its run ends, so a clean stop leaves no file behind
/// whatever the receive thread and the async tasks are doing then.
#[derive(Debug)]
pub struct SocketGuard(Option<Stopper>);

impl Drop for SocketGuard {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.stop();
        }
    }
}

/// Binds and starts the receive thread; logs one clear error and returns
/// `None` when the socket cannot be made (monitoring goes on without it).
pub fn start(
    cfg: &AllocatorConfig,
    state: Arc<AllocatorState>,
    shutdown: watch::Receiver<bool>,
) -> Option<SocketGuard> {
    let rx = match Receiver::bind(cfg) {
        Ok(rx) => rx,
        Err(e) => {
            tracing::error!("allocator view disabled: {e}");
            return None;
        }
    };
    arm_stopper(&rx, shutdown.clone());
    // Out of descriptors: no guard, the file goes only with the thread.
    let guard = SocketGuard(rx.stopper().ok());
    tracing::info!(socket = %cfg.socket.display(), "allocator view: receiving reports");
    let spawned = std::thread::Builder::new()
        .name("gpumemd-alloc".into())
        .spawn(move || rx.run(&state, &shutdown));
    match spawned {
        Ok(_) => Some(guard),
        Err(e) => {
            tracing::error!(error = %e, "allocator view disabled: cannot start its thread");
            None
        }
    }
}

/// Stops the receiver when `shutdown` turns true, from a task of the async
/// runtime; outside one (or out of descriptors) the receive loop falls back
/// to looking at the flag every `PAUSE`.
fn arm_stopper(rx: &Receiver, mut shutdown: watch::Receiver<bool>) {
    if let (Ok(rt), Ok(stopper)) = (tokio::runtime::Handle::try_current(), rx.stopper()) {
        rt.spawn(async move {
            // An error is the sender gone: the daemon is ending too.
            let _ = shutdown.wait_for(|s| *s).await;
            stopper.stop();
        });
    } else if let Err(e) = rx.poll_shutdown() {
        tracing::warn!(error = %e, "allocator socket: no receive timeout; shutdown may wait for a report");
    }
}

/// A numeric gid, or a group name looked up in /etc/group.
fn group_id(group: &str) -> Option<u32> {
    if let Ok(n) = group.parse() {
        return Some(n);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == group).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}
