//! The collect concept: reading the node. Owns the hardware seams (NVML,
//! the simulated fleet, libcuda), /proc attribution, health events, the
//! allocator view, the driver-call ledger, the diagnoses, the pipeline and
//! poll thread that turn one poll into a snapshot, and the history. Must
//! not judge, act or serve; it uses `data` only (`[processes]` is owned by
//! `pipeline`, so a poll needs nothing from the config).

pub mod allocator;
pub mod attribution;
pub mod cuda;
pub mod diagnosis;
pub mod health;
pub mod history;
pub mod ledger;
pub mod pipeline;
pub mod poller;
pub mod source;
