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
//! session key  = HMAC(secret, "pathprobe session"   ‖ client_nonce ‖ server_nonce)
//! ```
//!
//! Every control frame after `Auth`, both ways, is sealed with the session
//! key ([`FrameSealer`]), so that a relay which passed the handshake through
//! to a real responder can still neither rewrite a test's terms nor forge
//! its results.
//!
//! Both halves of the handshake are here: [`answer_challenge`] for the
//! prober and [`Challenge`] for the responder.
//!
//! The labels keep the MACs apart: neither side's proof can be
//! reflected back as the other's, nor as the token. The test token that
//! binds data connections and UDP flows is derived rather than sent, so
//! only the two ends of this handshake know it before the first data hello.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::protocol::message::{Hello, WelcomeAuth};
use crate::protocol::RejectReason;

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
const SESSION_LABEL: &[u8] = b"pathprobe session";
const PROBER_FRAME_LABEL: &[u8] = b"pathprobe frame from prober";
const RESPONDER_FRAME_LABEL: &[u8] = b"pathprobe frame from responder";

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

    /// The key for the MACs on every control frame after the handshake.
    pub fn session_key(&self, client: &Nonce, server: &Nonce) -> SessionKey {
        SessionKey(
            self.mac(SESSION_LABEL, &client.0, &server.0)
                .finalize()
                .into_bytes()
                .into(),
        )
    }
}

/// The prober's side of one handshake, once the responder's `Welcome`
/// arrived: what to send as `Auth`, and what both ends now share.
pub struct ProberAnswer {
    /// Hex, for `Auth`.
    pub proof: String,
    pub token: String,
    /// Seals the control frames after `Auth`.
    pub sealer: FrameSealer,
    /// Whether the responder's own proof checked out.
    pub responder_proven: bool,
}

/// Checks the responder's challenge and proof and answers it. A responder
/// that offers no challenge is refused: a prober given a secret wants a peer
/// that holds it, and anyone can answer without one. The error is the
/// sentence the prober reports.
pub fn answer_challenge(
    secret: &Secret,
    client: &Nonce,
    offer: Option<&WelcomeAuth>,
) -> Result<ProberAnswer, String> {
    let Some(offer) = offer else {
        return Err("this prober has a shared secret but the responder did not authenticate; give the responder the same secret file".into());
    };
    if offer.method != METHOD {
        return Err(format!(
            "the responder offered method {:?}; this prober speaks {METHOD}",
            offer.method
        ));
    }
    let server = Nonce::parse(&offer.server_nonce, "server nonce").map_err(|e| e.to_string())?;
    let proof = unhex(&offer.server_proof).unwrap_or_default();
    Ok(ProberAnswer {
        proof: hex(&secret.prober_proof(client, &server)),
        token: secret.test_token(client, &server),
        sealer: FrameSealer::new(secret.session_key(client, &server), Side::Prober),
        responder_proven: secret.verify_responder(client, &server, &proof),
    })
}

/// The responder's side of one handshake: the challenge it sent, waiting
/// for the prober's proof.
pub struct Challenge {
    secret: Secret,
    client: Nonce,
    server: Nonce,
    /// What goes into the `Welcome`.
    pub welcome: WelcomeAuth,
}

/// What a verified prober and the responder now share.
pub struct Verified {
    pub token: String,
    pub sealer: FrameSealer,
}

impl Challenge {
    /// Answers a prober's hello under `secret`: nothing to do without a
    /// secret, a challenge when the hello offers a usable one, and the
    /// refusal to send otherwise.
    pub fn for_hello(
        hello: &Hello,
        secret: Option<&Secret>,
    ) -> Result<Option<Challenge>, (RejectReason, String)> {
        let Some(secret) = secret else {
            // A prober that offered auth to a responder without a secret
            // gets a Welcome without a proof, and decides for itself (it
            // refuses).
            return Ok(None);
        };
        let Some(offer) = &hello.auth else {
            return Err((RejectReason::AuthRequired, AUTH_REQUIRED.into()));
        };
        let failed = |m: String| (RejectReason::AuthFailed, m);
        if offer.method != METHOD {
            return Err(failed(format!(
                "authentication failed: unsupported method {:?}; this responder speaks {METHOD}",
                offer.method
            )));
        }
        let client = Nonce::parse(&offer.client_nonce, "client nonce")
            .map_err(|e| failed(format!("authentication failed: {e}")))?;
        let server = Nonce::random().map_err(|e| failed(format!("authentication failed: {e}")))?;
        let welcome = WelcomeAuth {
            method: METHOD.into(),
            server_nonce: server.to_hex(),
            server_proof: hex(&secret.responder_proof(&client, &server)),
        };
        Ok(Some(Challenge {
            secret: secret.clone(),
            client,
            server,
            welcome,
        }))
    }

    /// The shared token and sealer if `proof` (hex) is the prober's proof.
    pub fn verify(&self, proof: &str) -> Option<Verified> {
        let proof = unhex(proof)?;
        self.secret
            .verify_prober(&self.client, &self.server, &proof)
            .then(|| Verified {
                token: self.secret.test_token(&self.client, &self.server),
                sealer: FrameSealer::new(
                    self.secret.session_key(&self.client, &self.server),
                    Side::Responder,
                ),
            })
    }
}

/// What a responder with a secret tells a prober without one: what is
/// wrong; the prober's hint says how to give a secret, once.
pub const AUTH_REQUIRED: &str = "authentication required: this responder needs a shared secret";
/// What a responder tells a prober whose proof is wrong.
pub const AUTH_FAILED: &str = "authentication failed: the shared secrets differ";

/// Which end of the test a [`FrameSealer`] serves: each seals under its own label, so a
/// frame cannot be reflected back to its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Prober,
    Responder,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Prober => PROBER_FRAME_LABEL,
            Side::Responder => RESPONDER_FRAME_LABEL,
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Prober => Side::Responder,
            Side::Responder => Side::Prober,
        }
    }
}

/// The key both ends derive from the handshake for the per-frame MACs.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

/// Why a sealed control frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the control frame carries no MAC")]
    Missing,
    #[error("the control frame's MAC is wrong: it was changed, replayed, reordered or forged")]
    Mismatch,
    #[error("a control frame to seal must be a JSON object")]
    NotAnObject,
}

/// Authenticates every control frame after the handshake, so that a relay
/// that passed the handshake through can neither rewrite, reorder, replay,
/// drop nor inject a frame: each frame's MAC covers its bytes, the
/// direction it travels and its place in the conversation.
///
/// A sealed frame is the message's JSON object with one more member at the
/// end, `"mac"`, holding hex HMAC-SHA256 over (direction label ‖ sequence
/// number ‖ the object without that member). Appending keeps the rest of
/// the frame byte for byte as the sender wrote it, so no canonical form is
/// needed; any re-encoding on the way fails.
#[derive(Debug)]
pub struct FrameSealer {
    key: SessionKey,
    end: Side,
    sent: u64,
    received: u64,
}

/// `,"mac":"` + 64 hex digits + `"}`.
const MAC_SUFFIX_LEN: usize = 8 + 64 + 2;

impl FrameSealer {
    pub fn new(key: SessionKey, end: Side) -> FrameSealer {
        FrameSealer {
            key,
            end,
            sent: 0,
            received: 0,
        }
    }

    fn mac(&self, from: Side, seq: u64, object: &[u8]) -> HmacSha256 {
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(from.label());
        mac.update(&seq.to_be_bytes());
        mac.update(object);
        mac
    }

    /// Seals the JSON object `payload` as the next frame this end sends.
    pub fn seal(&mut self, payload: &[u8]) -> Result<Vec<u8>, SealError> {
        if payload.len() < 2 || payload.first() != Some(&b'{') || payload.last() != Some(&b'}') {
            return Err(SealError::NotAnObject);
        }
        let tag = self
            .mac(self.end, self.sent, payload)
            .finalize()
            .into_bytes();
        self.sent += 1;
        let mut out = Vec::with_capacity(payload.len() + MAC_SUFFIX_LEN);
        out.extend_from_slice(&payload[..payload.len() - 1]);
        out.extend_from_slice(b",\"mac\":\"");
        out.extend_from_slice(hex(&tag).as_bytes());
        out.extend_from_slice(b"\"}");
        Ok(out)
    }

    /// Checks the next frame from the other end and returns the message's
    /// JSON without its MAC. A refused frame still uses up its place, so
    /// that nothing after a forgery can be accepted either.
    pub fn open(&mut self, payload: &[u8]) -> Result<Vec<u8>, SealError> {
        let seq = self.received;
        self.received += 1;
        if payload.len() < MAC_SUFFIX_LEN + 2 {
            return Err(SealError::Missing);
        }
        let (object, suffix) = payload.split_at(payload.len() - MAC_SUFFIX_LEN);
        let tag = suffix
            .strip_prefix(b",\"mac\":\"")
            .and_then(|rest| rest.strip_suffix(b"\"}"))
            // Lower-case only, as sealed: a frame has exactly one sealed
            // form, so that any change to its bytes is caught.
            .filter(|digits| {
                digits
                    .iter()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            })
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(unhex)
            .ok_or(SealError::Missing)?;
        let mut original = Vec::with_capacity(object.len() + 1);
        original.extend_from_slice(object);
        original.push(b'}');
        self.mac(self.end.other(), seq, &original)
            .verify_slice(&tag)
            .map_err(|_| SealError::Mismatch)?;
        Ok(original)
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
    if !s.len().is_multiple_of(2) {
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
    fn sealed_frames_open_only_unchanged_in_order_and_in_their_direction() {
        let (c, s) = nonces();
        let mut prober = FrameSealer::new(secret().session_key(&c, &s), Side::Prober);
        let mut responder = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
        let a = prober.seal(br#"{"type":"start"}"#).unwrap();
        assert!(a.starts_with(br#"{"type":"start","mac":""#), "{a:?}");
        assert_eq!(responder.open(&a).unwrap(), br#"{"type":"start"}"#);
        // Replayed: its place in the conversation has passed.
        assert_eq!(responder.open(&a), Err(SealError::Mismatch));
        let b = responder.seal(br#"{"type":"ready"}"#).unwrap();
        // Reflected back to its sender.
        let mut echo = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
        assert_eq!(echo.open(&b), Err(SealError::Mismatch));
        assert_eq!(prober.open(&b).unwrap(), br#"{"type":"ready"}"#);
        // Rewritten by one byte.
        let mut p2 = FrameSealer::new(secret().session_key(&c, &s), Side::Prober);
        let mut r2 = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
        let mut f = p2.seal(br#"{"type":"request","streams":1}"#).unwrap();
        let at = f.iter().position(|&x| x == b'1').unwrap();
        f[at] = b'9';
        assert_eq!(r2.open(&f), Err(SealError::Mismatch));
        // Unsealed, or sealed under another secret.
        let mut r3 = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
        assert_eq!(r3.open(br#"{"type":"start"}"#), Err(SealError::Missing));
        let other = Secret::new(b"correct horse battery stapler").unwrap();
        let mut forger = FrameSealer::new(other.session_key(&c, &s), Side::Prober);
        let mut r4 = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
        assert_eq!(
            r4.open(&forger.seal(br#"{"type":"start"}"#).unwrap()),
            Err(SealError::Mismatch)
        );
        assert_eq!(prober.seal(b"[]"), Err(SealError::NotAnObject));
    }

    proptest::proptest! {
        // Whatever a message holds, it opens as sealed, in order; changed
        // in any one bit, or made up, it does not.
        #[test]
        fn sealing_round_trips_and_any_change_is_caught(
            bodies in proptest::collection::vec("[ -~]{0,64}", 1..4),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
            bit in 0u8..8,
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let (c, s) = nonces();
            let mut p = FrameSealer::new(secret().session_key(&c, &s), Side::Prober);
            let mut r = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
            for body in &bodies {
                let payload = serde_json::to_vec(&serde_json::json!({"type": "x", "d": body})).unwrap();
                let sealed = p.seal(&payload).unwrap();
                let mut bad = sealed.clone();
                let at = flip.index(bad.len());
                bad[at] ^= 1 << bit;
                let mut fresh = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
                fresh.received = r.received;
                proptest::prop_assert!(fresh.open(&bad).is_err());
                proptest::prop_assert_eq!(r.open(&sealed).unwrap(), payload);
            }
            let mut victim = FrameSealer::new(secret().session_key(&c, &s), Side::Responder);
            proptest::prop_assert!(victim.open(&junk).is_err());
        }
    }

    #[test]
    fn a_handshake_gives_both_ends_the_same_token_and_sealer() {
        let hello = Hello {
            auth: Some(crate::protocol::message::HelloAuth {
                method: METHOD.into(),
                client_nonce: Nonce([0x11; NONCE_LEN]).to_hex(),
            }),
            ..Hello::new()
        };
        let challenge = Challenge::for_hello(&hello, Some(&secret()))
            .unwrap()
            .unwrap();
        let mut answer = answer_challenge(
            &secret(),
            &Nonce([0x11; NONCE_LEN]),
            Some(&challenge.welcome),
        )
        .unwrap();
        assert!(answer.responder_proven);
        let mut verified = challenge.verify(&answer.proof).unwrap();
        assert_eq!(verified.token, answer.token);
        let frame = answer.sealer.seal(br#"{"type":"start"}"#).unwrap();
        assert!(verified.sealer.open(&frame).is_ok());
        assert!(challenge.verify("00").is_none());
        let no_auth = Challenge::for_hello(&Hello::new(), Some(&secret()));
        assert_eq!(no_auth.err().unwrap().0, RejectReason::AuthRequired);
        assert!(Challenge::for_hello(&Hello::new(), None).unwrap().is_none());
        assert!(answer_challenge(&secret(), &Nonce([0x11; NONCE_LEN]), None).is_err());
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
