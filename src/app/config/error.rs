//! The config boundary's error type: every way loading a config fails, as
//! one line that names the file, line and key (found by `locate.rs` from
//! toml's spans). Owns the wording of config errors; it must not decide
//! what is valid (that is `mod.rs` and `units.rs`).

use std::path::PathBuf;

use thiserror::Error;

use super::locate::{KeyPath, Located, line_at};
use crate::data::files::one_line;

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
        source: crate::data::files::ReadError,
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
    /// Maps a TOML parse or type error to a one-line error at its position,
    /// naming the key toml's span points into.
    pub(crate) fn from_toml(origin: &str, text: &str, e: &toml::de::Error) -> ConfigError {
        let at = e.span().map(|span| span.start);
        let key = at.map(|at| Located::parse(text).path_at(at).to_string());
        ConfigError::Invalid {
            origin: origin.to_string(),
            line: at.map(|at| line_at(text, at)),
            key: key.filter(|k| !k.is_empty()).unwrap_or_else(|| "(document)".into()),
            // toml's message can span lines; the first line carries the meaning.
            message: e.message().lines().next().unwrap_or("invalid").trim().to_string(),
        }
    }

    /// An invalid value at `path` of `doc`, found by its span.
    pub(crate) fn at(origin: &str, doc: &Located<'_>, path: &KeyPath, message: String) -> ConfigError {
        ConfigError::Invalid {
            origin: origin.to_string(),
            line: doc.line_of(path),
            key: path.to_string(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn errors_are_one_line_whatever_the_file_quotes() {
        let text = "[server]\nlisten = \"a\\nb\"\n# stray \r here\n";
        for demo in [false, true] {
            let e = crate::app::config::Config::from_toml(text, "f.toml", demo).expect_err("invalid");
            assert!(!e.to_string().contains(['\n', '\r']), "{e}");
        }
        let e = crate::app::config::Config::from_toml("[server]\nlisten = \"x\\ny\"\n", "f.toml", false)
            .expect_err("no port");
        assert!(e.to_string().contains("x\\ny"), "the value is shown escaped: {e}");
    }
}
