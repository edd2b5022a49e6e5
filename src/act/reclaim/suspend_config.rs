//! `[reclaim.suspend]`: the knobs of the `suspend` action, apart
//! from what it shares with `terminate` in `[reclaim]` (enabled, dry_run,
//! allow/deny lists).
//!
//! Owns: the keys, their defaults and their validation. Must not: load the
//! driver or read `/proc` (plain data).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::config::InvalidSetting;
use crate::data::units::ByteSize;

/// When a suspended process is put back on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResumeMode {
    /// Only on `POST /api/v1/processes/{pid}/resume` (`gpumemd resume PID`).
    #[default]
    Manual,
    /// Also as soon as its device has its bytes free plus `resume_margin`.
    WhenFree,
}

/// Longest wait accepted for one checkpoint or restore: a 40 GiB process
/// moves in well under a minute on an H200 (7.8 s for 12.9 GiB measured).
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SuspendConfig {
    /// The CUDA driver library (name or path); `--cuda-lib` overrides it.
    pub cuda_lib: String,
    /// How long the driver may try to lock a process (its CUDA calls must
    /// drain first); on expiry the process is left running.
    #[serde(with = "humantime_serde")]
    pub lock_timeout: Duration,
    /// Deadline of one checkpoint or restore call.
    #[serde(with = "humantime_serde")]
    pub call_timeout: Duration,
    /// Suspends (lock + checkpoint) running at once.
    pub max_in_flight: u32,
    /// Host memory that must stay free on top of the process's GPU bytes
    /// (its memory moves into host RAM): `MemAvailable >= bytes + margin`.
    pub host_memory_margin: ByteSize,
    pub resume: ResumeMode,
    /// For `resume = "when-free"`: free device memory beyond the process's bytes.
    pub resume_margin: ByteSize,
    /// For `resume = "when-free"`: how long a process stays suspended at
    /// least. Its own bytes leaving make room for it, so without a wait a
    /// quiet GPU would resume it at the next poll (suspend, resume, suspend).
    #[serde(with = "humantime_serde")]
    pub resume_after: Duration,
    /// After a resume (by hand or when free), how long the process is left
    /// alone by suspend rules: it is still idle when it comes back, and
    /// without this its rule would suspend it again at the next poll,
    /// undoing what its owner asked for. Retried afterwards while its
    /// alert keeps firing.
    #[serde(with = "humantime_serde")]
    pub resumed_grace: Duration,
}

impl Default for SuspendConfig {
    fn default() -> Self {
        SuspendConfig {
            cuda_lib: crate::collect::cuda::DEFAULT_LIBRARY.into(),
            lock_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(300),
            max_in_flight: 1,
            host_memory_margin: ByteSize(4 << 30),
            resume: ResumeMode::Manual,
            resume_margin: ByteSize(1 << 30),
            resume_after: Duration::ZERO,
            resumed_grace: Duration::from_secs(600),
        }
    }
}

impl SuspendConfig {
    /// # Errors
    /// The first invalid setting, naming its key.
    pub fn check(&self) -> Result<(), InvalidSetting> {
        let bad = |key: &'static str, message: String| Err(InvalidSetting { key, message });
        if self.cuda_lib.trim().is_empty() {
            return bad(
                "suspend.cuda_lib",
                "is empty; name the driver, e.g. \"libcuda.so.1\"".into(),
            );
        }
        if self.lock_timeout.is_zero() || self.lock_timeout > Duration::from_secs(600) {
            return bad(
                "suspend.lock_timeout",
                "is out of range; use a duration above 0 and at most 10m, e.g. \"10s\"".into(),
            );
        }
        if self.call_timeout < Duration::from_secs(1) || self.call_timeout > MAX_CALL_TIMEOUT {
            return bad(
                "suspend.call_timeout",
                "is out of range; use between 1s and 1h, e.g. \"5m\"".into(),
            );
        }
        if self.max_in_flight == 0 {
            return bad(
                "suspend.max_in_flight",
                "is 0, so nothing could ever be suspended; use 1 or more".into(),
            );
        }
        if self.resumed_grace > Duration::from_secs(86_400) {
            return bad(
                "suspend.resumed_grace",
                "is more than a day; use e.g. \"10m\" (or \"0s\" to allow a suspend right after a resume)".into(),
            );
        }
        Ok(())
    }

    /// The deadline gpumemd gives the lock call: the driver's own timeout
    /// plus room for the call to come back and say so.
    pub fn lock_deadline(&self) -> Duration {
        self.lock_timeout.saturating_mul(2) + Duration::from_secs(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_manual_and_parse_back() {
        let c = SuspendConfig::default();
        assert_eq!(c.check(), Ok(()));
        assert_eq!(c.resume, ResumeMode::Manual);
        let back: SuspendConfig = toml::from_str(&toml::to_string(&c).expect("serializes")).expect("parses");
        assert_eq!(back, c);
    }

    #[test]
    fn keys_parse_and_bad_values_name_their_key() {
        let c: SuspendConfig = toml::from_str(
            "lock_timeout = \"2s\"\nresume = \"when-free\"\nhost_memory_margin = \"8GiB\"\nmax_in_flight = 2\n\
             resume_after = \"1m\"",
        )
        .expect("valid");
        assert_eq!(
            (c.lock_timeout, c.resume, c.host_memory_margin, c.max_in_flight),
            (Duration::from_secs(2), ResumeMode::WhenFree, ByteSize(8 << 30), 2)
        );
        assert_eq!(c.resume_after, Duration::from_secs(60));
        assert!(toml::from_str::<SuspendConfig>("resume = \"auto\"").is_err());
        assert!(toml::from_str::<SuspendConfig>("lock_timeot = \"2s\"").is_err());
        for (c, key) in [
            (
                SuspendConfig {
                    max_in_flight: 0,
                    ..SuspendConfig::default()
                },
                "suspend.max_in_flight",
            ),
            (
                SuspendConfig {
                    lock_timeout: Duration::ZERO,
                    ..SuspendConfig::default()
                },
                "suspend.lock_timeout",
            ),
            (
                SuspendConfig {
                    cuda_lib: " ".into(),
                    ..SuspendConfig::default()
                },
                "suspend.cuda_lib",
            ),
        ] {
            assert_eq!(c.check().map_err(|e| e.key), Err(key));
        }
    }
}
