//! The act concept: what follows a judgement. Owns the alert engine,
//! notifications (Alertmanager, webhooks) and reclaiming memory (signals,
//! CUDA checkpoints) with its audit. Must not serve HTTP or read the
//! command line; it uses `data`, `collect` and `judge`.

pub mod alerts;
pub mod notify;
pub mod reclaim;
pub mod suspend_follow;
