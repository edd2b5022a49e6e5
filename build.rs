//! Build identity baked into the binary: `GPUMEMD_REVISION` (the short git
//! revision, for `gpumem_build_info{revision}`) and `GPUMEMD_BUILD_DATE`
//! (UTC `YYYY-MM-DD`, for `--version`). Owns only these two variables; it
//! must not fail a build: no git or no checkout (a source tarball, a
//! container build without `.git`) gives revision "unknown".
//!
//! A packager can set either variable in the environment to override it;
//! `SOURCE_DATE_EPOCH` (reproducible builds) sets the date.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=GPUMEMD_REVISION");
    println!("cargo:rerun-if-env-changed=GPUMEMD_BUILD_DATE");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let revision = std::env::var("GPUMEMD_REVISION").ok().filter(|r| !r.is_empty());
    let revision = revision.unwrap_or_else(|| git_revision(&dir).unwrap_or_else(|| "unknown".into()));
    println!("cargo:rustc-env=GPUMEMD_REVISION={revision}");
    let date = std::env::var("GPUMEMD_BUILD_DATE").ok().filter(|d| !d.is_empty());
    println!("cargo:rustc-env=GPUMEMD_BUILD_DATE={}", date.unwrap_or_else(build_date));
}

/// Runs git in `dir`; `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !s.trim().is_empty()).then(|| s.trim().to_string())
}

/// The short revision of HEAD, and the files whose change means a new one.
/// In a worktree `.git` is a file and HEAD and the refs live elsewhere, so
/// git names the paths.
fn git_revision(dir: &Path) -> Option<String> {
    if !dir.join(".git").exists() {
        return None;
    }
    let rev = git(dir, &["rev-parse", "--short", "HEAD"])?;
    let mut watch = vec![git(dir, &["rev-parse", "--git-path", "HEAD"])];
    watch.push(git(dir, &["rev-parse", "--git-path", "packed-refs"]));
    if let Some(r) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        // A branch's first commit creates its loose ref: watch the folder
        // while the file does not exist.
        let path = git(dir, &["rev-parse", "--git-path", &r]).map(PathBuf::from);
        watch.push(
            path.map(|p| match p.exists() {
                true => p,
                false => p.parent().map(Path::to_path_buf).unwrap_or(p),
            })
            .map(|p| p.display().to_string()),
        );
    }
    for p in watch.into_iter().flatten() {
        let p = dir.join(p);
        // A path that does not exist would rerun this script on every build.
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    Some(rev)
}

/// UTC date of `SOURCE_DATE_EPOCH` or of now. Days to a civil date by
/// Howard Hinnant's algorithm, so the build needs no date crate.
fn build_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
        });
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
