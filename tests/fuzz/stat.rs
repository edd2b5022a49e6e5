//! The /proc parsers of `attribution`: `parse_stat` (`/proc/<pid>/stat`),
//! `parse_status_uid` (`/proc/<pid>/status`) and `parse_btime`
//! (`/proc/stat`). These files race with process exit and a comm is any 15
//! bytes a process chose, so every parser takes anything. Besides "no
//! panic, no hang", a well-formed stat line with any comm parses back to
//! exactly what was written.

use gpumemd::collect::attribution::{ProcState, StatError, StatFields, parse_btime, parse_stat, parse_status_uid};
use proptest::prelude::*;

use super::mutate;
use crate::{assert_one_line, bounded, cases, corpus};

const DICT: &[&str] = &[
    "(",
    ")",
    ") ",
    " ",
    "\n",
    "\0",
    "4242",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "R",
    "S",
    "Z",
    "D",
    "python3",
    "Uid:",
    "Uid:\t",
    "\t",
    "btime ",
    "btime",
    "1700000000",
    "cpu ",
];

/// All three parsers on the same bytes.
fn check(bytes: Vec<u8>) -> Result<StatFields, StatError> {
    let text = String::from_utf8_lossy(&bytes);
    let _ = parse_status_uid(&text);
    let _ = parse_btime(&text);
    let r = parse_stat(&bytes);
    if let Err(StatError::Malformed(detail)) = &r {
        assert_one_line("stat", detail);
    }
    r
}

fn run(bytes: Vec<u8>) -> Result<StatFields, StatError> {
    bounded("stat", bytes, check)
}

/// A stat line as the kernel prints it (fs/proc/array.c), 52 fields.
fn stat_line(pid: u32, comm: &str, state: char, ppid: u32, flags: u64, start_ticks: u64, filler: i64) -> String {
    let mut fields: Vec<String> = vec![state.to_string(), ppid.to_string()];
    // Fields 5..=21 (flags is 9), then starttime (22), then 23..=52.
    fields.extend((5..=21).map(|i| match i {
        9 => flags.to_string(),
        _ => filler.wrapping_mul(i).to_string(),
    }));
    fields.push(start_ticks.to_string());
    fields.extend((23..=52).map(|i| (filler.wrapping_add(i)).unsigned_abs().to_string()));
    format!("{pid} ({comm}) {}\n", fields.join(" "))
}

#[test]
fn every_seed_is_read() {
    for s in corpus("stat", &[]) {
        let r = run(s.bytes.clone());
        let text = s.text();
        if s.name.contains("pid-stat-empty") {
            assert_eq!(r, Err(StatError::Empty), "{}", s.name);
        } else if s.name.contains("pid-stat-") {
            assert!(r.is_ok(), "seed {}: {r:?}", s.name);
        } else if s.name.contains("status-") {
            assert!(parse_status_uid(&text).is_some(), "seed {} has a Uid line", s.name);
        } else if s.name.ends_with("proc-stat") {
            assert!(parse_btime(&text).is_some(), "seed {} has btime", s.name);
        }
    }
}

proptest! {
    #![proptest_config(cases(1024))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = run(bytes);
    }

    #[test]
    fn stat_tokens(text in mutate::soup(DICT, 80)) {
        let _ = run(text.into_bytes());
    }

    #[test]
    fn mutated_seeds(seed in any::<usize>(), edits in mutate::edits(12)) {
        let seeds = corpus("stat", &[]);
        let s = &seeds[seed % seeds.len()];
        let _ = run(mutate::apply(&s.bytes, &edits, DICT));
    }

    #[test]
    fn any_comm_round_trips(
        pid in any::<u32>(),
        comm in any::<String>(),
        // The kernel prints one letter; ')' after comm would end the comm
        // there, which the parser rightly assumes the kernel never does.
        state in any::<char>().prop_filter("one field", |c| !c.is_ascii_whitespace() && *c != ')'),
        ppid in any::<u32>(),
        flags in any::<u64>(),
        start_ticks in any::<u64>(),
        filler in any::<i64>(),
    ) {
        let line = stat_line(pid, &comm, state, ppid, flags, start_ticks, filler);
        let got = run(line.clone().into_bytes()).map(|f| (f.comm, f.state, f.ppid, f.flags, f.start_ticks));
        prop_assert_eq!(
            got,
            Ok((comm, ProcState::from_code(state), ppid, flags, start_ticks)),
            "line {:?}", line
        );
    }

    #[test]
    fn uid_and_btime_round_trip(
        uid in any::<u32>(),
        btime in any::<u64>(),
        // Another status line; never a second "Uid:", which would come first.
        junk in "[A-Z][a-z]{1,7}:\t[ -~]{0,20}".prop_filter("not Uid", |j| !j.starts_with("Uid:")),
    ) {
        let status = format!("Name:\tx\n{junk}\nUid:\t{uid}\t{uid}\t0\t0\nGid:\t0\n");
        prop_assert_eq!(parse_status_uid(&status), Some(uid));
        let stat = format!("cpu  1 2 3\n{junk}\nbtime {btime}\nprocesses 5\n");
        prop_assert_eq!(parse_btime(&stat), Some(btime));
    }
}
