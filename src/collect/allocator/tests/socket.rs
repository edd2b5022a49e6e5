//! The allocator socket with real kernel credentials: the sender the kernel
//! names wins over the message, and binding fails clearly.

use std::os::unix::net::UnixDatagram;

use super::super::receiver::{Receiver, ReceiverError};
use super::*;
use crate::tests::wait_true;

#[test]
fn over_the_socket_the_kernel_names_the_sender_whatever_the_message_says() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = AllocatorConfig {
        enabled: true,
        socket: dir.path().join("a.sock"),
        mode: "0660".into(),
        ..AllocatorConfig::default()
    };
    let me = std::process::id();
    let s = Arc::new(AllocatorState::new(&cfg));
    // We are listed; PID 1 (which the message claims to be) is listed too.
    let mut devs = [device("GPU-a", &[(me, GIB), (1, 2 * GIB)])];
    s.join(&mut devs, crate::data::clock::unix_now());
    let rx = Receiver::bind(&cfg).unwrap();
    let mode =
        std::fs::metadata(&cfg.socket).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.ok(), Some(0o660));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let st = s.clone();
    let stop = rx.stopper().unwrap();
    let t = std::thread::spawn(move || rx.run(&st, &stop_rx));
    let tx = UnixDatagram::unbound().unwrap();
    let claim = report("GPU-a", 123, 456, 0).replacen("{\"v\":1", "{\"pid\":1,\"v\":1", 1);
    tx.send_to(claim.as_bytes(), &cfg.socket).unwrap();
    tx.send_to(&vec![b'{'; 9000], &cfg.socket).unwrap();
    tx.send_to(b"\xff\xfe", &cfg.socket).unwrap();
    wait_true("three datagrams", || s.counts().iter().map(|c| c.1).sum::<u64>() == 3);
    assert_eq!(
        (count(&s, "accepted"), count(&s, "oversize"), count(&s, "malformed")),
        (1, 1, 1)
    );
    s.join(&mut devs, crate::data::clock::unix_now());
    let mine = devs[0]
        .processes
        .iter()
        .find(|p| p.pid == me)
        .and_then(|p| p.allocator.clone());
    let pid1 = devs[0]
        .processes
        .iter()
        .find(|p| p.pid == 1)
        .and_then(|p| p.allocator.clone());
    assert_eq!(
        mine.map(|a| a.allocated.current),
        Some(123),
        "recorded as the real sender"
    );
    assert!(pid1.is_none(), "the PID in the message counts for nothing");
    // The thread blocks with no timeout: the flag alone would not end it.
    stop_tx.send(true).unwrap();
    stop.stop();
    t.join().unwrap();
    assert!(!cfg.socket.exists(), "the socket file goes with the receiver");
}

#[test]
fn a_missing_directory_or_a_file_in_the_way_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = AllocatorConfig {
        socket: dir.path().join("no/such/dir/a.sock"),
        ..AllocatorConfig::default()
    };
    let e = Receiver::bind(&missing).unwrap_err();
    assert!(matches!(e, ReceiverError::NoDir { .. }));
    assert!(e.to_string().contains("does not exist"), "{e}");
    let file = dir.path().join("taken");
    std::fs::write(&file, "x").unwrap();
    let taken = AllocatorConfig {
        socket: file.clone(),
        ..AllocatorConfig::default()
    };
    assert!(matches!(Receiver::bind(&taken), Err(ReceiverError::Config { .. })));
    assert!(file.exists(), "a regular file is never replaced");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    assert!(super::super::receiver::start(&missing, Arc::new(state()), rx).is_none());
}
