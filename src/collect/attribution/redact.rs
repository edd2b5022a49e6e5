//! Cmdline formatting: NUL-separated `/proc/<pid>/cmdline` bytes to one line,
//! secrets redacted, truncated on a char boundary.
//!
//! Owns: what counts as a secret in argv. Must not: read files, or redact
//! `-p` (too common: ports, paths, parallelism). Redaction errs on the side
//! of hiding: a false positive costs a label value, a miss leaks a password
//! into Prometheus.

/// Replaces every secret value.
pub const REDACTED: &str = "<redacted>";

const ELLIPSIS: &str = "…";

/// Joins `args` with single spaces, replacing secret values by `<redacted>`:
/// `--password=x`, `--token x` (the next arg, unless it is itself a flag),
/// `--api-key`, `--secret`, `--access-key` and every flag or `NAME=value`
/// whose name contains "password"/"passwd"/"passphrase" or whose last word
/// (split on `-`, `_`, `.`) is key/token/secret; `Bearer x`; header-style
/// `Authorization: x`; the password of `scheme://user:password@host` and
/// secret-named URL query parameters.
pub fn redact_cmdline(args: &[&str]) -> String {
    redact_args(args).join(" ")
}

/// `/proc/<pid>/cmdline` bytes to a redacted line of at most `max_bytes`
/// (the "…" marking a cut included). Trailing NULs (setproctitle padding)
/// are dropped; invalid UTF-8 is replaced, never an error.
pub fn format_cmdline(raw: &[u8], max_bytes: usize) -> String {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches('\0');
    if text.is_empty() {
        return String::new();
    }
    let args: Vec<&str> = text.split('\0').collect();
    truncate(&redact_cmdline(&args), max_bytes)
}

fn redact_args(args: &[&str]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut redact_next = false;
    for arg in args {
        // A flag after `--token` means `--token` was a switch, not a key/value
        // pair; a password starting with '-' therefore leaks (accepted).
        if std::mem::take(&mut redact_next) && !is_flag(arg) {
            out.push(REDACTED.to_string());
            continue;
        }
        let (text, next) = redact_arg(arg);
        redact_next = next;
        out.push(text);
    }
    out
}

/// One arg; the bool says "the next arg is this one's value".
fn redact_arg(arg: &str) -> (String, bool) {
    if let Some((key, _)) = arg.split_once('=')
        && is_name(key.trim_start_matches('-'))
        && is_secret_name(key)
    {
        return (format!("{key}={REDACTED}"), false);
    }
    if let Some((key, _)) = arg.split_once(':') {
        let key = key.trim();
        if is_name(key) && (key.eq_ignore_ascii_case("authorization") || is_secret_name(key)) {
            return (format!("{key}: {REDACTED}"), false);
        }
    }
    if arg.contains(char::is_whitespace) {
        // setproctitle() and `sh -c "..."` put a whole command line into one
        // arg: redact its words as if they were args.
        let words: Vec<&str> = arg.split_whitespace().collect();
        return (redact_args(&words).join(" "), false);
    }
    if (is_flag(arg) && is_secret_name(arg)) || arg.eq_ignore_ascii_case("bearer") {
        return (arg.to_string(), true);
    }
    (redact_urls(arg), false)
}

/// `-x`-style arg with a name of two or more characters (so never `-p`).
fn is_flag(arg: &str) -> bool {
    let name = arg.trim_start_matches('-');
    name.len() != arg.len() && name.len() >= 2 && is_name(name)
}

/// Identifier-like: env var, flag, Java property or header name.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn is_secret_name(key: &str) -> bool {
    let lower = key.trim_start_matches('-').to_ascii_lowercase();
    if ["password", "passwd", "passphrase"]
        .iter()
        .any(|word| lower.contains(word))
    {
        return true;
    }
    // Last word only: `--max-tokens`, `--tokenizer`, `--key-file` and
    // `--token-file` are not secrets; `--hf-token` and `AWS_SECRET_ACCESS_KEY` are.
    let last = lower.rsplit(['-', '_', '.']).next().unwrap_or_default();
    matches!(
        last,
        "token" | "secret" | "key" | "apikey" | "accesskey" | "secretkey" | "credentials"
    )
}

/// Redacts `user:PASSWORD@` and secret query parameters of every `://` URL.
fn redact_urls(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(scheme_end) = rest.find("://") {
        let authority_start = scheme_end + 3;
        out.push_str(&rest[..authority_start]);
        rest = &rest[authority_start..];
        let authority_end = rest.find(['/', '?', '#', ',']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        // `user:password@host` loses the password; `user@host` is kept whole.
        let (userinfo, host) = authority.split_at(authority.rfind('@').unwrap_or(0));
        match userinfo.split_once(':') {
            Some((user, _)) => out.push_str(&format!("{user}:{REDACTED}{host}")),
            None => out.push_str(authority),
        }
        rest = &rest[authority_end..];
        let path_end = rest.find("://").map_or(rest.len(), |next| {
            // Stop before the next URL's scheme, e.g. "a://x,b://y".
            rest[..next].rfind([',', ';']).map_or(0, |sep| sep + 1)
        });
        out.push_str(&redact_query(&rest[..path_end]));
        rest = &rest[path_end..];
    }
    out.push_str(rest);
    out
}

/// `/path?token=x&b=1#frag` -> `/path?token=<redacted>&b=1#frag`.
fn redact_query(path: &str) -> String {
    let Some(q) = path.find('?') else {
        return path.to_string();
    };
    let fragment = path[q..].find('#').map_or(path.len(), |at| q + at);
    let params: Vec<String> = path[q + 1..fragment]
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((k, _)) if is_secret_name(k) => format!("{k}={REDACTED}"),
            _ => param.to_string(),
        })
        .collect();
    format!("{}?{}{}", &path[..q], params.join("&"), &path[fragment..])
}

/// At most `max_bytes`, cut on a char boundary, "…" included when cut.
pub(crate) fn truncate(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        return s.to_string();
    }
    let marker = if max_bytes >= ELLIPSIS.len() { ELLIPSIS } else { "" };
    let mut cut = max_bytes - marker.len();
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{marker}", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments and the line they must give; `<r>` stands for [`REDACTED`].
    const REDACTION_CASES: &[(&[&str], &str)] = &[
        (&["app", "--password=hunter2"], "app --password=<r>"),
        (&["app", "--password", "hunter2", "-v"], "app --password <r> -v"),
        (&["app", "--token", "abc"], "app --token <r>"),
        (&["app", "--api-key", "abc"], "app --api-key <r>"),
        (&["app", "--api_key=abc"], "app --api_key=<r>"),
        (&["app", "--secret", "s"], "app --secret <r>"),
        (&["app", "--access-key=AKIA"], "app --access-key=<r>"),
        (&["app", "--hf-token", "hf_x"], "app --hf-token <r>"),
        (
            &["env", "AWS_SECRET_ACCESS_KEY=x", "ls"],
            "env AWS_SECRET_ACCESS_KEY=<r> ls",
        ),
        (&["HF_TOKEN=x", "WANDB_API_KEY=y"], "HF_TOKEN=<r> WANDB_API_KEY=<r>"),
        (&["CLIENT_SECRET=x"], "CLIENT_SECRET=<r>"),
        (
            &["DB_PASSWORD_FILE=/run/p", "MYPASSWORDX=1"],
            "DB_PASSWORD_FILE=<r> MYPASSWORDX=<r>",
        ),
        (
            &["java", "-Djavax.net.ssl.keyStorePassword=x"],
            "java -Djavax.net.ssl.keyStorePassword=<r>",
        ),
        (&["train.py", "api_key=abc", "lr=0.1"], "train.py api_key=<r> lr=0.1"),
        // Not secrets.
        (&["ssh", "-p", "2222", "host"], "ssh -p 2222 host"),
        (
            &["vllm", "--max-num-batched-tokens", "8192"],
            "vllm --max-num-batched-tokens 8192",
        ),
        (
            &["x", "--tokenizer", "gpt2", "--key-file", "/k"],
            "x --tokenizer gpt2 --key-file /k",
        ),
        (&["x", "PWD=/home/a", "PATH=/bin"], "x PWD=/home/a PATH=/bin"),
        (&["x", "--token", "--verbose"], "x --token --verbose"),
        (&["x", "--password"], "x --password"),
        // URLs.
        (
            &["psql", "postgres://bob:s3cr3t@db:5432/x"],
            "psql postgres://bob:<r>@db:5432/x",
        ),
        (&["--url=https://u:p@h/a?b=1"], "--url=https://u:<r>@h/a?b=1"),
        (&["redis://:pw@h"], "redis://:<r>@h"),
        (&["https://u@h/p"], "https://u@h/p"),
        (&["https://h/p?token=x&b=1#f"], "https://h/p?token=<r>&b=1#f"),
        (&["a://u:p@h,b://v:q@i"], "a://u:<r>@h,b://v:<r>@i"),
        // Headers and whole command lines in one arg.
        (
            &["curl", "-H", "Authorization: Bearer abc"],
            "curl -H Authorization: <r>",
        ),
        (&["curl", "-H", "X-Api-Key: abc"], "curl -H X-Api-Key: <r>"),
        (&["Bearer", "abc"], "Bearer <r>"),
        (
            &["sh", "-c", "python x.py --token abc -p 1"],
            "sh -c python x.py --token <r> -p 1",
        ),
        (&["python train.py --password=pw"], "python train.py --password=<r>"),
        (&["x", "--password=two words"], "x --password=<r>"),
        (&[], ""),
    ];

    #[test]
    fn redaction_table() {
        for (args, want) in REDACTION_CASES {
            assert_eq!(redact_cmdline(args), want.replace("<r>", REDACTED), "{args:?}");
        }
    }

    #[test]
    fn formats_proc_bytes() {
        assert_eq!(
            format_cmdline(b"python\0train.py\0--token\0abc\0", 200),
            format!("python train.py --token {REDACTED}")
        );
        assert_eq!(
            format_cmdline(b"nginx: worker process\0\0\0\0", 200),
            "nginx: worker process"
        );
        assert_eq!(format_cmdline(b"", 200), "");
        assert_eq!(format_cmdline(b"\0\0", 200), "");
        assert_eq!(format_cmdline(b"a\xff\0b", 200), "a\u{fffd} b");
    }

    #[test]
    fn truncates_on_char_boundary_with_ellipsis() {
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("hello world", 8), "hello…");
        // "é" is 2 bytes: never split it.
        assert_eq!(truncate("ééééé", 8), "éé…");
        assert_eq!(truncate("ééééé", 7), "éé…");
        assert_eq!(truncate("hello", 2), "he");
        assert_eq!(truncate("éé", 1), "");
        assert_eq!(truncate("hello", 0), "");
        for max in 0..20 {
            let out = format_cmdline("日本語 the quick\0brown fox".as_bytes(), max);
            assert!(out.len() <= max, "{max}: {out:?}");
        }
    }
}
