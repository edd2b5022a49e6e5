//! Unit tests of the metrics renderer.
