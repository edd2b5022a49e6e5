//! The app concept: a running daemon as a whole. Owns the configuration,
//! reload, the wiring of every part (`daemon`), logging and shutdown. Must
//! not use `serve` or `cli` (they use it): the HTTP server is wired in
//! `lib.rs`, and `[status_page]`'s settings are owned by `config`.

pub mod config;
pub(crate) mod daemon;
pub mod logging;
pub mod reload;
pub mod shutdown;
