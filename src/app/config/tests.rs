//! Table tests for config loading: defaults, demo layering and the exact
//! shape of every bad-input error the operator can meet.

use super::*;

fn err(text: &str) -> String {
    match Config::from_toml(text, "t.toml", false) {
        Ok(c) => panic!("expected an error for {text:?}, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_file_gives_builtin_defaults() {
    let c = Config::from_toml("", "t.toml", false).expect("empty config is valid");
    assert_eq!(c.server.listen, ":9947");
    assert_eq!(c.poll.interval.get(), Duration::from_secs(1));
    assert_eq!(c.poll.effective_timeout(), Duration::from_millis(800));
    assert_eq!(c.processes.top_n, 50);
    assert_eq!(c.processes.leak_window.get(), Duration::from_secs(600));
    assert_eq!(c.nvml.library, "libnvidia-ml.so.1");
}

#[test]
fn timeout_defaults_to_80_percent_capped_at_5s() {
    let c = Config::from_toml("[poll]\ninterval = \"30s\"", "t", false).expect("valid");
    assert_eq!(c.poll.effective_timeout(), Duration::from_secs(5));
    let c = Config::from_toml("[poll]\ninterval = \"2s\"", "t", false).expect("valid");
    assert_eq!(c.poll.effective_timeout(), Duration::from_millis(1600));
}

#[test]
fn demo_layers_short_windows_under_the_file() {
    let d = Config::from_toml("", "t", true).expect("valid");
    assert_eq!(d.processes.leak_window.get(), Duration::from_secs(30));
    let d = Config::from_toml("[processes]\nleak_window = \"45s\"", "t", true).expect("valid");
    assert_eq!(d.processes.leak_window.get(), Duration::from_secs(45));
    // Keys the file does not set keep the demo's value.
    assert_eq!(d.processes.late_release_after.get(), Duration::from_secs(8));
}

#[test]
fn bad_inputs_name_file_line_and_key() {
    let cases: &[(&str, &str)] = &[
        (
            "[poll]\nintervall = \"1s\"",
            "t.toml:2: poll.intervall: unknown field `intervall`",
        ),
        ("[poll]\ninterval = \"0s\"", "t.toml:2: poll.interval: `0s` is zero"),
        (
            "[poll]\ninterval = \"-5s\"",
            "t.toml:2: poll.interval: `-5s` is negative",
        ),
        (
            "[poll]\ninterval = \"1s\"\ntimeout = \"2s\"",
            "t.toml:3: poll.timeout: 2s is not below poll.interval (1s)",
        ),
        (
            "[poll]\ninterval = \"1s\"\ntimeout = \"1s\"",
            "t.toml:3: poll.timeout: 1s is not below",
        ),
        (
            "[processes]\nmin_bytes = \"12 bananas\"",
            "t.toml:2: processes.min_bytes: `12 bananas` has an unknown unit",
        ),
        (
            "[processes]\nmin_bytes = -3",
            "t.toml:2: processes.min_bytes: -3 is negative",
        ),
        (
            "[processes]\nmode = \"everything\"",
            "t.toml:2: processes.mode: unknown variant `everything`",
        ),
        (
            "[processes]\ngroup_by = [\"planet\"]",
            "t.toml:2: processes.group_by[0]: unknown variant `planet`",
        ),
        (
            "[server]\nlisten = \"9947\"",
            "t.toml:2: server.listen: `9947` has no port",
        ),
        (
            "[server]\nlisten = \":http\"",
            "t.toml:2: server.listen: `http` in `:http` is not a port",
        ),
        ("[bogus]\nx = 1", "t.toml:1: bogus: unknown field `bogus`"),
        // Upper bounds: the interval that made the daemon never poll again.
        (
            "[poll]\ninterval = \"9999999999999h\"",
            "t.toml:2: poll.interval: `9999999999999h`",
        ),
        (
            "[poll]\ninterval = \"31d\"",
            "t.toml:2: poll.interval: `31d` is more than the maximum of 30 days",
        ),
        (
            "[poll]\ninterval = \"2h\"",
            "t.toml:2: poll.interval: 2h is more than the maximum of 1h",
        ),
        // Reserved rule labels, in a table, an inline table and a dotted key.
        (
            "[[rule]]\nname = \"A\"\nkind = \"process_used_bytes\"\nabove = \"8GiB\"\nseverity = \"page\"\n\
             [rule.labels]\nalertstate = \"x\"",
            "t.toml:7: rule \"A\": labels.alertstate: `alertstate` is reserved",
        ),
        (
            "[[rule]]\nname = \"A\"\nkind = \"process_used_bytes\"\nabove = \"8GiB\"\nseverity = \"page\"\n\
             labels = { team = \"t\",\n  alertname = \"x\" }",
            "t.toml:7: rule \"A\": labels.alertname: `alertname` is reserved",
        ),
        (
            "[[rule]]\nname = \"A\"\nkind = \"process_used_bytes\"\nabove = \"8GiB\"\nseverity = \"page\"\n\
             labels.__name__ = \"x\"",
            "t.toml:6: rule \"A\": labels.__name__: `__name__` is reserved",
        ),
        // Section validators: typed errors, located through dotted keys
        // and inline tables, each part printed once.
        (
            "[reclaim]\ngrace = \"0s\"",
            "t.toml:2: reclaim.grace: \"0s\" is out of range; use a duration above 0",
        ),
        (
            "[reclaim]\nenabled = true",
            "t.toml:2: reclaim.enabled: true but allow_users is empty",
        ),
        (
            "notify.alertmanager.urls = [\"http://a:9093\", \"ftp://x\"]",
            "t.toml:1: notify.alertmanager.urls[1]: `ftp://x` is not an http(s) URL",
        ),
        (
            "[notify]\nwebhook = { url = \"\" }",
            "t.toml:2: notify.webhook.url: must not be empty",
        ),
        // A syntax error has no key yet: the line and toml's message say it.
        (
            "[poll\ninterval = 1",
            "t.toml:1: (document): unclosed table, expected `]`",
        ),
    ];
    for (text, want) in cases {
        let got = err(text);
        assert!(got.starts_with(want), "for {text:?}\n got: {got}\nwant: {want}…");
        assert!(!got.contains('\n'), "error must be one line: {got:?}");
        // The key is named once: `[reclaim]` errors used to print twice.
        let message = got.splitn(3, ": ").nth(2).unwrap_or_default();
        assert!(!got.contains(&format!("{message}: {message}")), "twice: {got}");
    }
}

#[test]
fn missing_file_is_an_error_not_defaults() {
    let e = Config::load(Path::new("/nonexistent/gpumemd.toml"), false).unwrap_err();
    assert_eq!(e.to_string(), "config file /nonexistent/gpumemd.toml does not exist");
}

#[test]
fn effective_config_round_trips() {
    let c = Config::defaults(false);
    let text = toml::to_string(&c).expect("serializable");
    let back = Config::from_toml(&text, "printed", false).expect("printed config parses");
    assert_eq!(back, c);
}

#[test]
fn listen_forms() {
    assert_eq!(parse_listen(":9947"), Ok(ListenAddr { host: None, port: 9947 }));
    assert_eq!(
        parse_listen("[::1]:80"),
        Ok(ListenAddr {
            host: Some("::1".into()),
            port: 80
        })
    );
    assert_eq!(
        parse_listen("127.0.0.1:0"),
        Ok(ListenAddr {
            host: Some("127.0.0.1".into()),
            port: 0
        })
    );
    assert!(parse_listen("localhost").is_err());
}

/// Every file shipped in config/ must load (DESIGN.md: "every file in
/// `config/` is loaded by a test").
#[test]
fn shipped_configs_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("config/ exists") {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            Config::load(&path, false).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n > 0, "no config files found in {}", dir.display());
}

#[test]
fn built_in_rules_link_to_their_runbook_section_and_user_rules_keep_theirs() {
    let text = "[links]\nrunbook_base_url = \"https://wiki.example/gpu\"\n\
                [[rule]]\nname = \"Mine\"\nkind = \"device_used_ratio\"\nabove = \"50%\"\n";
    let cfg = Config::from_toml(text, "t", false).expect("valid");
    let rules = cfg.effective_rules();
    let url = |name: &str| {
        let r = rules.iter().find(|r| r.cfg.name == name).expect(name);
        r.cfg.annotations.get("runbook_url").cloned()
    };
    assert_eq!(
        url("GpuMemoryHigh").as_deref(),
        Some("https://wiki.example/gpu#gpumemoryhigh")
    );
    assert_eq!(url("GpuLost").as_deref(), Some("https://wiki.example/gpu#gpulost"));
    assert_eq!(url("Mine"), None, "a site's own rule has no section in our runbook");
    // By default: this daemon's own /runbook, absolute for receivers.
    let default = Config::defaults(false).effective_rules();
    for r in &default {
        let url = &r.cfg.annotations["runbook_url"];
        let want = format!("/runbook#{}", r.cfg.name.to_lowercase());
        assert!(url.starts_with("http://") && url.ends_with(&want), "{url}");
    }
    assert!(err("[links]\nrunbook_base_url = \"docs/runbook.md\"\n").contains("nor a path on this daemon"));
    // The deprecated [status_page] runbook_url is the same knob.
    let old =
        Config::from_toml("[status_page]\nrunbook_url = \"https://wiki.example/rb\"\n", "t", false).expect("valid");
    assert_eq!(old.links.runbook_base_url, "https://wiki.example/rb");
    assert!(old.status_page.runbook_url.is_empty());
    let both = "[links]\nrunbook_base_url = \"https://new.example/rb\"\n[status_page]\nrunbook_url = \"/old\"\n";
    let both = Config::from_toml(both, "t", false).expect("valid");
    assert_eq!(both.links.runbook_base_url, "https://new.example/rb", "[links] wins");
}
