//! The `snapshot` subcommand's own flags (output, filters, `--top`, colour,
//! watch; the daemon's URL is among the shared client options). Owns
//! argument syntax only; `snapshot_cmd` acts on them.

use std::time::Duration;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Default, Args)]
pub struct SnapshotOpts {
    /// Print the snapshot as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only these GPUs: index or UUID (a MIG instance matches by its own or its parent's UUID); repeatable.
    #[arg(long, value_name = "INDEX|UUID")]
    pub gpu: Vec<String>,
    /// Only processes of these users; repeatable.
    #[arg(long, value_name = "USER")]
    pub user: Vec<String>,
    /// Only these processes; repeatable.
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// At most N processes per GPU, largest first, then "... and K more
    /// processes" (JSON: `processes_omitted`). Default: 10 on a terminal
    /// (without --watch, whose screen fits the terminal), all when piped;
    /// 0 shows all.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Colour the table: auto (when stdout is a terminal), always or never.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
    /// Refresh in place every INTERVAL (default 2s) until interrupted.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2s",
          value_parser = parse_interval)]
    pub watch: Option<Duration>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    #[default]
    Auto,
    Always,
    Never,
}

/// `2s`, `500ms`, or a bare number of seconds (`0.5`), at least 100 ms so a
/// typo cannot spin a core.
fn parse_interval(s: &str) -> Result<Duration, IntervalError> {
    let d = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs),
        Ok(_) => return Err(IntervalError::NotPositive(s.to_owned())),
        Err(_) => humantime::parse_duration(s).map_err(|source| IntervalError::NotADuration {
            text: s.to_owned(),
            source,
        })?,
    };
    if d < Duration::from_millis(100) {
        return Err(IntervalError::TooShort(s.to_owned()));
    }
    Ok(d)
}

/// Why a `--watch` interval was refused (clap prints it after the flag).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum IntervalError {
    #[error("`{0}` is not a positive interval")]
    NotPositive(String),
    #[error("`{text}`: {source}")]
    NotADuration {
        text: String,
        source: humantime::DurationError,
    },
    #[error("`{0}` is below the 100ms minimum")]
    TooShort(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("-1").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
