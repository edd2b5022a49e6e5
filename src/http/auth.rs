//! Request guards of the web config: HTTP basic auth against bcrypt hashes
//! and the `rate_limit` token bucket. A refusal says only "401
//! Unauthorized" (or 429): never which part was wrong. bcrypt runs off the
//! async workers, one at a time, and its verdicts are cached so that an
//! authenticated scrape costs one hash lookup, not one bcrypt.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use base64::Engine as _;
use subtle::ConstantTimeEq;

/// Verdicts remembered; past this an arbitrary one is forgotten, so wrong
/// guesses cannot grow the map without bound.
const CACHE_MAX: usize = 256;

/// `basic_auth_users`: user name to bcrypt hash.
pub struct BasicAuth {
    users: Vec<(String, String)>,
    cache: Mutex<HashMap<[u8; 32], bool>>,
    /// bcrypt is deliberately slow; one at a time keeps a flood of wrong
    /// passwords from taking every blocking thread.
    bcrypt: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: hashes are secrets too.
        let names: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("BasicAuth").field("users", &names).finish()
    }
}

impl BasicAuth {
    /// Checks that every hash is a bcrypt hash.
    ///
    /// # Errors
    /// The first user whose hash is not bcrypt, without the hash.
    pub fn new(users: BTreeMap<String, String>) -> Result<Self, String> {
        for (user, hash) in &users {
            hash.parse::<bcrypt::HashParts>().map_err(|_| {
                format!("basic_auth_users.{user}: not a bcrypt hash (make one with `htpasswd -nBC 10 \"\"`)")
            })?;
        }
        Ok(Self {
            users: users.into_iter().collect(),
            cache: Mutex::new(HashMap::new()),
            bcrypt: tokio::sync::Mutex::new(()),
        })
    }

    /// Whether the request's `Authorization: Basic` names a user with the
    /// right password.
    pub async fn allows(&self, headers: &HeaderMap) -> bool {
        let Some((user, pass)) = credentials(headers) else {
            return false;
        };
        // Look at every user with a constant-time compare, so the time taken
        // does not tell which names exist.
        let mut found = None;
        for (u, h) in &self.users {
            if bool::from(u.as_bytes().ct_eq(&user)) {
                found = Some(h.clone());
            }
        }
        let known = found.is_some();
        // An unknown user still costs one bcrypt (against a real user's hash,
        // so at the same cost), for the same reason.
        let Some(hash) = found.or_else(|| self.users.first().map(|(_, h)| h.clone())) else {
            return false;
        };
        let key = cache_key(&user, &hash, &pass);
        if let Some(ok) = self.cache.lock().ok().and_then(|c| c.get(&key).copied()) {
            return ok && known;
        }
        let ok = {
            let _one_at_a_time = self.bcrypt.lock().await;
            tokio::task::spawn_blocking(move || bcrypt::verify(&pass, &hash).unwrap_or(false))
                .await
                .unwrap_or(false)
        };
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= CACHE_MAX {
                if let Some(k) = c.keys().next().copied() {
                    c.remove(&k);
                }
            }
            c.insert(key, ok);
        }
        ok && known
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
