//! A real Alertmanager for tests (Debian package `prometheus-alertmanager`,
//! which CI installs): start it on a loopback port, read its active alerts,
//! wait on a condition over them with a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed expectation is the failure

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// How to get the peer, for the failure.
const INSTALL: &str = "install it with `apt-get install -y prometheus-alertmanager` \
                       or point ALERTMANAGER_BIN at an alertmanager binary";

/// The binary: `$ALERTMANAGER_BIN`, else the Debian package's, else
/// `alertmanager` on PATH; `None` when there is none.
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ALERTMANAGER_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "ALERTMANAGER_BIN={} is not a file: {INSTALL}", p.display());
        return Some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["prometheus-alertmanager", "alertmanager"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/bin")])
            .map(|dir| dir.join(name))
            .find(|c| c.is_file())
    })
}

/// A running Alertmanager, killed when dropped.
pub struct Alertmanager {
    child: Child,
    log: PathBuf,
}

impl Alertmanager {
    /// Starts one on `port`; fails the test when Alertmanager is not
    /// installed (the tests that need it are ignored unless asked for).
    pub async fn start(port: u16, dir: &Path) -> Alertmanager {
        let bin = binary().unwrap_or_else(|| panic!("Alertmanager not found: {INSTALL}"));
        std::fs::create_dir_all(dir).expect("am dir");
        let config = dir.join("alertmanager.yml");
        std::fs::write(
            &config,
            "route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n",
        )
        .expect("config");
        let log = dir.join("alertmanager.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn alertmanager");
        let mut am = Alertmanager { child, log };
        let url = format!("http://127.0.0.1:{port}/-/ready");
        super::wait_until(Duration::from_secs(30), "Alertmanager ready", || {
            if let Ok(Some(status)) = am.child.try_wait() {
                panic!("alertmanager exited with {status}:\n{}", am.logs());
            }
            let url = url.clone();
            async move {
                reqwest::get(&url)
                    .await
                    .is_ok_and(|r| r.status().is_success())
                    .then_some(())
            }
        })
        .await;
        am
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// The active alerts Alertmanager shows, by alertname.
pub async fn active(port: u16) -> BTreeMap<String, Value> {
    let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/api/v2/alerts")).await else {
        return BTreeMap::new();
    };
    let list: Vec<Value> = resp
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    list.into_iter()
        .filter_map(|a| Some((a["labels"]["alertname"].as_str()?.to_owned(), a)))
        .collect()
}

/// Polls Alertmanager until `cond` holds on its active alerts. Each new
/// set of alert names it shows goes to stderr, which a failed test prints.
pub async fn wait_for(
    port: u16,
    what: &str,
    deadline: Duration,
    cond: impl Fn(&BTreeMap<String, Value>) -> bool,
) -> BTreeMap<String, Value> {
    let shown = std::cell::RefCell::new(Vec::new());
    super::wait_until(deadline, what, || async {
        let alerts = active(port).await;
        let names: Vec<String> = alerts.keys().cloned().collect();
        if *shown.borrow() != names {
            eprintln!("Alertmanager shows {names:?}");
            *shown.borrow_mut() = names;
        }
        cond(&alerts).then_some(alerts)
    })
    .await
}
