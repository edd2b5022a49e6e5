//! uid -> user name from a passwd file, cached, then from the name service
//! (LDAP, SSSD) for the uids the file lacks, when one is attached.
//!
//! Owns: parsing passwd and deciding when to re-read it. Must not: call NSS
//! itself (that is `nss.rs`, off the poll thread), or re-read the file on a
//! cache miss: container uids are usually unknown to the host, and a miss
//! must not cost a file read for every such process every second.

use arcstr::ArcStr;
use rustc_hash::FxHashMap;
use std::time::{Duration, Instant, SystemTime};

use super::nss::NssNames;
use super::tree::{ProcTree, TreeFile};

/// A passwd file larger than this is cut: no real one comes near it.
const PASSWD_MAX: u64 = 64 << 20;

/// How often the passwd file's mtime is checked by default: user changes are
/// rare, and a stat of passwd per process per poll would be wasted work.
pub(crate) const DEFAULT_RECHECK: Duration = Duration::from_secs(5);

/// Names kept beyond passwd's, at most.
const OTHERS_MAX: usize = 4096;

#[derive(Debug)]
pub(crate) struct UserCache {
    recheck: Duration,
    /// Shared: every process of a user carries the same allocation. FxHash:
    /// looked up for every process every poll, by uids the kernel gives.
    names: FxHashMap<u32, ArcStr>,
    /// Names the name service gave, and numeric names where no name
    /// service will ever answer: each allocated once, not per poll.
    others: FxHashMap<u32, ArcStr>,
    /// (mtime, len) of the file we parsed; `None` when never read or missing.
    loaded: Option<(SystemTime, u64)>,
    last_check: Option<Instant>,
    /// Names of the uids passwd lacks; `None` when the passwd file is not
    /// the host's own (a container with a host passwd mounted: its NSS
    /// would answer for the container, not the host).
    nss: Option<NssNames>,
}

impl UserCache {
    /// The passwd file is the tree's ([`TreeFile::Passwd`]).
    pub(crate) fn new() -> Self {
        UserCache {
            recheck: DEFAULT_RECHECK,
            names: FxHashMap::default(),
            others: FxHashMap::default(),
            loaded: None,
            last_check: None,
            nss: None,
        }
    }

    /// Also asks the name service for uids passwd lacks (`None`: never).
    pub(crate) fn set_nss(&mut self, nss: Option<NssNames>) {
        self.nss = nss;
        self.others.clear();
    }

    #[cfg(test)]
    pub(crate) fn set_recheck(&mut self, recheck: Duration) {
        self.recheck = recheck;
    }

    /// The user name for `uid`: from passwd, else from the name service's
    /// cache, else the uid as text (until the name service answers).
    /// `now` is the caller's clock (a poll reads it once for all its
    /// processes), for when passwd is checked again.
    pub(crate) fn name(&mut self, uid: u32, tree: &dyn ProcTree, now: Instant) -> ArcStr {
        self.refresh_if_due(tree, now);
        if let Some(n) = self.names.get(&uid).or_else(|| self.others.get(&uid)) {
            return n.clone();
        }
        let answer = self.nss.as_ref().map(|n| n.get(uid));
        // Asked in the background: a number until it answers, not kept.
        let last = !matches!(answer, Some(None));
        let name = ArcStr::from(answer.flatten().unwrap_or_else(|| uid.to_string()));
        if last {
            // Bounded whatever uids come and go.
            if self.others.len() >= OTHERS_MAX {
                self.others.clear();
            }
            self.others.insert(uid, name.clone());
        }
        name
    }

    /// [`UserCache::name`] when it is not `cached` (the name an identity
    /// was cached with), else `None`: the usual answer, once a poll per
    /// process, then takes no reference count.
    pub(crate) fn name_unless(&mut self, uid: u32, tree: &dyn ProcTree, now: Instant, cached: &str) -> Option<ArcStr> {
        self.refresh_if_due(tree, now);
        if let Some(n) = self.names.get(&uid).or_else(|| self.others.get(&uid)) {
            return (n.as_str() != cached).then(|| n.clone());
        }
        let name = self.name(uid, tree, now);
        (name.as_str() != cached).then_some(name)
    }

    fn refresh_if_due(&mut self, tree: &dyn ProcTree, now: Instant) {
        let due = self
            .last_check
            .is_none_or(|at| now.saturating_duration_since(at) >= self.recheck);
        if !due {
            return;
        }
        self.last_check = Some(now);
        let current = tree.stamp(TreeFile::Passwd);
        if current.is_some() && current == self.loaded {
            return;
        }
        // A missing or unreadable passwd just means numeric users.
        let mut bytes = Vec::new();
        self.names = match tree.read(TreeFile::Passwd, PASSWD_MAX, &mut bytes) {
            Ok(_) => parse_passwd(&String::from_utf8_lossy(&bytes)),
            Err(_) => FxHashMap::default(),
        };
        // A uid passwd now names must not keep its old name from here.
        self.others.clear();
        self.loaded = current;
    }
}

/// `name:password:uid:gid:gecos:home:shell` lines; the first name of a uid
/// wins, as with getpwuid(3) on a files database.
pub(crate) fn parse_passwd(text: &str) -> FxHashMap<u32, ArcStr> {
    let mut names = FxHashMap::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split(':');
        let (Some(name), Some(_), Some(uid)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        // "+" / "-" lines are NIS compat markers, not users.
        if name.is_empty() || name.starts_with(['+', '-']) {
            continue;
        }
        if let Ok(uid) = uid.parse::<u32>() {
            names.entry(uid).or_insert_with(|| ArcStr::from(name));
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::attribution::DirTree;

    #[test]
    fn parses_passwd_lines() {
        let names = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\n\
             # comment\n\
             \n\
             alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n\
             alias:x:1000:1000::/:/bin/sh\n\
             broken-line\n\
             bad:x:notanumber:0::/:\n\
             +nis::::::\n\
             bob:x:1001:1001::/home/bob:/bin/sh",
        );
        assert_eq!(names.get(&0).map(ArcStr::as_str), Some("root"));
        assert_eq!(names.get(&1000).map(ArcStr::as_str), Some("alice"));
        assert_eq!(names.get(&1001).map(ArcStr::as_str), Some("bob"));
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn unknown_and_missing_file_give_numbers() {
        let tree = DirTree::new("/nonexistent", "/nonexistent/passwd");
        let mut cache = UserCache::new();
        assert_eq!(cache.name(1234, &tree, Instant::now()), "1234");
    }

    #[test]
    fn rereads_when_file_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("passwd");
        std::fs::write(&path, "alice:x:1000:1000::/:/bin/sh\n").expect("write");
        let tree = DirTree::new(dir.path(), &path);
        let mut cache = UserCache::new();
        cache.set_recheck(Duration::ZERO);
        assert_eq!(cache.name(1000, &tree, Instant::now()), "alice");
        assert_eq!(cache.name(1001, &tree, Instant::now()), "1001");
        assert_eq!(cache.name_unless(1000, &tree, Instant::now(), "alice"), None);
        assert_eq!(
            cache.name_unless(1000, &tree, Instant::now(), "al").as_deref(),
            Some("alice")
        );

        // Different length, and an mtime set explicitly so a coarse clock
        // cannot hide the change.
        std::fs::write(&path, "alice:x:1000:1000::/:/bin/sh\nbob:x:1001:1::/:/x\n").expect("rewrite");
        let file = std::fs::File::options().write(true).open(&path).expect("open");
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
            .expect("set mtime");
        assert_eq!(
            cache.name_unless(1001, &tree, Instant::now(), "1001").as_deref(),
            Some("bob")
        );
        assert_eq!(cache.name(1001, &tree, Instant::now()), "bob");
    }

    #[test]
    fn passwd_first_then_the_name_service_once_it_answered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("passwd");
        std::fs::write(&path, "alice:x:1000:1000::/:/bin/sh\n").expect("write");
        let tree = DirTree::new(dir.path(), &path);
        let nss = NssNames::start(std::sync::Arc::new(|uid| (uid != 7).then(|| format!("ldap{uid}"))));
        let mut cache = UserCache::new();
        cache.set_nss(Some(nss));
        assert_eq!(cache.name(1000, &tree, Instant::now()), "alice", "passwd wins");
        let deadline = Instant::now() + Duration::from_secs(10);
        while cache.name(5000, &tree, Instant::now()) == "5000" {
            assert!(Instant::now() < deadline, "the name service never answered");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(cache.name(5000, &tree, Instant::now()), "ldap5000");
        assert_eq!(cache.name(7, &tree, Instant::now()), "7", "unknown to both: the number");
    }

    #[test]
    fn does_not_reread_before_recheck_interval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("passwd");
        std::fs::write(&path, "alice:x:1000:1000::/:/bin/sh\n").expect("write");
        let tree = DirTree::new(dir.path(), &path);
        let mut cache = UserCache::new();
        cache.set_recheck(Duration::from_secs(3600));
        assert_eq!(cache.name(1000, &tree, Instant::now()), "alice");
        std::fs::write(&path, "carol:x:1000:1000::/:/bin/sh\nxx:x:1:1::/:/x\n").expect("w");
        assert_eq!(cache.name(1000, &tree, Instant::now()), "alice");
    }
}
