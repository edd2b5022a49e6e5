//! Units: durations ("30s"), byte sizes ("20GiB") and ratios (0.9 or "90%")
//! as typed values parsed once, and sizes and foreign text (process names,
//! command lines) made printable for people. A leaf used by
//! config, rules, sources and the CLI table alike; it owns the accepted syntax
//! and its error texts and must not know about any config section or
//! depend on anything else in the crate.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Why a duration, size or ratio was refused; the texts show the accepted
/// form, and callers prefix them with the setting or flag they came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("`{0}` is negative; use a positive duration such as \"1s\" or \"500ms\"")]
    NegativeDuration(String),
    #[error("`{text}` is not a duration ({reason}); use e.g. \"1s\", \"250ms\", \"10m\"")]
    NotADuration { text: String, reason: String },
    #[error("`{0}` is zero; use a positive duration such as \"1s\"")]
    ZeroDuration(String),
    #[error("`{0}` is more than the maximum of 30 days")]
    TooLong(String),
    #[error("`{0}` is not a size; {SIZE_HINT}")]
    NotASize(String),
    #[error("`{text}` has an unknown unit `{unit}`; {SIZE_HINT}")]
    UnknownUnit { text: String, unit: String },
    #[error("`{0}` is too large")]
    TooLarge(String),
    #[error("`{0}` is outside 0..1; write a ratio as 0.9 or \"90%\"")]
    RatioOutOfRange(String),
}

const SIZE_HINT: &str = "use e.g. \"512MiB\", \"20GiB\" or a number of bytes";

/// A strictly positive duration of at most [`MAX_DURATION`], written as a
/// humantime string ("1s", "10m", "250ms").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PositiveDuration(Duration);

/// The longest duration any setting accepts. Longer values are typos, and
/// the bound keeps every `Instant + duration` far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

impl PositiveDuration {
    /// Builds a value from a non-zero duration of at most `MAX_DURATION`.
    pub fn new(d: Duration) -> Option<Self> {
        (!d.is_zero() && d <= MAX_DURATION).then_some(Self(d))
    }

    pub fn get(self) -> Duration {
        self.0
    }

    /// Shorthand for built-in defaults; zero falls back to one millisecond so
    /// a default can never be invalid.
    pub(crate) const fn secs(s: u64) -> Self {
        if s == 0 {
            Self(Duration::from_millis(1))
        } else {
            Self(Duration::from_secs(s))
        }
    }
}

/// Parses "30s", "1m30s", "250ms". Negative or zero values are refused with
/// a message that shows the accepted form.
pub fn parse_duration(text: &str) -> Result<PositiveDuration, UnitError> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(UnitError::NegativeDuration(t.to_owned()));
    }
    let d = humantime::parse_duration(t).map_err(|e| UnitError::NotADuration {
        text: t.to_owned(),
        reason: e.to_string(),
    })?;
    if d.is_zero() {
        return Err(UnitError::ZeroDuration(t.to_owned()));
    }
    PositiveDuration::new(d).ok_or_else(|| UnitError::TooLong(t.to_owned()))
}

impl<'de> Deserialize<'de> for PositiveDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PositiveDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration string such as \"1s\", \"250ms\" or \"10m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                parse_duration(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl Serialize for PositiveDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

/// A byte count written as an integer or a string with a binary or decimal
/// unit ("512MiB", "20GiB", "1.5GB", "0").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

const UNITS: &[(&str, f64)] = &[
    ("b", 1.0),
    ("kib", 1024.0),
    ("mib", 1048576.0),
    ("gib", 1073741824.0),
    ("tib", 1099511627776.0),
    ("kb", 1e3),
    ("mb", 1e6),
    ("gb", 1e9),
    ("tb", 1e12),
    ("k", 1024.0),
    ("m", 1048576.0),
    ("g", 1073741824.0),
    ("t", 1099511627776.0),
];

/// Parses a size; the unit is case-insensitive and may be separated by a space.
pub fn parse_size(text: &str) -> Result<ByteSize, UnitError> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let value: f64 = num.parse().map_err(|_| UnitError::NotASize(t.to_owned()))?;
    let mult = if unit.is_empty() {
        1.0
    } else {
        UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, m)| *m)
            .ok_or_else(|| UnitError::UnknownUnit {
                text: t.to_owned(),
                unit: unit.clone(),
            })?
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(UnitError::TooLarge(t.to_owned()));
    }
    Ok(ByteSize(bytes.round() as u64))
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"512MiB\" or \"20GiB\", or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                parse_size(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("{v} is negative; a size must be 0 or more")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ByteSize(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_size(self.0))
    }
}

/// Formats bytes with the largest binary unit that divides them exactly, so a
/// printed effective config parses back to the same value.
pub fn format_size(b: u64) -> String {
    for (unit, mult) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if b >= mult && b.is_multiple_of(mult) {
            return format!("{}{unit}", b / mult);
        }
    }
    b.to_string()
}

/// Bytes for people: one decimal in the largest binary unit ("1.5 KiB").
pub fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Seconds as the status page words them: `45s`, `12m`, `3h`.
pub fn human_seconds(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..90 => format!("{s}s"),
        90..5400 => format!("{}m", (s + 30) / 60),
        _ => format!("{}h", (s + 1800) / 3600),
    }
}

/// Text a process chose (its name, its command line) made safe for a
/// terminal: control characters (ESC, newlines, C1) and bidirectional
/// overrides are written as Rust escapes (`\u{1b}`, `\n`), so a name cannot
/// clear the screen, move the cursor or forge a row. Borrowed when clean.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A fraction in [0, 1], written as 0.9 or "90%".
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
pub struct Ratio(pub f64);

pub fn parse_ratio(v: f64, text: &str) -> Result<Ratio, UnitError> {
    if (0.0..=1.0).contains(&v) {
        Ok(Ratio(v))
    } else {
        Err(UnitError::RatioOutOfRange(text.to_owned()))
    }
}

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Ratio;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a ratio such as 0.9 or \"90%\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                parse_ratio(v, &v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                parse_ratio(v as f64, &v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let pct = v
                    .trim()
                    .strip_suffix('%')
                    .ok_or_else(|| E::custom(format!("`{v}` is not a ratio; write 0.9 or \"90%\"")))?;
                let n: f64 = pct
                    .trim()
                    .parse()
                    .map_err(|_| E::custom(format!("`{v}` is not a percentage; write e.g. \"90%\"")))?;
                parse_ratio(n / 100.0, v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn printable_escapes_what_a_terminal_would_act_on() {
        assert!(matches!(
            super::printable("python3 train.py"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            super::printable("evil\u{1b}[2J\nroot  4242"),
            "evil\\u{1b}[2J\\nroot  4242"
        );
        assert_eq!(super::printable("a\u{202e}b\u{9b}c"), "a\\u{202e}b\\u{9b}c");
    }

    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(80 << 30), "80.0 GiB");
    }

    #[test]
    fn sizes() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("512MiB", Some(512 << 20)),
            ("20GiB", Some(20 << 30)),
            ("20 gib", Some(20 << 30)),
            ("1.5GB", Some(1_500_000_000)),
            ("7", Some(7)),
            ("12XB", None),
            ("GiB", None),
            ("-1GiB", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_size(text).ok().map(|b| b.0), *want, "{text}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").map(|d| d.get()), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s").map(|d| d.get()), Ok(Duration::from_secs(90)));
        let err = |t: &str| parse_duration(t).map(|_| ()).unwrap_err().to_string();
        assert!(err("0s").contains("zero"));
        assert!(err("-1s").contains("negative"));
        assert!(err("soon").contains("not a duration"));
        assert_eq!(parse_duration("30d").map(|d| d.get()), Ok(MAX_DURATION));
        assert!(err("30d 1s").contains("maximum of 30 days"));
        // The value that made the daemon never poll again.
        assert!(parse_duration("9999999999999h").is_err());
    }

    #[test]
    fn sizes_round_trip_through_format() {
        for b in [0u64, 1, 1023, 1024, 512 << 20, 80 << 30, (3 << 30) + 1] {
            assert_eq!(parse_size(&format_size(b)).map(|s| s.0), Ok(b));
        }
    }

    #[test]
    fn ratios() {
        #[derive(Deserialize)]
        struct T {
            r: Ratio,
        }
        let ok = |s: &str| toml::from_str::<T>(&format!("r = {s}")).map(|t| t.r.0);
        assert_eq!(ok("0.9").ok(), Some(0.9));
        assert_eq!(ok("\"90%\"").ok(), Some(0.9));
        assert_eq!(ok("1").ok(), Some(1.0));
        assert!(ok("1.5").is_err());
        assert!(ok("\"150%\"").is_err());
        assert!(ok("\"ninety\"").is_err());
    }
}
