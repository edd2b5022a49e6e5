//! Request guards of the web config: HTTP basic auth against bcrypt hashes
//! and the `rate_limit` token bucket. A refusal says only "401
//! Unauthorized" (or 429): never which part was wrong. bcrypt runs off the
//! async workers in a bounded pool with fair admission (a few checks per
//! source address at once, the rest refused with 429 rather than queued), and
//! successful verdicts are remembered apart from failed ones, so that an
//! authenticated scrape costs one hash lookup and a flood of wrong passwords
//! can neither evict it nor queue it out. A source with a recent failure gets
//! one check at a time and only an idle worker, never a place in the queue,
//! so sources without failures are served first. A check keeps its worker
//! and its source's place until bcrypt itself ends, even when the request
//! that asked for it has timed out. It must not know routes or sockets.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use base64::Engine as _;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// Verdicts remembered per kind; past this an arbitrary one is forgotten,
/// so wrong guesses cannot grow the map without bound. Successes and
/// failures are kept apart: guesses only ever evict guesses.
const CACHE_MAX: usize = 256;

/// bcrypt checks one source address may have admitted (queued or running)
/// at once; more from it are refused with 429 without any bcrypt.
pub const PER_SOURCE: usize = 2;

/// How long a wrong password marks its source as failing.
const FAILING_FOR: Duration = Duration::from_secs(60);

/// Failing sources remembered; past this the expired ones are forgotten,
/// then an arbitrary one.
const FAILING_MAX: usize = 4096;

/// The most bcrypt checks running at once: enough to use the machine, few
/// enough that a flood cannot take every blocking thread.
fn pool_size() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4))
}

/// What a request's credentials earn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
    /// Its source already has [`PER_SOURCE`] checks in the pool.
    Busy,
}

/// `basic_auth_users`: user name to bcrypt hash.
pub struct BasicAuth {
    users: Vec<(String, String)>,
    /// The hash of the highest cost: what an unknown user's password is
    /// checked against, so that it costs as much as the costliest user.
    costliest: String,
    /// Shared with the checks on the blocking pool, which write to it.
    outcomes: Arc<Outcomes>,
    workers: Arc<Semaphore>,
    sources: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// What finished checks leave: verdicts by credentials, and the sources
/// with a recent wrong password. A check writes here when bcrypt ends,
/// whether or not its request still waits: one that timed out must still
/// mark its source failing, or a flood whose queue is longer than the
/// request timeout would never be moved out of the fair queue.
#[derive(Default)]
struct Outcomes {
    allowed: Mutex<HashMap<[u8; 32], ()>>,
    denied: Mutex<HashMap<[u8; 32], ()>>,
    /// Source to when its last wrong password was seen.
    failing: Mutex<HashMap<IpAddr, Instant>>,
}

/// Who asked for a check, for [`Outcomes::record`].
struct Asker {
    key: [u8; 32],
    known: bool,
    ip: IpAddr,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: hashes are secrets too.
        let names: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("BasicAuth").field("users", &names).finish()
    }
}

/// A source's place in the pool, given back on drop.
struct Admitted {
    sources: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut s) = self.sources.lock()
            && let Some(n) = s.get_mut(&self.ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.remove(&self.ip);
            }
        }
    }
}

/// A `basic_auth_users` entry whose hash is not bcrypt (the hash is not
/// repeated: it may be a password pasted by mistake).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("basic_auth_users.{user}: not a bcrypt hash (make one with `htpasswd -nBC 10 \"\"`)")]
pub struct NotBcrypt {
    pub user: String,
}

impl BasicAuth {
    /// Checks that every hash is a bcrypt hash.
    ///
    /// # Errors
    /// The first user whose hash is not bcrypt, without the hash.
    pub fn new(users: BTreeMap<String, String>) -> Result<Self, NotBcrypt> {
        let mut costliest: Option<(u32, String)> = None;
        for (user, hash) in &users {
            let parts = hash
                .parse::<bcrypt::HashParts>()
                .map_err(|_| NotBcrypt { user: user.clone() })?;
            if costliest.as_ref().is_none_or(|(c, _)| parts.get_cost() > *c) {
                costliest = Some((parts.get_cost(), hash.clone()));
            }
        }
        Ok(Self {
            users: users.into_iter().collect(),
            costliest: costliest.map(|(_, h)| h).unwrap_or_default(),
            outcomes: Arc::default(),
            workers: Arc::new(Semaphore::new(pool_size())),
            sources: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    /// The hash a user's password is checked against, and whether the user
    /// exists. Every user is compared in constant time, so the time taken
    /// does not tell which names exist; an unknown user is checked against
    /// the costliest hash, so the bcrypt work does not tell either.
    fn hash_for(&self, user: &[u8]) -> (&str, bool) {
        let mut found = None;
        for (u, h) in &self.users {
            if bool::from(u.as_bytes().ct_eq(user)) {
                found = Some(h.as_str());
            }
        }
        found.map_or((self.costliest.as_str(), false), |h| (h, true))
    }

    /// Whether the request's `Authorization: Basic` names a user with the
    /// right password; `peer` is the source address used for admission.
    pub async fn check(&self, headers: &HeaderMap, peer: IpAddr) -> Verdict {
        let Some((user, pass)) = credentials(headers) else {
            return Verdict::Deny;
        };
        let (hash, known) = self.hash_for(&user);
        if hash.is_empty() {
            return Verdict::Deny;
        }
        let key = cache_key(&user, hash, &pass);
        // Consulted before any queue: a scraper that logged in once never
        // waits behind guessers again.
        let o = &self.outcomes;
        if o.allowed.lock().is_ok_and(|c| c.contains_key(&key)) {
            return if known { Verdict::Allow } else { Verdict::Deny };
        }
        if o.denied.lock().is_ok_and(|c| c.contains_key(&key)) {
            return Verdict::Deny;
        }
        let ip = source_of(peer);
        let failing = o.is_failing(ip);
        let Some(place) = self.admit(ip, if failing { 1 } else { PER_SOURCE }) else {
            return Verdict::Busy;
        };
        let asker = Asker { key, known, ip };
        match self.verify(pass, hash.to_string(), place, failing, asker).await {
            Some(true) => Verdict::Allow,
            Some(false) => Verdict::Deny,
            None => Verdict::Busy,
        }
    }

    /// A place in the pool for source `ip`, unless it already holds `share`.
    fn admit(&self, ip: IpAddr, share: usize) -> Option<Admitted> {
        let mut s = self.sources.lock().ok()?;
        let n = s.entry(ip).or_insert(0);
        if *n >= share {
            return None;
        }
        *n += 1;
        Some(Admitted {
            sources: self.sources.clone(),
            ip,
        })
    }

    /// One bcrypt on the blocking pool, whether the credentials get in. A
    /// source without failures waits for a worker (first come, first
    /// served: tokio's semaphore is fair and hands a freed worker to a
    /// waiter before `try_acquire` can take it); a failing one takes an
    /// idle worker or is refused (`None`). The worker, `place` and the
    /// recording of the outcome go with the bcrypt, so a dropped request
    /// frees neither and loses no verdict.
    async fn verify(&self, pass: Vec<u8>, hash: String, place: Admitted, failing: bool, asker: Asker) -> Option<bool> {
        let worker = if failing {
            self.workers.clone().try_acquire_owned().ok()?
        } else {
            self.workers.clone().acquire_owned().await.ok()?
        };
        let outcomes = self.outcomes.clone();
        let check = move || {
            let ok = bcrypt::verify(&pass, &hash).unwrap_or(false);
            // Recorded before the place is given back: the source's next
            // request already counts as failing.
            let allow = outcomes.record(&asker, ok);
            drop((worker, place));
            allow
        };
        Some(tokio::task::spawn_blocking(check).await.unwrap_or(false))
    }
}

impl Outcomes {
    /// Remembers a finished check's verdict, marks its source failing
    /// unless it got in, and says whether it did.
    fn record(&self, asker: &Asker, ok: bool) -> bool {
        remember(if ok { &self.allowed } else { &self.denied }, asker.key);
        let allow = ok && asker.known;
        if !allow {
            self.failed(asker.ip);
        }
        allow
    }

    fn is_failing(&self, ip: IpAddr) -> bool {
        self.failing
            .lock()
            .is_ok_and(|f| f.get(&ip).is_some_and(|t| t.elapsed() < FAILING_FOR))
    }

    fn failed(&self, ip: IpAddr) {
        let Ok(mut f) = self.failing.lock() else { return };
        if f.len() >= FAILING_MAX {
            f.retain(|_, t| t.elapsed() < FAILING_FOR);
            if let Some(k) = f.keys().next().copied().filter(|_| f.len() >= FAILING_MAX) {
                f.remove(&k);
            }
        }
        f.insert(ip, Instant::now());
    }
}

/// The unit of admission: an IPv4 address, or the /64 of an IPv6 one (a
/// single host is routinely given a whole /64, so its addresses are one
/// source); IPv4-mapped IPv6 addresses count as the IPv4 address.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

fn remember(cache: &Mutex<HashMap<[u8; 32], ()>>, key: [u8; 32]) {
    if let Ok(mut c) = cache.lock() {
        if c.len() >= CACHE_MAX
            && let Some(k) = c.keys().next().copied()
        {
            c.remove(&k);
        }
        c.insert(key, ());
    }
}

/// SHA-256 of the length-prefixed triple: the cache keeps no password, and
/// no two triples share a key.
fn cache_key(user: &[u8], hash: &str, pass: &[u8]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash.as_bytes(), pass] {
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// (user, password) from `Authorization: Basic base64(user:password)`.
fn credentials(headers: &HeaderMap) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    Some((raw[..colon].to_vec(), raw[colon + 1..].to_vec()))
}

/// 401 with the challenge and nothing else to learn from.
pub fn unauthorized() -> Response<Body> {
    let mut r = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
    r
}

/// 429 for a source that already has its share of password checks
/// running: try again in a second, when they are done.
pub fn busy() -> Response<Body> {
    let mut r = plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n");
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// A short text response.
pub fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `rate_limit`: one token every `interval`, at most `burst` saved up
/// (Go's `rate.NewLimiter(rate.Every(interval), burst)`).
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    burst: u32,
    /// (tokens, when last refilled)
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(interval: Duration, burst: u32) -> Self {
        Self {
            interval,
            burst,
            state: Mutex::new((f64::from(burst), Instant::now())),
        }
    }

    /// Takes a token if one is there.
    pub fn allow(&self) -> bool {
        let Ok(mut st) = self.state.lock() else {
            return true;
        };
        let now = Instant::now();
        let refill = now.duration_since(st.1).as_secs_f64() / self.interval.as_secs_f64();
        st.0 = (st.0 + refill).min(f64::from(self.burst));
        st.1 = now;
        if st.0 >= 1.0 {
            st.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests;
