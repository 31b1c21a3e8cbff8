//! Shared-secret authentication between prober and responder.
//!
//! Both ends hold the same secret, read from a file. The handshake is an
//! HMAC-SHA256 challenge and response over a fresh random nonce from each
//! side, so the secret never crosses the wire and a recorded handshake is
//! useless on a new connection (the responder's nonce differs every time):
//!
//! ```text
//! prober                                   responder
//!   Hello{auth: method, client_nonce}  ─▶
//!                                      ◀─  Welcome{auth: server_nonce, server_proof}
//!   Auth{proof}                        ─▶
//! server_proof = HMAC(secret, "pathprobe responder" ‖ client_nonce ‖ server_nonce)
//! proof        = HMAC(secret, "pathprobe prober"    ‖ server_nonce ‖ client_nonce)
//! token        = HMAC(secret, "pathprobe token"     ‖ client_nonce ‖ server_nonce)[..16]
//! ```
//!
//! The labels keep the three MACs apart: neither side's proof can be
//! reflected back as the other's, nor as the token. The test token that
//! binds data connections and UDP flows is derived rather than sent, so
//! only the two ends of this handshake know it before the first data hello.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The only method so far; the name travels in `Hello.auth.method` so that
/// another can be added without a version bump.
pub const METHOD: &str = "hmac-sha256";
/// Bytes in each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Shorter secrets are refused: they could be found by trying them offline
/// against one recorded handshake.
pub const MIN_SECRET_LEN: usize = 16;
/// Anything larger is certainly not a secret file (a mistyped path to a
/// log, say); reading it whole would only waste memory.
pub const MAX_SECRET_LEN: usize = 4096;

const RESPONDER_LABEL: &[u8] = b"pathprobe responder";
const PROBER_LABEL: &[u8] = b"pathprobe prober";
const TOKEN_LABEL: &[u8] = b"pathprobe token";

type HmacSha256 = Hmac<Sha256>;

/// Why a secret could not be loaded or a handshake value was unusable.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read secret file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("secret file {} holds {len} bytes after trimming; use at least {MIN_SECRET_LEN} (e.g. `head -c 32 /dev/urandom | base64 > FILE`)", path.display())]
    TooShort { path: PathBuf, len: usize },
    #[error("secret file {} is larger than {MAX_SECRET_LEN} bytes; is it the right file?", path.display())]
    TooLong { path: PathBuf },
    #[error("the {what} is not {NONCE_LEN} bytes of hex")]
    BadNonce { what: &'static str },
    #[error("the OS random source failed: {0}")]
    Random(String),
}

/// A shared secret. Cloning is cheap; `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<[u8]>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// A secret from bytes, with the same length rules as a file.
    pub fn new(bytes: &[u8]) -> Result<Secret, AuthError> {
        Secret::checked(bytes, Path::new("<memory>"))
    }

    fn checked(bytes: &[u8], path: &Path) -> Result<Secret, AuthError> {
        // Editors and `echo` add a final newline; it is never meant as part
        // of the secret, and keeping it would make two ends differ.
        let trimmed = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(&bytes[..0], |end| &bytes[..=end]);
        if bytes.len() > MAX_SECRET_LEN {
            return Err(AuthError::TooLong {
                path: path.to_path_buf(),
            });
        }
        if trimmed.len() < MIN_SECRET_LEN {
            return Err(AuthError::TooShort {
                path: path.to_path_buf(),
                len: trimmed.len(),
            });
        }
        Ok(Secret(trimmed.into()))
    }

    /// Reads a secret file. Trailing whitespace is dropped.
    pub fn from_file(path: &Path) -> Result<Secret, AuthError> {
        use std::io::Read;
        let read_err = |error| AuthError::Read {
            path: path.to_path_buf(),
            error,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        warn_if_others_can_read(&file, path);
        let mut bytes = Vec::new();
        // One byte past the limit tells "too long" from "exactly the limit".
        file.take(MAX_SECRET_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        Secret::checked(&bytes, path)
    }

    fn mac(&self, label: &[u8], first: &[u8; NONCE_LEN], second: &[u8; NONCE_LEN]) -> HmacSha256 {
        // HMAC takes keys of any length, so this cannot fail.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(label);
        mac.update(first);
        mac.update(second);
        mac
    }

    /// The responder's proof, which the prober checks.
    pub fn responder_proof(&self, client: &Nonce, server: &Nonce) -> [u8; 32] {
        self.mac(RESPONDER_LABEL, &client.0, &server.0)
            .finalize()
            .into_bytes()
            .into()
    }

    /// The prober's proof, which the responder checks.
    pub fn prober_proof(&self, client: &Nonce, server: &Nonce) -> [u8; 32] {
        self.mac(PROBER_LABEL, &server.0, &client.0)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks the responder's proof in constant time.
    pub fn verify_responder(&self, client: &Nonce, server: &Nonce, proof: &[u8]) -> bool {
        self.mac(RESPONDER_LABEL, &client.0, &server.0)
            .verify_slice(proof)
            .is_ok()
    }

    /// Checks the prober's proof in constant time.
    pub fn verify_prober(&self, client: &Nonce, server: &Nonce, proof: &[u8]) -> bool {
        self.mac(PROBER_LABEL, &server.0, &client.0)
            .verify_slice(proof)
            .is_ok()
    }

    /// The test token both ends derive once the handshake succeeded, hex
    /// encoded like a random one.
    pub fn test_token(&self, client: &Nonce, server: &Nonce) -> String {
        let tag = self
            .mac(TOKEN_LABEL, &client.0, &server.0)
            .finalize()
            .into_bytes();
        hex(&tag[..16])
    }
}

/// Operators are told, not refused: a container runtime may mount secrets
/// world-readable inside a private namespace, where that is harmless.
fn warn_if_others_can_read(file: &std::fs::File, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = file.metadata() {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "secret file is readable by group or others; chmod 600 it"
            );
        }
    }
}

/// One side's challenge: fresh random bytes for every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_LEN]);

impl Nonce {
    pub fn random() -> Result<Nonce, AuthError> {
        let mut raw = [0u8; NONCE_LEN];
        getrandom::fill(&mut raw).map_err(|e| AuthError::Random(e.to_string()))?;
        Ok(Nonce(raw))
    }

    /// Parses a nonce as it travels: 64 hex digits.
    pub fn parse(s: &str, what: &'static str) -> Result<Nonce, AuthError> {
        let bytes = unhex(s).ok_or(AuthError::BadNonce { what })?;
        let raw: [u8; NONCE_LEN] = bytes.try_into().map_err(|_| AuthError::BadNonce { what })?;
        Ok(Nonce(raw))
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

/// Lower-case hex, the form nonces, proofs and tokens travel in.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses hex of either case; `None` for odd lengths or other characters.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| {
            let digits = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(digits, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::new(b"correct horse battery staple").unwrap()
    }

    fn nonces() -> (Nonce, Nonce) {
        (Nonce([0x11; NONCE_LEN]), Nonce([0x22; NONCE_LEN]))
    }

    // Fixed vectors, computed independently with Python's hmac module:
    //   hmac.new(b"correct horse battery staple",
    //            b"pathprobe responder" + b"\x11"*32 + b"\x22"*32, "sha256")
    // so a change to labels, order or encoding cannot pass unnoticed.
    #[test]
    fn proofs_match_fixed_vectors() {
        let (c, s) = nonces();
        assert_eq!(
            hex(&secret().responder_proof(&c, &s)),
            RESPONDER_VECTOR,
            "responder proof"
        );
        assert_eq!(
            hex(&secret().prober_proof(&c, &s)),
            PROBER_VECTOR,
            "prober proof"
        );
        assert_eq!(secret().test_token(&c, &s), TOKEN_VECTOR, "token");
    }

    const RESPONDER_VECTOR: &str =
        "f58adbd3f2eaa1f9e52cb9f24a9136de60063301d83956be23d8de08616cb58f";
    const PROBER_VECTOR: &str = "df4d540b54cc36fba44e40cf06ab5ff766088d3ceb721adedc70c8ef6dada146";
    const TOKEN_VECTOR: &str = "fc300fd7f34f88ea595120073034bce6";

    #[test]
    fn proofs_verify_only_with_the_same_secret_and_nonces() {
        let (c, s) = nonces();
        let k = secret();
        let proof = k.prober_proof(&c, &s);
        assert!(k.verify_prober(&c, &s, &proof));
        let other = Secret::new(b"correct horse battery stapler").unwrap();
        assert!(!other.verify_prober(&c, &s, &proof));
        // A replay meets a different server nonce.
        assert!(!k.verify_prober(&c, &Nonce([0x23; NONCE_LEN]), &proof));
        // One side's proof is not the other's.
        assert!(!k.verify_responder(&c, &s, &proof));
        assert!(k.verify_responder(&c, &s, &k.responder_proof(&c, &s)));
        // Truncated and empty proofs fail rather than match a prefix.
        assert!(!k.verify_prober(&c, &s, &proof[..16]));
        assert!(!k.verify_prober(&c, &s, &[]));
    }

    #[test]
    fn secrets_are_trimmed_and_length_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "correct horse battery staple\n\n").unwrap();
        assert_eq!(Secret::from_file(&path).unwrap(), secret());
        std::fs::write(&path, "short\n").unwrap();
        match Secret::from_file(&path) {
            Err(AuthError::TooShort { len, .. }) => assert_eq!(len, 5),
            other => panic!("expected too short, got {other:?}"),
        }
        std::fs::write(&path, vec![b'x'; MAX_SECRET_LEN + 1]).unwrap();
        assert!(matches!(
            Secret::from_file(&path),
            Err(AuthError::TooLong { .. })
        ));
        let missing = dir.path().join("missing");
        let e = Secret::from_file(&missing).unwrap_err();
        assert!(e.to_string().starts_with("cannot read secret file"), "{e}");
        assert_eq!(format!("{:?}", secret()), "Secret(28 bytes)");
    }

    #[test]
    fn nonces_travel_as_hex() {
        let n = Nonce::random().unwrap();
        assert_ne!(n, Nonce::random().unwrap());
        assert_eq!(Nonce::parse(&n.to_hex(), "x").unwrap(), n);
        assert_eq!(
            Nonce::parse(&"AB".repeat(NONCE_LEN), "x").unwrap(),
            Nonce([0xab; NONCE_LEN])
        );
        for bad in [
            "",
            "abc",
            &"zz".repeat(NONCE_LEN),
            &"ab".repeat(NONCE_LEN - 1),
        ] {
            assert!(Nonce::parse(bad, "client nonce").is_err(), "{bad:?}");
        }
        assert_eq!(unhex("00ff"), Some(vec![0, 255]));
        assert_eq!(unhex("é0"), None);
    }
}
