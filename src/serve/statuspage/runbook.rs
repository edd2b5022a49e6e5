//! `docs/runbook.md`, built into the binary and served at `/runbook` as
//! minimal HTML: every `## Rule` heading gets the anchor `#rule` (lower
//! case), the rest is escaped preformatted text. No Markdown engine: the
//! page only needs the sections to be linkable, offline.

use std::fmt::Write as _;

const RUNBOOK_MD: &str = include_str!("../../../docs/runbook.md");

/// The runbook page (rendered per call: it is small and rarely asked for).
pub fn html() -> String {
    let mut out = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>gpumemd runbook</title><link rel=\"icon\" href=\"data:,\"><style>\
         body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;padding:8px 14px;max-width:900px}\
         pre{white-space:pre-wrap;overflow-wrap:anywhere;font:13px/1.45 ui-monospace,monospace}\
         h2{border-top:1px solid #d5dbe0;padding-top:10px}</style></head><body>\
         <p><a href=\"/\">&larr; status page</a></p><pre>",
    );
    for line in RUNBOOK_MD.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            let id: String = title
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
                .to_ascii_lowercase();
            let _ = write!(out, "</pre><h2 id=\"{id}\">{}</h2><pre>", escape(title));
        } else {
            out.push_str(&escape(line));
            out.push('\n');
        }
    }
    out.push_str("</pre></body></html>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
