//! The cli concept, and its root: the command-line interface (clap), `run`
//! (the default), `check-config`, `check`, `generate`, `snapshot`,
//! `report`, `record`, and `suspend` / `resume` (requests to a running
//! daemon), with the flags of DESIGN.md section 1. This file owns argument syntax only; `main.rs`
//! acts on the parsed values, and the subcommands' code is in the modules
//! below. Must not be used by any other concept.

pub mod check;
pub mod remote;
pub mod report_cmd;
pub mod snapshot_cmd;
pub mod table;

use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand};

pub use crate::cli::remote::ClientArgs;
pub use crate::cli::snapshot_cmd::args::{ColorWhen, SnapshotOpts};

pub use crate::app::logging::{LogFormat, LogLevel};

/// `--version`: the version, the git revision and the build date, set by
/// build.rs (revision "unknown" outside a git checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("GPUMEMD_REVISION"),
    ", built ",
    env!("GPUMEMD_BUILD_DATE"),
    ")"
);

/// Where `/metrics` is served unless `--web.telemetry-path` says otherwise.
pub const DEFAULT_TELEMETRY_PATH: &str = "/metrics";

#[derive(Debug, Parser)]
#[command(
    name = "gpumemd",
    version = VERSION,
    about = "GPU memory monitoring daemon: who holds GPU memory, what leaks, what was never released",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (the default when no command is given).
    Run(RunArgs),
    /// Validate a config file and print the effective config; exit 0 or 1.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
        /// Check it as layered over the demo defaults.
        #[arg(long)]
        demo: bool,
    },
    /// Did this job (or these PIDs, uids, users) leave GPU memory behind?
    /// Exit 0 (no), 1 (yes, with where and by whom) or 2 (cannot tell), one
    /// line on stdout. For Slurm epilogs and node health checks (docs/slurm.md).
    Check(CheckArgs),
    /// Print the man page (roff) or a shell's completion script; `man --dir
    /// DIR` writes gpumemd.1 and one gpumemd-SUBCOMMAND.1 per subcommand.
    Generate {
        #[arg(value_enum)]
        what: Generate,
        /// With `man`: write every page into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Poll once (or ask a running daemon), print a table (or JSON) and exit; `--watch` refreshes.
    Snapshot {
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        opts: SnapshotOpts,
        /// `--url` and how to reach that daemon; its snapshot carries the
        /// growth trend of its history.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Ask the running daemon to suspend a process (CUDA checkpoint; needs `enable_lifecycle`).
    Suspend(RemoteArgs),
    /// Ask the running daemon to resume a process it suspended.
    Resume(RemoteArgs),
    /// Print a job's, pod's or process's GPU memory report (peak, p95,
    /// idle, left behind, a suggested request) from the running daemon.
    /// Exit 0 (found), 1 (none), 2 (bad usage or no answer).
    Report(report_cmd::ReportArgs),
    /// Ask a reporting PyTorch process (gpumemd-torch) to record its memory
    /// history and dump it on its next OOM (or now, with --dump) to the
    /// daemon's spool (needs `enable_lifecycle`).
    Record(RecordArgs),
}

/// `gpumemd record PID [--dump | --stop]`.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// Dump the snapshot now (recording first if it was not).
    #[arg(long, conflicts_with = "stop")]
    pub dump: bool,
    /// Stop recording.
    #[arg(long)]
    pub stop: bool,
}

/// A lifecycle request to a running daemon. Exit 0 when done (or dry-run),
/// 1 when refused, failed or not asked (the message says why and what to
/// do), 2 for bad arguments.
#[derive(Debug, Clone, Args)]
pub struct RemoteArgs {
    /// The process id.
    pub pid: u32,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print the daemon's JSON answer as it came, for scripts.
    #[arg(long)]
    pub json: bool,
    /// The old spelling of --auth-user, kept for scripts written with it.
    #[arg(long = "user", value_name = "NAME", hide = true, conflicts_with = "auth_user")]
    pub user: Option<String>,
}

impl RemoteArgs {
    /// The client options, with the old `--user` spelling folded in.
    pub fn client(&self) -> ClientArgs {
        let mut c = self.client.clone();
        if c.auth_user.is_none() {
            c.auth_user.clone_from(&self.user);
        }
        c
    }
}

/// What `gpumemd generate` writes to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Generate {
    Man,
    Bash,
    Zsh,
    Fish,
}

/// Writes the man pages of [`Cli`] into `dir`: `gpumemd.1` and one
/// `gpumemd-SUBCOMMAND.1` per (visible) subcommand, which the top page's
/// SUBCOMMANDS section names. Returns the files written.
pub fn generate_man_pages(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(Cli::command(), dir)?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "1"))
        .collect();
    pages.sort();
    Ok(pages)
}

/// Writes the man page or a completion script for [`Cli`] to `out`.
pub fn generate(what: Generate, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use clap_complete::Shell;
    let mut cmd = Cli::command();
    let shell = match what {
        Generate::Man => return clap_mangen::Man::new(cmd).render(out),
        Generate::Bash => Shell::Bash,
        Generate::Zsh => Shell::Zsh,
        Generate::Fish => Shell::Fish,
    };
    // clap_complete panics on a failed write; render first, then write.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "gpumemd", &mut script);
    out.write_all(&script)
}

/// Where the data comes from; shared by `run` and `snapshot`.
#[derive(Debug, Clone, Default, Args)]
pub struct SourceArgs {
    /// Config file [default: /etc/gpumemd/gpumemd.toml if it exists, else built-in defaults].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Use the built-in simulated fleet instead of NVML: default, gpu-lost, mig, large, or a scenario file.
    #[arg(long, value_name = "SCENARIO", num_args = 0..=1, default_missing_value = "default")]
    pub demo: Option<String>,
    /// NVML library to load (name or path) [default: libnvidia-ml.so.1].
    #[arg(long = "nvml-lib", value_name = "PATH")]
    pub nvml_lib: Option<String>,
    /// CUDA driver library for `action = "suspend"` (name or path) [default: libcuda.so.1].
    #[arg(long = "cuda-lib", value_name = "PATH")]
    pub cuda_lib: Option<String>,
}

/// `gpumemd check`: where the snapshot comes from and what counts.
#[derive(Debug, Clone, Default, Args)]
pub struct CheckArgs {
    /// `--url`: ask the running daemon instead of polling once here.
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub source: SourceArgs,
    /// The finished Slurm job: its processes must hold no GPU memory.
    #[arg(long, value_name = "ID")]
    pub job: Vec<String>,
    /// These PIDs must hold no GPU memory (repeat or comma-separate).
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Processes of this uid must hold no GPU memory.
    #[arg(long, value_name = "UID")]
    pub uid: Vec<u32>,
    /// Processes of this user must hold no GPU memory.
    #[arg(long, value_name = "NAME")]
    pub user: Vec<String>,
    /// Only these users may hold GPU memory (e.g. root on an idle node).
    #[arg(long = "allow-user", value_name = "NAME")]
    pub allow_user: Vec<String>,
    /// Only these Slurm jobs may hold GPU memory (the jobs still running).
    #[arg(long = "allow-job", value_name = "ID")]
    pub allow_job: Vec<String>,
    /// Unattributed memory per GPU tolerated (e.g. 512MiB, 0).
    #[arg(long = "max-unattributed", value_name = "BYTES", default_value = "512MiB")]
    pub max_unattributed: String,
    /// How long to wait for the daemon.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub timeout: String,
}

#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Address to listen on [default: :9947].
    #[arg(long = "web.listen-address", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Web config file (Prometheus exporter-toolkit format): TLS, basic auth, response headers, limits.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// Path under which to expose the metrics.
    #[arg(long = "web.telemetry-path", value_name = "PATH", default_value = DEFAULT_TELEMETRY_PATH)]
    pub telemetry_path: String,
    /// Only log messages with the given severity or above [default: info, or RUST_LOG when set].
    #[arg(long = "log.level", value_enum, value_name = "LEVEL")]
    pub log_level: Option<LogLevel>,
    /// Output format of log messages (`--log-format` and `text` are the old spellings).
    #[arg(long = "log.format", alias = "log-format", value_enum, default_value_t = LogFormat::Logfmt)]
    pub log_format: LogFormat,
}

impl Cli {
    /// Parses the process's arguments after [`Cli::reorder`].
    pub fn parse_args() -> Cli {
        Cli::parse_from(Cli::reorder(std::env::args_os().collect()))
    }

    /// `gpumemd --demo [SCENARIO] snapshot ...` means `gpumemd snapshot
    /// --demo [SCENARIO] ...`: `--demo` takes an optional value, so clap
    /// would read the subcommand as the scenario's name (or refuse it after
    /// one). A subcommand name right after `--demo`, `--demo VALUE` or
    /// `--demo=VALUE` is moved in front of the flags (to a scenario file of
    /// that name, write `--demo ./snapshot`).
    pub fn reorder(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
        let cmd = Cli::command();
        let is_sub = |a: &std::ffi::OsString| {
            a.to_str()
                .is_some_and(|s| cmd.get_subcommands().any(|c| c.get_name() == s))
        };
        // Only the first subcommand-like word counts: a later one is a value.
        let first = (1..args.len()).find(|&i| is_sub(&args[i]));
        let at = |i: usize| args.get(i).and_then(|a| a.to_str()).unwrap_or_default();
        let after_demo = |i: usize| {
            let prev = at(i - 1);
            prev == "--demo"
                || prev.starts_with("--demo=")
                || (i > 2 && at(i - 2) == "--demo" && !prev.starts_with('-'))
        };
        let found = first.filter(|&i| i > 1 && after_demo(i));
        if let Some(i) = found {
            let sub = args.remove(i);
            args.insert(1, sub);
        }
        args
    }

    /// The command to run, with `run` as the default.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Run(self.run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Command {
        let mut v = vec!["gpumemd"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v)
            .map(Cli::into_command)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn suspend_and_resume_take_a_pid_and_the_daemon_url() {
        for user_flag in ["--auth-user", "--user"] {
            match parse(&["resume", "4242", "--url", "https://gpu1:9947", user_flag, "ops"]) {
                Command::Resume(r) => {
                    let c = r.client();
                    assert_eq!(
                        (r.pid, c.url.as_deref(), c.auth_user.as_deref()),
                        (4242, Some("https://gpu1:9947"), Some("ops"))
                    );
                }
                c => panic!("{c:?}"),
            }
        }
        match parse(&["suspend", "7"]) {
            Command::Suspend(r) => assert_eq!((r.pid, r.client.url), (7, None)),
            c => panic!("{c:?}"),
        }
        // Every client subcommand takes the same options.
        for sub in ["check", "snapshot", "suspend", "resume"] {
            let mut args = vec!["gpumemd", sub];
            if sub.ends_with("sume") || sub.starts_with("susp") {
                args.push("7");
            }
            args.extend(["--url", "https://h:9947", "--ca-file", "ca.pem", "--cert-file", "c.pem"]);
            args.extend(["--key-file", "k.pem", "--auth-user", "ops", "--password-file", "pw"]);
            assert!(Cli::try_parse_from(&args).is_ok(), "{args:?}");
        }
        let half = Cli::try_parse_from(["gpumemd", "check", "--cert-file", "c.pem"]);
        assert!(half.is_err(), "--cert-file without --key-file");
        let bad = Cli::try_parse_from(["gpumemd", "resume", "abc"])
            .map(|_| ())
            .expect_err("not a pid");
        assert!(bad.to_string().contains("abc"), "{bad}");
        match parse(&["--cuda-lib", "/opt/libcuda.so.1"]) {
            Command::Run(r) => assert_eq!(r.source.cuda_lib.as_deref(), Some("/opt/libcuda.so.1")),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn run_is_the_default_and_demo_takes_an_optional_scenario() {
        match parse(&["--demo"]) {
            Command::Run(r) => assert_eq!(r.source.demo.as_deref(), Some("default")),
            c => panic!("{c:?}"),
        }
        match parse(&["run", "--demo", "mig", "--web.listen-address", "127.0.0.1:0"]) {
            Command::Run(r) => {
                assert_eq!(r.source.demo.as_deref(), Some("mig"));
                assert_eq!(r.listen.as_deref(), Some("127.0.0.1:0"));
            }
            c => panic!("{c:?}"),
        }
        match parse(&["snapshot", "--json", "--demo", "--nvml-lib", "/x.so"]) {
            Command::Snapshot { source, opts, .. } => {
                assert!(opts.json);
                assert_eq!(source.demo.as_deref(), Some("default"));
                assert_eq!(source.nvml_lib.as_deref(), Some("/x.so"));
            }
            c => panic!("{c:?}"),
        }
        assert!(matches!(
            parse(&["check-config", "f.toml"]),
            Command::CheckConfig { .. }
        ));
    }

    #[test]
    fn exporter_flags_and_the_old_log_spelling() {
        match parse(&[
            "--log.format",
            "json",
            "--log.level",
            "debug",
            "--web.telemetry-path",
            "/m",
        ]) {
            Command::Run(r) => {
                assert_eq!(r.log_format, LogFormat::Json);
                assert_eq!(r.log_level, Some(LogLevel::Debug));
                assert_eq!(r.telemetry_path, "/m");
            }
            c => panic!("{c:?}"),
        }
        match parse(&["--log-format", "text"]) {
            Command::Run(r) => {
                assert_eq!(r.log_format, LogFormat::Logfmt, "the old spelling still works");
                assert_eq!((r.log_level, r.telemetry_path.as_str()), (None, "/metrics"));
            }
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn demo_before_the_subcommand_does_not_swallow_it() {
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let reordered = Cli::reorder(args(&["gpumemd", "--demo", "snapshot", "--gpu", "1"]));
        assert_eq!(reordered, args(&["gpumemd", "snapshot", "--demo", "--gpu", "1"]));
        match Cli::try_parse_from(reordered).map(Cli::into_command) {
            Ok(Command::Snapshot { source, opts, .. }) => {
                assert_eq!(source.demo.as_deref(), Some("default"));
                assert_eq!(opts.gpu, vec!["1".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        // With a scenario: the value travels with --demo.
        for (given, want) in [
            (
                &["gpumemd", "--demo", "mig", "snapshot"][..],
                &["gpumemd", "snapshot", "--demo", "mig"][..],
            ),
            (
                &["gpumemd", "--demo=mig", "snapshot", "--json"],
                &["gpumemd", "snapshot", "--demo=mig", "--json"],
            ),
        ] {
            let reordered = Cli::reorder(args(given));
            assert_eq!(reordered, args(want));
            match Cli::try_parse_from(reordered).map(Cli::into_command) {
                Ok(Command::Snapshot { source, .. }) => assert_eq!(source.demo.as_deref(), Some("mig")),
                other => panic!("{given:?}: {other:?}"),
            }
        }
        // A scenario value and flags after the subcommand stay where they are.
        let kept = args(&["gpumemd", "snapshot", "--demo", "mig"]);
        assert_eq!(Cli::reorder(kept.clone()), kept);
        let kept = args(&["gpumemd", "--demo", "large"]);
        assert_eq!(Cli::reorder(kept.clone()), kept);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(Cli::try_parse_from(["gpumemd", "--log-format", "xml"]).is_err());
        assert!(Cli::try_parse_from(["gpumemd", "--log.level", "chatty"]).is_err());
        assert!(Cli::try_parse_from(["gpumemd", "snapshot", "--web.listen-address", ":1"]).is_err());
    }
}
