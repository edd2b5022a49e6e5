//! The allocator families: samples only for processes that report, each
//! kind under its label, counters as counters, and the receiver's counts.

use super::*;
use crate::collect::allocator::{AllocatorConfig, AllocatorState};
use crate::data::snapshot::{AllocPair, AllocatorFigures};

fn figures() -> AllocatorFigures {
    let pair = |c, p| AllocPair { current: c, peak: p };
    AllocatorFigures {
        allocated: pair(100, 150),
        reserved: pair(300, 400),
        active: pair(110, 160),
        inactive_split: pair(20, 30),
        alloc_retries: 4,
        ooms: 2,
        ..AllocatorFigures::default()
    }
}

#[test]
fn only_reporting_processes_get_allocator_series() {
    let mut a = proc(7, Some(1000), "ann");
    a.allocator = Some(Box::new(figures()));
    let s = snap(vec![dev("GPU-a", vec![a, proc(8, Some(500), "bob")])]);
    let out = render(&s, &cfg());
    for line in [
        r#"gpumem_process_allocator_bytes{uuid="GPU-a",pid="7",kind="allocated"} 100"#,
        r#"gpumem_process_allocator_bytes{uuid="GPU-a",pid="7",kind="reserved"} 300"#,
        r#"gpumem_process_allocator_bytes{uuid="GPU-a",pid="7",kind="inactive_split"} 20"#,
        r#"gpumem_process_allocator_peak_bytes{uuid="GPU-a",pid="7",kind="active"} 160"#,
        r#"gpumem_process_ooms_total{uuid="GPU-a",pid="7"} 2"#,
        r#"gpumem_process_alloc_retries_total{uuid="GPU-a",pid="7"} 4"#,
        "# TYPE gpumem_process_ooms_total counter",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line}");
    }
    assert!(
        !out.lines()
            .any(|l| l.starts_with("gpumem_process_allocator") && l.contains("pid=\"8\"")),
        "no figures are not zero figures"
    );
}

#[test]
fn receiver_counts_by_result() {
    let st = std::sync::Arc::new(AllocatorState::new(&AllocatorConfig::default()));
    st.receive(None, b"{}", 2, 0.0);
    let counters = Counters {
        allocator: Some(st),
        ..Counters::default()
    };
    let d = DaemonState {
        counters: Some(&counters),
        ..DaemonState::default()
    };
    let out = render_with(&snap(vec![]), &d, &cfg());
    assert!(out.contains("gpumem_allocator_messages_total{result=\"no_credentials\"} 1"));
    assert!(out.contains("gpumem_allocator_messages_total{result=\"accepted\"} 0"));
}
