//! The `/metrics` body, built so that a scrape costs almost nothing (issue
//! 21): the snapshot's families are rendered once per (snapshot, config,
//! format) by the first scrape that needs them and shared as `Bytes`; only
//! what changes without a new snapshot (alerts, reload status, counters,
//! `process_*`) is rendered per scrape. The body goes out as those two
//! frames, in the order and with the bytes `metrics::render` gives.
//! It owns the cache and the two-frame body; it does not read `/proc` or
//! any channel (the handler passes what it borrowed), and nothing but a
//! scrape ever fills the cache.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use axum::body::{Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};

use super::gzip;
use crate::config::Config;
use crate::metrics::{self, BuildInfo, DaemonState, Format};
use crate::snapshot::Snapshot;

/// At most one rendered snapshot part per format.
#[derive(Default)]
pub struct ScrapeCache {
    /// Indexed by [`slot`]: the text format, then OpenMetrics.
    slots: [Mutex<Option<Entry>>; 2],
}

/// A rendered snapshot part and what it was rendered from. `Weak`, so the
/// cache never keeps an old snapshot's contents alive, and a new snapshot
/// or config can never be taken for the old one (the allocation a `Weak`
/// points at is not reused while the `Weak` exists).
struct Entry {
    snap: Weak<Snapshot>,
    cfg: Weak<Config>,
    /// The plain text, kept while a plain scrape of this entry may want it
    /// again. A gzip scrape keeps only its compressed head: at 64 x 1000
    /// the text is 5.5 MB against 0.4 MB gzipped, and Prometheus asks for
    /// gzip (issue 21, round 9).
    body: Option<Bytes>,
    /// A plain scrape asked for this entry: its text stays beside the gzip.
    plain_wanted: bool,
    /// The text gzipped as a member's head, once a scrape asked for gzip.
    gzip: Option<gzip::Head>,
}

impl Entry {
    fn is_for(&self, snap: &Arc<Snapshot>, cfg: &Arc<Config>) -> bool {
        Weak::ptr_eq(&self.snap, &Arc::downgrade(snap)) && Weak::ptr_eq(&self.cfg, &Arc::downgrade(cfg))
    }
}

fn slot(format: Format) -> usize {
    match format {
        Format::Prometheus => 0,
        Format::OpenMetrics => 1,
    }
}

impl ScrapeCache {
    fn held(&self, format: Format) -> std::sync::MutexGuard<'_, Option<Entry>> {
        self.slots[slot(format)].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The snapshot part of `format`'s body: the cached bytes when they were
    /// rendered from this very `snap` and `cfg`, otherwise rendered now and
    /// kept (in place of an old entry, which is dropped here, so a new
    /// snapshot or a reload frees it at the next scrape). Two first
    /// scrapes of a snapshot at once may both render; either result is the
    /// same.
    pub fn snapshot_part(&self, snap: &Arc<Snapshot>, cfg: &Arc<Config>, build: &BuildInfo, format: Format) -> Bytes {
        {
            let mut held = self.held(format);
            if let Some(e) = held.as_mut()
                && e.is_for(snap, cfg)
                && let Some(body) = &e.body
            {
                e.plain_wanted = true;
                return body.clone();
            }
        }
        // Rendered outside the lock: a slow render holds up no other scrape.
        let body = Bytes::from(metrics::render_snapshot(snap, &cfg.processes, build, format));
        let mut held = self.held(format);
        match held.as_mut() {
            // Its gzip head was made first: the text joins it.
            Some(e) if e.is_for(snap, cfg) => {
                e.body = Some(body.clone());
                e.plain_wanted = true;
            }
            _ => {
                let old = held.replace(Entry {
                    snap: Arc::downgrade(snap),
                    cfg: Arc::downgrade(cfg),
                    body: Some(body.clone()),
                    plain_wanted: true,
                    gzip: None,
                });
                drop(held);
                drop(old);
            }
        }
        body
    }

    /// The whole body for one scrape: the (cached) snapshot part, then the
    /// live part rendered from `daemon` now.
    pub fn body(
        &self,
        snap: &Arc<Snapshot>,
        cfg: &Arc<Config>,
        build: &BuildInfo,
        daemon: &DaemonState<'_>,
        format: Format,
    ) -> Frames {
        let head = self.snapshot_part(snap, cfg, build, format);
        let tail = Bytes::from(metrics::render_live(daemon, &cfg.processes, format));
        Frames::new(vec![head, tail])
    }

    /// The snapshot part gzipped as a member's head (see [`gzip`]),
    /// compressed by the first gzip scrape of an entry and kept; the plain
    /// text it was made from is kept only if a plain scrape asked for it,
    /// and is not made whole at all when none had (issue 21, round 11).
    ///
    /// # Errors
    /// When deflate fails.
    pub fn gzip_part(
        &self,
        snap: &Arc<Snapshot>,
        cfg: &Arc<Config>,
        build: &BuildInfo,
        format: Format,
    ) -> Result<gzip::Head, gzip::GzipError> {
        let cached = {
            let held = self.held(format);
            match held.as_ref() {
                Some(e) if e.is_for(snap, cfg) => {
                    if let Some(g) = &e.gzip {
                        return Ok(g.clone());
                    }
                    e.body.clone()
                }
                _ => None,
            }
        };
        // Text a plain scrape left is compressed as it is; otherwise the
        // text is compressed as it is rendered and never held whole.
        let head = match cached {
            Some(plain) => gzip::head(&plain)?,
            None => {
                let mut to = gzip::HeadWriter::new();
                metrics::stream_snapshot(snap, &cfg.processes, build, format, &mut to);
                to.finish()?
            }
        };
        let mut held = self.held(format);
        match held.as_mut() {
            Some(e) if e.is_for(snap, cfg) => {
                e.gzip = Some(head.clone());
                if !e.plain_wanted {
                    e.body = None;
                }
            }
            _ => {
                let old = held.replace(Entry {
                    snap: Arc::downgrade(snap),
                    cfg: Arc::downgrade(cfg),
                    body: None,
                    plain_wanted: false,
                    gzip: Some(head.clone()),
                });
                drop(held);
                drop(old);
            }
        }
        Ok(head)
    }

    /// [`ScrapeCache::body`] as one gzip member: the cached compressed
    /// snapshot part, then the live part compressed as it is rendered.
    ///
    /// # Errors
    /// When deflate fails.
    pub fn gzip_body(
        &self,
        snap: &Arc<Snapshot>,
        cfg: &Arc<Config>,
        build: &BuildInfo,
        daemon: &DaemonState<'_>,
        format: Format,
    ) -> Result<Frames, gzip::GzipError> {
        let head = self.gzip_part(snap, cfg, build, format)?;
        let mut to = gzip::TailWriter::new(&head);
        metrics::stream_live(daemon, &cfg.processes, format, &mut to);
        let tail = to.finish()?;
        Ok(Frames::new(vec![head.bytes, tail]))
    }

    /// Whether `format`'s entry holds plain text (for tests).
    #[cfg(test)]
    fn holds_text(&self, format: Format) -> bool {
        self.held(format).as_ref().is_some_and(|e| e.body.is_some())
    }
}

/// Whether `accept_encoding` asks for gzip (a `gzip` coding whose q is not
/// 0). Anything else is left to the response layer, as before.
pub fn wants_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|v| {
        v.split(',').any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            name.eq_ignore_ascii_case("gzip")
                && parts.all(|p| {
                    let Some((k, q)) = p.split_once('=') else { return true };
                    !k.trim().eq_ignore_ascii_case("q") || q.trim().parse::<f32>().is_ok_and(|q| q > 0.0)
                })
        })
    })
}

/// A body sent as a few `Bytes` frames, with its exact length known (so the
/// answer keeps its `Content-Length`, as a one-string body had).
pub struct Frames {
    /// In reverse order, so sending pops from the end.
    rest: Vec<Bytes>,
    len: u64,
}

impl Frames {
    pub fn new(mut frames: Vec<Bytes>) -> Self {
        frames.retain(|b| !b.is_empty());
        let len = frames.iter().map(|b| b.len() as u64).sum();
        frames.reverse();
        Self { rest: frames, len }
    }

    /// The frames' bytes in order, as one buffer (for tests and benches).
    pub fn concat(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len as usize);
        for b in self.rest.iter().rev() {
            out.extend_from_slice(b);
        }
        out
    }

    /// The frames in the order they are sent.
    pub fn frames(&self) -> impl Iterator<Item = &Bytes> {
        self.rest.iter().rev()
    }
}

impl HttpBody for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let next = self.rest.pop();
        if let Some(b) = &next {
            self.len -= b.len() as u64;
        }
        Poll::Ready(next.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests;
