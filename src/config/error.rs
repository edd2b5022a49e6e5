//! The config boundary's error type and the helpers that turn a parser
//! position into "file, line, key". Owns the wording of config errors; it
//! must not decide what is valid (that is `mod.rs` and `units.rs`).

use std::path::PathBuf;

use thiserror::Error;

/// Everything that can go wrong loading a config. Each variant prints as one
/// line that names the file, the line and the key where known.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config file {path} does not exist")]
    NotFound { path: PathBuf },
    #[error("config file {path} {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: super::read::ReadError,
    },
    // Key and message can quote the file (a value's "\n", a stray carriage
    // return): escaped, so the error stays one log line.
    #[error("{origin}{}: {}: {}", line.map(|l| format!(":{l}")).unwrap_or_default(), one_line(key), one_line(message))]
    Invalid {
        origin: String,
        line: Option<usize>,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// Maps a TOML parse or type error to a one-line error at its position.
    pub(crate) fn from_toml(origin: &str, text: &str, e: &toml::de::Error) -> ConfigError {
        let (line, key) = match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                (Some(line), key_at(text, line))
            }
            None => (None, String::new()),
        };
        // toml's message can span lines; the first line carries the meaning.
        let message = e.message().lines().next().unwrap_or("invalid").trim().to_string();
        let key = if key.is_empty() { "(document)".to_string() } else { key };
        ConfigError::Invalid {
            origin: origin.to_string(),
            line,
            key,
            message,
        }
    }
}

/// `s` with control characters escaped (`\n`, `\r`, `\u{1b}`).
pub(crate) fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The dotted key defined on `line` (1-based): the table header above it plus
/// the key left of `=`; the header itself when the line is one.
fn key_at(text: &str, line: usize) -> String {
    let mut section = String::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if let Some(h) = header(t) {
            section = h.to_string();
        }
        if i + 1 == line {
            if header(t).is_some() {
                return section;
            }
            // A comment names no key (the error is about a stray byte in it).
            let key = if t.starts_with('#') {
                ""
            } else {
                t.split('=').next().unwrap_or("").trim().trim_matches('"')
            };
            return match (section.is_empty(), key.is_empty()) {
                (_, true) => section,
                (true, false) => key.to_string(),
                (false, false) => format!("{section}.{key}"),
            };
        }
    }
    section
}

fn header(t: &str) -> Option<&str> {
    let inner = t.strip_prefix('[')?.split(']').next()?;
    Some(inner.trim_start_matches('[').trim())
}

/// The 1-based line where `key` is set inside `[section]`, if the text sets it.
pub(crate) fn find_key_line(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if let Some(h) = header(t) {
            current = h.to_string();
            continue;
        }
        let k = t.split('=').next().unwrap_or("").trim();
        if current == section && k == key && t.contains('=') {
            return Some(i + 1);
        }
    }
    None
}

/// The line of `name = "<name>"` inside a `[[rule]]` table.
pub(crate) fn find_rule_line(text: &str, name: &str) -> Option<usize> {
    let mut in_rule = false;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if let Some(h) = header(t) {
            in_rule = h == "rule";
            continue;
        }
        let (k, v) = t.split_once('=').unwrap_or(("", ""));
        if in_rule && k.trim() == "name" && v.trim().trim_matches('"') == name {
            return Some(i + 1);
        }
    }
    None
}

/// A listen address is `[host]:port`; an empty host means all interfaces.
pub(crate) fn check_listen(s: &str) -> Result<(), String> {
    crate::config::parse_listen(s).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_positions() {
        let text = "[server]\nlisten = \":1\"\n\n[poll]\ninterval = \"1s\"\n";
        assert_eq!(key_at(text, 2), "server.listen");
        assert_eq!(key_at(text, 4), "poll");
        assert_eq!(find_key_line(text, "poll", "interval"), Some(5));
        assert_eq!(find_key_line(text, "poll", "timeout"), None);
        assert_eq!(key_at("[poll]\n# a comment\n", 2), "poll");
    }

    #[test]
    fn errors_are_one_line_whatever_the_file_quotes() {
        let text = "[server]\nlisten = \"a\\nb\"\n# stray \r here\n";
        for demo in [false, true] {
            let e = crate::config::Config::from_toml(text, "f.toml", demo).expect_err("invalid");
            assert!(!e.to_string().contains(['\n', '\r']), "{e}");
        }
        let e =
            crate::config::Config::from_toml("[server]\nlisten = \"x\\ny\"\n", "f.toml", false).expect_err("no port");
        assert!(e.to_string().contains("x\\ny"), "the value is shown escaped: {e}");
    }
}
