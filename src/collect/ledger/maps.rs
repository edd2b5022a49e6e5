//! Finding the CUDA driver a process actually maps: the executable
//! mappings of `/proc/PID/maps` whose file name starts with one of
//! `[ebpf] libraries`, each named by (device, inode), so one library file
//! is probed once however many processes, containers or paths map it. The
//! path to attach to goes through `/proc/PID/root`, so a container's own
//! driver mount is the file probed. Reads /proc only; must not touch BPF.

use std::path::{Path, PathBuf};

/// One mapped driver library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    /// (device as "major:minor" text, inode): the file's identity.
    pub id: (String, u64),
    /// Where the daemon can open it (`<proc_root>/PID/root/<path>`).
    pub path: PathBuf,
}

/// The driver libraries in one maps text of process `pid`.
pub fn libraries(proc_root: &Path, pid: u32, maps: &str, names: &[String]) -> Vec<Library> {
    let mut out: Vec<Library> = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(_range), Some(perms), Some(_off), Some(dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some(path) = f.next().filter(|p| p.starts_with('/')) else {
            continue;
        };
        if !perms.contains('x') || f.next().is_some() {
            // Not code, or a path with spaces or " (deleted)": skipped.
            continue;
        }
        let Ok(inode) = inode.parse::<u64>() else { continue };
        let file = path.rsplit('/').next().unwrap_or(path);
        if inode == 0 || !names.iter().any(|n| file.starts_with(n.as_str())) {
            continue;
        }
        let id = (dev.to_string(), inode);
        if out.iter().any(|l| l.id == id) {
            continue;
        }
        let path = proc_root
            .join(pid.to_string())
            .join("root")
            .join(path.trim_start_matches('/'));
        out.push(Library { id, path });
    }
    out
}

/// The driver libraries process `pid` maps now (none when it is gone or
/// its maps cannot be read).
pub fn of_pid(proc_root: &Path, pid: u32, names: &[String]) -> Vec<Library> {
    std::fs::read_to_string(proc_root.join(pid.to_string()).join("maps"))
        .map(|text| libraries(proc_root, pid, &text, names))
        .unwrap_or_default()
}
