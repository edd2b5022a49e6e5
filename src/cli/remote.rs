//! How every client subcommand (`check --url`, `snapshot --url`,
//! `suspend`, `resume`) reaches a running daemon: one set of flags
//! ([`ClientArgs`], flattened into each) and one client builder
//! ([`ClientArgs::connect`]) with the web config's TLS files (a private CA,
//! a client certificate) and basic auth (user and password from a file or
//! the environment, never argv; `user:password@` in the URL still works).
//!
//! Owns: the flags, the HTTP client, credentials, and errors that name the
//! URL (without credentials) and the cause. Must not: judge what a daemon
//! answers (`check`, `snapshot_cmd` and [`lifecycle`] do) or act on
//! processes itself.

pub mod lifecycle;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The daemon a client subcommand asks when `--url` is not given (where
/// one is needed: `suspend`, `resume`).
pub const DEFAULT_URL: &str = "http://127.0.0.1:9947";
/// The daemon's snapshot, which `check --url`, `snapshot --url` and
/// `suspend` / `resume` (for the process's name and size) read.
pub const SNAPSHOT_PATH: &str = "/api/v1/snapshot";

/// The options of every subcommand that talks to a daemon. The basic-auth
/// user is `--auth-user` because `check` and `snapshot` use `--user` as a
/// filter (processes of a user).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientArgs {
    /// Ask the running daemon at this base URL (e.g. http://127.0.0.1:9947 or
    /// https://gpu1:9947). `check` and `snapshot` poll here without it;
    /// `suspend` and `resume` default to http://127.0.0.1:9947.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// For an https:// daemon: a CA certificate (PEM) to trust besides the
    /// system's, e.g. the web config's private CA.
    #[arg(long = "ca-file", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM), for a web config that asks for one; needs --key-file.
    #[arg(long = "cert-file", value_name = "FILE", requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long = "key-file", value_name = "FILE", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
    /// A user of the web config's basic_auth_users; the password comes from
    /// --password-file or the GPUMEMD_PASSWORD environment variable, never
    /// from the command line.
    #[arg(long = "auth-user", value_name = "NAME")]
    pub auth_user: Option<String>,
    /// File holding the --auth-user password (its first line).
    #[arg(long = "password-file", value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

/// Why a daemon could not be asked, or what it said instead of an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("`{0}` is not a URL")]
    BadUrl(String),
    #[error("{flag} {}: {detail}", path.display())]
    TlsFile {
        flag: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("--password-file {}: {source}", path.display())]
    PasswordFile { path: PathBuf, source: std::io::Error },
    #[error("--auth-user needs --password-file FILE or GPUMEMD_PASSWORD")]
    NoPassword,
    #[error("--password-file is the password of --auth-user NAME; give that too")]
    PasswordWithoutUser,
    #[error("cannot build an HTTP client: {0}")]
    Client(String),
    #[error("cannot ask {url}: {cause}; is gpumemd running and listening there?")]
    Unreachable { url: String, cause: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16, body: String },
}

/// Basic-auth credentials.
#[derive(Clone)]
struct Credentials {
    user: String,
    password: Option<String>,
}

/// A daemon to ask: the client, its base URL without credentials, and
/// the credentials to send.
pub struct Daemon {
    client: reqwest::Client,
    base: reqwest::Url,
    auth: Option<Credentials>,
}

impl ClientArgs {
    /// A client for `url` (`--url` or the caller's default) that gives up
    /// after `timeout`.
    ///
    /// # Errors
    /// A bad URL, an unreadable or invalid TLS or password file (naming its
    /// flag), `--auth-user` without a password.
    pub fn connect(&self, url: &str, timeout: Duration) -> Result<Daemon, ClientError> {
        let mut base = reqwest::Url::parse(url).map_err(|_| ClientError::BadUrl(url.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
            return Err(ClientError::BadUrl(url.to_string()));
        }
        let in_url = (!base.username().is_empty()).then(|| Credentials {
            user: base.username().to_string(),
            password: base.password().map(str::to_string),
        });
        // Credentials go in the header, never into messages that quote the URL.
        let _ = base.set_username("");
        let _ = base.set_password(None);
        if self.auth_user.is_none() && self.password_file.is_some() {
            return Err(ClientError::PasswordWithoutUser);
        }
        let auth = match &self.auth_user {
            Some(user) => Some(Credentials {
                user: user.clone(),
                password: Some(self.password()?),
            }),
            None => in_url,
        };
        let mut b = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("gpumemd/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &self.ca_file {
            let pem = read("--ca-file", ca)?;
            let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| tls_file("--ca-file", ca, e))?;
            b = b.add_root_certificate(cert);
        }
        if let (Some(c), Some(k)) = (&self.cert_file, &self.key_file) {
            let mut pem = read("--cert-file", c)?;
            pem.push(b'\n');
            pem.extend(read("--key-file", k)?);
            let id = reqwest::Identity::from_pem(&pem)
                .map_err(|e| tls_file("--cert-file", c, format!("with --key-file {}: {e}", k.display())))?;
            b = b.identity(id);
        }
        let client = b.build().map_err(|e| ClientError::Client(root_cause(&e)))?;
        Ok(Daemon { client, base, auth })
    }

    /// The first option given that only applies with `--url` (for `check`
    /// and `snapshot`, which poll here without it).
    pub fn set_without_url(&self) -> Option<&'static str> {
        if self.url.is_some() {
            return None;
        }
        [
            (self.ca_file.is_some(), "--ca-file"),
            (self.cert_file.is_some(), "--cert-file"),
            (self.key_file.is_some(), "--key-file"),
            (self.auth_user.is_some(), "--auth-user"),
            (self.password_file.is_some(), "--password-file"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }

    /// The first line of `--password-file`, else `GPUMEMD_PASSWORD`.
    fn password(&self) -> Result<String, ClientError> {
        match &self.password_file {
            Some(f) => std::fs::read_to_string(f)
                .map(|t| t.lines().next().unwrap_or("").to_string())
                .map_err(|source| ClientError::PasswordFile {
                    path: f.clone(),
                    source,
                }),
            None => std::env::var("GPUMEMD_PASSWORD").map_err(|_| ClientError::NoPassword),
        }
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| tls_file(flag, path, e))
}

fn tls_file(flag: &'static str, path: &Path, e: impl std::fmt::Display) -> ClientError {
    ClientError::TlsFile {
        flag,
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// The innermost cause ("Connection refused (os error 111)", "invalid
/// peer certificate: UnknownIssuer"): what a person can act on.
fn root_cause(e: &dyn std::error::Error) -> String {
    let last = std::iter::successors(Some(e), |c| c.source())
        .last()
        .map_or_else(String::new, ToString::to_string);
    if e.to_string().contains("timed out") || last.contains("timed out") {
        return "no answer in time (timed out)".into();
    }
    last
}

impl Daemon {
    /// The URL of `path` on this daemon; a base URL that already ends with
    /// `path` is kept as it is.
    pub fn endpoint(&self, path: &str) -> reqwest::Url {
        let mut u = self.base.clone();
        if !u.path().trim_end_matches('/').ends_with(path) {
            let base = u.path().trim_end_matches('/').to_string();
            u.set_path(&format!("{base}{path}"));
        }
        u
    }

    /// The body of `GET path?query` (the pairs encoded; none: no `?`) on a
    /// 2xx answer.
    ///
    /// # Errors
    /// Unreachable (with the cause), or any other status.
    pub async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<String, ClientError> {
        let (status, body, url) = self.send(reqwest::Method::GET, self.with_query(path, query)).await?;
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(ClientError::Status { url, status, body })
        }
    }

    /// `POST path`: its status, body and URL, whatever the status.
    ///
    /// # Errors
    /// Only when no answer came.
    pub async fn post(&self, path: &str, query: &[(&str, &str)]) -> Result<(u16, String, String), ClientError> {
        self.send(reqwest::Method::POST, self.with_query(path, query)).await
    }

    fn with_query(&self, path: &str, query: &[(&str, &str)]) -> reqwest::Url {
        let mut url = self.endpoint(path);
        if !query.is_empty() {
            url.query_pairs_mut().clear().extend_pairs(query);
        }
        url
    }

    async fn send(&self, method: reqwest::Method, url: reqwest::Url) -> Result<(u16, String, String), ClientError> {
        let shown = url.to_string();
        let unreachable = |e: reqwest::Error| ClientError::Unreachable {
            url: shown.clone(),
            cause: root_cause(&e),
        };
        let mut req = self.client.request(method, url.clone());
        if let Some(c) = &self.auth {
            req = req.basic_auth(&c.user, c.password.as_deref());
        }
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(unreachable)?;
        Ok((status, body, shown))
    }

    /// Whether credentials are sent (for the message of a 401).
    pub fn has_credentials(&self) -> bool {
        self.auth.is_some()
    }
}

/// Runs `f` on a small runtime of its own: the CLI has none.
///
/// # Errors
/// The runtime could not start, or what `f` returns.
pub fn block_on<T, E: From<ClientError>>(f: impl std::future::Future<Output = Result<T, E>>) -> Result<T, E> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::Client(format!("cannot start a runtime: {e}")))?
        .block_on(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn a_query_is_encoded_and_credentials_leave_the_url() {
        let d = ClientArgs::default()
            .connect("http://me:pw@127.0.0.1:9947/", T)
            .expect("client");
        let u = d.with_query("/api/v1/reports", &[("job", "4 2&x")]);
        assert_eq!(u.as_str(), "http://127.0.0.1:9947/api/v1/reports?job=4+2%26x");
        assert!(d.has_credentials());
        assert_eq!(
            d.with_query("/api/v1/snapshot", &[]).as_str(),
            "http://127.0.0.1:9947/api/v1/snapshot"
        );
    }

    #[test]
    fn bad_files_and_urls_name_their_flag() {
        let args = ClientArgs {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..ClientArgs::default()
        };
        let e = args.connect(DEFAULT_URL, T).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.starts_with("--ca-file /nonexistent/ca.pem")),
            "{e:?}"
        );
        let args = ClientArgs {
            auth_user: Some("ops".into()),
            password_file: Some("/nonexistent/pw".into()),
            ..ClientArgs::default()
        };
        let e = args.connect(DEFAULT_URL, T).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.starts_with("--password-file /nonexistent/pw")),
            "{e:?}"
        );
        for bad in ["not a url", "ftp://h/", "http://"] {
            let e = ClientArgs::default().connect(bad, T).err().map(|e| e.to_string());
            assert_eq!(e, Some(format!("`{bad}` is not a URL")));
        }
    }

    #[test]
    fn endpoints_and_credentials_in_the_url() {
        let d = ClientArgs::default()
            .connect("http://ops:pw@h:9947/", T)
            .expect("client");
        assert_eq!(d.endpoint("/api/v1/snapshot").as_str(), "http://h:9947/api/v1/snapshot");
        assert!(d.has_credentials());
        let d = ClientArgs::default()
            .connect("http://h/api/v1/snapshot", T)
            .expect("client");
        assert_eq!(d.endpoint("/api/v1/snapshot").as_str(), "http://h/api/v1/snapshot");
        assert!(!d.has_credentials());
    }

    #[test]
    fn an_unreachable_daemon_names_the_url_and_the_cause() {
        // A port nothing listens on: bind, learn the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(9);
        let url = format!("http://127.0.0.1:{port}");
        let d = ClientArgs::default().connect(&url, T).expect("client");
        let e = block_on(d.get("/api/v1/snapshot", &[])).err().map(|e| e.to_string());
        let want = format!("cannot ask {url}/api/v1/snapshot: Connection refused");
        assert!(e.as_deref().is_some_and(|e| e.starts_with(&want)), "{e:?}");
    }
}
