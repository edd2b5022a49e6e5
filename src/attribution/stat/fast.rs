//! The kernel's own `stat` layout, parsed in one pass: after the comm, one
//! space before each field, the state one ASCII letter, the numbers used
//! plain digits. Anything else (a tab, two spaces, a sign, an overflow, a
//! short line) is left to the general parser in `stat.rs`, which for every
//! line accepted here gives the same fields (the test below holds them to
//! it).
//!
//! Owns: that fast path only. Must not: reject what the general parser
//! accepts (it only declines), or panic on any input.
//!
//! Why: stat is parsed for every GPU process every poll, and splitting the
//! line and `str::parse` of each number used was 11 % of a 64 x 1000 poll
//! (issue 21).

use super::{FLAGS_INDEX, ProcState, STARTTIME_INDEX};

/// State, ppid, flags and starttime from the fields after the comm as the
/// kernel prints them, in one pass that stops at starttime; `None` for
/// anything else. Eight bytes at a time: each word gives a mask of its
/// spaces and one of its control bytes without a branch per byte, and the
/// loop visits the spaces only. (`memchr` per field, round 7, was 19 % of a
/// 64 x 1000 `Pipeline::build`: twenty searches of a few bytes each, each
/// paying a SIMD search's set-up; a byte loop mispredicts at every space.)
pub(super) fn fields(after: &[u8]) -> Option<(ProcState, u32, u64, u64)> {
    let [b' ', state, b' ', rest @ ..] = after else {
        return None;
    };
    if !state.is_ascii() || state.is_ascii_whitespace() {
        return None;
    }
    let (mut ppid, mut flags) = (0, 0);
    // Field `index` starts at `rest[at]` (the state is index 0); each one
    // before starttime ends at exactly one space.
    let (mut index, mut at) = (1, 0);
    let mut base = 0;
    while index < STARTTIME_INDEX {
        let word = word_at(rest, base)?;
        let mut spaces = marked(word ^ (ONES * u64::from(b' ')), LOW7);
        let mut control = marked(word, 0x6060_6060_6060_6060);
        while spaces != 0 {
            let offset = spaces.trailing_zeros() as usize / 8;
            let end = base + offset;
            let field = &rest[at..end];
            match index {
                1 => ppid = u32::try_from(all_digits(field)?).ok()?,
                FLAGS_INDEX => flags = all_digits(field)?,
                _ if field.is_empty() => return None,
                _ => {}
            }
            at = end + 1;
            index += 1;
            spaces &= spaces - 1;
            if index == STARTTIME_INDEX {
                // Only the bytes before starttime are checked here.
                control &= (1u64 << (8 * offset)).wrapping_sub(1);
                break;
            }
        }
        // A tab, newline or other control byte inside a field: the general
        // parser splits there, so decline. (Spaces were the separators.)
        if control != 0 {
            return None;
        }
        base += 8;
    }
    let (start, end) = digits(rest, at)?;
    // The last one used may end the line or be followed by any whitespace,
    // as a split would see it.
    if rest.get(end).is_some_and(|b| !b.is_ascii_whitespace()) {
        return None;
    }
    Some((ProcState::from_code(char::from(*state)), ppid, flags, start))
}

const ONES: u64 = 0x0101_0101_0101_0101;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The eight bytes of `bytes` from `at` as a little-endian word, the part
/// past the end read as `x` (neither a space nor a control byte); `None`
/// once `at` is past the end.
fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    let tail = bytes.get(at..).filter(|t| !t.is_empty())?;
    // A whole word is one load; only the last, short one is copied (a copy
    // of a variable length is a call to `memcpy`).
    if let Some(whole) = tail.first_chunk::<8>() {
        return Some(u64::from_le_bytes(*whole));
    }
    let mut word = [b'x'; 8];
    let n = tail.len().min(8);
    word[..n].copy_from_slice(&tail[..n]);
    Some(u64::from_le_bytes(word))
}

/// The top bit of each byte of `word` below `0x80 - add` (so `LOW7`: the
/// zero bytes; `0x60` in each byte: those below 0x20), exactly: the low
/// seven bits plus `add` stay within a byte, so nothing carries into the
/// next one.
fn marked(word: u64, add: u64) -> u64 {
    !(((word & LOW7) + add) | word | LOW7)
}

/// A field that is a non-empty run of ASCII digits, as a u64.
fn all_digits(field: &[u8]) -> Option<u64> {
    match digits(field, 0)? {
        (n, end) if end == field.len() => Some(n),
        _ => None,
    }
}

/// A non-empty run of ASCII digits at `at` as a u64, and where it ends.
fn digits(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut n: u64 = 0;
    let mut end = at;
    while let Some(d) = bytes.get(end).filter(|b| b.is_ascii_digit()) {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        end += 1;
    }
    (end > at).then_some((n, end))
}

#[cfg(test)]
mod tests {
    use super::super::fields_general;
    use super::*;

    /// The fields after the comm of a stat line of Linux 6.x.
    const KERNEL: &str = " S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 123456 1000000 500 \
                          18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";

    #[test]
    fn the_kernel_layout_is_read_in_one_pass() {
        assert_eq!(
            fields(KERNEL.as_bytes()),
            Some((ProcState::Sleeping, 1, 4_194_560, 123_456))
        );
        // Ends right after starttime, or with a newline after it.
        let short = &KERNEL[..KERNEL.find("123456").unwrap_or(0) + 6];
        assert_eq!(fields(short.as_bytes()).map(|f| f.3), Some(123_456));
        assert_eq!(fields(format!("{short}\n").as_bytes()).map(|f| f.3), Some(123_456));
    }

    /// Every variant the fast path accepts, the general parser reads the
    /// same; what it declines, the general parser still judges.
    #[test]
    fn agrees_with_the_general_parser_or_declines() {
        let base = KERNEL.to_string();
        let mut cases = vec![
            base.clone(),
            base.replacen(' ', "  ", 2),
            base.replacen(' ', "\t", 3),
            base.replace(" 123456 ", " +123456 "),
            base.replace(" 123456 ", " 99999999999999999999999 "),
            base.replace(" 123456 ", " 123456x "),
            base.replace(" 123456 ", " 0123456\t"),
            base.replace(" 4194560 ", " -4194560 "),
            base.replace(" 1 4242 ", " 4294967296 4242 "),
            base.replace(" 1 4242 ", " 4294967295 4242 "),
            base.replace(" S ", " \u{e9} "),
            base.replace(" S ", " SS "),
            base.replace(" 0 -1 ", " 0 \u{1}1 "),
            base.replace(" 0 -1 ", " 0 \u{e9}1 "),
            base[..base.find("123456").unwrap_or(0)].to_string(),
            base.trim_start().to_string(),
            String::new(),
            " S".into(),
            " S ".into(),
        ];
        // Cut anywhere, and a byte changed anywhere.
        for at in 0..base.len() {
            cases.push(base[..at].to_string());
            for b in [b' ', b'\t', b'0', b'a', 0] {
                let mut bytes = base.clone().into_bytes();
                bytes[at] = b;
                cases.push(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
        let mut accepted = 0;
        for case in &cases {
            if let Some(fast) = fields(case.as_bytes()) {
                accepted += 1;
                assert_eq!(fields_general(case.as_bytes()), Ok(fast), "{case:?}");
            }
        }
        assert!(
            accepted > 100 && accepted < cases.len(),
            "{accepted} of {}",
            cases.len()
        );
    }
}
