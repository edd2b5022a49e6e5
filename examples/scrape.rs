//! A minimal scrape client for latency benchmarks: `COUNT` sequential
//! `GET`s of one URL path, a new TCP connection each (as Prometheus does
//! when keep-alive is off, and as the side-by-side compares every exporter),
//! and a JSON line with the latency percentiles.
//!
//! ```sh
//! cargo run --release --example scrape -- 127.0.0.1:9947 /metrics 1000
//! ```
//!
//! Why not curl or Python: at a few hundred microseconds a scrape, the
//! client's own start-up or interpreter cost would be most of the figure.
//! Only the standard library: this runs on the GPU machine, which has no
//! network to fetch anything. Stops early after `--cap-s` seconds (default
//! 60) so a slow exporter cannot eat a bounded benchmark run. `--gzip` asks
//! for a gzip body, as Prometheus does (`body_bytes` is then compressed).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: scrape HOST:PORT PATH COUNT [--cap-s SECONDS] [--gzip]";
    let (Some(addr), Some(path), Some(count)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let Ok(count) = count.parse::<usize>() else {
        eprintln!("COUNT must be a whole number, not {count:?}\n{usage}");
        return ExitCode::from(2);
    };
    let cap = match args.iter().position(|a| a == "--cap-s") {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse::<f64>().ok()) {
            Some(s) if s > 0.0 => Duration::from_secs_f64(s),
            _ => {
                eprintln!("--cap-s needs a positive number of seconds\n{usage}");
                return ExitCode::from(2);
            }
        },
        None => Duration::from_secs(60),
    };
    let coding = if args.iter().any(|a| a == "--gzip") {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{coding}Connection: close\r\n\r\n");
    let mut lat = Vec::with_capacity(count);
    let (mut errors, mut last_status, mut body_bytes) = (0usize, 0u16, 0usize);
    let mut buf = Vec::with_capacity(1 << 20);
    let started = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        match get(addr, request.as_bytes(), &mut buf) {
            Ok(status) => {
                last_status = status;
                if status == 200 {
                    body_bytes = body_len(&buf);
                } else {
                    errors += 1;
                }
            }
            Err(e) => {
                errors += 1;
                if errors == 1 {
                    eprintln!("scrape of {addr}{path} failed: {e}");
                }
            }
        }
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        if started.elapsed() > cap {
            break;
        }
    }
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        lat.get(((lat.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
    };
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    println!(
        "{{\"count\":{},\"errors\":{errors},\"last_status\":{last_status},\"body_bytes\":{body_bytes},\
         \"p50_ms\":{:.4},\"p99_ms\":{:.4},\"mean_ms\":{mean:.4},\"max_ms\":{:.4},\"seconds\":{:.3}}}",
        lat.len(),
        pct(0.50).unwrap_or(f64::NAN),
        pct(0.99).unwrap_or(f64::NAN),
        lat.last().copied().unwrap_or(f64::NAN),
        started.elapsed().as_secs_f64(),
    );
    if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One request on a fresh connection; the whole response ends up in `buf`.
fn get(addr: &str, request: &[u8], buf: &mut Vec<u8>) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request)?;
    buf.clear();
    s.read_to_end(buf)?;
    // "HTTP/1.1 200 OK": the status is the second word.
    let status = buf
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(|w| std::str::from_utf8(w).ok())
        .and_then(|w| w.parse().ok());
    status.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP status line"))
}

/// Bytes after the header block (chunked framing, if any, included).
fn body_len(resp: &[u8]) -> usize {
    resp.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |i| resp.len() - i - 4)
}
