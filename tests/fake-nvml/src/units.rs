//! Parsing of the human-friendly quantities a scenario file may contain: byte
//! sizes ("80GiB", "518 MiB", 1024) and durations ("3s", "250ms"). Pure
//! functions; errors are messages naming the offending text.

use std::time::Duration;

/// Parses a size: a plain byte count or a number followed by a unit.
/// Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal units
/// (KB, MB, GB, TB) powers of 1000, because `nvidia-smi` prints MiB while
/// marketing names (80GB) are decimal and both show up in scenarios.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => return Err(format!("unknown size unit {other:?} in {text:?}")),
    };
    scale(number, multiplier).ok_or_else(|| format!("invalid size {text:?}"))
}

/// Parses a duration such as "3s", "250ms", "1.5s" or "2m".
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let micros_per_unit: u64 = match unit.trim() {
        "us" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {text:?} (use us, ms, s or m)"
            ));
        }
    };
    scale(number, micros_per_unit)
        .map(Duration::from_micros)
        .ok_or_else(|| format!("invalid duration {text:?}"))
}

/// Integer maths when the number is whole, so that "85520809984" stays
/// exact; fractions go through f64, where rounding to a byte is harmless.
fn scale(number: &str, multiplier: u64) -> Option<u64> {
    if number.is_empty() {
        return None;
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(multiplier);
    }
    let value: f64 = number.parse().ok()?;
    let scaled = (value * multiplier as f64).round();
    (scaled.is_finite() && scaled >= 0.0 && scaled < u64::MAX as f64).then_some(scaled as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let cases = [
            ("1024", Some(1024)),
            ("80GiB", Some(80 << 30)),
            ("518 MiB", Some(518 << 20)),
            ("1.5GiB", Some(3 << 29)),
            ("80GB", Some(80_000_000_000)),
            ("12 b", Some(12)),
            ("GiB", None),
            ("5 parsecs", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_size(text).ok(), want, "{text}");
        }
    }

    #[test]
    fn durations() {
        let cases = [
            ("3s", Some(Duration::from_secs(3))),
            ("250ms", Some(Duration::from_millis(250))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("2m", Some(Duration::from_secs(120))),
            ("3", None),
            ("s", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text).ok(), want, "{text}");
        }
    }
}
