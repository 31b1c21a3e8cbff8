//! `--web.config.file`: TLS, client certificates, basic-auth users and
//! response headers for every HTTP endpoint, in the file format of
//! Prometheus' exporter-toolkit (the `--web.config.file` of node_exporter,
//! blackbox_exporter and Prometheus itself), so that an operator's existing
//! files, habits and security reviews carry over.
//!
//! The file is read whole at start and at every reload; a file that does
//! not load is refused naming itself (and the line, where the YAML parser
//! gives one), and on reload the previous one stays in force. TLS is
//! rustls; passwords are bcrypt hashes, checked by the bcrypt crate.
//!
//! bcrypt is slow on purpose (tens of milliseconds at cost 10), so a
//! successful check is remembered ([`BasicAuth`]): Prometheus scraping
//! every second costs one hash, not one a second. Checks not remembered
//! run one at a time, off the async threads, and only a few may wait: a
//! flood of wrong passwords costs at most one core, and is told to retry
//! rather than queued without bound.

#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hyper::header::{HeaderName, HeaderValue};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A web configuration file that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
#[error("web config file {}: {what}", path.display())]
pub struct WebConfigError {
    /// The file given with `--web.config.file`.
    pub path: PathBuf,
    /// What is wrong with it (with its line, where the parser gives one).
    pub what: String,
}

/// What the HTTP server applies to every connection and request. The
/// default (no `--web.config.file`) is plain HTTP, no users, no headers.
#[derive(Default)]
pub struct WebConfig {
    tls: Option<tokio_rustls::TlsAcceptor>,
    users: HashMap<String, String>,
    headers: Vec<(HeaderName, HeaderValue)>,
    client_auth: ClientAuth,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.len())
            .field("headers", &self.headers.len())
            .field("client_auth", &self.client_auth)
            .finish()
    }
}

impl WebConfig {
    /// Reads and checks the file at `path`; relative file names in it are
    /// taken from the file's own directory, as exporter-toolkit does.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let err = |what: String| WebConfigError {
            path: path.to_path_buf(),
            what,
        };
        let text = crate::config::read_text(path).map_err(|e| match e {
            crate::config::ConfigError::Read { error, .. } => err(format!("cannot read: {error}")),
            e => err(e.to_string()),
        })?;
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml::from_str(&text).map_err(|e| err(e.to_string()))?
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        file.build(dir).map_err(err)
    }

    /// Whether connections must speak TLS.
    pub fn tls(&self) -> Option<&tokio_rustls::TlsAcceptor> {
        self.tls.as_ref()
    }

    /// Whether requests must carry a user's password.
    pub fn requires_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// The headers added to every response.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// One line for the log: what is in force.
    pub fn summary(&self) -> String {
        let tls = match (&self.tls, self.client_auth) {
            (None, _) => "plain HTTP".to_string(),
            (Some(_), ClientAuth::NoClientCert) => "TLS".to_string(),
            (Some(_), c) => format!("TLS, client certificates: {}", c.as_str()),
        };
        format!(
            "{tls}, {} basic-auth user(s), {} header(s)",
            self.users.len(),
            self.headers.len()
        )
    }
}

/// The file as written; unknown keys are refused (a misspelt key would
/// otherwise leave an endpoint open without a word).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    http_server_config: Option<HttpFile>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, BcryptHash>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    client_auth_type: ClientAuth,
    client_ca_file: Option<PathBuf>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<TlsVersion>,
    max_version: Option<TlsVersion>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<Curve>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    /// Accepted for compatibility: pathprobe serves HTTP/1.1 only.
    #[allow(dead_code)]
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<AllowedHeader, String>,
}

/// A bcrypt hash, checked when the file is read so that a user whose
/// password can never match is an error, not a locked door.
#[derive(Debug, Deserialize)]
#[serde(try_from = "String")]
struct BcryptHash(String);

impl TryFrom<String> for BcryptHash {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let parts: bcrypt::HashParts = s.parse().map_err(|_| {
            "a basic_auth_users value must be a bcrypt hash ($2y$10$..., as `htpasswd -nBC 10 \"\" | tr -d ':\\n'` prints), not a password".to_string()
        })?;
        if parts.get_cost() > MAX_BCRYPT_COST {
            return Err(format!(
                "bcrypt cost {} is over {MAX_BCRYPT_COST}: each check would take seconds of CPU",
                parts.get_cost()
            ));
        }
        Ok(BcryptHash(s))
    }
}

/// Above this cost one check takes seconds (about 70 ms at 10, doubling
/// with each step), which no scrape can wait for.
const MAX_BCRYPT_COST: u32 = 16;

/// exporter-toolkit's client authentication policies (Go's names).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
enum ClientAuth {
    #[default]
    NoClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    fn as_str(self) -> &'static str {
        match self {
            ClientAuth::NoClientCert => "NoClientCert",
            ClientAuth::VerifyClientCertIfGiven => "VerifyClientCertIfGiven",
            ClientAuth::RequireAndVerifyClientCert => "RequireAndVerifyClientCert",
        }
    }
}

impl TryFrom<String> for ClientAuth {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "" | "NoClientCert" => Ok(ClientAuth::NoClientCert),
            "VerifyClientCertIfGiven" => Ok(ClientAuth::VerifyClientCertIfGiven),
            "RequireAndVerifyClientCert" => Ok(ClientAuth::RequireAndVerifyClientCert),
            "RequestClientCert" | "RequireAnyClientCert" => Err(format!(
                "client_auth_type {s} is not supported: it accepts a certificate without verifying it; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file"
            )),
            _ => Err(format!(
                "unknown client_auth_type {s:?}: expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
enum TlsVersion {
    Tls12,
    Tls13,
}

impl TryFrom<String> for TlsVersion {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "TLS12" => Ok(TlsVersion::Tls12),
            "TLS13" => Ok(TlsVersion::Tls13),
            "TLS10" | "TLS11" => Err(format!(
                "{s} is not supported (rustls speaks TLS12 and TLS13 only, and both older versions are deprecated)"
            )),
            _ => Err(format!("unknown TLS version {s:?}: expected TLS12 or TLS13")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
enum Curve {
    X25519,
    P256,
    P384,
}

impl TryFrom<String> for Curve {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "X25519" => Ok(Curve::X25519),
            "CurveP256" => Ok(Curve::P256),
            "CurveP384" => Ok(Curve::P384),
            "CurveP521" => {
                Err("CurveP521 is not supported here: use X25519, CurveP256 or CurveP384".into())
            }
            _ => Err(format!(
                "unknown curve {s:?}: expected X25519, CurveP256 or CurveP384"
            )),
        }
    }
}

/// The headers exporter-toolkit lets the file set; others are refused,
/// so that the file cannot forge what the endpoints themselves say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
enum AllowedHeader {
    ContentSecurityPolicy,
    XFrameOptions,
    XContentTypeOptions,
    XXssProtection,
    StrictTransportSecurity,
}

impl AllowedHeader {
    fn name(self) -> &'static str {
        match self {
            AllowedHeader::ContentSecurityPolicy => "Content-Security-Policy",
            AllowedHeader::XFrameOptions => "X-Frame-Options",
            AllowedHeader::XContentTypeOptions => "X-Content-Type-Options",
            AllowedHeader::XXssProtection => "X-XSS-Protection",
            AllowedHeader::StrictTransportSecurity => "Strict-Transport-Security",
        }
    }

    const ALL: [AllowedHeader; 5] = [
        AllowedHeader::ContentSecurityPolicy,
        AllowedHeader::XFrameOptions,
        AllowedHeader::XContentTypeOptions,
        AllowedHeader::XXssProtection,
        AllowedHeader::StrictTransportSecurity,
    ];
}

impl TryFrom<String> for AllowedHeader {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        AllowedHeader::ALL
            .into_iter()
            .find(|h| h.name().eq_ignore_ascii_case(&s))
            .ok_or_else(|| {
                let names: Vec<&str> = AllowedHeader::ALL.iter().map(|h| h.name()).collect();
                format!(
                    "header {s:?} cannot be set here: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl File {
    fn build(self, dir: &Path) -> Result<WebConfig, String> {
        let mut headers = Vec::new();
        if let Some(http) = self.http_server_config {
            for (h, v) in http.headers {
                if v.is_empty() {
                    continue;
                }
                let bad = |why: &str| format!("http_server_config.headers.{}: {why}", h.name());
                match h {
                    AllowedHeader::XFrameOptions
                        if !["deny", "sameorigin"].contains(&v.to_ascii_lowercase().as_str()) =>
                    {
                        return Err(bad("expected deny or sameorigin"));
                    }
                    AllowedHeader::XContentTypeOptions if !v.eq_ignore_ascii_case("nosniff") => {
                        return Err(bad("expected nosniff"));
                    }
                    _ => {}
                }
                let value = HeaderValue::from_str(&v)
                    .map_err(|_| bad("not a valid header value (printable ASCII)"))?;
                headers.push((HeaderName::from_static(lower(h)), value));
            }
        }
        let users = self
            .basic_auth_users
            .unwrap_or_default()
            .into_iter()
            .map(|(u, h)| {
                if u.is_empty() || u.contains(':') {
                    Err(format!(
                        "basic_auth_users: user name {u:?} must be non-empty and hold no ':'"
                    ))
                } else {
                    Ok((u, h.0))
                }
            })
            .collect::<Result<HashMap<_, _>, _>>()?;
        let (tls, client_auth) = match self.tls_server_config {
            Some(t) => match t.acceptor(dir)? {
                Some((a, c)) => (Some(a), c),
                None => (None, ClientAuth::NoClientCert),
            },
            None => (None, ClientAuth::NoClientCert),
        };
        Ok(WebConfig {
            tls,
            users,
            headers,
            client_auth,
        })
    }
}

/// The lower-case name hyper wants for a static header name.
fn lower(h: AllowedHeader) -> &'static str {
    match h {
        AllowedHeader::ContentSecurityPolicy => "content-security-policy",
        AllowedHeader::XFrameOptions => "x-frame-options",
        AllowedHeader::XContentTypeOptions => "x-content-type-options",
        AllowedHeader::XXssProtection => "x-xss-protection",
        AllowedHeader::StrictTransportSecurity => "strict-transport-security",
    }
}

/// PEM text given inline (`cert`) or in a file (`cert_file`), never both.
fn pem(
    dir: &Path,
    inline: Option<String>,
    file: Option<PathBuf>,
    name: &str,
) -> Result<Option<(Vec<u8>, String)>, String> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(format!(
            "tls_server_config: give {name} or {name}_file, not both"
        )),
        (Some(text), None) => Ok(Some((text.into_bytes(), format!("{name} (inline)")))),
        (None, Some(f)) => {
            let f = dir.join(f);
            let bytes =
                std::fs::read(&f).map_err(|e| format!("{name}_file {}: {e}", f.display()))?;
            Ok(Some((bytes, format!("{name}_file {}", f.display()))))
        }
        (None, None) => Ok(None),
    }
}

fn certificates(bytes: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: holds no PEM certificate"));
    }
    Ok(certs)
}

impl TlsFile {
    /// The acceptor, or `None` when the section sets nothing (exporter-
    /// toolkit then serves plain HTTP too).
    fn acceptor(
        self,
        dir: &Path,
    ) -> Result<Option<(tokio_rustls::TlsAcceptor, ClientAuth)>, String> {
        use rustls::crypto::ring;
        let has_cert = self.cert.is_some() || self.cert_file.is_some();
        let has_key = self.key.is_some() || self.key_file.is_some();
        if has_cert != has_key {
            return Err(format!(
                "tls_server_config: {} is missing",
                if has_cert {
                    "key_file (or key)"
                } else {
                    "cert_file (or cert)"
                }
            ));
        }
        let cert = pem(dir, self.cert, self.cert_file, "cert")?;
        let key = pem(dir, self.key, self.key_file, "key")?;
        let client_ca = pem(dir, self.client_ca, self.client_ca_file, "client_ca")?;
        let (cert, key) = match (cert, key) {
            (None, None)
                if client_ca.is_none() && self.client_auth_type == ClientAuth::NoClientCert =>
            {
                return Ok(None)
            }
            (Some(c), Some(k)) => (c, k),
            (None, _) => return Err("tls_server_config: cert_file (or cert) is missing".into()),
            (_, None) => return Err("tls_server_config: key_file (or key) is missing".into()),
        };
        if self.client_allowed_sans.is_some() {
            return Err("tls_server_config: client_allowed_sans is not supported by pathprobe; issue client certificates from a CA of their own instead".into());
        }
        let certs = certificates(&cert.0, &cert.1)?;
        let key = PrivateKeyDer::from_pem_slice(&key.0)
            .map_err(|e| format!("{}: no PEM private key: {e}", key.1))?;

        // ring, not aws-lc-rs: it builds without cmake, and the endpoints
        // need no post-quantum key exchange (the reason it is deprecated).
        #[allow(deprecated)]
        let mut provider = ring::default_provider();
        if let Some(names) = &self.cipher_suites {
            let mut kept = Vec::new();
            for name in names {
                let found = ring::ALL_CIPHER_SUITES.iter().find(|s| {
                    s.tls13().is_none()
                        && s.suite().as_str().is_some_and(|n| {
                            n == name || n.strip_suffix("_SHA256") == Some(name.as_str())
                        })
                });
                match found {
                    Some(s) => kept.push(*s),
                    None => {
                        let known: Vec<&str> = ring::ALL_CIPHER_SUITES
                            .iter()
                            .filter(|s| s.tls13().is_none())
                            .filter_map(|s| s.suite().as_str())
                            .collect();
                        return Err(format!(
                            "tls_server_config.cipher_suites: {name:?} is not supported; TLS 1.2 suites here: {}",
                            known.join(", ")
                        ));
                    }
                }
            }
            // TLS 1.3's suites are not configurable, as in Go.
            kept.extend(
                ring::ALL_CIPHER_SUITES
                    .iter()
                    .filter(|s| s.tls13().is_some())
                    .copied(),
            );
            provider.cipher_suites = kept;
        }
        if let Some(curves) = &self.curve_preferences {
            provider.kx_groups = curves
                .iter()
                .map(|c| match c {
                    Curve::X25519 => ring::kx_group::X25519,
                    Curve::P256 => ring::kx_group::SECP256R1,
                    Curve::P384 => ring::kx_group::SECP384R1,
                })
                .collect();
        }
        let min = self.min_version.unwrap_or(TlsVersion::Tls12);
        let max = self.max_version.unwrap_or(TlsVersion::Tls13);
        if min > max {
            return Err("tls_server_config: min_version is above max_version".into());
        }
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
            (TlsVersion::Tls12, &rustls::version::TLS12),
            (TlsVersion::Tls13, &rustls::version::TLS13),
        ]
        .into_iter()
        .filter(|(v, _)| (min..=max).contains(v))
        .map(|(_, p)| p)
        .collect();
        let provider = Arc::new(provider);
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| format!("tls_server_config: {e}"))?;
        let builder = match (self.client_auth_type, client_ca) {
            (ClientAuth::NoClientCert, None) => builder.with_no_client_auth(),
            (ClientAuth::NoClientCert, Some(_)) => {
                return Err("tls_server_config: client_ca_file is set but client_auth_type is NoClientCert, so no certificate would be asked for; set client_auth_type: RequireAndVerifyClientCert".into())
            }
            (c, None) => {
                return Err(format!(
                    "tls_server_config: client_auth_type {} needs client_ca_file (the CA that issues client certificates)",
                    c.as_str()
                ))
            }
            (c, Some((bytes, what))) => {
                let mut roots = rustls::RootCertStore::empty();
                for ca in certificates(&bytes, &what)? {
                    roots
                        .add(ca)
                        .map_err(|e| format!("{what}: unusable CA certificate: {e}"))?;
                }
                let mut v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider.clone(),
                );
                if c == ClientAuth::VerifyClientCertIfGiven {
                    v = v.allow_unauthenticated();
                }
                let v = v
                    .build()
                    .map_err(|e| format!("tls_server_config: client CA: {e}"))?;
                builder.with_client_cert_verifier(v)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| format!("tls_server_config: certificate and key: {e}"))?;
        config.ignore_client_order = self.prefer_server_cipher_suites.unwrap_or(true);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some((
            tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            self.client_auth_type,
        )))
    }
}

/// The verdict on a request's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthVerdict {
    /// No users configured, or a user's right password.
    Allowed,
    /// No credentials, an unknown user or a wrong password: 401.
    Unauthorized,
    /// Too many checks waiting: 429, try again.
    Busy,
}

/// Checks not remembered that may wait for the one running; more are
/// told to retry.
const MAX_WAITING_CHECKS: usize = 8;
/// Successful checks remembered; past this the memory starts over.
const MAX_REMEMBERED: usize = 1024;

/// Checks basic-auth credentials against a [`WebConfig`]'s users, with
/// a memory of the successful ones, shared across reloads (an entry
/// names the hash it matched, so a changed password is checked again).
pub struct BasicAuth {
    remembered: Mutex<std::collections::HashSet<[u8; 32]>>,
    running: tokio::sync::Semaphore,
    waiting: AtomicUsize,
}

impl Default for BasicAuth {
    fn default() -> Self {
        BasicAuth::new()
    }
}

impl BasicAuth {
    /// A checker with nothing remembered.
    pub fn new() -> BasicAuth {
        BasicAuth {
            remembered: Default::default(),
            running: tokio::sync::Semaphore::new(1),
            waiting: AtomicUsize::new(0),
        }
    }

    fn key(user: &str, hash: &str, password: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [user, hash, password] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().into()
    }

    /// The verdict on an `Authorization` header under `config`.
    pub async fn check(&self, config: &WebConfig, header: Option<&HeaderValue>) -> AuthVerdict {
        if config.users.is_empty() {
            return AuthVerdict::Allowed;
        }
        let Some((user, password)) = header.and_then(parse_basic) else {
            return AuthVerdict::Unauthorized;
        };
        // An unknown user is checked against a real hash all the same, so
        // that the time taken does not say which users exist.
        let (known, hash) = match config.users.get(&user) {
            Some(h) => (true, h.clone()),
            None => match config.users.values().next() {
                Some(h) => (false, h.clone()),
                None => return AuthVerdict::Unauthorized,
            },
        };
        let key = Self::key(&user, &hash, &password);
        if known
            && self
                .remembered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&key)
        {
            return AuthVerdict::Allowed;
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING_CHECKS {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return AuthVerdict::Busy;
        }
        let permit = self.running.acquire().await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        let Ok(_permit) = permit else {
            return AuthVerdict::Busy;
        };
        let ok = tokio::task::spawn_blocking(move || {
            bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if !(ok && known) {
            return AuthVerdict::Unauthorized;
        }
        let mut r = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        if r.len() >= MAX_REMEMBERED {
            r.clear();
        }
        r.insert(key);
        AuthVerdict::Allowed
    }
}

/// `Basic BASE64(user:password)`, decoded.
fn parse_basic(v: &HeaderValue) -> Option<(String, String)> {
    use base64::Engine;
    let v = v.to_str().ok()?;
    let (scheme, rest) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<WebConfig, WebConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        std::fs::write(&path, yaml).unwrap();
        WebConfig::load(&path)
    }

    fn basic(user: &str, pass: &str) -> HeaderValue {
        use base64::Engine;
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        HeaderValue::from_str(&format!("Basic {b}")).unwrap()
    }

    #[test]
    fn an_empty_file_is_plain_http_without_users() {
        let c = load("").unwrap();
        assert!(c.tls().is_none());
        assert!(!c.requires_auth());
        assert_eq!(c.summary(), "plain HTTP, 0 basic-auth user(s), 0 header(s)");
    }

    #[test]
    fn errors_name_the_file_and_the_line() {
        let e = load("basic_auth_users:\n  alice: x\ntls_server_config:\n  cert_fil: a\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("web config file "), "{e}");
        assert!(e.contains("web.yml"), "{e}");
        assert!(e.contains("line 2"), "{e}");
        assert!(e.contains("bcrypt hash"), "{e}");
        let e = load("tls_server_config:\n  cert_fil: a\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `cert_fil`"), "{e}");
        assert!(e.contains("line 2"), "{e}");
        let e = load("tls_server_config:\n  min_version: TLS10\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TLS10 is not supported") && e.contains("line 2"),
            "{e}"
        );
        let e = load("http_server_config:\n  headers:\n    Server: x\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot be set here") && e.contains("line 3"),
            "{e}"
        );
    }

    #[test]
    fn tls_needs_both_files_and_a_ca_for_client_certificates() {
        let e = load("tls_server_config:\n  cert_file: a.pem\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("key_file (or key) is missing"), "{e}");
        let e = load("tls_server_config:\n  cert_file: nothere.pem\n  key_file: k.pem\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cert_file") && e.contains("nothere.pem"), "{e}");
        let e = load("tls_server_config:\n  client_auth_type: RequireAnyClientCert\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not supported"), "{e}");
    }

    #[test]
    fn headers_are_checked_and_kept() {
        let c = load(
            "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n    Content-Security-Policy: \"default-src 'self'\"\n    X-XSS-Protection: \"\"\n",
        )
        .unwrap();
        let names: Vec<&str> = c.headers().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["content-security-policy", "x-frame-options"]);
        let e = load("http_server_config:\n  headers:\n    X-Frame-Options: allow\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("deny or sameorigin"), "{e}");
    }

    #[tokio::test]
    async fn passwords_are_checked_and_successes_remembered() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = load(&format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
        assert!(c.requires_auth());
        let auth = BasicAuth::new();
        assert_eq!(auth.check(&c, None).await, AuthVerdict::Unauthorized);
        let good = basic("prometheus", "s3cret");
        assert_eq!(auth.check(&c, Some(&good)).await, AuthVerdict::Allowed);
        assert_eq!(auth.remembered.lock().unwrap().len(), 1);
        assert_eq!(auth.check(&c, Some(&good)).await, AuthVerdict::Allowed);
        assert_eq!(auth.remembered.lock().unwrap().len(), 1);
        for bad in [
            basic("prometheus", "wrong"),
            basic("mallory", "s3cret"),
            HeaderValue::from_static("Basic !!!"),
            HeaderValue::from_static("Bearer abc"),
        ] {
            assert_eq!(auth.check(&c, Some(&bad)).await, AuthVerdict::Unauthorized);
        }
        // Failures are not remembered.
        assert_eq!(auth.remembered.lock().unwrap().len(), 1);
        // No users: everything passes.
        assert_eq!(
            auth.check(&WebConfig::default(), None).await,
            AuthVerdict::Allowed
        );
    }

    #[tokio::test]
    async fn a_flood_of_checks_is_bounded() {
        let hash = bcrypt::hash("s3cret", 8).unwrap();
        let c = Arc::new(load(&format!("basic_auth_users:\n  u: '{hash}'\n")).unwrap());
        let auth = Arc::new(BasicAuth::new());
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let (c, auth) = (c.clone(), auth.clone());
                tokio::spawn(async move {
                    let h = basic("u", &format!("guess{i}"));
                    auth.check(&c, Some(&h)).await
                })
            })
            .collect();
        let mut busy = 0;
        let mut denied = 0;
        for t in tasks {
            match t.await.unwrap() {
                AuthVerdict::Busy => busy += 1,
                AuthVerdict::Unauthorized => denied += 1,
                AuthVerdict::Allowed => panic!("a wrong password passed"),
            }
        }
        // At most one running and MAX_WAITING_CHECKS waiting at a time.
        assert!(busy > 0, "busy {busy}, denied {denied}");
        assert!(denied >= 1, "busy {busy}, denied {denied}");
    }
}
