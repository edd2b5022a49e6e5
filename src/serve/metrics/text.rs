//! The exposition writer: Prometheus text format 0.0.4 and OpenMetrics 1.0
//! into one preallocated `String`. Owns escaping, number formatting, label
//! truncation and the two formats' differences (counter family names,
//! `# EOF`). It knows no metric names; callers emit whole families in
//! order. It does not compress: the HTTP layer does.

use std::fmt::Write as _;

pub use super::format::Format;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

/// A sample value: integers print exactly, floats in Prometheus' spelling.
pub trait Value {
    fn write_to(&self, out: &mut String);
}

impl Value for u64 {
    fn write_to(&self, out: &mut String) {
        out.push_str(Digits::new(*self).as_str());
    }
}

/// An integer's decimal digits on the stack: label values such as `pid`
/// without a `String` per series, and sample values without `fmt`.
pub struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    pub fn new(mut v: u64) -> Self {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        loop {
            start -= 1;
            buf[start] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        Self { buf, start }
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII digits were written; the fallback cannot happen.
        std::str::from_utf8(&self.buf[self.start..]).unwrap_or("0")
    }
}

impl Value for f64 {
    fn write_to(&self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if *self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

pub struct Writer {
    out: String,
    format: Format,
    label_max: usize,
}

impl Writer {
    pub fn new(format: Format, label_max: usize) -> Self {
        // A few GPUs and tens of processes fit; more grows the buffer.
        Self::with_capacity(format, label_max, 64 << 10)
    }

    pub fn with_capacity(format: Format, label_max: usize, bytes: usize) -> Self {
        Self {
            out: String::with_capacity(bytes),
            format,
            label_max,
        }
    }

    /// Starts a family: HELP and TYPE lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        // OpenMetrics names a counter family without its `_total` suffix.
        let meta = match (self.format, kind) {
            (Format::OpenMetrics, Kind::Counter) => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let kind = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(self.out, "# HELP {meta} {help}");
        let _ = writeln!(self.out, "# TYPE {meta} {kind}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Value) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_into(&mut self.out, truncated(v, self.label_max));
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        value.write_to(&mut self.out);
        self.out.push('\n');
    }

    /// The text so far, without the format's end: a part that another
    /// writer's [`Writer::finish`] completes.
    pub fn into_text(self) -> String {
        self.out
    }

    pub fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }
}

/// At most `max` bytes of `s`, cut on a char boundary.
fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

fn escape_into(out: &mut String, v: &str) {
    // Almost no label value needs escaping: copy those in one go.
    if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_truncates_labels() {
        let mut w = Writer::new(Format::Prometheus, 12);
        w.family("x", Kind::Gauge, "h");
        w.sample("x", &[("a", "q\"b\\c\nd"), ("b", "ééééééé")], 1u64);
        let s = w.finish();
        assert!(s.contains(r#"x{a="q\"b\\c\nd",b="éééééé"} 1"#), "{s}");
    }

    #[test]
    fn integers_print_exactly() {
        for v in [0u64, 7, 10, 4096, 1_767_225_600, u64::MAX] {
            let mut s = String::new();
            v.write_to(&mut s);
            assert_eq!(s, v.to_string());
            assert_eq!(Digits::new(v).as_str(), v.to_string());
        }
    }

    #[test]
    fn finite_floats_print_as_display_does() {
        for v in [
            0.0,
            1.0,
            -1.0,
            0.5,
            123.456,
            1e15,
            8.9e15,
            9e15,
            1e16,
            1e300,
            -7e200,
            1_767_225_600.25,
        ] {
            let mut s = String::new();
            v.write_to(&mut s);
            assert_eq!(s, format!("{v}"));
        }
    }

    #[test]
    fn floats_use_prometheus_spelling() {
        for (v, want) in [
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (0.25, "0.25"),
            (-0.0, "-0"),
            (1_767_225_600.0, "1767225600"),
            (-42.0, "-42"),
        ] {
            let mut s = String::new();
            v.write_to(&mut s);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn openmetrics_counters_and_eof() {
        let mut w = Writer::new(Format::OpenMetrics, 128);
        w.family("c_total", Kind::Counter, "h");
        w.sample("c_total", &[], 3u64);
        let s = w.finish();
        assert_eq!(s, "# HELP c h\n# TYPE c counter\nc_total 3\n# EOF\n");
    }
}
