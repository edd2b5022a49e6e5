//! The outbox against a temp dir: reload, coalescing, bounds, corruption.

use std::fs;
use std::path::Path;

use super::super::NotifyError;
use super::super::outbox::Outbox;

fn open(dir: &Path, max: usize) -> Outbox<String> {
    Outbox::open(dir, max).expect("open outbox")
}

fn items(o: &Outbox<String>) -> Vec<String> {
    o.batch(usize::MAX).into_iter().map(|(_, s)| s).collect()
}

fn json_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .count()
}

#[test]
fn entries_survive_a_reopen_in_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("outbox/webhook");
    let mut o = open(&dir, 100);
    for s in ["a", "b", "c"] {
        o.push(None, s.to_owned());
    }
    drop(o);
    let mut o = open(&dir, 100);
    assert_eq!(items(&o), ["a", "b", "c"]);
    let newer = o.push(None, "d".into());
    assert!(
        o.batch(3).iter().all(|(s, _)| *s < newer),
        "sequence numbers keep growing after a reload"
    );
}

#[test]
fn delivered_entries_leave_the_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut o = open(tmp.path(), 100);
    o.push(None, "a".into());
    o.push(None, "b".into());
    let first: Vec<u64> = o.batch(1).into_iter().map(|(s, _)| s).collect();
    assert_eq!(o.remove_seqs(&first), 1);
    assert_eq!(json_files(tmp.path()), 1);
    drop(o);
    assert_eq!(items(&open(tmp.path(), 100)), ["b"]);
}

#[test]
fn same_key_coalesces_to_the_latest_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut o = open(tmp.path(), 100);
    let old = o.push(Some("fp1"), "firing".into());
    o.push(Some("fp2"), "other".into());
    o.push(Some("fp1"), "resolved".into());
    assert_eq!(items(&o), ["other", "resolved"]);
    // Acking the replaced state (in flight when it was replaced) keeps the new one.
    assert_eq!(o.remove_seqs(&[old]), 0);
    drop(o);
    assert_eq!(items(&open(tmp.path(), 100)), ["other", "resolved"]);
}

#[test]
fn volatile_entries_do_not_replace_queued_ones_nor_touch_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut o = open(tmp.path(), 100);
    o.push(Some("fp1"), "resolved".into());
    o.push_volatile("fp1", "firing-resend".into());
    o.push_volatile("fp2", "resend".into());
    assert_eq!(items(&o), ["resolved", "resend"]);
    assert_eq!(json_files(tmp.path()), 1);
    let all: Vec<u64> = o.batch(10).into_iter().map(|(s, _)| s).collect();
    assert_eq!(o.remove_seqs(&all), 2);
    assert_eq!(json_files(tmp.path()), 0);
}

#[test]
fn bound_drops_oldest_and_counts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut o = open(tmp.path(), 3);
    for i in 0..5 {
        o.push(None, format!("m{i}"));
    }
    assert_eq!(items(&o), ["m2", "m3", "m4"]);
    assert_eq!(o.counters.dropped, 2);
    assert_eq!(json_files(tmp.path()), 3);
    drop(o);
    // A smaller bound on the next start applies to what was left.
    let o = open(tmp.path(), 2);
    assert_eq!(items(&o), ["m3", "m4"]);
    assert_eq!(o.counters.dropped, 1);
}

#[test]
fn corrupt_entry_is_moved_aside_counted_and_the_rest_loaded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut o = open(tmp.path(), 100);
    o.push(None, "good1".into());
    o.push(None, "good2".into());
    drop(o);
    fs::write(tmp.path().join("00000000000000000001.json"), b"{not json").expect("write");
    fs::write(
        tmp.path().join("00000000000000000002.json"),
        br#"{"format":99,"seq":2,"item":"x"}"#,
    )
    .expect("write");
    fs::write(tmp.path().join(".00000000000000000003.json.tmp"), b"half").expect("write");
    let o = open(tmp.path(), 100);
    assert_eq!(items(&o), ["good1", "good2"]);
    assert_eq!(o.counters.dropped, 2);
    assert!(tmp.path().join("corrupt/00000000000000000001.json").exists());
    assert!(tmp.path().join("corrupt/00000000000000000002.json").exists());
    assert!(
        !tmp.path().join(".00000000000000000003.json.tmp").exists(),
        "leftover temp files are removed"
    );
    drop(o);
    assert_eq!(
        open(tmp.path(), 100).counters.dropped,
        0,
        "a corrupt file is counted once"
    );
}

#[test]
fn entry_file_format_is_documented_shape() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut o = open(tmp.path(), 100);
    let seq = o.push(Some("abc"), "payload".into());
    let text = fs::read_to_string(tmp.path().join("abc.json")).expect("read");
    assert_eq!(text, format!(r#"{{"format":1,"seq":{seq},"item":"payload"}}"#));
}

#[test]
fn unusable_state_dir_is_an_error_naming_the_path() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("not-a-dir");
    fs::write(&file, b"").expect("write");
    let dir = file.join("outbox/webhook");
    match Outbox::<String>::open(&dir, 10) {
        Err(e @ NotifyError::StateDir { .. }) => {
            assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened an outbox under a file"),
    }
}

#[test]
fn write_failure_later_is_counted_and_kept_in_memory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("ob");
    let mut o = open(&dir, 100);
    // Replacing the directory by a file makes every later write fail, even as root.
    fs::remove_dir_all(&dir).expect("rm");
    fs::write(&dir, b"").expect("write");
    o.push(None, "a".into());
    o.push(None, "b".into());
    assert_eq!(items(&o), ["a", "b"]);
    assert_eq!(o.counters.persist_errors, 2);
    let all: Vec<u64> = o.batch(10).into_iter().map(|(s, _)| s).collect();
    assert_eq!(o.remove_seqs(&all), 2);
}

#[test]
fn an_outbox_that_cannot_be_opened_keeps_entries_and_opens_when_it_can() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // A file where the state dir should be: no write can succeed under it,
    // even as root, until it is removed (as a full disk until space is freed).
    let blocker = tmp.path().join("state");
    fs::write(&blocker, b"").expect("write");
    let dir = blocker.join("outbox/webhook");
    let mut o = Outbox::<String>::open_or_retry(&dir, 100);
    assert!(!o.attached());
    o.push(None, "a".into());
    o.retry_due_now();
    o.retry_open();
    assert!(!o.attached(), "still blocked");
    assert!(o.counters.persist_errors >= 2, "every unwritten entry is counted");
    fs::remove_file(&blocker).expect("unblock");
    // A previous run's entry waiting there is delivered first.
    {
        let mut prev = open(&dir, 100);
        prev.push(None, "old".into());
    }
    o.push(None, "b".into());
    o.retry_due_now();
    o.retry_open();
    assert!(o.attached());
    assert_eq!(items(&o), ["old", "a", "b"]);
    assert_eq!(json_files(&dir), 3, "what was held in memory is on disk now");
    drop(o);
    assert_eq!(items(&open(&dir, 100)), ["old", "a", "b"]);
}

#[test]
fn an_entry_numbered_u64_max_stays_in_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let text = format!(r#"{{"format":1,"seq":{},"item":"last-run"}}"#, u64::MAX);
    fs::write(tmp.path().join("x.json"), text).expect("write");
    let mut o = open(tmp.path(), 100);
    o.push(None, "this-run".into());
    o.push(None, "then".into());
    assert_eq!(items(&o), ["last-run", "this-run", "then"]);
    drop(o);
    assert_eq!(items(&open(tmp.path(), 100)), ["last-run", "this-run", "then"]);
}

#[test]
fn alertmanager_outbox_names_show_no_path_nor_user_info() {
    use super::super::alertmanager::target_dir_name;
    let name = target_dir_name("https://user:pw@am.example:9093/secret-token/path");
    assert!(name.starts_with("am.example_9093-"), "{name}");
    for leak in ["secret", "token", "path", "user", "pw"] {
        assert!(!name.contains(leak), "{name} shows {leak}");
    }
    assert_ne!(name, target_dir_name("https://am.example:9093/other"), "still unique");
    assert!(
        target_dir_name("http://am:9093").starts_with("am_9093-"),
        "names of plain URLs unchanged"
    );
}
