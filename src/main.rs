//! The `gpumemd` binary: parses the command line, sets up logging, loads the
//! config, picks the source, binds the listener and maps every failure to a
//! one-line message and a non-zero exit code. All behaviour lives in the
//! library; nothing here polls or serves by itself.

mod hangup;
mod malloc;

use std::path::Path;
use std::process::ExitCode;

use gpumemd::app::config::{self, Config, DEFAULT_CONFIG_PATH, Overrides};
use gpumemd::cli::check::{Criteria, Scope, Verdict};
use gpumemd::cli::{
    CheckArgs, Cli, ClientArgs, Command, DEFAULT_TELEMETRY_PATH, LogFormat, RemoteArgs, RunArgs, SnapshotOpts,
    SourceArgs,
};
use gpumemd::collect::pipeline::Pipeline;
use gpumemd::collect::source::nvml::NvmlSource;
use gpumemd::collect::source::parked::ParkedSource;
use gpumemd::collect::source::scenario::Scenario;
use gpumemd::collect::source::simulated::SimulatedSource;
use gpumemd::collect::source::{GpuSource, SourceError};
use gpumemd::data::clock::unix_now;
use gpumemd::data::snapshot::{PollOutcome, PollStats, Snapshot};

/// Every way a command fails, printed as one line after "gpumemd: ".
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    WebConfig(#[from] gpumemd::serve::http::webconfig::WebConfigError),
    #[error(transparent)]
    Scenario(#[from] gpumemd::collect::source::scenario::ScenarioError),
    #[error(transparent)]
    Daemon(#[from] gpumemd::RunError),
    #[error(transparent)]
    Snapshot(#[from] gpumemd::cli::snapshot_cmd::SnapshotError),
    #[error(transparent)]
    Client(#[from] gpumemd::cli::remote::ClientError),
    #[error("{0}")]
    Lifecycle(String),
    #[error("{0} is for asking a daemon; give --url too")]
    ClientFlagWithoutUrl(&'static str),
    #[error("--web.listen-address: {0}")]
    ListenFlag(config::ListenError),
    #[error("--web.telemetry-path: {0}")]
    TelemetryPath(gpumemd::serve::http::TelemetryPathError),
    #[error("listen address: {0}")]
    Listen(config::ListenError),
    #[error("cannot listen on {listen}: {source}")]
    Bind { listen: String, source: std::io::Error },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot write: {0}")]
    Write(std::io::Error),
    #[error("cannot write the man pages to {}: {source}", dir.display())]
    ManPages {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("--dir is for `generate man`, not {0}")]
    DirNotForMan(String),
    #[error("cannot print the config: {0}")]
    PrintConfig(toml::ser::Error),
    #[error("--url reads the daemon's data; --demo and --nvml-lib do not apply to it")]
    UrlWithLocalSource,
    #[error("NVML not available: {0}; use --demo to try without a GPU")]
    NoNvml(String),
    #[error(transparent)]
    Source(SourceError),
    #[error("--max-unattributed: {0}")]
    MaxUnattributed(gpumemd::data::units::UnitError),
    #[error("--timeout: {0}")]
    Timeout(gpumemd::data::units::UnitError),
    #[error("cannot encode the snapshot: {0}")]
    Encode(serde_json::Error),
    #[error("cannot tell: {0}")]
    CannotTell(gpumemd::cli::remote::ClientError),
}

fn main() -> ExitCode {
    malloc::tune();
    // Again, in case the constructor did not run (a static build without
    // .init_array support): the window is then only the runtime's start.
    hangup::hold(true);
    let command = Cli::parse_args().into_command();
    if !matches!(command, Command::Run(_)) {
        hangup::hold(false);
    }
    let result = match command {
        Command::Run(args) => run(args),
        Command::CheckConfig { file, demo } => check_config(&file, demo),
        Command::Snapshot { source, opts, client } => snapshot(&source, &opts, &client),
        Command::Check(args) => return check(&args),
        Command::Generate {
            what: gpumemd::cli::Generate::Man,
            dir: Some(dir),
        } => gpumemd::cli::generate_man_pages(&dir)
            .map(|pages| pages.iter().for_each(|p| print_out(format_args!("{}\n", p.display()))))
            .map_err(|source| CliError::ManPages { dir, source }),
        Command::Generate { what, dir: Some(_) } => Err(CliError::DirNotForMan(format!("{what:?}"))),
        Command::Generate { what, dir: None } => match gpumemd::cli::generate(what, &mut std::io::stdout().lock()) {
            // `gpumemd generate man | head` is not a failure.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Write(e)),
            _ => Ok(()),
        },
        Command::Suspend(r) => remote(&r, "suspend"),
        Command::Resume(r) => remote(&r, "resume"),
        Command::Report(r) => return report(&r),
        Command::Record(r) => record(&r),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("gpumemd: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `text` to stdout. A reader that went away (`gpumemd ... | head`)
/// is not a failure: `println!` would panic there (exit 101).
fn print_out(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(text).and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => eprintln!("gpumemd: cannot write to stdout: {e}"),
        _ => {}
    }
}

/// The config: `--config` (must exist), else the default path if present,
/// else built-in defaults; then command-line overrides (kept on the config,
/// so reloads apply them too). The read has a deadline: a FIFO nobody writes
/// must not hold the start forever.
fn load_config(src: &SourceArgs, overrides: &Overrides) -> Result<Config, CliError> {
    let demo = src.demo.is_some();
    let deadline = gpumemd::app::reload::RELOAD_DEADLINE;
    let mut cfg = match &src.config {
        Some(p) => Config::load_within(p, demo, deadline)?,
        None if Path::new(DEFAULT_CONFIG_PATH).exists() => {
            Config::load_within(Path::new(DEFAULT_CONFIG_PATH), demo, deadline)?
        }
        None => Config::defaults(demo),
    };
    overrides.apply(&mut cfg);
    Ok(cfg)
}

/// The command-line settings that win over the file.
fn overrides(src: &SourceArgs, run: Option<&RunArgs>) -> Result<Overrides, CliError> {
    let listen = run.and_then(|r| r.listen.clone());
    if let Some(l) = &listen {
        config::parse_listen(l).map_err(CliError::ListenFlag)?;
    }
    Ok(Overrides {
        nvml_lib: src.nvml_lib.clone(),
        cuda_lib: src.cuda_lib.clone(),
        listen,
        web_config_file: run.and_then(|r| r.web_config.clone()),
        tls: false,
        telemetry_path: match run {
            Some(r) if r.telemetry_path != DEFAULT_TELEMETRY_PATH => {
                gpumemd::serve::http::check_telemetry_path(&r.telemetry_path).map_err(CliError::TelemetryPath)?;
                Some(r.telemetry_path.clone())
            }
            _ => None,
        },
    })
}

fn make_source(cfg: &Config, demo: Option<&str>) -> Result<Box<dyn GpuSource>, CliError> {
    match demo {
        Some(name) => {
            let sc = Scenario::resolve(name)?;
            let fleet = SimulatedSource::new(sc, cfg.poll.interval.get(), unix_now());
            // What a suspend (simulated CUDA checkpoint) hides, as on a GPU.
            Ok(Box::new(ParkedSource::new(Box::new(fleet), Default::default())))
        }
        None => Ok(Box::new(
            NvmlSource::new(cfg.nvml.library.clone()).with_health(cfg.health.clone()),
        )),
    }
}

fn run(args: RunArgs) -> Result<(), CliError> {
    // First of all: signal handlers. Until they are installed a SIGHUP (a
    // reload sent right after start) or SIGTERM takes the default action and
    // kills the daemon.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gpumemd-http")
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    let shutdown = {
        let _in_runtime = rt.enter();
        gpumemd::app::shutdown::install_early()
    };
    // A SIGHUP held back since `main` began goes to the handler now.
    hangup::hold(false);
    gpumemd::app::logging::init(args.log_format, args.log_level, "info");
    let mut cfg = load_config(&args.source, &overrides(&args.source, Some(&args))?)?;
    // Checked before binding, so a bad file is one line and exit 1, not a
    // server that starts and then fails.
    if let Some(f) = &cfg.server.web_config_file {
        let web = gpumemd::serve::http::webconfig::load(f)?;
        let mut o = cfg.overrides.clone();
        o.tls = web.tls.is_some();
        o.apply(&mut cfg);
    }
    let source = make_source(&cfg, args.source.demo.as_deref())?;
    if let Some(name) = source.demo_name() {
        tracing::info!(scenario = %name, "DEMO MODE: serving a simulated GPU fleet, not real GPUs");
    }
    rt.block_on(async move {
        let listener = bind(&cfg.server.listen).await?;
        let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(address = %addr, version = gpumemd::cli::VERSION, "listening");
        gpumemd::run(cfg, source, listener, shutdown).await?;
        Ok::<(), CliError>(())
    })?;
    tracing::info!("stopped");
    // A reload thread stuck on a FIFO or a hung mount must not keep the
    // process alive: returning from main ends it whatever threads remain.
    rt.shutdown_background();
    Ok(())
}

/// Binds `[host]:port`; an empty host binds all interfaces, IPv6 and IPv4
/// where the kernel allows a dual-stack socket, IPv4 alone otherwise.
async fn bind(listen: &str) -> Result<tokio::net::TcpListener, CliError> {
    let a = config::parse_listen(listen).map_err(CliError::Listen)?;
    let r = match &a.host {
        Some(h) => tokio::net::TcpListener::bind((h.as_str(), a.port)).await,
        None => match tokio::net::TcpListener::bind(("::", a.port)).await {
            Ok(l) => Ok(l),
            Err(_) => tokio::net::TcpListener::bind(("0.0.0.0", a.port)).await,
        },
    };
    r.map_err(|source| CliError::Bind {
        listen: listen.to_owned(),
        source,
    })
}

fn check_config(file: &Path, demo: bool) -> Result<(), CliError> {
    let cfg = Config::load(file, demo)?;
    if let Some(f) = &cfg.server.web_config_file {
        gpumemd::serve::http::webconfig::load(f)?;
    }
    // Printed without URL credentials or tokens: this output ends up in
    // terminals, CI logs and bug reports.
    let text = config::redact::printable(&cfg).map_err(CliError::PrintConfig)?;
    print_out(format_args!(
        "# effective configuration of {}\n{text}\n",
        file.display()
    ));
    Ok(())
}

/// `snapshot`: from a running daemon (`--url`), or polls here, keeping the
/// pipeline between `--watch` refreshes so growth appears as history builds.
fn snapshot(src: &SourceArgs, opts: &SnapshotOpts, client: &ClientArgs) -> Result<(), CliError> {
    use gpumemd::cli::snapshot_cmd::{self, Feed, SnapshotError};
    gpumemd::app::logging::init(LogFormat::Logfmt, None, "warn");
    if let Some(url) = &client.url {
        if src.demo.is_some() || src.nvml_lib.is_some() {
            return Err(CliError::UrlWithLocalSource);
        }
        let daemon = client.connect(url, snapshot_cmd::REMOTE_TIMEOUT)?;
        let feed = Feed {
            fetch: Box::new(move || snapshot_cmd::fetch_remote(&daemon)),
            has_history: true,
        };
        return Ok(snapshot_cmd::run(opts, feed)?);
    }
    if let Some(flag) = client.set_without_url() {
        return Err(CliError::ClientFlagWithoutUrl(flag));
    }
    let cfg = load_config(src, &overrides(src, None)?)?;
    let mut source = make_source(&cfg, src.demo.as_deref())?;
    let mut pipeline = Pipeline::for_source(&cfg.processes, source.as_ref());
    let mut seq = 0;
    let feed = Feed {
        fetch: Box::new(move || {
            seq += 1;
            poll_with(source.as_mut(), &mut pipeline, seq).map_err(|e| SnapshotError::Source(e.to_string()))
        }),
        has_history: false,
    };
    Ok(snapshot_cmd::run(opts, feed)?)
}

/// Poll number `seq` of `source` through `pipeline`, as a snapshot.
fn poll_with(source: &mut dyn GpuSource, pipeline: &mut Pipeline, seq: u64) -> Result<Snapshot, CliError> {
    let now = unix_now();
    let started = std::time::Instant::now();
    let raw = source.poll(true).map_err(|e| match e {
        SourceError::Unavailable(m) => CliError::NoNvml(m),
        other => CliError::Source(other),
    })?;
    let source_seconds = started.elapsed().as_secs_f64();
    let outcome = PollOutcome {
        seq,
        timestamp: now,
        monotonic: 0.0,
        nvml: Ok(pipeline.build(raw, now)),
    };
    let stats = PollStats {
        polls_total: seq,
        success: true,
        duration_seconds: started.elapsed().as_secs_f64(),
        source_seconds,
        last_success_timestamp: Some(now),
        ..PollStats::default()
    };
    Ok(Snapshot::of_poll(outcome, source.demo_name(), stats))
}

/// `gpumemd check`: one line on stdout, exit 0/1/2 (2 also when it cannot
/// ask: bad arguments, daemon unreachable, no NVML).
fn check(args: &CheckArgs) -> ExitCode {
    let verdict = check_criteria(args)
        .and_then(|c| check_verdict(args, &c))
        .unwrap_or_else(|msg| Verdict::unknown(msg.to_string()));
    // Names and command lines come from processes: no terminal escapes.
    print_out(format_args!("{}\n", gpumemd::data::units::printable(&verdict.line)));
    ExitCode::from(verdict.code)
}

fn check_criteria(a: &CheckArgs) -> Result<Criteria, CliError> {
    let max = gpumemd::data::units::parse_size(&a.max_unattributed).map_err(CliError::MaxUnattributed)?;
    Ok(Criteria {
        scope: Scope {
            jobs: a.job.clone(),
            pids: a.pid.clone(),
            uids: a.uid.clone(),
            users: a.user.clone(),
        },
        allow: Scope {
            jobs: a.allow_job.clone(),
            users: a.allow_user.clone(),
            ..Scope::default()
        },
        max_unattributed: max.0,
    })
}

fn check_verdict(a: &CheckArgs, c: &Criteria) -> Result<Verdict, CliError> {
    let Some(url) = &a.client.url else {
        if let Some(flag) = a.client.set_without_url() {
            return Err(CliError::ClientFlagWithoutUrl(flag));
        }
        // One poll through the production pipeline.
        gpumemd::app::logging::init(LogFormat::Logfmt, None, "warn");
        let cfg = load_config(&a.source, &overrides(&a.source, None)?)?;
        let mut source = make_source(&cfg, a.source.demo.as_deref())?;
        let mut pipeline = Pipeline::for_source(&cfg.processes, source.as_ref());
        let snap = poll_with(source.as_mut(), &mut pipeline, 1)?;
        let body = serde_json::to_string(&snap).map_err(CliError::Encode)?;
        return Ok(gpumemd::cli::check::judge_json(&body, c));
    };
    let timeout = gpumemd::data::units::parse_duration(&a.timeout).map_err(CliError::Timeout)?;
    let daemon = a.client.connect(url, timeout.get()).map_err(CliError::CannotTell)?;
    let body = gpumemd::cli::remote::block_on(daemon.get(gpumemd::cli::remote::SNAPSHOT_PATH, &[]))
        .map_err(CliError::CannotTell)?;
    Ok(gpumemd::cli::check::judge_json(&body, c))
}

/// `gpumemd report`: exit 0 (found), 1 (none) or 2 (cannot tell).
fn report(args: &gpumemd::cli::report_cmd::ReportArgs) -> ExitCode {
    match gpumemd::cli::report_cmd::run(args) {
        Ok((code, text)) => {
            print_out(format_args!("{text}"));
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("gpumemd: {e}");
            ExitCode::from(gpumemd::cli::report_cmd::CANNOT_TELL)
        }
    }
}

/// `gpumemd record PID [--dump | --stop]`: asks the daemon to have a
/// reporting process record (or dump, or stop) its memory history; one
/// line, exit 0 when asked, 1 when not (with the daemon's reason).
fn record(r: &gpumemd::cli::RecordArgs) -> Result<(), CliError> {
    use gpumemd::cli::remote::{DEFAULT_URL, block_on};
    const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
    let (pid, client) = (r.remote.pid, r.remote.client());
    let daemon = client.connect(client.url.as_deref().unwrap_or(DEFAULT_URL), TIMEOUT)?;
    let (query, what): (&[(&str, &str)], &str) = match (r.dump, r.stop) {
        (true, _) => (&[("dump", "true")], "dump its memory snapshot now"),
        (_, true) => (&[("stop", "true")], "stop recording its memory history"),
        _ => (
            &[],
            "record its memory history (dumped on its next out-of-memory error)",
        ),
    };
    let (status, body, _) = block_on(daemon.post(&format!("/api/v1/processes/{pid}/record"), query))?;
    if r.remote.json && (200..300).contains(&status) {
        print_out(format_args!("{}\n", body.trim_end()));
        return Ok(());
    }
    let said = gpumemd::data::units::printable(body.lines().next().unwrap_or("").trim());
    let cannot = |why: &str| Err(CliError::Lifecycle(format!("cannot ask PID {pid} to record: {why}")));
    match status {
        200..=299 => {
            let spool = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("spool").and_then(|s| s.as_str()).map(str::to_string));
            let to = spool.map(|s| format!("; snapshots go to {}", gpumemd::data::units::printable(&s)));
            print_out(format_args!("asked PID {pid} to {what}{}\n", to.unwrap_or_default()));
            Ok(())
        }
        403 => cannot(
            "the daemon's lifecycle API is off; set `[server] enable_lifecycle = true` in its config and reload it",
        ),
        401 => cannot(
            "the daemon asks for credentials; give --auth-user NAME with --password-file FILE (or GPUMEMD_PASSWORD)",
        ),
        _ => cannot(&format!("{said} (HTTP {status})")),
    }
}

/// `gpumemd suspend|resume PID`: asks the running daemon and says, in one
/// line, what happened (stdout, exit 0) or why not and what to do (stderr,
/// exit 1); `--json` prints the daemon's answer as it came.
fn remote(args: &RemoteArgs, action: &str) -> Result<(), CliError> {
    use gpumemd::cli::remote::{DEFAULT_URL, block_on, lifecycle};
    // A checkpoint moves GiBs into host memory: allow it minutes.
    const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
    let client = args.client();
    let daemon = client.connect(client.url.as_deref().unwrap_or(DEFAULT_URL), TIMEOUT)?;
    let answer = block_on(lifecycle::request(&daemon, args.pid, action))?;
    if args.json {
        print_out(format_args!("{}\n", answer.body.trim_end()));
    } else if answer.ok {
        print_out(format_args!("{}\n", answer.message));
    }
    if answer.ok {
        Ok(())
    } else {
        Err(CliError::Lifecycle(answer.message))
    }
}
