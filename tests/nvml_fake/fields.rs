//! Field reads that fail for a while and recover (`field-errors.toml`): each
//! failure is an entry in the device's `errors`, and nothing read during the
//! failure is remembered: not an empty name or PCI bus id, not "MIG off".

use super::harness::*;
use crate::common::wait_until;

const MIG_GPU: &str = "GPU-4d5e6f7a-8b9c-4dad-8e0f-1a2b3c4d5e6f";
const MIG_INSTANCE: &str = "MIG-5e6f7a8b-9c0d-5e1f-8a2b-3c4d5e6f7a8b";
const PLAIN_GPU: &str = "GPU-6f7a8b9c-0d1e-4f2a-9b3c-4d5e6f7a8b9c";

fn errors(snap: &serde_json::Value, uuid: &str) -> Vec<String> {
    device(snap, uuid)
        .and_then(|d| d["errors"].as_array())
        .map(|a| a.iter().filter_map(|e| e.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn failed_field_reads_are_recorded_and_read_again() {
    let d = Daemon::scenario("field-errors.toml", "interval = \"100ms\"");
    let during = wait_until(WAIT, "a poll inside the fault window", || async {
        let snap = d.snapshot().await;
        let seq = snap["seq"].as_u64()?;
        ((1..=10).contains(&seq)).then_some(snap)
    })
    .await;
    let plain = errors(&during, PLAIN_GPU);
    assert!(plain.iter().any(|e| e.starts_with("name: ")), "{plain:?}");
    assert!(plain.iter().any(|e| e.starts_with("pci bus id: ")), "{plain:?}");
    let mig = errors(&during, MIG_GPU);
    assert!(mig.iter().any(|e| e.starts_with("mig mode: ")), "{mig:?}");
    assert_eq!(device(&during, PLAIN_GPU).map(|d| d["up"].clone()), Some(true.into()));

    // After the window the name, bus id and MIG instances come back within a
    // few polls, not after the 30-poll MIG re-check or never.
    let after = wait_until(WAIT, "fields read again after the faults", || async {
        let snap = d.snapshot().await;
        let plain = device(&snap, PLAIN_GPU)?;
        let ok = plain["name"] == "NVIDIA H100 80GB HBM3"
            && plain["pci_bus_id"] == "00000000:62:00.0"
            && device(&snap, MIG_INSTANCE).is_some();
        ok.then_some(snap)
    })
    .await;
    let seq = after["seq"].as_u64().expect("seq");
    assert!(seq <= 15, "recovered only at poll {seq}");
    assert!(errors(&after, PLAIN_GPU).is_empty(), "{:?}", errors(&after, PLAIN_GPU));
    assert!(errors(&after, MIG_GPU).is_empty(), "{:?}", errors(&after, MIG_GPU));
}
