//! Text tables whose columns are as wide as their widest cell: the
//! layout shared by the snapshot table and the `--watch` screen. Owns
//! widths, alignment and painting cells; it must not know what a row means.

use super::{BOLD, Paint};

/// How a column lines its cells up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One cell: its text and an SGR code to paint it with (when colour is on).
#[derive(Clone, Default)]
pub struct Cell {
    pub text: String,
    pub sgr: Option<&'static str>,
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell { text, sgr: None }
    }
}

impl Cell {
    pub fn painted(text: String, sgr: Option<&'static str>) -> Self {
        Cell { text, sgr }
    }
}

/// Lines of a table whose columns are as wide as their widest cell (header
/// included), two blanks apart, each line without trailing blanks: the
/// header first, then one line per row. Only the text is painted, never
/// the padding, so colour does not change the alignment.
pub fn grid(heads: &[(&str, Align)], rows: &[Vec<Cell>], color: bool) -> Vec<String> {
    let paint = Paint(color);
    let width = |i: usize| {
        rows.iter()
            .filter_map(|r| r.get(i))
            .map(|c| c.text.chars().count())
            .chain(std::iter::once(heads[i].0.chars().count()))
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..heads.len()).map(width).collect();
    let line = |cells: &mut dyn Iterator<Item = (String, usize, Option<&'static str>)>| {
        let mut l = String::new();
        for (i, (text, len, sgr)) in cells.enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = " ".repeat(widths[i].saturating_sub(len));
            let shown = match sgr {
                Some(code) => paint.wrap(code, &text),
                None => text,
            };
            match heads[i].1 {
                Align::Left => l.push_str(&(shown + &pad)),
                Align::Right => l.push_str(&(pad + &shown)),
            }
        }
        l.trim_end_matches(' ').to_string()
    };
    let mut out = Vec::with_capacity(rows.len() + 1);
    out.push(line(
        &mut heads
            .iter()
            .map(|(h, _)| (h.to_string(), h.chars().count(), Some(BOLD))),
    ));
    for r in rows {
        out.push(line(
            &mut r.iter().map(|c| (c.text.clone(), c.text.chars().count(), c.sgr)),
        ));
    }
    out
}
