//! Pure parsers for `/proc/<pid>/stat` (for attribution and the daemon's
//! own `process_*` metrics), the `Uid:` line of `/proc/<pid>/status` and
//! `btime` of `/proc/stat`.
//!
//! Owns: turning file text into numbers. Must not: touch the filesystem or
//! panic on any input (these files race with process exit and fixtures can
//! hold anything).

use std::borrow::Cow;

use super::ProcState;

/// The fields of `/proc/<pid>/stat` attribution and the `process_*`
/// metrics need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFields {
    pub comm: String,
    pub state: ProcState,
    pub ppid: u32,
    /// Field 9 (PF_* bits): reclaim tells kernel threads by PF_KTHREAD.
    pub flags: u64,
    pub start_ticks: u64,
    /// Fields 14 and 15: user and system CPU time, in clock ticks. These
    /// and the two below are `None` when missing or not numbers:
    /// attribution needs none of them.
    pub utime: Option<u64>,
    pub stime: Option<u64>,
    /// Field 23: virtual memory size, in bytes.
    pub vsize: Option<u64>,
    /// Field 24: resident set size, in pages.
    pub rss_pages: Option<u64>,
}

/// Why a stat line was rejected; the caller wraps it into `ProcError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatError {
    /// Empty file: the kernel gives this for a task that is being torn down.
    Empty,
    Malformed(String),
}

/// Index of starttime (field 22) among the fields after the comm, where the
/// state (field 3) is index 0.
const STARTTIME_INDEX: usize = 22 - 3;
/// Index of flags (field 9), likewise.
const FLAGS_INDEX: usize = 9 - 3;
/// Index of rss (field 24), the last field parsed.
const RSS_INDEX: usize = 24 - 3;

/// Parses `pid (comm) S ppid ... starttime ...`.
///
/// comm can contain spaces, parens and even ")" followed by text that looks
/// like fields, so it spans from the first "(" to the LAST ")": the kernel
/// prints nothing after comm that contains ")".
pub fn parse_stat(bytes: &[u8]) -> Result<StatFields, StatError> {
    let (fields, comm) = parse_stat_ref(bytes)?;
    Ok(StatFields {
        comm: comm.into_owned(),
        ..fields
    })
}

/// [`parse_stat`] with the comm left in `bytes` when it is valid UTF-8 (the
/// returned `StatFields::comm` is empty): the poll compares it with the
/// cached one instead of allocating a copy per process per poll.
///
/// Works on bytes: only the comm can be anything other than ASCII, so only
/// the comm is checked as UTF-8.
pub fn parse_stat_ref(bytes: &[u8]) -> Result<(StatFields, Cow<'_, str>), StatError> {
    let end = bytes.iter().rposition(|b| !matches!(b, b'\n' | 0)).map_or(0, |i| i + 1);
    let text = &bytes[..end];
    if text.iter().all(u8::is_ascii_whitespace) {
        return Err(StatError::Empty);
    }
    let open = memchr::memchr(b'(', text).ok_or_else(|| StatError::Malformed("no '(' before comm".into()))?;
    let close = memchr::memrchr(b')', text)
        .filter(|&close| close > open)
        .ok_or_else(|| StatError::Malformed("no ')' after comm".into()))?;
    let raw = &text[open + 1..close];
    let comm = std::str::from_utf8(raw).map_or_else(|_| String::from_utf8_lossy(raw), Cow::Borrowed);
    Ok((fields(&text[close + 1..])?, comm))
}

/// The fields after the comm, separated by any run of whitespace (the
/// comm left empty).
fn fields(after: &[u8]) -> Result<StatFields, StatError> {
    // Only the fields up to rss are kept, without allocating. A plain loop,
    // not `split().filter()`: this runs for every listed process every poll
    // and the iterator chain was most of its cost.
    let mut rest: [&[u8]; RSS_INDEX + 1] = [b""; RSS_INDEX + 1];
    let mut left = after;
    for slot in &mut rest {
        let Some(start) = left.iter().position(|b| !b.is_ascii_whitespace()) else {
            break;
        };
        let field = &left[start..];
        let len = field.iter().position(u8::is_ascii_whitespace).unwrap_or(field.len());
        *slot = &field[..len];
        left = &field[len..];
    }
    let state = match rest[0] {
        [c] => ProcState::from_code(char::from(*c)),
        // A non-ASCII state is one character only if it decodes to one.
        field => {
            let text = String::from_utf8_lossy(field);
            let mut chars = text.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => ProcState::from_code(c),
                _ => return Err(StatError::Malformed("state is not one character".into())),
            }
        }
    };
    let ppid = number(&rest, 1, "ppid")?;
    // starttime first: a short line is reported as missing it, the field
    // attribution cannot do without.
    let start_ticks = number(&rest, STARTTIME_INDEX, "starttime")?;
    let flags = number(&rest, FLAGS_INDEX, "flags")?;
    let optional = |field: usize| number(&rest, field - 3, "").ok();
    Ok(StatFields {
        comm: String::new(),
        state,
        ppid,
        flags,
        start_ticks,
        utime: optional(14),
        stime: optional(15),
        vsize: optional(23),
        rss_pages: optional(24),
    })
}

/// Field `index` as an unsigned decimal: the kernel prints these fields
/// as plain digits, so anything else (a sign included) is malformed.
fn number<T: TryFrom<u64>>(fields: &[&[u8]], index: usize, name: &str) -> Result<T, StatError> {
    let raw = fields
        .get(index)
        .filter(|raw| !raw.is_empty())
        .ok_or_else(|| StatError::Malformed(format!("missing {name}")))?;
    raw.iter()
        .try_fold(0u64, |n, &b| {
            let digit = b.wrapping_sub(b'0');
            (digit < 10).then_some(())?;
            n.checked_mul(10)?.checked_add(u64::from(digit))
        })
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| StatError::Malformed(format!("{name} is not a number: {:?}", String::from_utf8_lossy(raw))))
}

/// Real uid: the first of the four numbers on the `Uid:` line.
pub fn parse_status_uid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_ascii_whitespace().next())
        .and_then(|uid| uid.parse().ok())
}

/// `btime <seconds>` from `/proc/stat`.
pub fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|rest| rest.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line of a sleeping python with starttime 123456.
    fn line(comm: &str, state: &str) -> String {
        format!(
            "4242 ({comm}) {state} 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 \
             20 0 12 0 123456 1000000 500 18446744073709551615 1 1 0 0 0 0 0 \
             0 0 0 0 0 0 17 3 0 0 0 0 0\n"
        )
    }

    #[test]
    fn parses_plain_line() {
        let s = parse_stat(line("python3", "S").as_bytes()).expect("valid line");
        assert_eq!(s.comm, "python3");
        assert_eq!(s.state, ProcState::Sleeping);
        assert_eq!(s.ppid, 1);
        assert_eq!(s.flags, 4194560);
        assert_eq!(s.start_ticks, 123456);
        assert_eq!(
            (s.utime, s.stime, s.vsize, s.rss_pages),
            (Some(5), Some(3), Some(1000000), Some(500))
        );
    }

    #[test]
    fn comm_with_spaces_and_parens() {
        for comm in ["my prog", "a) b (c", "x) R 1 2 3", "(", ")", "", ") Z 9 ("] {
            let s = parse_stat(line(comm, "R").as_bytes()).expect(comm);
            assert_eq!(s.comm, comm);
            assert_eq!(s.state, ProcState::Running);
            assert_eq!(s.start_ticks, 123456, "{comm}");
        }
    }

    #[test]
    fn comm_with_invalid_utf8_is_lossy() {
        let mut bytes = b"7 (a\xffb) Z 1".to_vec();
        bytes.extend_from_slice(" 0".repeat(30).as_bytes());
        let s = parse_stat(&bytes).expect("lossy");
        assert_eq!(s.comm, "a\u{fffd}b");
        assert_eq!(s.state, ProcState::Zombie);
    }

    #[test]
    fn empty_is_distinguished() {
        for input in ["", "\n", "   ", "\0"] {
            assert_eq!(parse_stat(input.as_bytes()), Err(StatError::Empty));
        }
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        let full = line("ok", "S");
        let cases: Vec<String> = vec![
            "garbage".into(),
            "1 (x".into(),
            "1 x) S 1".into(),
            ")(".into(),
            "1 (x)".into(),
            "1 (x) SS 1 1 1".into(),
            "1 (x) S".into(),
            "1 (x) S notanumber".into(),
            "1 (x) S 1 2 3".into(),
            "1 (x) S -1".into(),
            full.replace("123456", "-5"),
            full.replace("123456", "+5"),
            full.replace("123456", "99999999999999999999999"),
            full[..full.find("123456").unwrap_or(0)].to_string(),
            "\u{1F600}(\u{1F600}) \u{1F600}".into(),
        ];
        for case in cases {
            assert!(
                matches!(parse_stat(case.as_bytes()), Err(StatError::Malformed(_))),
                "{case:?}"
            );
        }
        // Random-ish byte soup: only "does not panic" matters.
        for seed in 0u32..512 {
            let bytes: Vec<u8> = (0..(seed % 97))
                .map(|i| (seed.wrapping_mul(2_654_435_761).rotate_left(i) % 256) as u8)
                .collect();
            let _ = parse_stat(&bytes);
        }
    }

    #[test]
    fn state_codes() {
        for (code, want) in [
            ("R", "running"),
            ("S", "sleeping"),
            ("D", "disk-sleep"),
            ("Z", "zombie"),
            ("T", "stopped"),
            ("t", "tracing-stop"),
            ("X", "dead"),
            ("I", "idle"),
            ("W", "other"),
        ] {
            let s = parse_stat(line("p", code).as_bytes()).expect(code);
            assert_eq!(s.state.as_str(), want);
        }
        assert_eq!(ProcState::from_code('W'), ProcState::Other('W'));
    }

    #[test]
    fn which_states_hold_as_zombie() {
        // D is how a live CUDA process waits in the driver: only a D that
        // lasted (Stuck, the caller's verdict) is unkillable.
        for (state, exited, unkillable) in [
            (ProcState::Zombie, true, true),
            (ProcState::Dead, true, true),
            (ProcState::Stuck, false, true),
            (ProcState::DiskSleep, false, false),
            (ProcState::Running, false, false),
            (ProcState::Sleeping, false, false),
            (ProcState::Stopped, false, false),
        ] {
            assert_eq!(
                (state.is_exited(), state.is_unkillable()),
                (exited, unkillable),
                "{state:?}"
            );
        }
    }

    #[test]
    fn names_and_codes_round_trip() {
        for code in ['R', 'S', 'D', 'Z', 'T', 't', 'X', 'I'] {
            let s = ProcState::from_code(code);
            assert_eq!(s.code(), code);
            assert_eq!(ProcState::from_name(s.as_str()), Some(s));
        }
        assert_eq!(ProcState::from_name("stuck").map(|s| s.code()), Some('D'));
        assert_eq!(ProcState::from_name("sleepy"), None);
    }

    #[test]
    fn every_named_state_reads_back_from_its_label() {
        // The labels come from the snapshot's state: two attribution states
        // that map to one snapshot state would read back as the same one.
        let named = "RSDZTtXI".chars().map(ProcState::from_code);
        for s in named.chain([ProcState::Stuck]) {
            assert_eq!(ProcState::from_name(s.as_str()), Some(s), "{s:?}");
        }
    }

    #[test]
    fn status_uid() {
        let status = "Name:\tpython\nState:\tS (sleeping)\nUid:\t1000\t1001\t1002\t1003\nGid:\t5\n";
        assert_eq!(parse_status_uid(status), Some(1000));
        assert_eq!(parse_status_uid("Name:\tx\n"), None);
        assert_eq!(parse_status_uid("Uid:\n"), None);
        assert_eq!(parse_status_uid("Uid:\tabc\t1\n"), None);
    }

    #[test]
    fn btime() {
        assert_eq!(
            parse_btime("cpu 1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_btime("cpu 1\n"), None);
        assert_eq!(parse_btime("btime x\n"), None);
    }
}
