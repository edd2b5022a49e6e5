//! Unit tests of the `process_*` families: `/proc` parsing from fixture
//! trees (odd command names, missing files, an unlimited limit), the real
//! `/proc/self`, and which families a render announces.

use std::fs;
use std::path::Path;

use super::*;
use crate::serve::metrics::selfproc::boot_time;

const UNITS: Units = Units {
    ticks_per_second: 100,
    page_size: 4096,
};

/// A `/proc/<pid>/stat` line: comm holds `) (` and spaces, utime 250,
/// stime 50 ticks, start 1000 ticks after boot, vsize 8 MiB, rss 300 pages.
const STAT: &str = "42 (my ) (daemon) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1000 8388608 300 \
                    18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";

const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";

fn fixture(root: &Path, files: &[(&str, &str)], fds: usize) {
    let dir = root.join("42");
    fs::create_dir_all(dir.join("fd")).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..fds {
        fs::write(dir.join("fd").join(i.to_string()), "").unwrap_or_else(|e| panic!("{e}"));
    }
    for (name, text) in files {
        let path = if *name == "stat-root" {
            root.join("stat")
        } else {
            dir.join(name)
        };
        fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    }
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn stats_come_from_stat_limits_fd_and_boot_time() {
    let tmp = tempdir();
    let files = [
        ("stat", STAT),
        ("limits", LIMITS),
        ("stat-root", "cpu  1 2 3\nbtime 1767225600\nprocesses 9\n"),
    ];
    fixture(tmp.path(), &files, 3);
    let s = SelfStats::read_from(tmp.path(), "42", UNITS, boot_time(tmp.path()));
    assert_eq!(
        s,
        SelfStats {
            cpu_seconds: Some(3.0),
            resident_bytes: Some(300 * 4096),
            virtual_bytes: Some(8 << 20),
            open_fds: Some(3),
            max_fds: Some(1024),
            start_time_seconds: Some(1_767_225_610.0),
        }
    );
}

#[test]
fn what_proc_does_not_give_is_absent_and_its_family_left_out() {
    let tmp = tempdir();
    let unlimited = LIMITS.replace("1024                ", "unlimited           ");
    fixture(tmp.path(), &[("limits", &unlimited), ("stat", "42 (cut")], 0);
    let s = SelfStats::read_from(tmp.path(), "42", UNITS, boot_time(tmp.path()));
    assert_eq!(
        s,
        SelfStats {
            open_fds: Some(0),
            ..SelfStats::default()
        }
    );
    let d = DaemonState {
        process: Some(s),
        ..DaemonState::default()
    };
    let out = render_with(&snap(Vec::new()), &d, &cfg());
    assert_eq!(value(&out, "process_open_fds", ""), Some(0));
    for gone in [
        "process_cpu_seconds_total",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(!announced(&out, gone), "{gone}");
    }
    let none = render(&snap(Vec::new()), &cfg());
    assert!(
        !none.contains("# TYPE process_"),
        "no stats given, no process_ families"
    );
}

#[test]
fn this_process_reads_whole_from_proc_self() {
    let s = SelfStats::read();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    assert!(s.resident_bytes.is_some_and(|b| b > 0), "{s:?}");
    assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
    assert!(s.open_fds.is_some_and(|n| n >= 3), "stdin, stdout, stderr: {s:?}");
    assert!(s.max_fds >= s.open_fds, "{s:?}");
    assert!(s.cpu_seconds.is_some_and(|c| c >= 0.0), "{s:?}");
    // The test binary started within the hour (clock ticks: 10 ms slack).
    assert!(
        s.start_time_seconds.is_some_and(|t| t <= now + 1.0 && t > now - 3600.0),
        "{s:?} now {now}"
    );
    let d = DaemonState {
        process: Some(s),
        ..DaemonState::default()
    };
    let out = super::super::render(&snap(Vec::new()), &d, &cfg(), &BUILD, Format::OpenMetrics);
    assert!(out.contains("# TYPE process_cpu_seconds counter\n"), "{out}");
    assert!(out.contains("\nprocess_cpu_seconds_total "), "{out}");
}
