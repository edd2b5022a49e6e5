//! A CUDA driver-API workload with a known pattern, for the driver-call
//! ledger's tests and its overhead figure: it dlopens a libcuda (the
//! stand-in `libfake_nvml.so`, or a real driver), waits for "go" on stdin
//! (so probes can be attached to what it mapped), then either runs the
//! pattern and prints its own accounting as one JSON line, or with `--bench
//! N` times N cuMemAlloc_v2/cuMemFree_v2 pairs and prints ns per call. It
//! then waits for stdin to close, so its books can be read while it lives.
//!
//! ```sh
//! FAKE_CUDA_MEMORY=1GiB cargo run --example cuda_workload -- target/debug/libfake_nvml.so
//! cargo run --release --example cuda_workload -- target/release/libfake_nvml.so --bench 1000000
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test workload: a failed step ends the run

use std::ffi::{c_int, c_uint, c_void};
use std::io::BufRead;
use std::time::Instant;

type Alloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type AllocFlags = unsafe extern "C" fn(*mut u64, usize, c_uint) -> c_int;
type AllocStream = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> c_int;
type AllocPool = unsafe extern "C" fn(*mut u64, usize, *mut c_void, *mut c_void) -> c_int;
type AllocPitch = unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, c_uint) -> c_int;
type Free = unsafe extern "C" fn(u64) -> c_int;
type FreeStream = unsafe extern "C" fn(u64, *mut c_void) -> c_int;
type Create = unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> c_int;

const MIB: usize = 1 << 20;

/// What the workload did, by its own count.
#[derive(Default)]
struct Own {
    live: Vec<(u64, usize)>,
    managed: usize,
    allocations: u64,
    frees: u64,
    failures: Vec<(c_int, usize)>,
}

impl Own {
    fn got(&mut self, rc: c_int, key: u64, size: usize) -> u64 {
        if rc == 0 {
            self.allocations += 1;
            self.live.push((key, size));
        } else {
            self.failures.push((rc, size));
        }
        key
    }

    fn gave(&mut self, rc: c_int, key: u64) {
        assert_eq!(rc, 0, "free of {key:#x}");
        self.frees += 1;
        self.live.retain(|(k, _)| *k != key);
    }

    fn json(&self) -> String {
        let live: usize = self.live.iter().map(|l| l.1).sum();
        let largest = self.live.iter().map(|l| l.1).max().unwrap_or(0);
        let failures: Vec<String> = self
            .failures
            .iter()
            .map(|(c, s)| format!("{{\"code\":{c},\"size\":{s}}}"))
            .collect();
        format!(
            "{{\"pid\":{},\"live_bytes\":{live},\"managed_bytes\":{},\"live_allocations\":{},\"largest_bytes\":{largest},\"allocations\":{},\"frees\":{},\"failures\":[{}]}}",
            std::process::id(),
            self.managed,
            self.live.len(),
            self.allocations,
            self.frees,
            failures.join(",")
        )
    }
}

#[allow(dead_code)] // tests/nvml_fake/ledger.rs includes this file and calls `workload`
fn main() {
    workload(&std::env::args().skip(1).collect::<Vec<_>>());
}

/// `LIBCUDA [--bench N]`: the whole run.
pub fn workload(args: &[String]) {
    let lib_path = args.first().expect("usage: cuda_workload LIBCUDA [--bench N]");
    let bench: Option<u64> = (args.get(1).map(String::as_str) == Some("--bench"))
        .then(|| args.get(2).and_then(|n| n.parse().ok()).expect("--bench N"));
    // SAFETY: loading a CUDA driver (or the stand-in) runs its initialisers only.
    let lib = unsafe { libloading::Library::new(lib_path) }.expect("dlopen");
    // SAFETY: each symbol has the driver API's C signature named by its type.
    let (alloc, free, managed, async_, pool, pitch, free_async, create, release) = unsafe {
        (
            *lib.get::<Alloc>(b"cuMemAlloc_v2").unwrap(),
            *lib.get::<Free>(b"cuMemFree_v2").unwrap(),
            *lib.get::<AllocFlags>(b"cuMemAllocManaged").unwrap(),
            *lib.get::<AllocStream>(b"cuMemAllocAsync").unwrap(),
            *lib.get::<AllocPool>(b"cuMemAllocFromPoolAsync").unwrap(),
            *lib.get::<AllocPitch>(b"cuMemAllocPitch_v2").unwrap(),
            *lib.get::<FreeStream>(b"cuMemFreeAsync").unwrap(),
            *lib.get::<Create>(b"cuMemCreate").unwrap(),
            *lib.get::<Free>(b"cuMemRelease").unwrap(),
        )
    };
    println!("ready {}", std::process::id());
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).expect("stdin");
    let null = std::ptr::null_mut();
    // SAFETY (every call below): valid out-pointers on this stack, and
    // pointers and handles the same library gave.
    unsafe {
        if let Some(n) = bench {
            let mut p = 0u64;
            let t = Instant::now();
            for _ in 0..n {
                assert_eq!(alloc(&mut p, MIB), 0);
                assert_eq!(free(p), 0);
            }
            let ns = t.elapsed().as_nanos() as f64 / (2 * n) as f64;
            println!("{{\"calls\":{},\"ns_per_call\":{ns:.1}}}", 2 * n);
        } else {
            let mut own = Own::default();
            let mut p = 0u64;
            let a1 = own.got(alloc(&mut p, MIB), p, MIB);
            own.got(alloc(&mut p, 64 * MIB), p, 64 * MIB);
            let mut row = 0usize;
            let rc = pitch(&mut p, &mut row, 1000, 100, 4);
            own.got(rc, p, row * 100);
            own.got(managed(&mut p, 3 * MIB, 1), p, 3 * MIB);
            own.managed += 3 * MIB;
            let a5 = own.got(async_(&mut p, 5 * MIB, null), p, 5 * MIB);
            own.got(pool(&mut p, 7 * MIB, null, null), p, 7 * MIB);
            // Handles share no space with addresses: the ledger keys them apart.
            let mut h = 0u64;
            own.got(create(&mut h, 32 * MIB, std::ptr::null(), 0), h | 1 << 63, 32 * MIB);
            let h2 = own.got(create(&mut h, 2 * MIB, std::ptr::null(), 0), h | 1 << 63, 2 * MIB);
            own.gave(free(a1), a1);
            own.gave(free_async(a5, null), a5);
            own.gave(release(h2 & !(1 << 63)), h2);
            // Past the budget: out of memory, twice, by two calls.
            own.got(alloc(&mut p, 2048 * MIB), 0, 2048 * MIB);
            own.got(async_(&mut p, 4096 * MIB, null), 0, 4096 * MIB);
            println!("{}", own.json());
        }
    }
    // Alive until told, so the books can be read.
    let _ = stdin.read_line(&mut line);
}
