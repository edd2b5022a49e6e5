//! End to end, the CUDA stand-in's injected errors that suspend and resume
//! must survive: `cuInit` answering NOT_INITIALIZED, 3 (suspend
//! refused `cuda_unavailable`, monitoring goes on) and a restore answering
//! ILLEGAL_STATE, 401 (the process stays checkpointed, reported; a later resume
//! works). Shares the set-up of `suspend_e2e`.

use super::harness::WAIT;
use super::suspend_e2e::{audit, audited, config, listed, post, start};
use crate::common::wait_until;

#[tokio::test]
async fn a_driver_that_will_not_initialise_refuses_suspend_and_monitoring_goes_on() {
    let fault = "[[fault]]\nfunction = \"cu_init\"\ncode = \"CUDA_ERROR_NOT_INITIALIZED\"\n";
    let r = start(fault, &config(false, true, "")).await;
    let line = audited(&r.d, "suspend", "refused").await;
    assert_eq!(line["reason"], "cuda_unavailable", "{line}");
    // The audit line can land before the child's stderr is read: wait.
    r.d.logged("a warning naming cuInit and its error 3 (NOT_INITIALIZED)", |l| {
        l.contains("no usable CUDA driver") && l.contains("cuInit") && l.contains("(3)")
    })
    .await;
    let pid = r.v.0.id();
    assert!(listed(&r.d.snapshot().await, pid), "monitoring goes on");
    assert!(!audit(&r.d).iter().any(|l| l["result"] == "done"));
}

#[tokio::test]
async fn a_failed_restore_keeps_it_checkpointed_and_a_later_resume_works() {
    let fault = "[[fault]]\nfunction = \"cu_restore\"\ncode = \"CUDA_ERROR_ILLEGAL_STATE\"\ntimes = 1\n";
    let r = start(fault, &config(false, false, "")).await;
    let pid = r.v.0.id();
    let first = post(&r.d, &pid.to_string(), "suspend").await;
    assert_eq!(first.status, 200, "{}", first.body);
    wait_until(WAIT, "the process leaves NVML's list", || async {
        (!listed(&r.d.snapshot().await, pid)).then_some(())
    })
    .await;
    let failed = post(&r.d, &pid.to_string(), "resume").await;
    assert_eq!(failed.status, 500, "{}", failed.body);
    let line = audited(&r.d, "resume", "failed").await;
    assert!(
        line["reason"]
            .as_str()
            .unwrap_or("")
            .contains("(401); the process stays checkpointed"),
        "{line}"
    );
    // A poll taken after the failed restore.
    let seq = r.d.snapshot().await["seq"].as_u64().unwrap_or(0);
    let snap = wait_until(WAIT, "a later poll", || async {
        let s = r.d.snapshot().await;
        (s["seq"].as_u64().unwrap_or(0) > seq).then_some(s)
    })
    .await;
    assert!(!listed(&snap, pid), "still checkpointed, off the GPU");
    let dev = super::harness::device(&snap, "GPU-11111111-2222-3333-4444-555555555555").expect("device");
    assert_eq!(dev["suspended"][0]["pid"], pid, "still reported suspended: {dev}");
    let again = post(&r.d, &pid.to_string(), "resume").await;
    assert_eq!(again.status, 200, "{}", again.body);
    wait_until(WAIT, "listed again", || async {
        listed(&r.d.snapshot().await, pid).then_some(())
    })
    .await;
}
