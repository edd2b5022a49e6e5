//! Tests of the driver-call ledger without the kernel: record decoding,
//! the books and their bounds, finding libcuda in a maps text, the config
//! checks, and the join (figures, NVML split, OOM events) on books fed as
//! the reader thread would. Real uprobes: tests/nvml_fake/ledger.rs.

use std::sync::Arc;

use super::book::Book;
use super::event::{Call, Event, Kind, OUT_OF_MEMORY};
use super::*;
use crate::data::snapshot::{Device, Process, Who};

fn ev(pid: u32, kind: Kind, call: Call, addr: u64, size: u64) -> Event {
    Event {
        pid,
        kind,
        call,
        code: if kind == Kind::Fail { OUT_OF_MEMORY } else { 0 },
        addr,
        size,
    }
}

#[test]
fn records_round_trip_as_the_bpf_side_writes_them() {
    let e = Event {
        code: 2,
        ..ev(42, Kind::Fail, Call::Pool, 0, 1 << 40)
    };
    assert_eq!(Event::decode(&e.encode()), Some(e));
    let free = ev(7, Kind::Free, Call::Release, 0xdead, 0);
    assert_eq!(Event::decode(&free.encode()), Some(free));
    assert_eq!(Event::decode(&[0u8; 31]), None, "short");
    let mut bad = free.encode();
    bad[5] = 77;
    assert_eq!(Event::decode(&bad), None, "unknown call");
}

#[test]
fn books_follow_allocations_frees_and_failures() {
    let mut b = Book::new(100, 10);
    b.apply(&ev(1, Kind::Alloc, Call::Alloc, 0x1000, 100));
    b.apply(&ev(1, Kind::Alloc, Call::Managed, 0x2000, 300));
    b.apply(&ev(1, Kind::Alloc, Call::Create, 0x1000, 50)); // a handle, not 0x1000 the address
    b.apply(&ev(1, Kind::Fail, Call::Alloc, 0, 1 << 40));
    let a = b.get(1).expect("booked");
    assert_eq!(
        (a.live_bytes, a.managed_bytes, a.largest(), a.live_allocations()),
        (450, 300, 300, 3)
    );
    b.apply(&ev(1, Kind::Free, Call::Free, 0x2000, 0));
    b.apply(&ev(1, Kind::Free, Call::Free, 0x9999, 0)); // never given: nothing to take
    let a = b.get(1).expect("booked");
    assert_eq!((a.live_bytes, a.managed_bytes, a.largest()), (150, 0, 100));
    assert_eq!((a.allocations, a.frees, a.failures), (3, 2, 1));
    let f = b.take_failures(1);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].code, f[0].size), (OUT_OF_MEMORY, 1 << 40));
    assert!(b.take_failures(1).is_empty(), "taken once");
    b.apply(&ev(1, Kind::Free, Call::Release, 0x1000, 0));
    assert_eq!(
        b.get(1).map(|a| a.live_bytes),
        Some(100),
        "the handle went, the address stays"
    );
}

#[test]
fn bounds_hold_and_say_what_they_left_out() {
    let mut b = Book::new(2, 1);
    for i in 0..4 {
        b.apply(&ev(1, Kind::Alloc, Call::Alloc, 0x1000 * (i + 1), 10));
    }
    b.apply(&ev(2, Kind::Alloc, Call::Alloc, 0x1000, 10));
    let a = b.get(1).expect("booked");
    assert_eq!((a.live_bytes, a.untracked, a.allocations), (20, 2, 4));
    assert_eq!(b.unbooked, 1, "a second process over max_processes");
    assert_eq!(b.held(), (1, 2));
    b.retain(|pid| pid != 1);
    assert_eq!(b.held(), (0, 0), "a gone process frees its share of the bound");
}

#[test]
fn maps_name_each_driver_file_once_through_the_process_root() {
    let maps = "\
7f00-7f10 r--p 00000000 fd:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65\n\
7f10-7f20 r-xp 00010000 fd:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65\n\
7f20-7f30 r-xp 00000000 fd:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65\n\
7f30-7f40 r-xp 00000000 00:2a 99 /usr/lib64/libcuda.so.1\n\
7f40-7f50 r-xp 00000000 fd:01 55 /usr/lib/libcudart.so.12\n\
7f50-7f60 r-xp 00000000 fd:01 56 /usr/lib/libcuda.so.1 (deleted)\n\
7f60-7f70 rw-p 00000000 00:00 0 [heap]\n";
    let names = vec!["libcuda.so".to_string()];
    let libs = maps::libraries(std::path::Path::new("/proc"), 42, maps, &names);
    let ids: Vec<_> = libs.iter().map(|l| (l.id.0.as_str(), l.id.1)).collect();
    assert_eq!(
        ids,
        [("fd:01", 1234), ("00:2a", 99)],
        "code mappings of libcuda only, once per file"
    );
    assert_eq!(
        libs[1].path,
        std::path::Path::new("/proc/42/root/usr/lib64/libcuda.so.1")
    );
}

#[test]
fn config_section_refuses_what_it_cannot_bound() {
    let ok = EbpfConfig::default();
    assert!(ok.check().is_ok());
    for (cfg, key) in [
        (
            EbpfConfig {
                libraries: vec![],
                ..ok.clone()
            },
            "libraries",
        ),
        (
            EbpfConfig {
                libraries: vec!["/usr/lib/libcuda.so".into()],
                ..ok.clone()
            },
            "libraries",
        ),
        (
            EbpfConfig {
                max_allocations: 0,
                ..ok.clone()
            },
            "max_allocations",
        ),
        (
            EbpfConfig {
                max_processes: 0,
                ..ok.clone()
            },
            "max_processes",
        ),
        (
            EbpfConfig {
                ring_buffer: crate::data::units::ByteSize(5000),
                ..ok.clone()
            },
            "ring_buffer",
        ),
    ] {
        assert_eq!(cfg.check().map_err(|e| e.0), Err(key));
    }
}

fn device(uuid: &str, procs: &[(u32, u64)]) -> Device {
    Device {
        uuid: uuid.into(),
        processes: procs
            .iter()
            .map(|&(pid, used)| Process {
                pid,
                used_bytes: Some(used),
                start_time: Some(0.0),
                who: Who::shared("train", "alice", None),
                ..Process::default()
            })
            .collect(),
        ..Device::default()
    }
}

#[test]
fn join_splits_nvml_and_turns_an_oom_into_one_event_with_the_table() {
    let log = Arc::new(crate::data::events::EventLog::new(16));
    // Down (no probes here), but books fed as the reader would.
    let cfg = EbpfConfig::default();
    let l = Ledger::start(&cfg, "/nonexistent-proc".into(), Some(log.clone()));
    assert!(!l.up());
    l.apply(&[
        ev(10, Kind::Alloc, Call::Alloc, 0x1000, 6 << 30),
        ev(10, Kind::Fail, Call::Alloc, 0, 80 << 30),
        ev(20, Kind::Alloc, Call::Alloc, 0x1000, 1 << 30),
    ]);
    let mut devs = vec![
        device("GPU-a", &[(10, 7 << 30), (30, 9 << 30)]),
        device("GPU-b", &[(20, 2 << 30)]),
    ];
    l.join(&mut devs, 100.0);
    let f = devs[0].processes[0].driver.as_deref().expect("figures");
    assert_eq!((f.live_bytes, f.other_bytes, f.failures), (6 << 30, Some(1 << 30), 1));
    assert_eq!(
        f.last_failure.as_ref().map(|x| (x.call.as_str(), x.code)),
        Some(("cuMemAlloc_v2", 2))
    );
    assert!(devs[0].processes[1].driver.is_none(), "no books, no figures");
    let events = log.list();
    assert_eq!(events.len(), 1);
    let v = serde_json::to_value(&events[0]).expect("json");
    assert_eq!(
        (v["kind"].as_str(), v["pid"].as_u64(), v["requested_bytes"].as_u64()),
        (Some("oom"), Some(10), Some(80 << 30))
    );
    assert_eq!(
        v["gpu"]["processes"].as_array().map(Vec::len),
        Some(2),
        "the GPU's holder table"
    );
    assert_eq!(devs[0].ooms.len(), 1);
    assert!(devs[0].ooms[0].others.contains("(30)"));
    // The next poll makes no second event; the snapshot still shows it.
    l.join(&mut devs, 101.0);
    assert_eq!(log.list().len(), 1);
    assert_eq!(devs[0].ooms.len(), 1);
    // Gone from NVML and from /proc: forgotten.
    let mut none: Vec<Device> = vec![device("GPU-a", &[])];
    l.join(&mut none, 102.0);
    assert_eq!(l.held().0, 0);
}
