//! Tests of [`DirTree`](super::DirTree): stat files kept open on a real
//! procfs, none kept on a fixture directory.

use super::*;

fn stat(tree: &DirTree, pid: u32) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    tree.read(TreeFile::Pid(pid, PidFile::Stat), 64 * 1024, &mut buf)?;
    Ok(buf)
}

/// pid, comm and starttime (field 22) of a stat line.
fn identity(stat: &[u8]) -> Option<(String, String)> {
    let text = String::from_utf8_lossy(stat);
    let close = text.rfind(')')?;
    let start = text[close + 1..].split_whitespace().nth(19)?;
    Some((text[..=close].to_string(), start.to_string()))
}

fn open_count(tree: &DirTree) -> usize {
    tree.stat_fds.lock().map(|f| f.open.len()).unwrap_or(usize::MAX)
}

/// On the real /proc a live process's stat stays open and reads fresh
/// each time; once it is gone the read fails as gone and nothing stays
/// open for it.
#[test]
fn a_procfs_stat_stays_open_while_its_process_lives() {
    let tree = DirTree::new("/proc", "/etc/passwd");
    let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = child.id();
    // Until the child has exec'd, its comm is still the test's; wait
    // for it with a deadline rather than a sleep.
    let first = crate::tests::wait_for("the child's exec", || {
        let now = stat(&tree, pid).expect("a live process");
        // The last stat line read says where it stopped.
        if now.starts_with(format!("{pid} (sleep) ").as_bytes()) {
            Ok(now)
        } else {
            Err(String::from_utf8_lossy(&now).into_owned())
        }
    });
    assert_eq!(open_count(&tree), 1, "kept open");
    // The state and the counters move between reads (R, then S); the
    // identity (pid, comm, field 22 starttime) must not.
    let again = stat(&tree, pid).expect("read again");
    assert_eq!(identity(&again), identity(&first), "the same process");
    assert!(identity(&first).is_some(), "{first:?}");
    child.kill().expect("kill");
    let _ = child.wait();
    let gone = stat(&tree, pid).expect_err("a reaped process");
    assert!(
        gone.kind() == io::ErrorKind::NotFound || gone.raw_os_error() == Some(3),
        "{gone:?}"
    );
    assert_eq!(open_count(&tree), 0, "nothing held for a gone process");
}

/// On the real /proc the main thread's stat is what is kept open, and
/// it names the same process as the process's own stat: this test
/// process has several threads (the harness's), whose sums the
/// process's file would add up at every read.
#[test]
fn a_procfs_stat_is_the_main_threads() {
    let tree = DirTree::new("/proc", "/etc/passwd");
    let pid = std::process::id();
    let worker = std::thread::spawn(|| std::thread::park_timeout(std::time::Duration::from_secs(5)));
    let ours = stat(&tree, pid).expect("this process");
    let whole = std::fs::read(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    assert_eq!(identity(&ours), identity(&whole));
    assert!(identity(&ours).is_some(), "{ours:?}");
    let held = tree
        .stat_fds
        .lock()
        .ok()
        .and_then(|f| f.open.get(&pid).map(|(file, _)| std::os::fd::AsRawFd::as_raw_fd(file)))
        .expect("kept open");
    let target = std::fs::read_link(format!("/proc/self/fd/{held}")).expect("readlink");
    assert_eq!(target, PathBuf::from(format!("/proc/{pid}/task/{pid}/stat")));
    worker.thread().unpark();
    let _ = worker.join();
}

/// A fixture directory is read by path each time: a removed process
/// reads as gone and a rewritten stat as rewritten.
#[test]
fn a_fixture_stat_is_read_by_path_every_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = DirTree::new(dir.path(), dir.path().join("passwd"));
    std::fs::create_dir(dir.path().join("42")).expect("mkdir");
    let file = dir.path().join("42/stat");
    std::fs::write(&file, "42 (a) S 1").expect("write");
    assert_eq!(stat(&tree, 42).expect("read"), b"42 (a) S 1");
    let next = dir.path().join("42/stat.new");
    std::fs::write(&next, "42 (b) S 1").expect("write");
    std::fs::rename(&next, &file).expect("rename");
    assert_eq!(stat(&tree, 42).expect("read"), b"42 (b) S 1");
    assert_eq!(open_count(&tree), 0);
    std::fs::remove_file(&file).expect("rm");
    assert_eq!(stat(&tree, 42).map_err(|e| e.kind()), Err(io::ErrorKind::NotFound));
}

/// A file longer than the first read is read whole, and one over the
/// limit is cut and says so.
#[test]
fn a_long_file_is_read_whole_or_cut_at_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("long");
    let text: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(&path, &text).expect("write");
    let file = File::open(&path).expect("open");
    let mut buf = Vec::new();
    assert!(!read_once(&file, 64 * 1024, &mut buf).expect("read"));
    assert_eq!(buf, text);
    assert!(read_once(&file, 3000, &mut buf).expect("read"), "cut");
    assert_eq!(buf.as_slice(), &text[..3000]);
    assert!(
        !read_once(&file, 5000, &mut buf).expect("read"),
        "exactly the limit is whole"
    );
    assert_eq!(buf, text);
}
