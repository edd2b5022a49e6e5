//! Who holds the server's connection places, and who gives way. Every open
//! connection is counted against its source address (at most
//! `max_connections_per_source`) and is in one of three states: waiting
//! (no whole request yet, TLS handshake included), idle (served before,
//! kept alive, no request in flight) or busy (a request in flight). Waiting
//! connections have a pool of their own; idle and busy ones share the
//! serving places. When a pool is full the newcomer is not refused while
//! someone can give way: the oldest waiting connection, or the connection
//! idle the longest, is told to close. A source at its cap gives way from
//! its own connections. Only busy connections are never pushed out.
//! Refusals are logged at most once per interval, with how many there were.
//! It must not do I/O or know HTTP: `serve.rs` acts on its answers.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How often a kind of refusal (or a failed accept) may be logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Logs at most one line per [`LOG_EVERY`] for conditions an attacker can
/// repeat.
#[derive(Default)]
pub(super) struct Throttle(Option<Instant>);

impl Throttle {
    pub(super) fn ready(&mut self) -> bool {
        let now = Instant::now();
        let due = self.0.is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
        if due {
            self.0 = Some(now);
        }
        due
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    /// Idle since this tick (lower is longer).
    Idle(u64),
    Busy,
}

struct Conn {
    source: IpAddr,
    state: State,
    close: Arc<Signal>,
}

/// Set once, when a connection is told to give way.
#[derive(Default)]
struct Signal {
    set: AtomicBool,
    notify: Notify,
}

/// Why a connection was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source holds `max_connections_per_source`, all of them busy.
    SourceFull,
    /// Every serving place is busy.
    ServingFull,
}

#[derive(Default)]
struct Log {
    throttle: Throttle,
    refused: u64,
    pushed_out: u64,
}

#[derive(Default)]
struct Inner {
    tick: u64,
    conns: HashMap<u64, Conn>,
    per_source: HashMap<IpAddr, usize>,
    waiting: usize,
    serving: usize,
    /// Connections whose [`Place`] is not dropped yet (pushed out included).
    live: usize,
    log: Log,
}

/// The limits and the connections holding places.
pub struct Places {
    max_waiting: usize,
    max_serving: usize,
    per_source: usize,
    inner: Mutex<Inner>,
    gone: Notify,
}

/// One connection's hold on the registry; dropping it frees its place.
pub struct Place {
    places: Arc<Places>,
    id: u64,
    signal: Arc<Signal>,
}

impl Places {
    pub fn new(max_connections: usize, per_source: usize) -> Arc<Self> {
        Arc::new(Self {
            max_waiting: max_connections.max(1),
            max_serving: max_connections.max(1),
            per_source: per_source.max(1),
            inner: Mutex::new(Inner::default()),
            gone: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A waiting place for a connection just accepted from `source`.
    ///
    /// # Errors
    /// `SourceFull` when its source holds its cap and none of them can give way.
    pub fn enter(self: &Arc<Self>, source: IpAddr) -> Result<Place, Refusal> {
        let mut g = self.lock();
        if g.per_source.get(&source).copied().unwrap_or(0) >= self.per_source {
            match oldest(&g, |c| c.source == source && c.state != State::Busy) {
                Some(id) => push_out(&mut g, id),
                None => {
                    refused(&mut g, Refusal::SourceFull, source, self.per_source);
                    return Err(Refusal::SourceFull);
                }
            }
        }
        if g.waiting >= self.max_waiting
            && let Some(id) = oldest(&g, |c| c.state == State::Waiting)
        {
            push_out(&mut g, id);
        }
        let id = g.tick;
        g.tick += 1;
        let signal = Arc::new(Signal::default());
        g.conns.insert(
            id,
            Conn {
                source,
                state: State::Waiting,
                close: signal.clone(),
            },
        );
        *g.per_source.entry(source).or_insert(0) += 1;
        g.waiting += 1;
        g.live += 1;
        Ok(Place {
            places: self.clone(),
            id,
            signal,
        })
    }

    /// Resolves once every [`Place`] is dropped: every connection has ended.
    pub async fn all_gone(&self) {
        until(&self.gone, || self.lock().live == 0).await;
    }
}

impl Place {
    /// Resolves once the connection is told to give way (at once if it was).
    pub async fn pushed_out(&self) {
        until(&self.signal.notify, || self.is_pushed_out()).await;
    }

    pub fn is_pushed_out(&self) -> bool {
        self.signal.set.load(Ordering::SeqCst)
    }

    /// Trades the waiting place for a serving one, busy (its first request
    /// is complete). When every serving place is taken, the connection idle
    /// the longest gives way.
    ///
    /// # Errors
    /// `ServingFull` when every serving place is busy.
    pub fn serve(&self) -> Result<(), Refusal> {
        let p = &self.places;
        let mut g = p.lock();
        if !g.conns.contains_key(&self.id) {
            // Pushed out meanwhile: its `pushed_out` says so.
            return Ok(());
        }
        if g.serving >= p.max_serving {
            match oldest(&g, |c| matches!(c.state, State::Idle(_))) {
                Some(id) => push_out(&mut g, id),
                None => {
                    let source = g.conns.get(&self.id).map(|c| c.source);
                    if let Some(source) = source {
                        refused(&mut g, Refusal::ServingFull, source, p.max_serving);
                    }
                    return Err(Refusal::ServingFull);
                }
            }
        }
        if let Some(c) = g.conns.get_mut(&self.id) {
            c.state = State::Busy;
        }
        g.waiting -= 1;
        g.serving += 1;
        Ok(())
    }

    /// A request is in flight: not to be pushed out until it is done (a
    /// connection still waiting has its state changed by `serve` only).
    pub fn busy(&self) {
        let mut g = self.places.lock();
        if let Some(c) = g.conns.get_mut(&self.id)
            && c.state != State::Waiting
        {
            c.state = State::Busy;
        }
    }

    /// No request in flight: may give way from now on.
    pub fn idle(&self) {
        let mut g = self.places.lock();
        let tick = g.tick;
        g.tick += 1;
        if let Some(c) = g.conns.get_mut(&self.id)
            && c.state == State::Busy
        {
            c.state = State::Idle(tick);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut g = self.places.lock();
        if let Some(c) = g.conns.remove(&self.id) {
            release(&mut g, &c);
        }
        g.live -= 1;
        if g.live == 0 {
            self.places.gone.notify_waiters();
        }
    }
}

/// Resolves once `done` holds, looked at again each time `notify` wakes its
/// waiters. Registered before each look, so a change in between still wakes.
async fn until(notify: &Notify, done: impl Fn() -> bool) {
    loop {
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if done() {
            return;
        }
        woken.await;
    }
}

/// The connection longest in the state `want` picks (waiting connections
/// by arrival, idle ones by how long they have been idle).
fn oldest(g: &Inner, want: impl Fn(&Conn) -> bool) -> Option<u64> {
    g.conns
        .iter()
        .filter(|(_, c)| want(c))
        .min_by_key(|(id, c)| match c.state {
            State::Idle(since) => since,
            _ => **id,
        })
        .map(|(id, _)| *id)
}

/// Tells `id` to close and frees its place now: the newcomer need not wait
/// for the old connection's task to notice.
fn push_out(g: &mut Inner, id: u64) {
    if let Some(c) = g.conns.remove(&id) {
        release(g, &c);
        c.close.set.store(true, Ordering::SeqCst);
        c.close.notify.notify_waiters();
        g.log.pushed_out += 1;
    }
}

fn release(g: &mut Inner, c: &Conn) {
    match c.state {
        State::Waiting => g.waiting -= 1,
        State::Idle(_) | State::Busy => g.serving -= 1,
    }
    if let Some(n) = g.per_source.get_mut(&c.source) {
        *n -= 1;
        if *n == 0 {
            g.per_source.remove(&c.source);
        }
    }
}

/// Counts a refusal and logs it, at most once per [`LOG_EVERY`], with the
/// refusals and push-outs since the last line.
fn refused(g: &mut Inner, why: Refusal, source: IpAddr, limit: usize) {
    g.log.refused += 1;
    if !g.log.throttle.ready() {
        return;
    }
    let (refused, pushed_out) = (g.log.refused, g.log.pushed_out);
    g.log.refused = 0;
    g.log.pushed_out = 0;
    match why {
        Refusal::SourceFull => tracing::warn!(
            source = %source, max_connections_per_source = limit, refused, pushed_out,
            "connection refused: its source address holds its limit of connections, all with requests in flight"
        ),
        Refusal::ServingFull => tracing::warn!(
            source = %source, max_connections = limit, refused, pushed_out,
            "connection refused: every serving place has a request in flight"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        [127, 0, 0, last].into()
    }

    #[test]
    fn the_oldest_waiting_connection_gives_way_when_the_pool_is_full() {
        let places = Places::new(2, 64);
        let a = places.enter(ip(1)).expect("a place");
        let b = places.enter(ip(2)).expect("a place");
        let _c = places.enter(ip(3)).expect("the oldest gives way");
        assert!(a.is_pushed_out(), "the oldest is told to close");
        assert!(!b.is_pushed_out(), "the others stay");
        drop(b);
        let d = places.enter(ip(4)).expect("a place that left is free again");
        assert!(!d.is_pushed_out());
    }

    #[test]
    fn an_idle_keep_alive_connection_gives_way_and_a_busy_one_never_does() {
        let places = Places::new(2, 64);
        let a = places.enter(ip(1)).expect("place");
        let b = places.enter(ip(2)).expect("place");
        a.serve().expect("serving");
        b.serve().expect("serving");
        let c = places.enter(ip(3)).expect("waiting");
        assert_eq!(c.serve(), Err(Refusal::ServingFull), "both busy");
        b.idle();
        a.idle();
        let d = places.enter(ip(4)).expect("waiting");
        d.serve().expect("b, idle the longest, gives way");
        assert!(b.is_pushed_out());
        assert!(!a.is_pushed_out());
        a.busy();
        let e = places.enter(ip(5)).expect("waiting");
        assert_eq!(e.serve(), Err(Refusal::ServingFull), "a is busy again");
    }

    #[test]
    fn a_source_at_its_cap_gives_way_from_its_own_connections_only() {
        let places = Places::new(100, 2);
        let other = places.enter(ip(9)).expect("place");
        let a = places.enter(ip(1)).expect("place");
        let b = places.enter(ip(1)).expect("place");
        a.serve().expect("serving");
        let c = places.enter(ip(1)).expect("b, waiting, gives way");
        assert!(b.is_pushed_out());
        assert!(!a.is_pushed_out(), "busy");
        assert!(!other.is_pushed_out(), "another source");
        c.serve().expect("serving");
        assert_eq!(places.enter(ip(1)).err(), Some(Refusal::SourceFull), "both busy");
        assert!(places.enter(ip(2)).is_ok(), "other sources are not affected");
    }

    #[tokio::test]
    async fn all_gone_waits_for_every_place_pushed_out_ones_included() {
        let places = Places::new(1, 64);
        let a = places.enter(ip(1)).expect("place");
        let b = places.enter(ip(2)).expect("a gives way");
        drop(b);
        let waiter = tokio::spawn({
            let p = places.clone();
            async move { p.all_gone().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "a is still there");
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("all gone")
            .expect("join");
    }
}
