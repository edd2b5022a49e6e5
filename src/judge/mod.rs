//! The judge concept: thresholds over a snapshot. Owns the alert rules and
//! their evaluation, and the job-end memory reports. Must not act on what
//! it judges, serve, or read hardware; it uses `data` and `collect`.

pub mod report;
pub mod rules;
