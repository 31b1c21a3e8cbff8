//! The control conversation. A prober opens the control connection and the
//! two sides exchange, in order:
//!
//! ```text
//! prober                              responder
//!                                     (a client outside the allow list gets
//!                                      Rejected{denied} before anything else)
//!   Hello{version, max_version?, time_us?, auth?}   ─────▶
//!                           ◀─────    Welcome{version, time_us?, limits, auth?} | Rejected{version_mismatch | auth_required | auth_failed}
//!   Auth{proof}             ─────▶    (only when the Welcome carried auth)
//!   Request{test}           ─────▶
//!                           ◀─────    Accepted{token, clamped} | Busy{retry_after} | Rejected{reason}
//!   (data connections, each opening with DataHello{token, stream};
//!    UDP flows, each sending hello datagrams carrying the token)
//!                           ◀─────    Ready
//!   Start                   ─────▶
//!   (data moves; a tcp_crr test opens no data connection before Start,
//!    but one per transaction after it, each opening with
//!    DataHello{token, 0} and its request, and a last with
//!    DataHello{token, 1}: see [`super::crr`])
//!                           ◀─────    Progress{at_us, bytes}  (adaptive tests
//!                                      whose prober asked receiver_progress,
//!                                      every ~100 ms until End)
//!   End{span_start_us, reason}  ─────▶   (adaptive tests only, once)
//!                           ◀─────    Results{responder's figures}
//! ```
//!
//! With authentication (see [`crate::auth`]) the token in `Accepted` is
//! empty: both ends derive it from the handshake instead.
//!
//! ## Versions
//!
//! A fleet upgrades host by host, so adjacent releases must still measure
//! each other. The prober's `version` is the oldest version it speaks
//! (that is the field a version 2 responder checks, and it refuses
//! anything but its own), `max_version` the newest; the responder answers
//! with the highest version both speak in `Welcome.version`, or refuses
//! with `version_mismatch` naming both ranges (see [`negotiate`]). Version
//! 3 adds the negotiation itself and the wall-clock stamps (`time_us`) from
//! which the prober estimates the peer's clock offset (see
//! [`ClockOffset`]); at version 2 neither is sent, so the frames are those
//! of the previous release (tests/fixtures/wire/v2).
//!
//! Either side may send `Error` and close at any point. Unknown message
//! types, and unknown fields inside known ones, are tolerated only where the
//! field is marked optional, so that a later minor version can add fields.

use serde::{Deserialize, Serialize};

use super::model::{Direction, Kind, SideStats};

/// Identifies the protocol in [`Hello`], so that a stray client of another
/// protocol is recognised at once.
pub const PROTOCOL_NAME: &str = "pathprobe";
/// Bumped on any change that an older peer would misread.
/// Version 2 seals every control frame after an authenticated handshake;
/// version 3 negotiates the version and carries wall-clock stamps.
pub const PROTOCOL_VERSION: u32 = 3;
/// The oldest version this release still speaks: the previous release's,
/// so that one rolling upgrade never stops the mesh measuring.
pub const OLDEST_PROTOCOL_VERSION: u32 = 2;

/// Every message of the control channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Hello(Hello),
    Welcome(Welcome),
    Request(TestRequest),
    /// The prober's answer to the responder's challenge, when the
    /// [`Welcome`] carried one.
    Auth {
        /// Hex HMAC; see [`crate::auth`].
        proof: String,
    },
    Accepted {
        /// Ties data connections and UDP flows to this test. Empty after an
        /// authenticated handshake, where both ends derive it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        token: String,
        /// The test as the responder will run it.
        request: TestRequest,
        /// What the responder cut down to its limits, one sentence each
        /// ("duration 120 s clamped to 60 s"); the prober reports them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        clamped: Vec<String>,
    },
    Busy {
        retry_after_ms: u64,
        message: String,
    },
    Rejected {
        reason: RejectReason,
        message: String,
    },
    /// First frame on a TCP data connection.
    DataHello {
        token: String,
        stream: u32,
    },
    Ready,
    Start,
    Results(Box<SideStats>),
    Error {
        message: String,
    },
    /// The prober ended an adaptive test: sent once, during
    /// the test, only to a responder that echoed the test's `adaptive`.
    End(super::adaptive::TestEnd),
    /// The responder's received count during an adaptive test (issue
    /// 27), every ~100 ms, only to a prober that asked with
    /// `receiver_progress` and only until `End`.
    Progress(super::adaptive::Progress),
}

/// The prober's opening message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: String,
    /// The oldest version the prober speaks: a version 2 responder reads
    /// only this field, and runs the test when it is 2.
    pub version: u32,
    /// Software name and version, for logs.
    pub software: String,
    /// The newest version the prober speaks (version 3 on); absent, the
    /// prober speaks `version` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_version: Option<u32>,
    /// The prober's wall clock when it sent the hello, microseconds since
    /// the Unix epoch (version 3 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_us: Option<u64>,
    /// Present when the prober holds a secret: its method and challenge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<HelloAuth>,
    /// The prober's settings, so that the responder knows both
    /// ends too; older probers send none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<super::fingerprint::HostFingerprint>,
}

/// The prober's half of the challenge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloAuth {
    /// [`crate::auth::METHOD`]; a string so that an unknown method is
    /// refused by name rather than as a malformed frame.
    pub method: String,
    /// Hex, [`crate::auth::NONCE_LEN`] bytes.
    pub client_nonce: String,
}

/// The responder's challenge, and its proof that it holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WelcomeAuth {
    pub method: String,
    pub server_nonce: String,
    pub server_proof: String,
}

impl Hello {
    /// The hello of this release: every version it speaks, and the time.
    pub fn new() -> Hello {
        Hello::speaking(PROTOCOL_VERSION)
    }

    /// A hello that offers versions up to `newest` (at least the oldest
    /// spoken). Offering only version 2 sends exactly the previous
    /// release's hello, field for field.
    pub fn speaking(newest: u32) -> Hello {
        let newest = newest.clamp(OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION);
        let v3 = newest >= 3;
        Hello {
            protocol: PROTOCOL_NAME.to_string(),
            version: OLDEST_PROTOCOL_VERSION,
            software: software(),
            max_version: v3.then_some(newest),
            time_us: if v3 { Some(now_us()) } else { None },
            auth: None,
            fingerprint: None,
        }
    }

    /// The versions this hello offers, oldest first.
    pub fn versions(&self) -> (u32, u32) {
        let newest = self.max_version.unwrap_or(self.version).max(self.version);
        (self.version, newest)
    }
}

/// The wall clock in microseconds since the Unix epoch; 0 before it.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros().min(u64::MAX as u128) as u64)
        .unwrap_or(0)
}

/// The peer's clock against this side's, estimated NTP-style from one
/// exchange: this side stamped `sent` and `received` around the peer's
/// stamp `peer`. Assuming the two legs take equal time, the peer stamped
/// at the midpoint, so `offset = peer - (sent + received) / 2`; an
/// asymmetric path moves it by at most half the round trip, which is
/// the uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClockOffset {
    /// Positive: the peer's clock is ahead of this side's.
    pub offset_seconds: f64,
    /// Half the round trip of the exchange: the offset is within this of
    /// the truth whatever the legs' asymmetry.
    pub uncertainty_seconds: f64,
}

impl ClockOffset {
    /// The estimate from the three stamps (microseconds); `None` when the
    /// peer sent no stamp or this side's clock went backwards.
    pub fn estimate(sent_us: u64, received_us: u64, peer_us: Option<u64>) -> Option<ClockOffset> {
        let peer = peer_us.filter(|&p| p > 0)?;
        if received_us < sent_us || sent_us == 0 {
            return None;
        }
        let mid = sent_us as f64 / 2.0 + received_us as f64 / 2.0;
        Some(ClockOffset {
            offset_seconds: (peer as f64 - mid) / 1e6,
            uncertainty_seconds: (received_us - sent_us) as f64 / 2e6,
        })
    }
}

impl Default for Hello {
    fn default() -> Self {
        Hello::new()
    }
}

/// The responder's answer to a compatible [`Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The version chosen for this conversation: the highest both speak.
    pub version: u32,
    pub software: String,
    /// The responder's wall clock when it answered, microseconds since the
    /// Unix epoch (version 3 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_us: Option<u64>,
    pub limits: Limits,
    /// Present when the responder authenticated the prober's hello.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<WelcomeAuth>,
}

/// What a responder allows, so that a prober can see why it was clamped or
/// refused. Fields after the first three are 0 for "no limit"; they default
/// so that a Welcome from an older responder still reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Omit included; longer requests are clamped.
    pub max_duration_ms: u64,
    /// Per direction; more is refused.
    pub max_streams: u32,
    /// Bits per second summed over streams; 0 means no cap. Higher (or
    /// unpaced) requests are clamped.
    pub max_bitrate: u64,
    /// Write or datagram size; larger is refused.
    #[serde(default)]
    pub max_length: u32,
    /// Socket buffer size; larger is clamped.
    #[serde(default)]
    pub max_window: u32,
    #[serde(default)]
    pub max_concurrent_tests: u32,
    #[serde(default)]
    pub max_tests_per_client_per_minute: u32,
    #[serde(default)]
    pub max_bytes_per_hour: u64,
    /// "clamp" or "refuse": what happens to a request over the first five.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub limit_policy: String,
    /// Connections per second one `tcp_crr` test may open; the prober
    /// paces itself to it, and the responder resets those beyond it.
    #[serde(default)]
    pub max_connections_per_second: u32,
}

/// The test a prober asks for. Durations travel as milliseconds so that the
/// wire form is plain integers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestRequest {
    pub kind: Kind,
    pub direction: Direction,
    pub duration_ms: u64,
    #[serde(default)]
    pub omit_ms: u64,
    pub streams: u32,
    /// Bits per second summed over the streams of one direction; 0 is unpaced.
    #[serde(default)]
    pub bitrate: u64,
    /// Write size for TCP, datagram payload size for UDP.
    pub length: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// CPU the responder should pin its data threads to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<usize>,
    /// Length of the interval reports asked for (`-i`); both ends bucket
    /// their streams' figures by it (see `probe::datapath::interval_plan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// UDP without GSO and GRO on either end, for figures comparable with
    /// history or with tools that do not use them. Older peers ignore it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_offload: bool,
    /// Request and response sizes and burst of a `tcp_rr` test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<super::rr::RrParams>,
    /// Adaptive duration: the test may end before
    /// `duration_ms`, when the prober says so with `End`. Older peers
    /// drop it, so a responder's echo without it says it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<super::adaptive::AdaptiveRequest>,
}

impl TestRequest {
    /// How many data streams this test opens in all (both directions for bidir).
    pub fn total_streams(&self) -> u32 {
        match self.direction {
            Direction::Bidir => self.streams.saturating_mul(2),
            _ => self.streams,
        }
    }
}

/// Why a responder refused a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    VersionMismatch,
    Limit,
    BadRequest,
    AuthRequired,
    AuthFailed,
    Denied,
    /// The client ran its allowance of tests for the last minute.
    RateLimited,
    /// The responder moved its allowance of bytes for the last hour.
    BudgetExhausted,
    /// A reason added by a later release; the message still says what it
    /// is, so the refusal reads as a refusal rather than a protocol error.
    #[serde(other)]
    Other,
}

impl RejectReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::VersionMismatch => "version_mismatch",
            RejectReason::Limit => "limit",
            RejectReason::BadRequest => "bad_request",
            RejectReason::AuthRequired => "auth_required",
            RejectReason::AuthFailed => "auth_failed",
            RejectReason::Denied => "denied",
            RejectReason::RateLimited => "rate_limited",
            RejectReason::BudgetExhausted => "budget_exhausted",
            RejectReason::Other => "other",
        }
    }
}

/// "pathprobe/0.1.0".
pub fn software() -> String {
    format!("pathprobe/{}", env!("CARGO_PKG_VERSION"))
}

/// Checks a prober's [`Hello`] against the versions this responder speaks
/// (`OLDEST_PROTOCOL_VERSION..=newest`); returns the highest version both
/// speak, otherwise the rejection to send back, naming both sides'
/// versions.
pub fn negotiate(hello: &Hello, newest: u32) -> Result<u32, (RejectReason, String)> {
    if hello.protocol != PROTOCOL_NAME {
        return Err((
            RejectReason::BadRequest,
            format!(
                "expected protocol {PROTOCOL_NAME:?}, got {:?}",
                hello.protocol
            ),
        ));
    }
    let newest = newest.clamp(OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION);
    let (low, high) = hello.versions();
    let chosen = high.min(newest);
    if chosen >= low.max(OLDEST_PROTOCOL_VERSION) {
        return Ok(chosen);
    }
    Err((
        RejectReason::VersionMismatch,
        format!(
            "responder speaks protocol versions {} ({}), prober speaks {} ({}); adjacent releases work together, so upgrade the older end",
            span(OLDEST_PROTOCOL_VERSION, newest),
            software(),
            span(low, high),
            truncate(&hello.software, 64),
        ),
    ))
}

/// "2 to 3", or "2" for a single version.
pub fn span(low: u32, high: u32) -> String {
    if low == high {
        low.to_string()
    } else {
        format!("{low} to {high}")
    }
}

/// A peer's string cut to `max` characters for a message, without control
/// characters: the message is logged, and a newline would forge a line.
fn truncate(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}

/// Generates a fresh test token: 16 random bytes, hex encoded.
pub fn new_token() -> String {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).expect("the OS random source is available");
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::adaptive::{StopReason, TestEnd};

    /// `StopReason` as the first adaptive release has it: no
    /// `out_of_reach`. Kept here, not imported, because it is the older
    /// peer's view of the wire that is under test.
    #[derive(Debug, PartialEq, Eq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum FirstReleaseReason {
        Converged,
        MaxDuration,
        Budget,
        Cut,
        #[serde(other)]
        Other,
    }

    #[derive(Debug, Deserialize)]
    struct FirstReleaseEnd {
        #[serde(rename = "type")]
        ty: String,
        span_start_us: u64,
        reason: FirstReleaseReason,
    }

    #[test]
    fn an_out_of_reach_end_is_additive_and_an_older_release_reads_other() {
        let frame = serde_json::to_string(&Message::End(TestEnd {
            span_start_us: 312_000,
            reason: StopReason::OutOfReach,
            span_end_us: None,
        }))
        .unwrap();
        // The frame is the existing `end` message; only the value is new.
        assert_eq!(
            frame,
            r#"{"type":"end","span_start_us":312000,"reason":"out_of_reach"}"#
        );
        // An older responder reads it as an `end` of some other reason,
        // with the span intact: it ends its senders and cuts its figures
        // as for any `end`.
        let old: FirstReleaseEnd = serde_json::from_str(&frame).unwrap();
        assert_eq!(old.ty, "end");
        assert_eq!(old.span_start_us, 312_000);
        assert_eq!(old.reason, FirstReleaseReason::Other);
        // The reasons that release knows still read as themselves.
        for r in &StopReason::ALL[..4] {
            let v: FirstReleaseReason = serde_json::from_str(&format!("\"{r}\"")).unwrap();
            assert_ne!(v, FirstReleaseReason::Other, "{r}");
        }
        // And this release reads its own value back.
        let back: Message = serde_json::from_str(&frame).unwrap();
        assert_eq!(
            back,
            Message::End(TestEnd {
                span_start_us: 312_000,
                reason: StopReason::OutOfReach,
                span_end_us: None,
            })
        );
        assert_eq!(StopReason::OutOfReach.as_str(), "out_of_reach");
        assert!(StopReason::ALL.contains(&StopReason::OutOfReach));
    }

    fn request() -> TestRequest {
        TestRequest {
            kind: Kind::Udp,
            direction: Direction::Bidir,
            duration_ms: 5000,
            omit_ms: 1000,
            streams: 2,
            bitrate: 100_000_000,
            length: 1400,
            window: Some(4 << 20),
            congestion: Some("cubic".into()),
            tos: Some(0x10),
            affinity: None,
            interval_ms: None,
            no_offload: false,
            rr: None,
            adaptive: None,
        }
    }

    #[test]
    fn messages_round_trip_through_json() {
        let msgs = vec![
            Message::Hello(Hello::new()),
            Message::Request(request()),
            Message::Accepted {
                token: new_token(),
                request: request(),
                clamped: vec![],
            },
            Message::Accepted {
                token: String::new(),
                request: request(),
                clamped: vec!["duration 120 s clamped to 60 s".into()],
            },
            Message::Auth {
                proof: "00ff".into(),
            },
            Message::Hello(Hello {
                auth: Some(HelloAuth {
                    method: "hmac-sha256".into(),
                    client_nonce: "11".repeat(32),
                }),
                ..Hello::new()
            }),
            Message::Busy {
                retry_after_ms: 5000,
                message: "busy".into(),
            },
            Message::Rejected {
                reason: RejectReason::Limit,
                message: "too long".into(),
            },
            Message::DataHello {
                token: "ab".into(),
                stream: 3,
            },
            Message::Ready,
            Message::Start,
            Message::Error {
                message: "bye".into(),
            },
        ];
        for m in msgs {
            let json = serde_json::to_string(&m).unwrap();
            let back: Message = serde_json::from_str(&json).unwrap();
            assert_eq!(back, m, "{json}");
        }
    }

    #[test]
    fn wire_form_is_stable() {
        let json = serde_json::to_string(&Message::DataHello {
            token: "00ff".into(),
            stream: 1,
        })
        .unwrap();
        assert_eq!(json, r#"{"type":"data_hello","token":"00ff","stream":1}"#);
        let json = serde_json::to_string(&Message::Auth { proof: "ab".into() }).unwrap();
        assert_eq!(json, r#"{"type":"auth","proof":"ab"}"#);
        // An authenticated Accepted carries no token, and a pre-limits
        // Welcome (three limit fields) still reads.
        let json = serde_json::to_string(&Message::Accepted {
            token: String::new(),
            request: request(),
            clamped: vec!["x".into()],
        })
        .unwrap();
        assert!(
            json.starts_with(r#"{"type":"accepted","request":"#),
            "{json}"
        );
        assert!(json.ends_with(r#""clamped":["x"]}"#), "{json}");
        let old: Message = serde_json::from_str(
            r#"{"type":"welcome","version":1,"software":"pathprobe/0.1.0","limits":{"max_duration_ms":60000,"max_streams":16,"max_bitrate":0}}"#,
        )
        .unwrap();
        match old {
            Message::Welcome(w) => {
                assert_eq!(w.limits.max_duration_ms, 60_000);
                assert_eq!(w.limits.max_bytes_per_hour, 0);
                assert_eq!(w.auth, None);
            }
            other => panic!("expected welcome, got {other:?}"),
        }
        let later: Message = serde_json::from_str(
            r#"{"type":"rejected","reason":"reason_from_the_future","message":"m"}"#,
        )
        .unwrap();
        assert_eq!(
            later,
            Message::Rejected {
                reason: RejectReason::Other,
                message: "m".into()
            }
        );
        assert_eq!(total(Direction::Bidir), 4);
        assert_eq!(total(Direction::Send), 2);
    }

    fn total(direction: Direction) -> u32 {
        TestRequest {
            direction,
            ..request()
        }
        .total_streams()
    }

    #[test]
    fn adjacent_versions_negotiate_and_wider_gaps_are_explained() {
        // This release with itself: the newest.
        assert_eq!(negotiate(&Hello::new(), PROTOCOL_VERSION), Ok(3));
        // A version 2 prober (no range) with this responder.
        let v2 = Hello::speaking(2);
        assert_eq!((v2.version, v2.max_version, v2.time_us), (2, None, None));
        assert_eq!(negotiate(&v2, PROTOCOL_VERSION), Ok(2));
        // This prober with a responder held to version 2.
        assert_eq!(negotiate(&Hello::new(), 2), Ok(2));
        // A next release speaking 3 to 4.
        let next = Hello {
            version: 3,
            max_version: Some(4),
            ..Hello::new()
        };
        assert_eq!(negotiate(&next, PROTOCOL_VERSION), Ok(3));
        // Two versions away, either way: refused, naming both.
        for (low, high, theirs) in [
            (1, None, "prober speaks 1 ("),
            (5, Some(5), "prober speaks 5 ("),
        ] {
            let hello = Hello {
                version: low,
                max_version: high,
                ..Hello::new()
            };
            let (reason, msg) = negotiate(&hello, PROTOCOL_VERSION).unwrap_err();
            assert_eq!(reason, RejectReason::VersionMismatch);
            assert!(
                msg.contains("responder speaks protocol versions 2 to 3"),
                "{msg}"
            );
            assert!(msg.contains(theirs), "{msg}");
        }
        let forged = Hello {
            version: 9,
            software: "x\nlevel=ERROR forged".into(),
            ..Hello::new()
        };
        let msg = negotiate(&forged, PROTOCOL_VERSION).unwrap_err().1;
        assert!(msg.contains("(xlevel=ERROR forged)"), "{msg}");
        let mut hello = Hello::new();
        hello.protocol = "iperf".into();
        assert_eq!(
            negotiate(&hello, PROTOCOL_VERSION).unwrap_err().0,
            RejectReason::BadRequest
        );
    }

    #[test]
    fn clock_offset_is_the_midpoint_difference_within_half_the_round_trip() {
        // Sent at 100 s, answered at 100.002 s; the peer stamped 130.001 s.
        let o = ClockOffset::estimate(100_000_000, 100_002_000, Some(130_001_000)).unwrap();
        assert!((o.offset_seconds - 30.0).abs() < 1e-9, "{o:?}");
        assert!((o.uncertainty_seconds - 0.001).abs() < 1e-9, "{o:?}");
        let behind = ClockOffset::estimate(100_000_000, 100_000_000, Some(95_000_000)).unwrap();
        assert!((behind.offset_seconds + 5.0).abs() < 1e-9);
        assert_eq!(ClockOffset::estimate(1, 2, None), None);
        assert_eq!(ClockOffset::estimate(5, 2, Some(3)), None);
    }

    #[test]
    fn tokens_are_unique_hex_and_give_an_id() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            super::super::udp::token_id(&a),
            u32::from_str_radix(&a[..8], 16).unwrap()
        );
    }
}
