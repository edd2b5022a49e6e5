//! `gpumemd report --job ID | --pod UID | --pid PID`: asks a running
//! daemon for a subject's memory report (`GET /api/v1/reports`) and prints
//! it short, or as JSON. Exit 0 (found), 1 (no report), 2 (bad usage, or
//! no answer from the daemon), for scripts and Slurm epilogs.
//!
//! Owns: the command's arguments, the request, and the human text. Must
//! not: compute a report (the daemon's `report` module does).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use clap::{ArgGroup, Args};

use crate::cli::remote::{ClientArgs, ClientError, DEFAULT_URL, block_on};
use crate::data::units::human;
use crate::judge::report::{GpuReport, Report, ReportState, Subject};

/// Exit codes.
pub const FOUND: u8 = 0;
pub const NONE: u8 = 1;
pub const CANNOT_TELL: u8 = 2;

/// How often `--wait` asks again.
const ASK_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("subject").required(true).args(["job", "pod", "pid"])))]
pub struct ReportArgs {
    /// A Slurm job id.
    #[arg(long, value_name = "ID")]
    pub job: Option<String>,
    /// A Kubernetes pod UID.
    #[arg(long, value_name = "UID")]
    pub pod: Option<String>,
    /// A process id (the newest report of that PID first).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Where the daemon is (default http://127.0.0.1:9947) and how to reach it.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print the reports as the API serves them.
    #[arg(long)]
    pub json: bool,
    /// While the subject still runs, ask again each second for up to this
    /// long (an epilog runs before the daemon's next poll has seen the end).
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
    /// How long to wait for each answer.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub timeout: String,
}

/// Why no answer could be had.
#[derive(Debug, thiserror::Error)]
pub enum ReportCmdError {
    #[error("--{flag}: {source}")]
    Duration {
        flag: &'static str,
        source: crate::data::units::UnitError,
    },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the daemon's answer is not a list of reports: {0}")]
    Answer(serde_json::Error),
}

#[derive(serde::Deserialize)]
struct Answer {
    reports: Vec<Report>,
}

/// Asks the daemon; the exit code and what to print on stdout.
///
/// # Errors
/// Bad flags, or no usable answer (exit [`CANNOT_TELL`]).
pub fn run(args: &ReportArgs) -> Result<(u8, String), ReportCmdError> {
    let timeout = duration("timeout", &args.timeout)?;
    let wait = args.wait.as_deref().map(|w| duration("wait", w)).transpose()?;
    let daemon = args
        .client
        .connect(args.client.url.as_deref().unwrap_or(DEFAULT_URL), timeout)?;
    let subject = subject(args);
    let query: Vec<(&str, &str)> = subject.iter().map(|(key, _, id)| (*key, id.as_str())).collect();
    let deadline = wait.map(|w| Instant::now() + w);
    let reports = block_on(async {
        loop {
            let body = daemon.get("/api/v1/reports", &query).await?;
            let reports = serde_json::from_str::<Answer>(&body)
                .map_err(ReportCmdError::Answer)?
                .reports;
            let running = reports.first().is_some_and(|r| r.state == ReportState::Running);
            match deadline {
                Some(d) if running && Instant::now() + ASK_EVERY <= d => tokio::time::sleep(ASK_EVERY).await,
                _ => return Ok::<_, ReportCmdError>(reports),
            }
        }
    })?;
    let code = if reports.is_empty() { NONE } else { FOUND };
    let text = if args.json {
        let list = serde_json::to_string_pretty(&serde_json::json!({ "reports": reports })).unwrap_or_default();
        format!("{list}\n")
    } else if reports.is_empty() {
        let wanted = subject.map_or_else(|| "that subject".to_string(), |(_, what, id)| format!("{what} {id}"));
        format!("no GPU memory report for {wanted}\n")
    } else {
        reports.iter().map(render).collect::<Vec<_>>().join("\n")
    };
    Ok((code, text))
}

fn duration(flag: &'static str, text: &str) -> Result<Duration, ReportCmdError> {
    crate::data::units::parse_duration(text)
        .map(|d| d.get())
        .map_err(|source| ReportCmdError::Duration { flag, source })
}

/// The subject asked for (clap lets only one be given): its filter key for
/// `GET /api/v1/reports`, its name in the text, and its id.
fn subject(args: &ReportArgs) -> Option<(&'static str, &'static str, String)> {
    match (&args.job, &args.pod, args.pid) {
        (Some(j), _, _) => Some(("job", "job", j.clone())),
        (_, Some(p), _) => Some(("pod", "pod", p.clone())),
        (_, _, Some(p)) => Some(("pid", "PID", p.to_string())),
        _ => None,
    }
}

/// A report as a few lines for people.
pub fn render(r: &Report) -> String {
    let what = match r.subject {
        Subject::Process => "process",
        Subject::Job => "Slurm job",
        Subject::Pod => "pod",
        Subject::Unit => "unit",
        Subject::Container => "container",
    };
    let state = match r.state {
        ReportState::Running => "still running",
        ReportState::Ending => "ended, memory still left behind",
        ReportState::Ended => "ended",
    };
    let until = r.ended.unwrap_or(r.last_live);
    let pids: Vec<String> = r.pids.iter().map(u32::to_string).collect();
    let mut s = format!(
        "GPU memory report for {what} {} ({}, {}; PIDs {}): {state}, held GPU memory {:.0} s\n",
        r.id,
        r.user,
        r.comm,
        pids.join(","),
        (until - r.started).max(0.0)
    );
    for g in &r.gpus {
        gpu_lines(&mut s, g);
    }
    if let Some(x) = &r.suggested {
        let _ = writeln!(
            s,
            "  suggested request: {} (--gres=gpumem:{}), GPU fraction {:.2}, vLLM --gpu-memory-utilization {:.2}",
            human(x.bytes),
            x.gres_gpumem,
            x.gpu_fraction,
            x.vllm_gpu_memory_utilization
        );
    }
    s
}

fn gpu_lines(s: &mut String, g: &GpuReport) {
    let share = if g.total_bytes > 0 {
        100.0 * g.peak_bytes as f64 / g.total_bytes as f64
    } else {
        0.0
    };
    let index = g.index.map(|i| format!("GPU {i} ")).unwrap_or_default();
    let p95 = g.p95_bytes.map_or_else(|| "-".to_string(), human);
    let _ = writeln!(
        s,
        "  {index}{}: peak {} of {} ({share:.0}%), p95 {p95}, {:.0} s at 90% or more",
        g.uuid,
        human(g.peak_bytes),
        human(g.total_bytes),
        g.above_90_seconds
    );
    let _ = writeln!(
        s,
        "    idle while holding: {:.0} s ({:.3} GiB-h); OOMs {}, allocation retries {}",
        g.idle_seconds, g.idle_gib_hours, g.ooms, g.alloc_retries
    );
    if let (Some(res), Some(alloc)) = (g.allocator_reserved_peak_bytes, g.allocator_allocated_peak_bytes) {
        let _ = writeln!(
            s,
            "    allocator peaks: reserved {}, allocated {}",
            human(res),
            human(alloc)
        );
    }
    if g.left_behind_bytes > 0 {
        let still = if g.left_behind_ongoing { ", still there" } else { "" };
        let _ = writeln!(
            s,
            "    left behind after exit: {} for {:.0} s{still}",
            human(g.left_behind_bytes),
            g.left_behind_seconds
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: ReportArgs,
    }

    fn parse(argv: &[&str]) -> Result<ReportArgs, clap::Error> {
        Cmd::try_parse_from(std::iter::once("report").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn one_subject_is_the_filter_and_a_bad_url_is_named() {
        let a = parse(&["--job", "4 2&x", "--url", "http://me:pw@127.0.0.1:9947/"]).expect("args");
        assert_eq!(subject(&a), Some(("job", "job", "4 2&x".to_string())));
        assert_eq!(a.client.url.as_deref(), Some("http://me:pw@127.0.0.1:9947/"));
        assert!(parse(&["--url", "http://x"]).is_err(), "a subject is required");
        assert!(parse(&["--job", "1", "--pid", "2"]).is_err(), "one subject");
        assert!(matches!(
            run(&parse(&["--pid", "1", "--url", "not a url"]).expect("args")),
            Err(ReportCmdError::Client(ClientError::BadUrl(_)))
        ));
    }

    #[test]
    fn the_text_names_the_subject_its_gpus_and_the_request() {
        let g = 1u64 << 30;
        let r = Report {
            subject: Subject::Job,
            id: "4243".into(),
            user: "alice".into(),
            comm: "python".into(),
            pids: vec![5202],
            started: 100.0,
            ended: Some(120.0),
            gpus: vec![GpuReport {
                uuid: "GPU-a".into(),
                index: Some(1),
                total_bytes: 80 * g,
                peak_bytes: 12 * g,
                p95_bytes: Some(12 * g),
                left_behind_bytes: 12 * g,
                left_behind_seconds: 40.0,
                ..GpuReport::default()
            }],
            suggested: crate::judge::report::suggest(12 * g, 80 * g),
            ..Report::default()
        };
        let text = render(&r);
        for want in [
            "GPU memory report for Slurm job 4243 (alice, python; PIDs 5202): ended, held GPU memory 20 s",
            "GPU 1 GPU-a: peak 12.0 GiB of 80.0 GiB (15%), p95 12.0 GiB, 0 s at 90% or more",
            "left behind after exit: 12.0 GiB for 40 s",
            "suggested request: 13.2 GiB (--gres=gpumem:14G), GPU fraction 0.20, vLLM --gpu-memory-utilization 0.17",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
    }
}
