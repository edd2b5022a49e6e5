//! Which exposition format a scrape gets: Prometheus text 0.0.4 or
//! OpenMetrics 1.0.0, negotiated from the `Accept` header with q-values
//! (RFC 9110 section 12.5.1). Owns the content types; it knows nothing of
//! how either format is written.

/// Which exposition format a scrape asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Prometheus,
    OpenMetrics,
}

impl Format {
    /// The format `accept` prefers. The classic text format answers when
    /// there is no header, when it is preferred or tied, and when neither
    /// is acceptable: an exporter that answers 406 loses the scrape, and
    /// every Prometheus reads the text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let om = preference(accept, Format::OpenMetrics);
        let text = preference(accept, Format::Prometheus);
        // Higher q wins; at equal q the range named more specifically wins
        // (a client that names OpenMetrics beside `*/*` means it).
        if om.q > 0.0 && (om.q, om.specificity) > (text.q, text.specificity) {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    fn media_type(self) -> (&'static str, &'static str) {
        match self {
            Format::Prometheus => ("text", "plain"),
            Format::OpenMetrics => ("application", "openmetrics-text"),
        }
    }

    /// Versions a range may name and still be served this format: ours,
    /// and those that only differ in what we never emit (0.0.1 is the
    /// OpenMetrics draft Prometheus also asks for; text 1.0.0 only adds
    /// UTF-8 names).
    fn serves_version(self, v: &str) -> bool {
        match self {
            Format::Prometheus => matches!(v, "0.0.4" | "1.0.0"),
            Format::OpenMetrics => matches!(v, "1.0.0" | "0.0.1"),
        }
    }
}

/// How much a header wants one format: the q of the most specific range
/// that covers it (0 when none does, or when that range says `q=0`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct Preference {
    q: f32,
    /// 0 `*/*`, 1 `type/*`, 2 `type/subtype`, 3 with a version we serve.
    specificity: u8,
}

fn preference(accept: &str, f: Format) -> Preference {
    let mut best: Option<Preference> = None;
    for range in accept.split(',') {
        let Some(p) = match_range(range, f) else { continue };
        best = match best {
            // The most specific range decides; among equals, the highest q.
            Some(b) if (b.specificity, b.q) >= (p.specificity, p.q) => Some(b),
            _ => Some(p),
        };
    }
    best.unwrap_or(Preference { q: 0.0, specificity: 0 })
}

/// How `range` (one element of the header) covers `f`, if it does.
fn match_range(range: &str, f: Format) -> Option<Preference> {
    let mut parts = range.split(';');
    let (ty, sub) = parts.next()?.trim().split_once('/')?;
    let (want_ty, want_sub) = f.media_type();
    let mut specificity = match (ty.trim(), sub.trim()) {
        ("*", "*") => 0,
        (t, "*") if t.eq_ignore_ascii_case(want_ty) => 1,
        (t, s) if t.eq_ignore_ascii_case(want_ty) && s.eq_ignore_ascii_case(want_sub) => 2,
        _ => return None,
    };
    let mut q = 1.0;
    for param in parts {
        let Some((k, v)) = param.split_once('=') else { continue };
        let v = v.trim().trim_matches('"');
        match k.trim() {
            k if k.eq_ignore_ascii_case("q") => q = parse_q(v)?,
            k if k.eq_ignore_ascii_case("version") && specificity == 2 => {
                if !f.serves_version(v) {
                    return None;
                }
                specificity = 3;
            }
            _ => {}
        }
    }
    Some(Preference { q, specificity })
}

/// A qvalue: 0 to 1 with at most three decimals. Anything else makes the
/// range unusable rather than guessing a weight.
fn parse_q(v: &str) -> Option<f32> {
    let ok = v.len() <= 5 && v.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let q: f32 = v.parse().ok().filter(|_| ok)?;
    (0.0..=1.0).contains(&q).then_some(q)
}

#[cfg(test)]
mod tests {
    use super::Format::{self, OpenMetrics as Om, Prometheus as Text};

    /// Accept headers and what each must get.
    const TABLE: &[(Option<&str>, Format)] = &[
        (None, Text),
        (Some(""), Text),
        (Some("*/*"), Text),
        (Some("text/plain"), Text),
        (Some("text/plain;version=0.0.4"), Text),
        (Some("application/openmetrics-text"), Om),
        (Some("application/openmetrics-text;version=1.0.0"), Om),
        (Some("application/openmetrics-text; version=1.0.0; charset=utf-8"), Om),
        (Some("APPLICATION/OpenMetrics-Text;Version=1.0.0"), Om),
        (Some("application/openmetrics-text;version=0.0.1"), Om),
        // Prometheus before 2.49 (no q on its first choice).
        (
            Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            ),
            Om,
        ),
        // Prometheus 2.49+ with its default scrape_protocols.
        (
            Some(
                "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            ),
            Om,
        ),
        // Prometheus 3 with its default scrape_protocols.
        (
            Some(
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
            ),
            Om,
        ),
        // Prometheus configured with scrape_protocols: [PrometheusText0.0.4].
        (Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.4"), Text),
        // Native histograms on: protobuf first, which we do not speak.
        (
            Some(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            ),
            Om,
        ),
        // Refusals and preferences by q.
        (Some("application/openmetrics-text;q=0"), Text),
        (Some("application/openmetrics-text;q=0,text/plain"), Text),
        (Some("application/openmetrics-text;q=0.0,*/*"), Text),
        (Some("text/plain;q=0.9,application/openmetrics-text;q=0.5"), Text),
        (Some("text/plain;q=0.5,application/openmetrics-text;q=0.9"), Om),
        (Some("text/plain;q=0.5, application/openmetrics-text ; q=0.51"), Om),
        (Some("text/plain;q=0,application/*;q=0.1"), Om),
        // At equal q the more specific range decides.
        (Some("application/openmetrics-text,*/*"), Om),
        (Some("text/plain,application/*"), Text),
        (Some("text/plain,application/openmetrics-text"), Text),
        (Some("application/openmetrics-text;version=1.0.0,text/plain"), Om),
        // The most specific range's q counts, even when lower.
        (
            Some("application/*;q=0.9,application/openmetrics-text;q=0.1,text/plain;q=0.5"),
            Text,
        ),
        // A version we do not write is not ours to answer with.
        (
            Some("application/openmetrics-text;version=2.0.0,text/plain;q=0.1"),
            Text,
        ),
        // Malformed q-values make their range unusable.
        (Some("application/openmetrics-text;q=2"), Text),
        (Some("application/openmetrics-text;q=abc"), Text),
        (Some("application/openmetrics-text;q=-1"), Text),
        (Some("application/openmetrics-text;q=0.12345"), Text),
        // Nothing acceptable: the text format rather than a lost scrape.
        (Some("application/json"), Text),
        (Some("*/*;q=0"), Text),
        (Some(",,;;garbage/"), Text),
    ];

    #[test]
    fn accept_table() {
        for (accept, want) in TABLE {
            assert_eq!(Format::from_accept(*accept), *want, "Accept: {accept:?}");
        }
    }

    #[test]
    fn content_types_name_the_versions_written() {
        assert!(Text.content_type().starts_with("text/plain; version=0.0.4"));
        assert!(
            Om.content_type()
                .starts_with("application/openmetrics-text; version=1.0.0")
        );
    }
}
