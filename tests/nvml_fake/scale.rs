//! A whole fleet and a whole answer: 64 GPUs x 1000 processes bounded by the
//! cardinality settings, and `gpumemd snapshot --json` on one GPU checked
//! against the scenario file and against `/metrics`.

use std::process::Command;

use serde_json::Value;

use super::harness::*;

/// Polls rarely: one poll of 64 000 processes is slow in a debug build.
const SLOW: &str = "interval = \"10s\"\ntimeout = \"8s\"";

async fn assert_bounded_by_top_n(processes: &str, top_n: usize) {
    let d = Daemon::start(Opts {
        scenario: Some("large.toml"),
        poll: SLOW,
        processes,
        ..Opts::default()
    });
    d.ready().await;
    let body = d.metrics().await;
    let uuids: Vec<&str> = lines_of(&body, "gpumem_device_info")
        .into_iter()
        .filter_map(|l| label(l, "uuid"))
        .collect();
    assert_eq!(uuids.len(), 64);
    assert_lines(&body, &["gpumem_poll_success 1".into()]);
    for metric in ["gpumem_process_memory_used_bytes", "gpumem_process_info"] {
        assert_eq!(lines_of(&body, metric).len(), 64 * top_n, "{metric}");
    }
    // Every per-process family is bounded the same way.
    let families: std::collections::BTreeSet<&str> = body
        .lines()
        .filter(|l| l.starts_with("gpumem_process_"))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for f in families {
        assert!(lines_of(&body, f).len() <= 64 * top_n, "{f}");
    }
    // The exported ones are the largest holders of each GPU.
    let snap = d.snapshot().await;
    let left_out = 1000 - top_n;
    for uuid in &uuids {
        let per_gpu = series_of(&body, uuid)
            .iter()
            .filter(|l| l.starts_with("gpumem_process_memory_used_bytes"))
            .count();
        assert_eq!(per_gpu, top_n, "{uuid}");
        let used: Vec<u64> = device(&snap, uuid).expect("device")["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .map(|p| p["used_bytes"].as_u64().expect("used"))
            .collect();
        assert_eq!(used.len(), 1000);
        let exported_min = series_of(&body, uuid)
            .iter()
            .filter(|l| l.starts_with("gpumem_process_memory_used_bytes"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .min();
        let left_out_max = {
            let mut sorted = used.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            sorted.get(top_n).copied()
        };
        assert!(
            exported_min >= left_out_max,
            "{uuid}: {exported_min:?} < {left_out_max:?}"
        );
        assert_lines(
            &body,
            &[
                format!("gpumem_processes_not_exported{{uuid=\"{uuid}\"}} {left_out}"),
                format!("gpumem_device_processes{{uuid=\"{uuid}\"}} 1000"),
            ],
        );
    }
}

#[tokio::test]
async fn sixty_four_gpus_of_a_thousand_processes_export_top_n_each() {
    assert_bounded_by_top_n("", 50).await;
}

#[tokio::test]
async fn a_smaller_top_n_bounds_the_exposition_further() {
    assert_bounded_by_top_n("top_n = 5", 5).await;
}

/// A size from the scenario file: bytes, or a number with a binary unit.
fn bytes(v: &toml::Value) -> u64 {
    if let Some(n) = v.as_integer() {
        return u64::try_from(n).expect("a size");
    }
    let s = v.as_str().expect("a size string");
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let shift = match unit {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        other => panic!("unit {other} in {s}"),
    };
    num.parse::<u64>().expect("whole number") << shift
}

#[tokio::test]
async fn snapshot_json_matches_the_scenario_and_metrics() {
    let text = std::fs::read_to_string(scenario("one-gpu.toml")).expect("read scenario");
    let sc: toml::Table = toml::from_str(&text).expect("scenario TOML");
    let gpu = &sc["device"][0];
    let proc = &gpu["process"][0];
    let (total, reserved, overhead) = (bytes(&gpu["total"]), bytes(&gpu["reserved"]), bytes(&gpu["overhead"]));
    let (pid, used) = (proc["pid"].as_integer().expect("pid"), bytes(&proc["used"]));
    let uuid = gpu["uuid"].as_str().expect("uuid");

    let work = Workdir::new("interval = \"100ms\"", "");
    let out = Command::new(BIN)
        .args(["snapshot", "--json", "--nvml-lib"])
        .arg(lib_path())
        .arg("--config")
        .arg(work.config())
        .env("FAKE_NVML_SCENARIO", scenario("one-gpu.toml"))
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpumemd snapshot");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let snap: Value = serde_json::from_slice(&out.stdout).expect("snapshot JSON");
    assert_eq!(snap["nvml_up"], true);
    assert_eq!(
        snap["driver"]["driver_version"],
        sc["driver_version"].as_str().expect("driver")
    );
    assert_eq!(
        snap["driver"]["nvml_version"],
        sc["nvml_version"].as_str().expect("nvml")
    );
    assert_eq!(
        snap["driver"]["cuda_version"], "12.4",
        "from {}",
        sc["cuda_driver_version"]
    );
    let devs = snap["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 1);
    let dev = &devs[0];
    assert_eq!(dev["uuid"], uuid);
    assert_eq!(dev["index"], 0);
    assert_eq!(dev["name"], gpu["name"].as_str().expect("name"));
    assert_eq!(dev["pci_bus_id"], gpu["pci_bus_id"].as_str().expect("bus"));
    assert_eq!(dev["up"], true);
    assert_eq!(dev["errors"], serde_json::json!([]));
    let dev_used = used + overhead;
    assert_eq!(
        dev["memory"],
        serde_json::json!({
            "total_bytes": total,
            "used_bytes": dev_used,
            "free_bytes": total - reserved - dev_used,
            "reserved_bytes": reserved,
        })
    );
    let procs = dev["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0]["pid"], pid);
    assert_eq!(procs[0]["used_bytes"], used);
    assert_eq!(procs[0]["type"], "compute");
    assert_eq!(
        procs[0]["sm_util_percent"],
        proc["sm_util"].as_integer().expect("sm_util")
    );

    // The daemon's exposition says the same.
    let d = Daemon::scenario("one-gpu.toml", "interval = \"100ms\"");
    d.ready().await;
    let body = d.metrics().await;
    let m = &dev["memory"];
    let n = |v: &Value| v.as_u64().expect("a byte count");
    let mut want = memory_lines(
        uuid,
        n(&m["total_bytes"]),
        n(&m["used_bytes"]),
        n(&m["free_bytes"]),
        Some(n(&m["reserved_bytes"])),
    );
    let pid = u32::try_from(pid).expect("pid");
    want.extend([
        format!(
            "gpumem_device_info{{uuid=\"{uuid}\",index=\"0\",name=\"{}\",pci_bus_id=\"{}\",parent_uuid=\"\",mig_profile=\"\"}} 1",
            dev["name"].as_str().expect("name"),
            dev["pci_bus_id"].as_str().expect("bus")
        ),
        format!("gpumem_device_up{{uuid=\"{uuid}\"}} 1"),
        format!("gpumem_device_processes{{uuid=\"{uuid}\"}} 1"),
        process_memory_line(uuid, pid, n(&procs[0]["used_bytes"])),
        process_info_line(uuid, pid, "compute"),
        format!(
            "gpumem_driver_info{{driver_version=\"{}\",nvml_version=\"{}\",cuda_version=\"{}\"}} 1",
            snap["driver"]["driver_version"].as_str().expect("driver"),
            snap["driver"]["nvml_version"].as_str().expect("nvml"),
            snap["driver"]["cuda_version"].as_str().expect("cuda"),
        ),
    ]);
    assert_lines(&body, &want);
    let held = |h: &str| value(&body, "gpumem_device_memory_held_bytes", &[&format!("holder=\"{h}\"")]);
    assert_eq!(
        (held("exited"), held("unattributed")),
        (
            n(&dev["holders"]["exited"]) as f64,
            n(&dev["holders"]["unattributed"]) as f64
        )
    );
}
