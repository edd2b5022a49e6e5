//! The app concept: a running daemon as a whole. Owns the configuration,
//! reload, the wiring of every part (`daemon`), logging and shutdown. Must
//! not parse the command line (`cli` does).

pub mod config;
pub(crate) mod daemon;
pub mod logging;
pub mod reload;
pub mod shutdown;
