//! The allocator view: what PyTorch processes that opt in (the Python
//! package `gpumemd-torch` in python/) report about their caching
//! allocator, joined to NVML's figures by the pipeline. Owns the
//! `[allocator]` config, the wire format, the receiver thread, the shared
//! latest-state map and the out-of-memory event store. It must not call
//! NVML or render metrics; the pipeline, metrics and HTTP read it.

pub mod arm;
pub mod config;
pub mod demo;
pub mod events;
mod listed;
pub mod message;
pub mod receiver;
pub mod recorder;
pub mod state;

pub use config::AllocatorConfig;
pub use events::OomEvent;
pub use state::{AllocatorState, Outcome};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_oom_socket;
#[cfg(test)]
mod tests_recorder;
