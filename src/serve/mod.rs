//! The serve concept: what an operator reads over HTTP. Owns the Prometheus
//! exposition, the HTTP server with its security limits, the API and the
//! status page. Must not read hardware or decide alerts; it reads what the
//! lower concepts publish, the configuration and `reload`'s state included.

pub mod http;
pub mod metrics;
pub mod statuspage;
