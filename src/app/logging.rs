//! Log setup in the Prometheus exporters' conventions: `--log.level` and
//! `--log.format logfmt|json`, written to stderr. Owns both line formats
//! (`ts=... level=... msg=... key=value`, and the same flat keys as one JSON
//! object); it must not decide what is logged, nor read the config file.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `--log.format`: logfmt (Prometheus' default) or one JSON object per line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `ts=... level=info msg="..." key=value`; `text` is its old name.
    #[default]
    #[value(alias = "text")]
    Logfmt,
    Json,
}

/// `--log.level`: the least severe level written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    fn level(self) -> tracing::Level {
        match self {
            Self::Debug => tracing::Level::DEBUG,
            Self::Info => tracing::Level::INFO,
            Self::Warn => tracing::Level::WARN,
            Self::Error => tracing::Level::ERROR,
        }
    }
}

/// Installs the global subscriber. An explicit `--log.level` wins; without
/// it `RUST_LOG` (`target=level` directives, for debugging one module)
/// applies, else `default_level`. A second call (tests) is a no-op.
pub fn init(format: LogFormat, level: Option<LogLevel>, default_level: &str) {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // An empty or unreadable RUST_LOG is as good as none.
    let from_env = || {
        let v = std::env::var("RUST_LOG").ok()?;
        Some(v.trim()).filter(|v| !v.is_empty())?.parse::<Targets>().ok()
    };
    let filter = match level {
        Some(l) => Targets::new().with_default(l.level()),
        None => from_env()
            .or_else(|| default_level.parse().ok())
            .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO)),
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .event_format(Lines(format))
        .finish()
        .with(filter)
        .try_init();
}

/// Both line formats, flat as Prometheus' own. Logfmt: `ts` (RFC 3339,
/// UTC, milliseconds), `level`, `target`, `msg`, then the event's fields in
/// the order they were given. JSON: `{"ts":"...","level":"info","target":
/// "...","msg":"...","key":"value",...}` (tracing's default nests the
/// fields and upper-cases the level). Spans are not written: the daemon
/// logs events with their fields.
struct Lines(LogFormat);

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = match self.0 {
            LogFormat::Logfmt => logfmt_line,
            LogFormat::Json => json_line,
        };
        writeln!(w, "{}", line(meta.level(), meta.target(), &fields, &rfc3339_now()))
    }
}

fn logfmt_line(level: &tracing::Level, target: &str, fields: &Fields, ts: &str) -> String {
    let level = level.as_str().to_ascii_lowercase();
    let mut line = format!("ts={ts} level={level} target={target}");
    if let Some(msg) = &fields.message {
        line.push_str(" msg=");
        push_value(&mut line, msg);
    }
    for (k, v) in &fields.pairs {
        let _ = write!(line, " {k}=");
        push_value(&mut line, v);
    }
    line
}

/// A field named like one of the four fixed keys is written as
/// `field_<name>`, so no key repeats.
fn json_line(level: &tracing::Level, target: &str, fields: &Fields, ts: &str) -> String {
    let q = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into());
    let mut line = format!(
        "{{\"ts\":{},\"level\":{},\"target\":{}",
        q(ts),
        q(&level.as_str().to_ascii_lowercase()),
        q(target)
    );
    if let Some(msg) = &fields.message {
        let _ = write!(line, ",\"msg\":{}", q(msg));
    }
    for (k, v) in &fields.pairs {
        let key = if matches!(*k, "ts" | "level" | "target" | "msg") {
            format!("field_{k}")
        } else {
            (*k).to_string()
        };
        let _ = write!(line, ",{}:{}", q(&key), q(v));
    }
    line.push('}');
    line
}

/// The event's message and its other fields, as strings.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    pairs: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = Some(value),
            name => self.pairs.push((name, value)),
        }
    }
}

/// Appends `v` bare when it is a plain token, else quoted with `"`, `\` and
/// control characters escaped, so one event is always one parseable line.
pub fn push_value(out: &mut String, v: &str) {
    let bare = !v.is_empty()
        && v.chars()
            .all(|c| c > ' ' && c != '"' && c != '=' && c != '\\' && c != '\u{7f}');
    if bare {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn rfc3339_now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_bare_or_quoted_and_escaped() {
        for (v, want) in [
            ("info", "info"),
            ("127.0.0.1:9947", "127.0.0.1:9947"),
            ("", "\"\""),
            ("two words", "\"two words\""),
            ("a=b", "\"a=b\""),
            ("say \"hi\"\n", "\"say \\\"hi\\\"\\n\""),
            ("back\\slash", "\"back\\\\slash\""),
        ] {
            let mut s = String::new();
            push_value(&mut s, v);
            assert_eq!(s, want, "for {v:?}");
        }
    }

    #[test]
    fn json_lines_are_flat_with_prometheus_keys() {
        let fields = Fields {
            message: Some("listening \"here\"".into()),
            pairs: vec![("address", "127.0.0.1:9947".into()), ("level", "shadowed".into())],
        };
        let line = json_line(&tracing::Level::INFO, "gpumemd", &fields, "2026-12-03T16:00:00.000Z");
        let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON object");
        assert_eq!(v["ts"], "2026-12-03T16:00:00.000Z");
        assert_eq!(v["level"], "info");
        assert_eq!(v["msg"], "listening \"here\"");
        assert_eq!(v["address"], "127.0.0.1:9947", "fields at the top level: {line}");
        assert_eq!(v["field_level"], "shadowed", "no key repeats");
        assert!(v.get("fields").is_none() && !line.contains('\n'));
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = |ms: u64| {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            humantime::format_rfc3339_millis(t).to_string()
        };
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(at(1_796_255_999_999), "2026-12-02T23:59:59.999Z");
        assert_eq!(rfc3339_now().len(), 24);
    }
}
