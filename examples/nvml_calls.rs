//! What each NVML call of a poll costs on a real driver: times every call
//! the NVML source makes per device per poll (mean over `ROUNDS` calls,
//! wall and CPU), so the poll reads only what is worth its price.
//!
//! ```sh
//! cargo run --release --example nvml_calls -- [ROUNDS]   # default 2000
//! ```
//!
//! A measurement tool, not part of the daemon: it calls `nvml-wrapper`
//! directly (the daemon does so only in `src/collect/source/nvml/mod.rs`). Needs a GPU
//! and its driver's `libnvidia-ml.so.1`; prints one line per call, and the
//! process's resident memory before and after NVML is initialised (what
//! the driver library itself costs any exporter).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

use std::process::ExitCode;
use std::time::Instant;

use nvml_wrapper::Nvml;

/// Thread CPU time in seconds, from /proc/thread-self/stat (utime+stime,
/// fields 14 and 15, in USER_HZ = 100): coarse, so only over many calls.
fn thread_cpu() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return f64::NAN;
    };
    let Some(rest) = s.rfind(')').map(|i| &s[i + 2..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (tick(11) + tick(12)) / 100.0
}

/// "VmRSS / RssAnon" of this process from /proc/self/status, in KiB.
fn rss() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map_or("?".to_string(), |v| v.trim().trim_end_matches(" kB").to_string())
    };
    format!("VmRSS {} KiB, RssAnon {} KiB", field("VmRSS:"), field("RssAnon:"))
}

fn time<T: IsOk>(name: &str, rounds: u32, mut call: impl FnMut() -> T) {
    let (c0, t0) = (thread_cpu(), Instant::now());
    let mut ok = 0u32;
    for _ in 0..rounds {
        // Kept, so the call cannot be optimised away.
        ok += u32::from(std::hint::black_box(call()).is_ok_result());
    }
    let wall = t0.elapsed().as_secs_f64() / f64::from(rounds);
    let cpu = (thread_cpu() - c0) / f64::from(rounds);
    println!(
        "{name:<40} {:>9.2} us wall {:>9.2} us cpu  ({ok}/{rounds} ok)",
        wall * 1e6,
        cpu * 1e6
    );
}

/// Whether a call's result was Ok, for any result type.
trait IsOk {
    fn is_ok_result(&self) -> bool;
}

impl<T, E> IsOk for Result<T, E> {
    fn is_ok_result(&self) -> bool {
        self.is_ok()
    }
}

fn main() -> ExitCode {
    let rounds = match std::env::args().nth(1).map(|a| a.parse::<u32>()) {
        None => 2000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: nvml_calls [ROUNDS > 0]");
            return ExitCode::from(2);
        }
    };
    println!("before init: {}", rss());
    let t = Instant::now();
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("NVML init failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "nvml init: {:.1} ms; after init: {}",
        t.elapsed().as_secs_f64() * 1e3,
        rss()
    );
    time("device_count", rounds, || nvml.device_count());
    time("device_by_index(0)", rounds, || nvml.device_by_index(0));
    let dev = match nvml.device_by_index(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no device 0: {e}");
            return ExitCode::FAILURE;
        }
    };
    time("uuid", rounds, || dev.uuid());
    time("memory_info (v2)", rounds, || dev.memory_info());
    time("mig_mode", rounds, || dev.mig_mode());
    time("running_compute_processes", rounds, || dev.running_compute_processes());
    time("running_graphics_processes", rounds, || {
        dev.running_graphics_processes()
    });
    time("mps_running_compute_processes", rounds, || {
        dev.mps_running_compute_processes()
    });
    time("running_compute_processes_count", rounds, || {
        dev.running_compute_processes_count()
    });
    time("process_utilization_stats(0)", rounds.min(200), || {
        dev.process_utilization_stats(0)
    });
    time("utilization_rates", rounds, || dev.utilization_rates());
    println!("after the calls: {}", rss());
    ExitCode::SUCCESS
}
