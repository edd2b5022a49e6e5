//! The driver-call ledger's families: per-process series only for processes
//! with driver figures (none at all without any), and `gpumem_ebpf_up` 0
//! when the probes did not load.

use super::*;
use crate::collect::ledger::{EbpfConfig, Ledger};
use crate::data::snapshot::DriverFigures;

#[test]
fn only_processes_the_ledger_saw_get_driver_series() {
    let plain = render(&snap(vec![dev("GPU-a", vec![proc(8, Some(500), "bob")])]), &cfg());
    assert!(!plain.contains("gpumem_process_driver"), "no ledger, no families");
    let mut a = proc(7, Some(1000), "ann");
    a.driver = Some(Box::new(DriverFigures {
        live_bytes: 900,
        managed_bytes: 100,
        live_allocations: 3,
        largest_bytes: 600,
        failures: 2,
        ..DriverFigures::default()
    }));
    let out = render(&snap(vec![dev("GPU-a", vec![a, proc(8, Some(500), "bob")])]), &cfg());
    for line in [
        r#"gpumem_process_driver_allocated_bytes{uuid="GPU-a",pid="7"} 900"#,
        r#"gpumem_process_driver_managed_bytes{uuid="GPU-a",pid="7"} 100"#,
        r#"gpumem_process_driver_allocations{uuid="GPU-a",pid="7"} 3"#,
        r#"gpumem_process_driver_largest_allocation_bytes{uuid="GPU-a",pid="7"} 600"#,
        r#"gpumem_process_driver_alloc_failures_total{uuid="GPU-a",pid="7"} 2"#,
        "# TYPE gpumem_process_driver_alloc_failures_total counter",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line}");
    }
    assert!(
        !out.lines()
            .any(|l| l.starts_with("gpumem_process_driver") && l.contains("pid=\"8\""))
    );
}

#[test]
fn ebpf_up_is_zero_when_the_probes_are_not_loaded() {
    // Not enabled: nothing is loaded, as when loading failed.
    let l = Ledger::start(&EbpfConfig::default(), "/proc".into(), None);
    let counters = Counters {
        ledger: Some(l),
        ..Counters::default()
    };
    let d = DaemonState {
        counters: Some(&counters),
        ..DaemonState::default()
    };
    let out = render_with(&snap(vec![]), &d, &cfg());
    assert!(out.lines().any(|l| l == "gpumem_ebpf_up 0"), "{out}");
    assert!(out.lines().any(|l| l == "gpumem_ebpf_events_lost_total 0"));
}
