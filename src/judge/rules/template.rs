//! Annotation templates: text with `{{ name }}` placeholders, parsed once at
//! config load so a typo is a config error, not a blank in a page at 3 am.
//! Owns the placeholder syntax and the list of names; it knows no rule logic.

/// Names a template may use: the value and threshold (raw and humanised),
/// every label an alert can carry, `others` (the largest other holders of
/// the GPU when a `process_oom` alert's OOM was reported) and `top` (who a
/// forecast or a `per = "gpu"` alert is about).
pub const NAMES: &[&str] = &[
    "value",
    "value_human",
    "threshold",
    "threshold_human",
    "alertname",
    "severity",
    "instance",
    "uuid",
    "gpu",
    "model",
    "pid",
    "comm",
    "user",
    "container_id",
    "pod_uid",
    "unit",
    "job",
    "holder",
    "group_by",
    "group",
    "others",
    "xid",
    "top",
];

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Var(String),
}

/// Why a template does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("`{{{{` without `}}}}` in {0:?}")]
    Unclosed(String),
    #[error("unknown placeholder `{{{{ {0} }}}}`; known: {known}", known = NAMES.join(", "))]
    Unknown(String),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template(Vec<Part>);

impl Template {
    /// Parses `text`.
    ///
    /// # Errors
    /// An unclosed `{{`, an empty placeholder, or a name not in [`NAMES`].
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| TemplateError::Unclosed(text.to_owned()))?;
            let name = after[..close]
                .trim()
                .trim_start_matches('.')
                .trim_start_matches("$labels.");
            if !NAMES.contains(&name) {
                return Err(TemplateError::Unknown(name.to_owned()));
            }
            parts.push(Part::Var(name.to_string()));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Template(parts))
    }

    /// Plain text, with no placeholders.
    pub fn text(text: String) -> Template {
        Template(vec![Part::Text(text)])
    }

    /// Appends the text to `out`, with `var` appending each placeholder's
    /// value: no map of every variable is built per render.
    pub fn render_with(&self, out: &mut String, mut var: impl FnMut(&str, &mut String)) {
        for p in &self.0 {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => var(v, out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    impl Template {
        /// Fills the placeholders; a name with no value renders empty.
        fn render(&self, vars: &BTreeMap<&str, String>) -> String {
            let mut out = String::new();
            self.render_with(&mut out, |name, out| {
                out.push_str(vars.get(name).map(String::as_str).unwrap_or(""));
            });
            out
        }
    }

    #[test]
    fn parse_and_render() {
        let t = Template::parse("GPU {{ gpu }} at {{value_human}} (limit {{ $labels.user }})").expect("valid");
        let vars = BTreeMap::from([("gpu", "3".to_string()), ("value_human", "91%".to_string())]);
        assert_eq!(t.render(&vars), "GPU 3 at 91% (limit )");
    }

    #[test]
    fn errors() {
        let err = |t: &str| Template::parse(t).map(|_| ()).unwrap_err().to_string();
        assert!(err("{{ value").contains("without"));
        assert!(err("{{ nope }}").contains("unknown placeholder `{{ nope }}`"));
        assert!(Template::parse("{{ }}").is_err());
        assert_eq!(
            Template::parse("plain").map(|t| t.render(&BTreeMap::new())),
            Ok("plain".into())
        );
    }
}
