//! `tls_server_config` to a rustls `ServerConfig` (ring provider): the
//! certificate and key (files or inline PEM), client certificate policy with
//! Go's `client_auth_type` names, TLS versions, cipher suites and curves.
//! Everything is checked here, at load, so a bad file fails at start (or
//! keeps the old config on reload), never at a handshake.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, ring as provider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use serde::Deserialize;

/// `tls_server_config` as written; empty strings mean "not set", as in Go.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct TlsFile {
    pub cert: String,
    pub key: String,
    pub client_ca: String,
    pub cert_file: String,
    pub key_file: String,
    pub client_auth_type: String,
    pub client_ca_file: String,
    pub client_allowed_sans: Option<Vec<String>>,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    pub cipher_suites: Vec<String>,
    pub prefer_server_cipher_suites: Option<bool>,
    pub curve_preferences: Vec<String>,
}

/// Why `tls_server_config` cannot be used; the texts follow exporter-toolkit's
/// keys so an operator finds the line to change.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("client_allowed_sans is not supported by gpumemd; use a client CA of its own instead")]
    AllowedSans,
    #[error("{from}: no PEM private key (PKCS#8, PKCS#1 or SEC1) found")]
    NoKey { from: String },
    #[error("min_version/max_version/cipher_suites: {0}")]
    Versions(rustls::Error),
    #[error("the certificate and key do not make a pair: {0}")]
    NotAPair(rustls::Error),
    #[error("set {0} or {0}_file, not both")]
    InlineAndFile(&'static str),
    #[error("missing one of {0} or {0}_file")]
    Missing(&'static str),
    #[error("{key}_file {}: cannot read: {source}", path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{from}: bad PEM: {source}")]
    BadPem {
        from: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{from}: no PEM certificate found")]
    NoCertificate { from: String },
    #[error("client_auth_type {0} needs client_ca_file or client_ca")]
    NoClientCa(String),
    #[error("{from}: {source}")]
    BadClientCa { from: String, source: rustls::Error },
    #[error("client CAs are configured without a client_auth_type that asks for client certificates")]
    CaWithoutClientAuth,
    #[error(transparent)]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("client_auth_type {0:?} is not one of {CLIENT_AUTH_TYPES}")]
    UnknownClientAuth(String),
    #[error("{0}: TLS 1.0 and 1.1 are not supported; use TLS12 or TLS13")]
    OldVersion(&'static str),
    #[error("{key}: {value:?} is not one of TLS12, TLS13")]
    UnknownVersion { key: &'static str, value: String },
    #[error("min_version is above max_version")]
    MinAboveMax,
    #[error("cipher_suites: {name:?} is not supported; supported: {known}")]
    UnknownSuite { name: String, known: String },
    #[error("curve_preferences: {0:?} is not one of X25519, CurveP256, CurveP384")]
    UnknownCurve(String),
}

/// The client certificate policies, by the names exporter-toolkit uses.
const CLIENT_AUTH_TYPES: &str =
    "NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert";

/// Go's TLS 1.3 suite names: Go ignores them in `cipher_suites` (TLS 1.3
/// suites are not configurable there), and so do we.
const GO_TLS13_SUITES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

fn enabled(t: &TlsFile) -> bool {
    [
        &t.cert,
        &t.key,
        &t.client_ca,
        &t.cert_file,
        &t.key_file,
        &t.client_ca_file,
        &t.client_auth_type,
    ]
    .iter()
    .any(|s| !s.is_empty())
}

/// The server config, or `None` when the section sets nothing TLS-related
/// (plain HTTP, as in exporter-toolkit). Files read are added to `watched`.
pub(super) fn server_config(
    t: &TlsFile,
    dir: &Path,
    watched: &mut Vec<PathBuf>,
) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    if !enabled(t) {
        return Ok(None);
    }
    if t.client_allowed_sans.is_some() {
        return Err(TlsError::AllowedSans);
    }
    let provider = Arc::new(crypto_provider(t)?);
    let versions = versions(t)?;
    let (cert_pem, cert_from) = pem(&t.cert, &t.cert_file, "cert", dir, watched)?;
    let certs = certificates(&cert_pem, &cert_from)?;
    let (key_pem, key_from) = pem(&t.key, &t.key_file, "key", dir, watched)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::NoKey { from: key_from })?;
    let verifier = client_verifier(t, dir, watched, &provider)?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(TlsError::Versions)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(TlsError::NotAPair)?;
    // HTTP/1.1 only: the server has no HTTP/2 (see docs/web-security.md).
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    Ok(Some(Arc::new(cfg)))
}

/// PEM bytes from the inline value or the file (relative to the web
/// config's directory), exactly one of them, and where they came from.
fn pem(
    inline: &str,
    file: &str,
    key: &'static str,
    dir: &Path,
    watched: &mut Vec<PathBuf>,
) -> Result<(Vec<u8>, String), TlsError> {
    match (inline.is_empty(), file.is_empty()) {
        (false, false) => Err(TlsError::InlineAndFile(key)),
        (true, true) => Err(TlsError::Missing(key)),
        (false, true) => Ok((inline.as_bytes().to_vec(), key.to_string())),
        (true, false) => {
            let p = dir.join(file);
            let bytes = match std::fs::read(&p) {
                Ok(b) => b,
                Err(source) => return Err(TlsError::Read { key, path: p, source }),
            };
            let from = format!("{key}_file {}", p.display());
            watched.push(p);
            Ok((bytes, from))
        }
    }
}

fn certificates(pem: &[u8], from: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadPem {
            from: from.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { from: from.to_owned() });
    }
    Ok(certs)
}

fn client_verifier(
    t: &TlsFile,
    dir: &Path,
    watched: &mut Vec<PathBuf>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let has_ca = !t.client_ca.is_empty() || !t.client_ca_file.is_empty();
    let mut roots = || -> Result<Arc<RootCertStore>, TlsError> {
        if !has_ca {
            return Err(TlsError::NoClientCa(t.client_auth_type.clone()));
        }
        let (pem, from) = pem(&t.client_ca, &t.client_ca_file, "client_ca", dir, watched)?;
        let mut store = RootCertStore::empty();
        for c in certificates(&pem, &from)? {
            store.add(c).map_err(|source| TlsError::BadClientCa {
                from: from.clone(),
                source,
            })?;
        }
        Ok(Arc::new(store))
    };
    let any = |mandatory| -> Arc<dyn ClientCertVerifier> {
        Arc::new(AnyClientCert {
            mandatory,
            algs: provider.signature_verification_algorithms,
        })
    };
    let webpki = |roots| WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
    match t.client_auth_type.as_str() {
        "" | "NoClientCert" if has_ca => Err(TlsError::CaWithoutClientAuth),
        "" | "NoClientCert" => Ok(WebPkiClientVerifier::no_client_auth()),
        "RequestClientCert" => Ok(any(false)),
        // "RequireClientCert" is exporter-toolkit's old spelling.
        "RequireAnyClientCert" | "RequireClientCert" => Ok(any(true)),
        "VerifyClientCertIfGiven" => Ok(webpki(roots()?).allow_unauthenticated().build()?),
        "RequireAndVerifyClientCert" => Ok(webpki(roots()?).build()?),
        other => Err(TlsError::UnknownClientAuth(other.to_owned())),
    }
}

fn version(v: Option<&str>, key: &'static str, default: u8) -> Result<u8, TlsError> {
    match v.unwrap_or("") {
        "" => Ok(default),
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => Err(TlsError::OldVersion(key)),
        other => Err(TlsError::UnknownVersion {
            key,
            value: other.to_owned(),
        }),
    }
}

fn versions(t: &TlsFile) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
    let min = version(t.min_version.as_deref(), "min_version", 12)?;
    let max = version(t.max_version.as_deref(), "max_version", 13)?;
    if min > max {
        return Err(TlsError::MinAboveMax);
    }
    let mut v = Vec::new();
    if min <= 12 {
        v.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        v.push(&rustls::version::TLS13);
    }
    Ok(v)
}

/// ring's provider, narrowed to the configured TLS 1.2 suites and curves
/// (in the configured order, which is the server's preference).
fn crypto_provider(t: &TlsFile) -> Result<CryptoProvider, TlsError> {
    let mut p = provider::default_provider();
    if !t.cipher_suites.is_empty() {
        let is12 = |s: &rustls::SupportedCipherSuite| s.version() == &rustls::version::TLS12;
        let mut chosen = Vec::new();
        for name in &t.cipher_suites {
            if GO_TLS13_SUITES.contains(&name.as_str()) {
                continue;
            }
            let found = p
                .cipher_suites
                .iter()
                .find(|s| is12(s) && s.suite().as_str() == Some(name.as_str()));
            let Some(s) = found else {
                let known: Vec<&str> = p
                    .cipher_suites
                    .iter()
                    .filter(|s| is12(s))
                    .filter_map(|s| s.suite().as_str())
                    .collect();
                return Err(TlsError::UnknownSuite {
                    name: name.clone(),
                    known: known.join(", "),
                });
            };
            chosen.push(*s);
        }
        chosen.extend(p.cipher_suites.iter().filter(|s| !is12(s)).copied());
        p.cipher_suites = chosen;
    }
    if !t.curve_preferences.is_empty() {
        let mut groups = Vec::new();
        for name in &t.curve_preferences {
            groups.push(match name.as_str() {
                "X25519" => provider::kx_group::X25519,
                "CurveP256" => provider::kx_group::SECP256R1,
                "CurveP384" => provider::kx_group::SECP384R1,
                other => return Err(TlsError::UnknownCurve(other.to_owned())),
            });
        }
        p.kx_groups = groups;
    }
    Ok(p)
}

/// Go's RequestClientCert / RequireAnyClientCert: ask for a certificate
/// and check that the client holds its key, but trust any issuer.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
