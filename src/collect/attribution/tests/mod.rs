//! Tests of the attribution module against fixture `/proc` trees built in a
//! tempdir (self-describing: each test says what its tree holds) and against
//! the real `/proc` of the machine running the tests.
//!
//! Owns: the fixture builder. Must not: depend on a particular host (real
//! `/proc` tests only assert what holds on any Linux machine).

mod cache;
mod cgroup;
mod memtree;
mod names;
mod procfs;
mod procfs_real;

use std::path::{Path, PathBuf};

use super::{ProcFs, ProcState};

/// Boot time written to every fixture's `<root>/stat`.
pub(super) const BTIME: u64 = 1_700_000_000;

/// One fixture process: what its stat/status/cgroup/cmdline files say.
pub(super) struct Proc<'a> {
    pub comm: &'a str,
    pub state: char,
    pub uid: u32,
    pub start_ticks: u64,
    pub cgroup: Option<&'a str>,
    pub cmdline: Option<&'a [u8]>,
}

impl Default for Proc<'_> {
    fn default() -> Self {
        Proc {
            comm: "python3",
            state: 'S',
            uid: 1000,
            start_ticks: 12_345,
            cgroup: Some("0::/system.slice/jupyter.service\n"),
            cmdline: Some(b"python3\0train.py\0"),
        }
    }
}

/// A `/proc` tree plus a passwd file in a tempdir.
pub(super) struct FakeProc {
    dir: tempfile::TempDir,
}

impl FakeProc {
    pub(super) fn new() -> Self {
        let fake = FakeProc {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        fake.write("stat", format!("cpu  1 2 3 4\nbtime {BTIME}\nprocesses 9\n"));
        std::fs::write(
            fake.passwd(),
            "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n",
        )
        .expect("passwd");
        fake
    }

    pub(super) fn root(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    pub(super) fn passwd(&self) -> PathBuf {
        self.dir.path().join("passwd")
    }

    /// Writes `<root>/<rel>`, creating directories.
    pub(super) fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let path = self.root().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, contents).expect("write fixture");
    }

    pub(super) fn add(&self, pid: u32, p: &Proc<'_>) {
        self.write(&format!("{pid}/stat"), stat_line(pid, p.comm, p.state, p.start_ticks));
        self.write(
            &format!("{pid}/status"),
            format!(
                "Name:\t{}\nState:\t{} (x)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\n\
                 Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t100\t100\t100\t100\n",
                p.comm,
                p.state,
                uid = p.uid
            ),
        );
        if let Some(cgroup) = p.cgroup {
            self.write(&format!("{pid}/cgroup"), cgroup);
        }
        if let Some(cmdline) = p.cmdline {
            self.write(&format!("{pid}/cmdline"), cmdline);
        }
    }

    pub(super) fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// A ProcFs on this tree that sees passwd changes at once.
    pub(super) fn procfs(&self) -> ProcFs {
        ProcFs::new(self.root(), self.passwd()).with_passwd_recheck(std::time::Duration::ZERO)
    }
}

/// A full 52-field stat line as Linux 6.x prints it.
pub(super) fn stat_line(pid: u32, comm: &str, state: char, start_ticks: u64) -> String {
    format!(
        "{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 2000 0 3 0 150 40 0 0 20 0 \
         24 0 {start_ticks} 8000000000 90000 18446744073709551615 1 1 0 0 0 0 16386 \
         16781312 0 0 0 17 5 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    )
}

#[test]
fn fixture_builder_writes_parseable_stat() {
    let fake = FakeProc::new();
    fake.add(7, &Proc::default());
    let id = fake.procfs().read(7, &Default::default()).expect("fixture process");
    assert_eq!(id.state, ProcState::Sleeping);
    assert!(Path::new(&fake.path("7/stat")).exists());
}
