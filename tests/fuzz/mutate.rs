//! The input generators shared by the targets: text made of a format's own
//! tokens, byte and line edits of a seed (what AFL-style fuzzers do), and
//! tree edits of a parsed document (delete a key, swap two values, change a
//! value's type, set an odd value, add a key). Trees are `serde_json::Value`
//! so one implementation serves TOML and YAML alike.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};

/// Text of `0..max` pieces, each a token of `dict` or a short arbitrary
/// string: mostly the format's own syntax, so parsers get past their first
/// byte, with arbitrary Unicode mixed in.
pub fn soup(dict: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        6 => select(dict).prop_map(str::to_string),
        1 => any::<String>().prop_map(|s| s.chars().take(8).collect::<String>()),
        1 => Just("\n".to_string()),
    ];
    proptest::collection::vec(piece, 0..max).prop_map(|v| v.concat())
}

/// One edit of a byte string; positions are taken modulo the length.
#[derive(Debug, Clone)]
pub enum Edit {
    SetByte(usize, u8),
    /// Inserts a dictionary token (by index, modulo the dictionary).
    InsertToken(usize, usize),
    InsertBytes(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    DupLine(usize),
    DropLine(usize),
    SwapLines(usize, usize),
    /// Removes a leading "# " (brings commented-out defaults to life).
    Uncomment(usize),
}

pub fn edits(max: usize) -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::SetByte(p, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(p, t)| Edit::InsertToken(p, t)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..6)).prop_map(|(p, b)| Edit::InsertBytes(p, b)),
        (any::<usize>(), 1..16usize).prop_map(|(p, n)| Edit::Delete(p, n)),
        any::<usize>().prop_map(Edit::Truncate),
        any::<usize>().prop_map(Edit::DupLine),
        any::<usize>().prop_map(Edit::DropLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        any::<usize>().prop_map(Edit::Uncomment),
    ];
    proptest::collection::vec(edit, 1..max)
}

/// Applies `edits` to `seed` in order.
pub fn apply(seed: &[u8], edits: &[Edit], dict: &[&str]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for e in edits {
        let at = |p: usize, len: usize| if len == 0 { 0 } else { p % (len + 1) };
        match e {
            Edit::SetByte(p, v) if !b.is_empty() => {
                let i = p % b.len();
                b[i] = *v;
            }
            Edit::SetByte(..) => b.push(0),
            Edit::InsertToken(p, t) => {
                let i = at(*p, b.len());
                let tok = dict.get(t % dict.len().max(1)).copied().unwrap_or("");
                b.splice(i..i, tok.bytes());
            }
            Edit::InsertBytes(p, bytes) => {
                let i = at(*p, b.len());
                b.splice(i..i, bytes.iter().copied());
            }
            Edit::Delete(p, n) => {
                let i = at(*p, b.len());
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Edit::Truncate(p) => {
                let i = at(*p, b.len());
                b.truncate(i);
            }
            Edit::DupLine(p) | Edit::DropLine(p) | Edit::Uncomment(p) => {
                let mut lines = split_lines(&b);
                if lines.is_empty() {
                    continue;
                }
                let i = p % lines.len();
                match e {
                    Edit::DupLine(_) => lines.insert(i, lines[i].clone()),
                    Edit::DropLine(_) => {
                        lines.remove(i);
                    }
                    _ => {
                        // The nearest commented line at or after i.
                        if let Some(j) = (0..lines.len())
                            .map(|k| (i + k) % lines.len())
                            .find(|&j| lines[j].starts_with(b"# "))
                        {
                            lines[j].drain(..2);
                        }
                    }
                }
                b = lines.concat();
            }
            Edit::SwapLines(x, y) => {
                let mut lines = split_lines(&b);
                if lines.is_empty() {
                    continue;
                }
                let n = lines.len();
                lines.swap(x % n, y % n);
                b = lines.concat();
            }
        }
    }
    b
}

/// Lines with their terminators, so concatenating them gives `b` back.
fn split_lines(b: &[u8]) -> Vec<Vec<u8>> {
    b.split_inclusive(|&c| c == b'\n').map(<[u8]>::to_vec).collect()
}

/// One step of a path into a tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// One edit of a tree; node and pool numbers are taken modulo their count.
#[derive(Debug, Clone)]
pub enum TreeEdit {
    Delete(usize),
    Swap(usize, usize),
    /// Replaces a node with an odd value from [`pool`].
    Set(usize, usize),
    /// Changes a node's type, keeping what can be kept of its value.
    Retype(usize),
    /// Adds key `dict[k]` with `pool[v]` to a table (the nearest enclosing one).
    AddKey(usize, usize, usize),
    /// Appends a copy of an array's element (a second `[[rule]]`, ...).
    Duplicate(usize),
}

pub fn tree_edits(max: usize) -> impl Strategy<Value = Vec<TreeEdit>> {
    let edit = prop_oneof![
        3 => any::<usize>().prop_map(TreeEdit::Delete),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TreeEdit::Swap(a, b)),
        3 => (any::<usize>(), any::<usize>()).prop_map(|(a, v)| TreeEdit::Set(a, v)),
        3 => any::<usize>().prop_map(TreeEdit::Retype),
        2 => (any::<usize>(), any::<usize>(), any::<usize>()).prop_map(|(a, k, v)| TreeEdit::AddKey(a, k, v)),
        1 => any::<usize>().prop_map(TreeEdit::Duplicate),
    ];
    proptest::collection::vec(edit, 1..max)
}

/// Values that break naive parsers: boundaries, wrong units, odd text.
pub fn pool() -> Vec<Value> {
    let mut deep = json!(1);
    for _ in 0..24 {
        deep = json!([deep]);
    }
    vec![
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(1),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u32::MAX),
        json!(1.5),
        json!(-0.0),
        json!(1e300),
        json!(""),
        json!(" "),
        json!("0"),
        json!("-1"),
        json!("0s"),
        json!("-5s"),
        json!("1ns"),
        json!("1y"),
        json!("584942417355y"),
        json!("99999999999999999999h"),
        json!("18446744073709551616"),
        json!("1.5"),
        json!("NaN"),
        json!("inf"),
        json!("90%"),
        json!("250%"),
        json!("-3%"),
        json!("1ZiB"),
        json!("16EiB"),
        json!("-1GiB"),
        json!("0B"),
        json!("per-process"),
        json!("grouped"),
        json!("user"),
        json!("terminate"),
        json!("zombie"),
        json!(":0"),
        json!("[::1]:99999"),
        json!("host:"),
        json!("ü\u{0}\u{1F600}"),
        json!("a\nb\r\nc"),
        json!("{{ value_human }} {{ nope }} {{"),
        json!("*"),
        json!("x".repeat(300)),
        json!([]),
        json!([1, "a", true]),
        json!(["user", "user", "pod"]),
        json!({}),
        json!({"k": "v"}),
        json!({"user": ["alice"], "gpu": [0, 99]}),
        deep,
    ]
}

/// Every node below the root, as paths.
pub fn paths(v: &Value) -> Vec<Vec<Seg>> {
    fn walk(v: &Value, here: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    here.push(Seg::Key(k.clone()));
                    out.push(here.clone());
                    walk(c, here, out);
                    here.pop();
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    here.push(Seg::Index(i));
                    out.push(here.clone());
                    walk(c, here, out);
                    here.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn get_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, seg| match (v, seg) {
        (Value::Object(m), Seg::Key(k)) => m.get_mut(k),
        (Value::Array(a), Seg::Index(i)) => a.get_mut(*i),
        _ => None,
    })
}

fn remove(v: &mut Value, path: &[Seg]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    match (get_mut(v, parent), last) {
        (Some(Value::Object(m)), Seg::Key(k)) => {
            m.remove(k);
        }
        (Some(Value::Array(a)), Seg::Index(i)) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

fn retype(v: &Value) -> Value {
    match v {
        Value::String(s) => s
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| s.parse::<f64>().map(Value::from))
            .unwrap_or(Value::Bool(!s.is_empty())),
        Value::Number(n) => Value::String(n.to_string()),
        Value::Bool(b) => Value::String(b.to_string()),
        Value::Array(a) => a.first().cloned().unwrap_or(Value::Array(vec![])),
        Value::Object(m) => Value::Array(m.values().cloned().collect()),
        Value::Null => Value::String(String::new()),
    }
}

/// Applies `edits` to `root` in order; paths are recomputed after each.
pub fn apply_tree(root: &mut Value, edits: &[TreeEdit], dict: &[&str]) {
    let pool = pool();
    for e in edits {
        let all = paths(root);
        let node = |i: usize| all.get(i % all.len().max(1)).cloned().unwrap_or_default();
        match e {
            TreeEdit::Delete(i) => remove(root, &node(*i)),
            TreeEdit::Swap(a, b) => {
                let (pa, pb) = (node(*a), node(*b));
                // Swapping a node with its own ancestor has no meaning.
                if pa.starts_with(&pb) || pb.starts_with(&pa) {
                    continue;
                }
                let (Some(va), Some(vb)) = (
                    get_mut(root, &pa).map(|v| v.clone()),
                    get_mut(root, &pb).map(|v| v.clone()),
                ) else {
                    continue;
                };
                if let Some(x) = get_mut(root, &pa) {
                    *x = vb;
                }
                if let Some(x) = get_mut(root, &pb) {
                    *x = va;
                }
            }
            TreeEdit::Set(i, v) => {
                if let Some(x) = get_mut(root, &node(*i)) {
                    *x = pool[v % pool.len()].clone();
                }
            }
            TreeEdit::Retype(i) => {
                if let Some(x) = get_mut(root, &node(*i)) {
                    *x = retype(x);
                }
            }
            TreeEdit::AddKey(i, k, v) => {
                let mut p = node(*i);
                // The nearest table at or above the node (the root at last).
                loop {
                    if let Some(Value::Object(m)) = get_mut(root, &p) {
                        let key = dict.get(k % dict.len().max(1)).copied().unwrap_or("x");
                        m.insert(key.to_string(), pool[v % pool.len()].clone());
                        break;
                    }
                    if p.pop().is_none() {
                        break;
                    }
                }
            }
            TreeEdit::Duplicate(i) => {
                let p = node(*i);
                if let Some(Value::Array(a)) = get_mut(root, &p)
                    && let Some(first) = a.first().cloned()
                {
                    a.push(first);
                }
            }
        }
    }
    if !root.is_object() {
        *root = Value::Object(Map::new());
    }
}
