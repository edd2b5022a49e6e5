//! ProcFs with a name service (LDAP, SSSD stand-ins): a hung directory never
//! delays a read, and its names show once it answers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::ReadOptions;
use super::{FakeProc, Proc};

#[test]
fn a_hung_name_service_never_delays_a_read_and_its_answer_shows_later() {
    let fake = FakeProc::new();
    fake.add(
        7,
        &Proc {
            uid: 5000,
            ..Proc::default()
        },
    );
    // The directory hangs until the test lets it answer.
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().expect("gate");
    let g = gate.clone();
    let mut procfs = fake
        .procfs()
        .with_identity_refresh(Duration::ZERO)
        .with_name_service(Some(Arc::new(move |uid| {
            let _hung = g.lock();
            (uid == 5000).then(|| "ldap-alice".to_string())
        })));
    let opts = ReadOptions::default();
    let started = Instant::now();
    for _ in 0..50 {
        assert_eq!(
            procfs.read(7, &opts).expect("live").who.user,
            "5000",
            "numeric until resolved"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "reads waited: {:?}",
        started.elapsed()
    );
    drop(held);
    crate::tests::wait_true("the directory's name for uid 7", || {
        procfs.read(7, &opts).expect("live").who.user == "ldap-alice"
    });
    // passwd still wins for the users it has.
    fake.add(8, &Proc::default());
    assert_eq!(procfs.read(8, &opts).expect("live").who.user, "alice");
}
