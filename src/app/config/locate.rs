//! Where a key is in a config text, from toml's own spans: the line of a
//! dotted key path (`notify.alertmanager.urls[1]`, `rule[2].labels.x`) and
//! the key path at a parser error's offset. Dotted keys, inline tables and
//! arrays of tables are found because toml parsed them, not a line scanner.
//! It must not decide what is valid.

use std::fmt;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A path to a value in the document, printed as `a.b[1].c`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    /// The path of dotted `keys` (no indices).
    pub fn keys(keys: &[&str]) -> Self {
        KeyPath(keys.iter().map(|k| Seg::Key((*k).to_string())).collect())
    }

    pub fn key(mut self, k: &str) -> Self {
        self.0.push(Seg::Key(k.to_string()));
        self
    }

    pub fn index(mut self, i: usize) -> Self {
        self.0.push(Seg::Index(i));
        self
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A config text with its parsed tree of spans.
pub struct Located<'a> {
    text: &'a str,
    root: Spanned<DeTable<'a>>,
}

impl<'a> Located<'a> {
    /// Parses `text`; a text with syntax errors keeps what could be parsed.
    pub fn parse(text: &'a str) -> Self {
        let (root, _errors) = DeTable::parse_recoverable(text);
        Located { text, root }
    }

    /// The 1-based line of `path`'s key (of the element, for an index), if
    /// the text sets it.
    pub fn line_of(&self, path: &KeyPath) -> Option<usize> {
        let mut table = self.root.get_ref();
        let mut value: Option<&Spanned<DeValue<'a>>> = None;
        let mut at = None;
        for seg in &path.0 {
            if let Some(v) = value.take() {
                match (v.get_ref(), seg) {
                    (DeValue::Table(t), Seg::Key(_)) => table = t,
                    (DeValue::Array(a), Seg::Index(i)) => {
                        let e = a.get(*i)?;
                        at = Some(e.span().start);
                        value = Some(e);
                        continue;
                    }
                    _ => return None,
                }
            }
            let Seg::Key(k) = seg else { return None };
            let (key, v) = table.iter().find(|(key, _)| key.get_ref() == k)?;
            at = Some(key.span().start);
            value = Some(v);
        }
        at.map(|offset| line_at(self.text, offset))
    }

    /// The key path whose key or value holds byte `offset` (a parser
    /// error's position); empty when none does.
    pub fn path_at(&self, offset: usize) -> KeyPath {
        find(self.root.get_ref(), offset, &KeyPath::default()).unwrap_or_default()
    }
}

fn find(table: &DeTable<'_>, offset: usize, path: &KeyPath) -> Option<KeyPath> {
    for (key, v) in table.iter() {
        let here = path.clone().key(key.get_ref());
        if key.span().contains(&offset) {
            return Some(here);
        }
        if let Some(p) = find_value(v, offset, &here) {
            return Some(p);
        }
    }
    None
}

fn find_value(v: &Spanned<DeValue<'_>>, offset: usize, here: &KeyPath) -> Option<KeyPath> {
    match v.get_ref() {
        // A table's span may cover only its header: search its keys.
        DeValue::Table(t) => find(t, offset, here),
        DeValue::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, e)| find_value(e, offset, &here.clone().index(i)))
            .or_else(|| v.span().contains(&offset).then(|| here.clone())),
        _ => v.span().contains(&offset).then(|| here.clone()),
    }
}

/// The 1-based line of byte `offset`.
pub fn line_at(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_keys_in_every_toml_form() {
        let text = "[server]\nlisten = \":1\"\n\n[poll]\ninterval = \"1s\"\n\
                    notify.webhook.url = \"x\"\n\
                    [alerting]\nx = { y = 1,\n z = 2 }\n\
                    [[rule]]\nname = \"a\"\n[[rule]]\nname = \"b\"\nlabels.team = \"t\"\n";
        let line = |p: KeyPath| Located::parse(text).line_of(&p);
        assert_eq!(line(KeyPath::keys(&["server", "listen"])), Some(2));
        assert_eq!(line(KeyPath::keys(&["poll", "interval"])), Some(5));
        assert_eq!(line(KeyPath::keys(&["poll", "timeout"])), None);
        // A dotted key (the old line scanner missed these)...
        assert_eq!(line(KeyPath::keys(&["poll", "notify", "webhook", "url"])), Some(6));
        // ...an inline table spread over lines...
        assert_eq!(line(KeyPath::keys(&["alerting", "x", "z"])), Some(9));
        // ...and arrays of tables.
        assert_eq!(line(KeyPath::keys(&["rule"]).index(1).key("name")), Some(13));
        assert_eq!(
            line(KeyPath::keys(&["rule"]).index(1).key("labels").key("team")),
            Some(14)
        );
        assert_eq!(line(KeyPath::keys(&["rule"]).index(2)), None);
    }

    #[test]
    fn paths_at_offsets() {
        let text = "[poll]\ninterval = \"1s\"\n[[rule]]\nname = \"a\"\nlabels = { team = \"t\" }\n";
        let at = |needle: &str| {
            let offset = text.find(needle).expect("in the text");
            Located::parse(text).path_at(offset).to_string()
        };
        assert_eq!(at("interval"), "poll.interval");
        assert_eq!(at("\"1s\""), "poll.interval");
        assert_eq!(at("team"), "rule[0].labels.team");
        assert_eq!(KeyPath::keys(&["a", "b"]).index(2).key("c").to_string(), "a.b[2].c");
    }
}
