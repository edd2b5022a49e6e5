//! What the status page reads besides its HTML: the compact summary behind
//! `GET /api/v1/summary` (sized for a screen, not the whole snapshot), the
//! runbook served at `/runbook`, and the page's `[status_page]` settings.
//! Pure functions of a snapshot, an alert view and the config: no I/O, no
//! HTTP types (the handlers in `http/` wrap them).

pub mod runbook;
mod summary;

pub use summary::{AlertGroup, GRID_FROM, MAX_TOP, Summary, SummaryDevice, default_top, summarize};

#[cfg(test)]
mod tests;
