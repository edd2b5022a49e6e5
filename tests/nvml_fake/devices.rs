//! Per-device and per-field failures and the shapes of NVML's answers: a lost
//! GPU among eight, NOT_SUPPORTED and NO_PERMISSION fields, unavailable
//! process memory, a PID in several lists, and MIG instances as devices.

use std::collections::BTreeSet;

use super::harness::*;
use crate::common::wait_until;

const FAST: &str = "interval = \"100ms\"";

/// The series of one device that must survive another GPU's loss.
fn device_series<'a>(body: &'a str, uuid: &str) -> BTreeSet<&'a str> {
    series_of(body, uuid)
        .into_iter()
        .filter(|l| {
            l.starts_with("gpumem_device_")
                || l.starts_with("gpumem_process_memory_used_bytes")
                || l.starts_with("gpumem_process_info")
                || l.starts_with("gpumem_processes_not_exported")
        })
        .collect()
}

#[tokio::test]
async fn a_lost_gpu_goes_down_alone_and_is_picked_up_again() {
    // 250 ms polls make the loss (polls 5-9) last over a second.
    let d = Daemon::scenario("lost-8gpu.toml", "interval = \"250ms\"");
    let (lost, during, snap, ready) = wait_until(WAIT, "GPU 3 lost", || async {
        let body = d.metrics().await;
        let info = lines_of(&body, "gpumem_device_info")
            .into_iter()
            .find(|l| l.contains("index=\"3\""))?;
        let uuid = label(info, "uuid")?.to_string();
        if !has_line(&body, &format!("gpumem_device_up{{uuid=\"{uuid}\"}} 0")) {
            return None;
        }
        let snap = d.snapshot().await;
        let ready = d.get("/-/ready").await.status;
        (device(&snap, &uuid)?["up"] == false).then_some((uuid, body, snap, ready))
    })
    .await;
    assert_eq!(ready, 200, "/-/ready stays 200 while one GPU is lost");
    let seq = snap["seq"].as_u64().expect("seq");
    assert!((5..=9).contains(&seq), "lost from poll 5 to 9, seen at poll {seq}");

    // The lost GPU: identity and up=0, nothing else (alerts about it aside).
    let info = lines_of(&during, "gpumem_device_info")
        .into_iter()
        .find(|l| l.contains(&format!("uuid=\"{lost}\"")))
        .expect("lost GPU keeps its info line");
    assert!(info.contains("index=\"3\",name=\"NVIDIA H100 80GB HBM3\""), "{info}");
    let down = format!("gpumem_device_up{{uuid=\"{lost}\"}} 0");
    let lost_series: Vec<&str> = series_of(&during, &lost)
        .into_iter()
        .filter(|l| !l.starts_with("gpumem_alerts{"))
        .collect();
    assert_eq!(lost_series, vec![info, down.as_str()]);
    let dev = device(&snap, &lost).expect("lost GPU in the snapshot");
    assert_eq!(
        dev["errors"],
        serde_json::json!(["device: GPU is lost (fell off the bus)"])
    );
    assert!(
        dev["memory"].is_null() && dev["processes"] == serde_json::json!([]),
        "{dev}"
    );
    assert_lines(&during, &["gpumem_poll_success 1".into(), "gpumem_nvml_up 1".into()]);

    // It comes back at poll 10.
    let after = wait_until(WAIT, "GPU 3 back", || async {
        let body = d.metrics().await;
        has_line(&body, &format!("gpumem_device_up{{uuid=\"{lost}\"}} 1")).then_some(body)
    })
    .await;
    let uuids: Vec<&str> = lines_of(&after, "gpumem_device_info")
        .into_iter()
        .filter_map(|l| label(l, "uuid"))
        .collect();
    assert_eq!(uuids.len(), 8, "{uuids:?}");
    for uuid in &uuids {
        let now = device_series(&after, uuid);
        // info, up, 4 memory, used_max, 4 held, unreleased, processes; 2
        // processes with memory and info; not_exported; the 7 memory Xid
        // counters (the stand-in supports Xid events, no other health read).
        assert_eq!(now.len(), 13 + 4 + 1 + 7, "{uuid}: {now:#?}");
        assert!(now.contains(format!("gpumem_device_up{{uuid=\"{uuid}\"}} 1").as_str()));
        if *uuid != lost {
            assert_eq!(
                device_series(&during, uuid),
                now,
                "{uuid} kept every series while GPU 3 was lost"
            );
        }
    }
    assert!(
        device_series(&after, &lost).contains(info),
        "same identity after the loss"
    );
    assert_lines(
        &after,
        &[
            "gpumem_poll_errors_total{reason=\"device\"} 5".into(),
            "gpumem_poll_success 1".into(),
        ],
    );
    let dev = device(&d.snapshot().await, &lost).cloned().expect("GPU 3");
    assert_eq!(dev["up"], true);
    assert_eq!(dev["errors"], serde_json::json!([]));
    assert_eq!(dev["processes"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn an_unsupported_or_forbidden_field_drops_only_its_series() {
    const V1_ONLY: &str = "GPU-0b5e7d21-4c3a-4f19-8e6d-2a1b3c4d5e6f";
    const NO_PROCS: &str = "GPU-9c1d2e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    let d = Daemon::scenario("not-supported.toml", FAST);
    d.ready().await;
    let body = d.metrics().await;
    let snap = d.snapshot().await;

    // Memory v2 NOT_SUPPORTED: v1 answers total/used/free (its used folds
    // the 512 MiB reserved in); reserved is absent, not 0.
    let (total, used) = (40_960 * MIB, 2 * GIB + 512 * MIB);
    let mut want = memory_lines(V1_ONLY, total, used, total - used, None);
    want.push(format!("gpumem_device_up{{uuid=\"{V1_ONLY}\"}} 1"));
    want.push(process_memory_line(V1_ONLY, 7001, 2 * GIB));
    assert_lines(&body, &want);
    assert!(
        !series_of(&body, V1_ONLY)
            .iter()
            .any(|l| l.starts_with("gpumem_device_memory_reserved_bytes")),
        "{body}"
    );
    let dev = device(&snap, V1_ONLY).expect("GPU 0");
    assert!(dev["memory"]["reserved_bytes"].is_null(), "{dev}");
    assert_eq!(dev["memory"]["used_bytes"], used);

    // Process lists NO_PERMISSION: no process series, memory still there.
    let reserved = 535 * MIB;
    let used = 3 * GIB;
    let mut want = memory_lines(NO_PROCS, H100_TOTAL, used, H100_TOTAL - reserved - used, Some(reserved));
    want.push(format!("gpumem_device_up{{uuid=\"{NO_PROCS}\"}} 1"));
    assert_lines(&body, &want);
    let procs: Vec<&str> = series_of(&body, NO_PROCS)
        .into_iter()
        .filter(|l| l.starts_with("gpumem_process_"))
        .collect();
    assert_eq!(procs, Vec::<&str>::new());
    let dev = device(&snap, NO_PROCS).expect("GPU 1");
    assert_eq!(dev["up"], true);
    assert_eq!(dev["processes"], serde_json::json!([]));
    assert_eq!(
        dev["errors"],
        serde_json::json!([
            "processes (compute): no permission",
            "processes (graphics): no permission",
            "processes (mps): no permission"
        ])
    );
}

/// With the process lists unreadable, the process count, holder split and
/// unreleased memory are unknown: absent, never 0 (and never "everything
/// unattributed", which would page in every unprivileged container).
#[tokio::test]
async fn unreadable_process_lists_leave_counts_and_holders_absent() {
    const NO_PROCS: &str = "GPU-9c1d2e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    let d = Daemon::scenario("not-supported.toml", FAST);
    d.ready().await;
    let body = d.metrics().await;
    let unread: Vec<&str> = series_of(&body, NO_PROCS)
        .into_iter()
        .filter(|l| {
            [
                "gpumem_device_processes",
                "gpumem_device_memory_held_bytes",
                "gpumem_device_memory_unreleased_bytes",
                "gpumem_processes_not_exported",
            ]
            .iter()
            .any(|m| l.starts_with(m))
        })
        .collect();
    assert_eq!(unread, Vec::<&str>::new(), "absent, not 0");
}

#[tokio::test]
async fn unavailable_process_memory_is_absent_not_zero() {
    const UUID: &str = "GPU-6d7e8f90-1a2b-4c3d-9e4f-5a6b7c8d9e0f";
    let d = Daemon::scenario("unavailable-memory.toml", FAST);
    d.ready().await;
    let body = d.metrics().await;
    assert_lines(
        &body,
        &[
            process_info_line(UUID, 3100, "compute"),
            process_info_line(UUID, 3101, "compute"),
            process_memory_line(UUID, 3101, 1536 * MIB),
            format!("gpumem_device_processes{{uuid=\"{UUID}\"}} 2"),
            // The hidden 6 GiB still counts in the device's used memory.
            format!(
                "gpumem_device_memory_used_bytes{{uuid=\"{UUID}\"}} {}",
                6 * GIB + 1536 * MIB
            ),
        ],
    );
    let with_3100: Vec<&str> = lines_of(&body, "gpumem_process_memory_used_bytes")
        .into_iter()
        .filter(|l| l.contains("pid=\"3100\""))
        .collect();
    assert_eq!(with_3100, Vec::<&str>::new(), "absent, not 0");
    let snap = d.snapshot().await;
    let procs = device(&snap, UUID).expect("device")["processes"].clone();
    let p = procs
        .as_array()
        .and_then(|a| a.iter().find(|p| p["pid"] == 3100))
        .expect("pid 3100 listed");
    assert!(p["used_bytes"].is_null(), "{p}");
}

#[tokio::test]
async fn a_process_in_two_lists_is_counted_once() {
    const UUID: &str = "GPU-1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b";
    let d = Daemon::scenario("dup-lists.toml", FAST);
    d.ready().await;
    let body = d.metrics().await;
    let all = 4 * GIB + 256 * MIB + GIB + 512 * MIB;
    let held =
        |holder: &str, v: u64| format!("gpumem_device_memory_held_bytes{{uuid=\"{UUID}\",holder=\"{holder}\"}} {v}");
    assert_lines(
        &body,
        &[
            format!("gpumem_device_processes{{uuid=\"{UUID}\"}} 4"),
            process_info_line(UUID, 5000, "compute+graphics"),
            process_info_line(UUID, 5001, "graphics"),
            process_info_line(UUID, 5002, "compute"),
            process_info_line(UUID, 5003, "mps"),
            process_memory_line(UUID, 5000, 4 * GIB),
            // Counted once, the processes account for all used memory.
            held("exited", all),
            held("unattributed", 0),
            format!("gpumem_device_memory_used_bytes{{uuid=\"{UUID}\"}} {all}"),
        ],
    );
    for metric in ["gpumem_process_info", "gpumem_process_memory_used_bytes"] {
        let n = lines_of(&body, metric)
            .iter()
            .filter(|l| l.contains("pid=\"5000\""))
            .count();
        assert_eq!(n, 1, "{metric} for pid 5000");
    }
}

#[tokio::test]
async fn mig_instances_are_devices_with_their_own_memory_and_processes() {
    const PARENT: &str = "GPU-2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e";
    const PLAIN: &str = "GPU-3c4d5e6f-7a8b-4c9d-8e0f-2a3b4c5d6e7f";
    const BUS: &str = "00000000:61:00.0";
    // (uuid, profile, total MiB, used)
    let instances = [
        ("MIG-7a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d", "3g.40gb", 40_320, 30 * GIB),
        ("MIG-8b2c3d4e-5f6a-5b7c-9d8e-0f1a2b3c4d5e", "2g.20gb", 20_096, 12 * GIB),
        ("MIG-9c3d4e5f-6a7b-5c8d-0e9f-1a2b3c4d5e6f", "1g.10gb", 9_856, GIB),
    ];
    let d = Daemon::scenario("mig.toml", FAST);
    d.ready().await;
    let body = d.metrics().await;
    let info = |uuid: &str, index: &str, name: &str, bus: &str, parent: &str, profile: &str| {
        format!(
            "gpumem_device_info{{uuid=\"{uuid}\",index=\"{index}\",name=\"{name}\",pci_bus_id=\"{bus}\",parent_uuid=\"{parent}\",mig_profile=\"{profile}\"}} 1"
        )
    };
    let h100 = "NVIDIA H100 80GB HBM3";
    let mut want = vec![
        info(PARENT, "0", h100, BUS, "", ""),
        info(PLAIN, "1", h100, "00000000:9D:00.0", "", ""),
    ];
    for (uuid, profile, total_mib, used) in instances {
        let total = total_mib * MIB;
        want.push(info(uuid, "", &format!("{h100} MIG {profile}"), BUS, PARENT, profile));
        want.extend(memory_lines(uuid, total, used, total - used, Some(0)));
        want.push(format!("gpumem_device_up{{uuid=\"{uuid}\"}} 1"));
    }
    let (m0, m2, m3) = (instances[0].0, instances[1].0, instances[2].0);
    // The parent's used memory is its instances'; its holder split is theirs
    // (30 + 12 GiB listed) with the unlisted 1 GiB unattributed.
    let used = 43 * GIB;
    want.extend(memory_lines(
        PARENT,
        H100_TOTAL,
        used,
        H100_TOTAL - 535 * MIB - used,
        Some(535 * MIB),
    ));
    want.extend([
        format!("gpumem_device_processes{{uuid=\"{PARENT}\"}} 0"),
        format!(
            "gpumem_device_memory_held_bytes{{uuid=\"{PARENT}\",holder=\"exited\"}} {}",
            42 * GIB
        ),
        format!("gpumem_device_memory_held_bytes{{uuid=\"{PARENT}\",holder=\"unattributed\"}} {GIB}"),
        format!("gpumem_device_processes{{uuid=\"{m0}\"}} 1"),
        format!("gpumem_device_processes{{uuid=\"{m2}\"}} 2"),
        format!("gpumem_device_processes{{uuid=\"{m3}\"}} 1"),
        process_memory_line(m0, 6100, 30 * GIB),
        process_memory_line(m2, 6200, 10 * GIB),
        process_memory_line(m2, 6201, 2 * GIB),
        process_info_line(m3, 6300, "compute"),
        process_memory_line(PLAIN, 6400, 12 * GIB),
    ]);
    assert_lines(&body, &want);
    let parent_procs: Vec<&str> = series_of(&body, PARENT)
        .into_iter()
        .filter(|l| l.starts_with("gpumem_process_"))
        .collect();
    assert_eq!(parent_procs, Vec::<&str>::new(), "the parent lists no processes");
    assert_eq!(lines_of(&body, "gpumem_process_info").len(), 5, "each process once");
    let snap = d.snapshot().await;
    let uuids: Vec<&str> = snap["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|d| d["uuid"].as_str())
        .collect();
    assert_eq!(uuids, [PARENT, m0, m2, m3, PLAIN]);
}

#[tokio::test]
async fn a_quiet_graphics_list_is_read_sparsely_but_a_new_graphics_process_is_found() {
    const UUID: &str = "GPU-5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9";
    // gpumemd reads a list that was empty for 10 polls every 5th poll
    // (src/collect/source/nvml/mod.rs); the process appears at the stand-in's poll 20.
    const APPEARS_AT: u64 = 20;
    const SPARSE_EVERY: u64 = 5;
    let d = Daemon::scenario("quiet-lists.toml", FAST);
    d.ready().await;
    let want = process_info_line(UUID, 6001, "graphics");
    let seen_at = wait_until(WAIT, "the graphics-only process", || async {
        let body = d.metrics().await;
        let polls = lines_of(&body, "gpumem_polls_total")
            .first()
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())?;
        has_line(&body, &want).then_some(polls)
    })
    .await;
    // One poll of slack: the scrape may land just after the poll that read it.
    assert!(
        seen_at <= APPEARS_AT + SPARSE_EVERY + 1,
        "the graphics-only process showed up only at poll {seen_at}"
    );
    let body = d.metrics().await;
    assert_lines(
        &body,
        &[
            format!(
                "gpumem_device_memory_used_bytes{{uuid=\"{UUID}\"}} {}",
                2 * GIB + 256 * MIB
            ),
            format!("gpumem_device_memory_held_bytes{{uuid=\"{UUID}\",holder=\"unattributed\"}} 0"),
        ],
    );
}
