//! The kernel side of the ledger, through aya: loads the checked-in BPF
//! object (bpf/ledger.bpf.o, built by scripts/build-bpf.sh), attaches its
//! uprobes and uretprobes to a driver library file, reads the lost-event
//! count, and runs the reader thread that drains the ring buffer into the
//! books. The only module that touches BPF; it must not read /proc or
//! decide what a figure means.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use aya::maps::{Array, MapData, RingBuf};
use aya::programs::UProbe;
use aya::{Ebpf, EbpfLoader};
use thiserror::Error;

use super::book::Book;
use super::event::Event;

/// The object the probes come from: x86_64 registers.
#[cfg(target_arch = "x86_64")]
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../../bpf/ledger.bpf.o");

/// (program, driver symbol, required): every entry probe, then the one
/// return probe on each allocating call. A library without an optional
/// symbol (an older driver) is still probed for the others.
const ENTRIES: &[(&str, &str, bool)] = &[
    ("enter_alloc", "cuMemAlloc_v2", true),
    ("enter_pitch", "cuMemAllocPitch_v2", false),
    ("enter_managed", "cuMemAllocManaged", false),
    ("enter_async", "cuMemAllocAsync", false),
    ("enter_pool", "cuMemAllocFromPoolAsync", false),
    ("enter_create", "cuMemCreate", false),
    ("enter_free", "cuMemFree_v2", true),
    ("enter_free_async", "cuMemFreeAsync", false),
    ("enter_release", "cuMemRelease", false),
    // The per-thread default stream variants of the stream-ordered calls.
    ("enter_async", "cuMemAllocAsync_ptsz", false),
    ("enter_pool", "cuMemAllocFromPoolAsync_ptsz", false),
    ("enter_free_async", "cuMemFreeAsync_ptsz", false),
];
const RETURN: &str = "leave_alloc";

/// Why the ledger could not load or attach.
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("the driver-call ledger is built for x86_64 only")]
    Arch,
    #[error("loading the BPF object failed (needs CAP_BPF and CAP_PERFMON, or root): {0}")]
    Load(#[from] aya::EbpfError),
    #[error("BPF program {name}: {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("BPF object has no {0}")]
    Missing(&'static str),
    #[error("BPF map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    #[error("{path}: {symbol}: {source}")]
    Attach {
        path: String,
        symbol: &'static str,
        source: aya::programs::ProgramError,
    },
}

/// The loaded programs, attached to the libraries so far.
pub struct Probes {
    ebpf: Ebpf,
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes").finish_non_exhaustive()
    }
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut UProbe, ProbeError> {
    let p = ebpf.program_mut(name).ok_or(ProbeError::Missing(name))?;
    p.try_into().map_err(|source| ProbeError::Program { name, source })
}

impl Probes {
    /// Loads the object with a ring buffer of `ring_bytes` and verifies
    /// every program; attaches nothing yet. Returns the ring buffer for
    /// the reader.
    #[cfg(target_arch = "x86_64")]
    pub fn load(ring_bytes: u32) -> Result<(Probes, Ring), ProbeError> {
        let mut ebpf = EbpfLoader::new().set_max_entries("EVENTS", ring_bytes).load(OBJECT)?;
        let mut names: Vec<&'static str> = ENTRIES.iter().map(|e| e.0).chain([RETURN]).collect();
        // A program probes several symbols but is loaded once.
        names.sort_unstable();
        names.dedup();
        for name in names {
            program(&mut ebpf, name)?
                .load()
                .map_err(|source| ProbeError::Program { name, source })?;
        }
        let map = ebpf.take_map("EVENTS").ok_or(ProbeError::Missing("EVENTS"))?;
        // A second descriptor of the same map for the reader's poll(2).
        let wake = match &map {
            aya::maps::Map::RingBuf(data) => data.fd().as_fd().try_clone_to_owned().ok(),
            _ => None,
        }
        .ok_or(ProbeError::Missing("EVENTS ring buffer"))?;
        let ring = RingBuf::try_from(map).map_err(|source| ProbeError::Map { name: "EVENTS", source })?;
        Ok((Probes { ebpf }, Ring { ring, wake }))
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub fn load(_ring_bytes: u32) -> Result<(Probes, Ring), ProbeError> {
        Err(ProbeError::Arch)
    }

    /// Attaches every probe whose symbol `path` exports; how many.
    ///
    /// # Errors
    /// A required symbol missing, or the kernel refusing the probe.
    pub fn attach(&mut self, path: &Path) -> Result<usize, ProbeError> {
        let mut n = 0;
        for &(name, symbol, required) in ENTRIES {
            let failed = |source| ProbeError::Attach {
                path: path.display().to_string(),
                symbol,
                source,
            };
            match program(&mut self.ebpf, name)?.attach(Some(symbol), 0, path, None) {
                Ok(_) => n += 1,
                Err(_) if !required => continue,
                Err(source) => return Err(failed(source)),
            }
            // The return probe only where the call stashed its arguments.
            if name.starts_with("enter_") && !name.starts_with("enter_free") && name != "enter_release" {
                program(&mut self.ebpf, RETURN)?
                    .attach(Some(symbol), 0, path, None)
                    .map_err(failed)?;
            }
        }
        Ok(n)
    }

    /// Events the kernel side lost to a full ring buffer.
    pub fn dropped(&self) -> u64 {
        let Some(map) = self.ebpf.map("DROPPED") else { return 0 };
        Array::<_, u64>::try_from(map).and_then(|a| a.get(&0, 0)).unwrap_or(0)
    }
}

/// The ring buffer and a descriptor to wait on it.
pub struct Ring {
    ring: RingBuf<MapData>,
    wake: std::os::fd::OwnedFd,
}

/// How often the reader drains the ring buffer: 100 ms.
const DRAIN_NS: i64 = 100_000_000;

/// The reader thread's handle: stops it when asked or dropped.
#[derive(Debug)]
pub struct Reader {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    /// Drains `ring` into `book` on its own thread until stopped; counts
    /// the records it read in `read`.
    pub fn spawn(ring: Ring, book: Arc<Mutex<Book>>, read: Arc<AtomicU64>) -> std::io::Result<Reader> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let Ring { mut ring, wake } = ring;
        let thread = std::thread::Builder::new()
            .name("gpumemd-ledger".into())
            .spawn(move || {
                let mut batch: Vec<Event> = Vec::with_capacity(1024);
                // Records do not wake the thread (BPF_RB_NO_WAKEUP: a wake-up
                // per call cost tens of microseconds on a busy machine), so
                // it drains every DRAIN_NS; the ring buffer holds far more
                // than that many nanoseconds' worth of calls.
                let timeout = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: DRAIN_NS,
                };
                while !flag.load(Ordering::Relaxed) {
                    let mut fds = [rustix::event::PollFd::new(&wake, rustix::event::PollFlags::IN)];
                    let _ = rustix::event::poll(&mut fds, Some(&timeout));
                    while let Some(item) = ring.next() {
                        if let Some(e) = Event::decode(&item) {
                            batch.push(e);
                        }
                        if batch.len() == batch.capacity() {
                            break;
                        }
                    }
                    if batch.is_empty() {
                        continue;
                    }
                    read.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    let mut b = book.lock().unwrap_or_else(PoisonError::into_inner);
                    batch.iter().for_each(|e| b.apply(e));
                    drop(b);
                    batch.clear();
                }
            })?;
        Ok(Reader {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
