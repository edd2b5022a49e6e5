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
        } else if self.fract() == 0.0 && self.abs() < 9e15 && !(*self == 0.0 && self.is_sign_negative()) {
            // Whole numbers (start times, idle seconds) print the same as
            // `Display` does, without its shortest-float search.
            if *self < 0.0 {
                out.push('-');
            }
            out.push_str(Digits::new(self.abs() as u64).as_str());
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
    pub fn new(format: Format, capacity: usize, label_max: usize) -> Self {
        Self {
            out: String::with_capacity(capacity),
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
        self.sample_after(name, "", labels, value);
    }

    /// A sample whose first labels are `prefix`, already written by
    /// [`Writer::labels`]: series that share labels (every per-process
    /// family starts with uuid and pid) escape them once, not per family.
    pub fn sample_after(&mut self, name: &str, prefix: &str, labels: &[(&str, &str)], value: impl Value) {
        self.out.push_str(name);
        if !prefix.is_empty() || !labels.is_empty() {
            self.out.push('{');
            self.out.push_str(prefix);
            if !prefix.is_empty() && !labels.is_empty() {
                self.out.push(',');
            }
            push_labels(&mut self.out, labels, self.label_max);
            self.out.push('}');
        }
        self.out.push(' ');
        value.write_to(&mut self.out);
        self.out.push('\n');
    }

    /// Appends `labels` as they appear between the braces (escaped and
    /// truncated as `sample` would) to `out`, for [`Writer::sample_after`].
    pub fn labels(&self, out: &mut String, labels: &[(&str, &str)]) {
        push_labels(out, labels, self.label_max);
    }

    pub fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }
}

fn push_labels(out: &mut String, labels: &[(&str, &str)], label_max: usize) {
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        escape_into(out, truncated(v, label_max));
        out.push('"');
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
        let mut w = Writer::new(Format::Prometheus, 64, 12);
        w.family("x", Kind::Gauge, "h");
        w.sample("x", &[("a", "q\"b\\c\nd"), ("b", "ééééééé")], 1u64);
        let s = w.finish();
        assert!(s.contains(r#"x{a="q\"b\\c\nd",b="éééééé"} 1"#), "{s}");
    }

    #[test]
    fn a_label_prefix_renders_like_the_same_labels_inline() {
        let labels = [("uuid", "GPU-\"x"), ("pid", "7"), ("comm", "py")];
        let mut inline = Writer::new(Format::Prometheus, 64, 16);
        inline.sample("m", &labels, 1u64);
        let mut split = Writer::new(Format::Prometheus, 64, 16);
        let mut prefix = String::new();
        split.labels(&mut prefix, &labels[..2]);
        split.sample_after("m", &prefix, &labels[2..], 1u64);
        split.sample_after("n", &prefix, &[], 2u64);
        split.sample_after("o", "", &[], 3u64);
        let (inline, split) = (inline.finish(), split.finish());
        assert_eq!(split.lines().next(), inline.lines().next());
        assert!(split.contains(r#"n{uuid="GPU-\"x",pid="7"} 2"#), "{split}");
        assert!(split.ends_with("\no 3\n"), "{split}");
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
        let mut w = Writer::new(Format::OpenMetrics, 64, 128);
        w.family("c_total", Kind::Counter, "h");
        w.sample("c_total", &[], 3u64);
        let s = w.finish();
        assert_eq!(s, "# HELP c h\n# TYPE c counter\nc_total 3\n# EOF\n");
    }
}
