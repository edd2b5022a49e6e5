//! Command-line settings that win over the config file (`--nvml-lib`, `--cuda-lib`,
//! `--web.listen-address`, `--web.config.file`; `--web.telemetry-path`
//! has no file key and is only carried). Kept as one typed value on
//! the `Config` so that every load, at start and at each reload, applies the
//! same overrides. It must not parse the command line (that is `cli.rs`).

use std::path::PathBuf;

use super::Config;

/// What the command line set; `None` leaves the file's (or default) value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub nvml_lib: Option<String>,
    /// `--cuda-lib`: the CUDA driver for `[reclaim.suspend]`.
    pub cuda_lib: Option<String>,
    pub listen: Option<String>,
    pub web_config_file: Option<PathBuf>,
    /// `--web.telemetry-path`; only on the command line, like the exporters'.
    pub telemetry_path: Option<String>,
    /// The web config turns TLS on (found at start, not a flag): default
    /// links (`generatorURL`, the runbook) then say `https`.
    pub tls: bool,
}

impl Overrides {
    /// Sets the overridden fields on `cfg` and remembers the overrides there,
    /// so a reload of `cfg` applies them again.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(lib) = &self.nvml_lib {
            cfg.nvml.library = lib.clone();
        }
        if let Some(lib) = &self.cuda_lib {
            cfg.reclaim.suspend.cuda_lib = lib.clone();
        }
        if let Some(listen) = &self.listen {
            cfg.server.listen = listen.clone();
        }
        if let Some(f) = &self.web_config_file {
            cfg.server.web_config_file = Some(f.clone());
        }
        cfg.links.tls = self.tls;
        cfg.overrides = self.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_over_the_file_and_stay_on_the_config() {
        let mut cfg =
            Config::from_toml("[server]\nlisten = \":1\"\n[nvml]\nlibrary = \"file.so\"\n", "t", false).expect("valid");
        let o = Overrides {
            nvml_lib: Some("/cli/libnvml.so".into()),
            cuda_lib: None,
            listen: Some("127.0.0.1:2".into()),
            web_config_file: None,
            telemetry_path: None,
            tls: false,
        };
        o.apply(&mut cfg);
        assert_eq!(cfg.nvml.library, "/cli/libnvml.so");
        assert_eq!(cfg.server.listen, "127.0.0.1:2");
        assert_eq!(cfg.server.web_config_file, None, "not overridden: the file's value");
        assert_eq!(cfg.overrides, o);
        assert_eq!(cfg.links.generator_url("node1", 2), "http://node1:2/#alerts");
    }

    #[test]
    fn a_tls_listener_makes_the_default_links_https_across_reloads() {
        let o = Overrides {
            tls: true,
            ..Overrides::default()
        };
        let mut cfg = Config::defaults(false);
        o.apply(&mut cfg);
        assert_eq!(cfg.links.generator_url("node1", 9947), "https://node1:9947/#alerts");
        // A reload re-reads the file and applies the same overrides.
        let mut next = Config::defaults(false);
        cfg.overrides.clone().apply(&mut next);
        assert!(next.links.tls);
        let rules = next.effective_rules();
        assert!(
            rules
                .iter()
                .all(|r| r.cfg.annotations["runbook_url"].starts_with("https://"))
        );
    }
}
