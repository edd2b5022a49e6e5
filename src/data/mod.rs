//! The data concept: what a poll yields and the leaves every other part
//! uses. Owns the snapshot and its types, sizes and durations, the clock,
//! the event log, the links the API lists, file helpers and the service
//! manager's notify socket. Must not use any other concept; `snapshot`,
//! `units`, `clock` and `sysnotify` use nothing of the crate at all.

pub mod clock;
pub mod events;
pub mod files;
pub mod links;
pub mod snapshot;
pub mod sysnotify;
pub mod units;
