//! iperf3's wire protocol (3.12 and later), as pure encode/decode with no
//! I/O: the cookie, the state bytes, the length-prefixed JSON of the
//! parameter and results exchanges, the SERVER_ERROR trailer, the UDP
//! connect handshake and the UDP datagram header.
//!
//! Every reader here takes its bytes as hostile: lengths are bounded before
//! anything is allocated, integers are read leniently the way iperf3 peers
//! write them (3.12 and 3.13 print -1 as 18446744073709551615, cJSON prints
//! NaN as `null`), and figures are checked by the prober (`probe::verify`)
//! before they become a result. See `docs/iperf3-protocol.md` in the shared
//! notes for the map this follows; each detail was checked against iperf3
//! 3.12.

use serde::{Deserialize, Deserializer, Serialize};

/// iperf3's port, for TCP and UDP alike.
pub const IPERF3_PORT: u16 = 5201;
/// The cookie: 36 characters of base32 and a NUL.
pub const COOKIE_LEN: usize = 37;
/// The alphabet iperf3 draws its cookie characters from.
const COOKIE_ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
/// Longest parameter JSON a server reads (iperf3 3.18's limit).
pub const MAX_PARAMS_LEN: u32 = 8192;
/// Longest results JSON the prober reads from a server. A stock server's
/// results are a few hundred bytes per stream; `server_output_text` is only
/// sent when asked for, and pathprobe does not ask.
pub const MAX_RESULTS_LEN: u32 = 256 * 1024;
/// The 4-byte datagram a UDP stream opens with, client to server ("9876").
pub const UDP_CONNECT: [u8; 4] = *b"9876";
/// The server's reply to it ("6789").
pub const UDP_REPLY: [u8; 4] = *b"6789";
/// The replies of iperf3 before 3.12 (987654321 in either byte order).
pub const UDP_REPLY_LEGACY: [[u8; 4]; 2] = [[0xB1, 0x68, 0xDE, 0x3A], [0x3A, 0xDE, 0x68, 0xB1]];

/// One state byte on the control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfDone,
    AccessDenied,
    ServerError,
    /// A value iperf3 defines but never sends, or no value at all.
    Other(i8),
}

impl State {
    pub fn from_byte(b: u8) -> State {
        match b as i8 {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            16 => State::IperfDone,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            other => State::Other(other),
        }
    }

    pub fn byte(self) -> u8 {
        let v: i8 = match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
            State::Other(v) => v,
        };
        v as u8
    }
}

/// A fresh cookie from 36 random bytes, as iperf3 makes it.
pub fn make_cookie(random: &[u8; 36]) -> [u8; COOKIE_LEN] {
    let mut c = [0u8; COOKIE_LEN];
    for (out, r) in c.iter_mut().zip(random) {
        *out = COOKIE_ALPHABET[(*r % 32) as usize];
    }
    c
}

/// Whether 37 bytes read from a new connection look like an iperf3 cookie:
/// 36 base32 characters and a NUL.
pub fn is_cookie(bytes: &[u8]) -> bool {
    bytes.len() == COOKIE_LEN
        && bytes[36] == 0
        && bytes[..36].iter().all(|b| COOKIE_ALPHABET.contains(b))
}

/// Two cookies name the same test: iperf3 compares them as C strings.
pub fn same_cookie(a: &[u8], b: &[u8]) -> bool {
    let cstr = |x: &[u8]| -> Vec<u8> { x.iter().take_while(|&&c| c != 0).copied().collect() };
    cstr(a) == cstr(b)
}

/// The 4-byte big-endian length before a JSON blob.
pub fn encode_json_len(len: usize) -> [u8; 4] {
    (len.min(u32::MAX as usize) as u32).to_be_bytes()
}

/// Why a JSON blob's length or body is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("a JSON message of length 0")]
    Empty,
    #[error("a JSON message of {len} bytes, over the limit of {max}")]
    TooLong { len: u32, max: u32 },
    #[error("unreadable JSON: {0}")]
    Syntax(String),
}

/// Checks a JSON blob's length prefix against `max` before reading it.
pub fn check_json_len(prefix: [u8; 4], max: u32) -> Result<usize, JsonError> {
    match u32::from_be_bytes(prefix) {
        0 => Err(JsonError::Empty),
        len if len > max => Err(JsonError::TooLong { len, max }),
        len => Ok(len as usize),
    }
}

/// The parameters a client sends after PARAM_EXCHANGE. Boolean keys mean
/// "on" by their presence whatever their value, so they are written only
/// when on; a server treats them the same way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "presence"
    )]
    pub tcp: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "presence"
    )]
    pub udp: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "presence"
    )]
    pub sctp: Option<bool>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub omit: i64,
    #[serde(default = "ten", deserialize_with = "lenient_i64")]
    pub time: i64,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub num: i64,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub blockcount: i64,
    #[serde(default = "one", deserialize_with = "lenient_i64")]
    pub parallel: i64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub len: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub bandwidth: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub fqrate: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub pacing_timer: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub burst: Option<i64>,
    #[serde(
        rename = "MSS",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub mss: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "presence"
    )]
    pub nodelay: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub window: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "presence"
    )]
    pub reverse: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "presence"
    )]
    pub bidirectional: Option<bool>,
    #[serde(
        rename = "TOS",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub tos: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub flowlabel: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub get_server_output: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub udp_counters_64bit: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub repeating_payload: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub zerocopy: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub dont_fragment: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub server_affinity: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authtoken: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "presence"
    )]
    pub mptcp: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub skip_rx_copy: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
}

fn ten() -> i64 {
    10
}
fn one() -> i64 {
    1
}

impl Params {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain fields serialize")
    }

    /// Reads a client's parameters. Unknown keys are ignored, as stock
    /// servers do.
    pub fn decode(body: &[u8]) -> Result<Params, JsonError> {
        serde_json::from_slice(body).map_err(|e| JsonError::Syntax(e.to_string()))
    }

    pub fn is_udp(&self) -> bool {
        // iperf3 checks tcp, then udp, then sctp; the last present wins.
        self.udp.is_some() && self.sctp.is_none()
    }
}

/// One stream in a results exchange, from the point of view of the side
/// that sends it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    #[serde(deserialize_with = "lenient_i64")]
    pub id: i64,
    #[serde(deserialize_with = "lenient_i64")]
    pub bytes: i64,
    #[serde(default = "minus_one", deserialize_with = "lenient_i64")]
    pub retransmits: i64,
    /// Seconds.
    #[serde(default, deserialize_with = "lenient_f64")]
    pub jitter: f64,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub errors: i64,
    /// Absent before 3.14: then unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub omitted_errors: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub packets: i64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_i64"
    )]
    pub omitted_packets: Option<i64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    pub start_time: f64,
    #[serde(default, deserialize_with = "lenient_f64")]
    pub end_time: f64,
}

fn minus_one() -> i64 {
    -1
}

/// One side's results, both directions of the exchange.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Percentages of one CPU... of the whole host, as iperf3 measures them
    /// (getrusage of the process over wall time): 0..=100 per CPU.
    #[serde(deserialize_with = "lenient_f64")]
    pub cpu_util_total: f64,
    #[serde(deserialize_with = "lenient_f64")]
    pub cpu_util_user: f64,
    #[serde(deserialize_with = "lenient_f64")]
    pub cpu_util_system: f64,
    /// -1: this side only received; 1: it reports TCP retransmits; 0: not.
    #[serde(deserialize_with = "lenient_i64")]
    pub sender_has_retransmits: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_json: Option<serde_json::Value>,
}

impl Results {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain fields serialize")
    }

    pub fn decode(body: &[u8]) -> Result<Results, JsonError> {
        serde_json::from_slice(body).map_err(|e| JsonError::Syntax(e.to_string()))
    }
}

/// An integer as iperf3 writes one: 2^63 and above is a negative number
/// printed unsigned (3.12, 3.13), a float is truncated, `null` is 0.
fn number_to_i64(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::Null => Some(0),
        serde_json::Value::Bool(b) => Some(*b as i64),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(i)
            } else if let Some(u) = n.as_u64() {
                Some(u as i64)
            } else {
                n.as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| f.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
            }
        }
        _ => None,
    }
}

fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    number_to_i64(&v).ok_or_else(|| serde::de::Error::custom("expected a number"))
}

fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    number_to_i64(&v)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom("expected a number"))
}

fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(0.0),
        serde_json::Value::Number(n) => Ok(n.as_f64().unwrap_or(0.0)),
        _ => Err(serde::de::Error::custom("expected a number")),
    }
}

/// A boolean key is on by being there, whatever its value.
fn presence<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let _ = serde::de::IgnoredAny::deserialize(d)?;
    Ok(Some(true))
}

/// iperf3's error codes that pathprobe sends or names.
pub mod errors {
    pub const IEDURATION: i32 = 5;
    pub const IENUMSTREAMS: i32 = 6;
    pub const IEBLOCKSIZE: i32 = 7;
    pub const IEBUFSIZE: i32 = 8;
    pub const IEUDPBLOCKSIZE: i32 = 20;
    pub const IETOTALRATE: i32 = 27;
    pub const IEMAXSERVERTESTDURATIONEXCEEDED: i32 = 37;
    pub const IERECVPARAMS: i32 = 114;
    pub const IEACCESSDENIED: i32 = 121;
    pub const IEAUTHTEST: i32 = 142;
    /// "idle timeout for receiving data" (3.11 and later).
    pub const IENOMSG: i32 = 144;
    pub const IESETCONGESTION: i32 = 134;
    pub const IESTREAMLISTEN: i32 = 202;
}

/// What a stock iperf3 3.12 prints for an error code it receives, for the
/// codes a server sends; others are named by number.
pub fn error_text(code: i32) -> String {
    let t = match code {
        5 => "test duration too long",
        6 => "number of parallel streams too large",
        7 => "block size too large",
        8 => "socket buffer size too large",
        20 => "block size invalid",
        27 => "total required bandwidth is larger than server limit",
        37 => "client's requested duration exceeds the server's maximum permitted limit",
        114 => "unable to receive parameters from client",
        121 => "the server is busy running a test. try again later",
        134 => "unable to set TCP_CONGESTION",
        142 => "test authorization failed",
        144 => "idle timeout for receiving data",
        160 => "server test duration expired",
        202 => "unable to start stream listener",
        _ => return format!("iperf3 error {code}"),
    };
    t.to_string()
}

/// The SERVER_ERROR trailer: iperf3's error code and the server's errno.
pub fn encode_server_error(code: i32, errno: i32) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[0] = State::ServerError.byte();
    b[1..5].copy_from_slice(&code.to_be_bytes());
    b[5..9].copy_from_slice(&errno.to_be_bytes());
    b
}

/// The server's reply to a UDP stream's connect datagram: the mirror of
/// what it got, so that peers of every byte order and age accept it.
pub fn udp_reply_for(hello: &[u8]) -> [u8; 4] {
    match hello {
        b"9876" => *b"6789",
        b"6789" => *b"9876",
        [0x15, 0xCD, 0x5B, 0x07] => UDP_REPLY_LEGACY[0],
        [0x07, 0x5B, 0xCD, 0x15] => UDP_REPLY_LEGACY[1],
        _ => UDP_REPLY,
    }
}

/// Whether a client accepts `reply` as the server's UDP connect reply.
pub fn is_udp_reply(reply: &[u8]) -> bool {
    reply == UDP_REPLY || reply == UDP_CONNECT || UDP_REPLY_LEGACY.iter().any(|l| reply == l)
}

/// The header of an iperf3 UDP datagram: the sender's clock (seconds and
/// microseconds) and the sequence, 32 or 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub sec: u32,
    pub usec: u32,
    pub seq: u64,
}

impl UdpHeader {
    pub fn len(counters64: bool) -> usize {
        if counters64 {
            16
        } else {
            12
        }
    }

    /// Writes the header into the start of `buf`, which must be at least
    /// [`UdpHeader::len`] bytes (iperf3's shortest datagram is 16).
    pub fn write(&self, buf: &mut [u8], counters64: bool) {
        buf[0..4].copy_from_slice(&self.sec.to_be_bytes());
        buf[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if counters64 {
            buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        } else {
            buf[8..12].copy_from_slice(&(self.seq as u32).to_be_bytes());
        }
    }

    pub fn parse(buf: &[u8], counters64: bool) -> Option<UdpHeader> {
        let at = |i: usize| -> Option<u32> {
            Some(u32::from_be_bytes(buf.get(i..i + 4)?.try_into().ok()?))
        };
        let seq = if counters64 {
            u64::from_be_bytes(buf.get(8..16)?.try_into().ok()?)
        } else {
            u64::from(at(8)?)
        };
        Some(UdpHeader {
            sec: at(0)?,
            usec: at(4)?,
            seq,
        })
    }

    /// The send time in nanoseconds, for jitter.
    pub fn send_ns(&self) -> u64 {
        u64::from(self.sec) * 1_000_000_000 + u64::from(self.usec.min(999_999)) * 1000
    }

    pub fn from_ns(ns: u64, seq: u64) -> UdpHeader {
        UdpHeader {
            sec: (ns / 1_000_000_000) as u32,
            usec: ((ns % 1_000_000_000) / 1000) as u32,
            seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_bytes_are_iperf3s() {
        for (s, b) in [
            (State::TestStart, 1u8),
            (State::TestRunning, 2),
            (State::TestEnd, 4),
            (State::ParamExchange, 9),
            (State::CreateStreams, 10),
            (State::ExchangeResults, 13),
            (State::DisplayResults, 14),
            (State::IperfDone, 16),
            (State::AccessDenied, 0xFF),
            (State::ServerError, 0xFE),
        ] {
            assert_eq!(s.byte(), b);
            assert_eq!(State::from_byte(b), s);
        }
        assert_eq!(State::from_byte(3), State::Other(3));
    }

    #[test]
    fn cookies_are_base32_and_nul() {
        let c = make_cookie(&[200; 36]);
        assert!(is_cookie(&c));
        assert_eq!(c[0], COOKIE_ALPHABET[200 % 32]);
        let mut bad = c;
        bad[3] = b'A';
        assert!(!is_cookie(&bad));
        assert!(!is_cookie(&c[..36]));
        // A pathprobe frame starts with a length, never with a cookie.
        assert!(!is_cookie(
            b"\0\0\0\x20{\"type\":\"hello\",\"version\":1}...."
        ));
        assert!(same_cookie(&c, &c));
        let mut other = c;
        other[0] = if c[0] == b'a' { b'b' } else { b'a' };
        assert!(!same_cookie(&c, &other));
    }

    #[test]
    fn booleans_are_written_only_when_on_and_read_by_presence() {
        let p = Params {
            tcp: Some(true),
            parallel: 2,
            time: 3,
            ..Params::default()
        };
        let text = String::from_utf8(p.encode()).unwrap();
        assert!(!text.contains("reverse"), "{text}");
        assert!(text.contains("\"tcp\":true"), "{text}");
        // `false` still means on, as stock servers take it.
        let back = Params::decode(br#"{"udp":true,"reverse":false,"time":2}"#).unwrap();
        assert_eq!(back.reverse, Some(true));
        assert!(back.is_udp());
        assert_eq!(back.parallel, 1, "missing parallel is 1");
        let none = Params::decode(br#"{"tcp":true}"#).unwrap();
        assert_eq!((none.time, none.omit, none.reverse), (10, 0, None));
    }

    #[test]
    fn a_stock_3_12_results_blob_reads_with_its_quirks() {
        let text = br#"{"cpu_util_total":32.8,"cpu_util_user":1.8,"cpu_util_system":31.0,"sender_has_retransmits":18446744073709551615,"congestion_used":"cubic","streams":[{"id":1,"bytes":4949540864,"retransmits":18446744073709551615,"jitter":null,"errors":0,"packets":0,"start_time":0,"end_time":2.000865}],"unknown":7}"#;
        let r = Results::decode(text).unwrap();
        assert_eq!(r.sender_has_retransmits, -1);
        assert_eq!(r.streams[0].retransmits, -1);
        assert_eq!(r.streams[0].bytes, 4_949_540_864);
        assert_eq!(r.streams[0].jitter, 0.0);
        assert_eq!(r.streams[0].omitted_errors, None);
        assert!((r.streams[0].end_time - 2.000865).abs() < 1e-9);
        let again = Results::decode(&r.encode()).unwrap();
        assert_eq!(again, r);
        assert!(
            Results::decode(br#"{"streams":[]}"#).is_err(),
            "cpu is required"
        );
        assert!(Results::decode(b"[]").is_err());
    }

    #[test]
    fn json_lengths_are_bounded_before_reading() {
        assert_eq!(check_json_len([0, 0, 0, 0], 10), Err(JsonError::Empty));
        assert_eq!(check_json_len([0, 0, 0, 10], 10), Ok(10));
        assert!(matches!(
            check_json_len([0xFF; 4], MAX_RESULTS_LEN),
            Err(JsonError::TooLong { .. })
        ));
    }

    #[test]
    fn udp_headers_round_trip_in_both_widths() {
        let h = UdpHeader {
            sec: 7,
            usec: 999_999,
            seq: 0x1_0000_0002,
        };
        let mut buf = [0u8; 16];
        h.write(&mut buf, true);
        assert_eq!(UdpHeader::parse(&buf, true), Some(h));
        h.write(&mut buf, false);
        assert_eq!(UdpHeader::parse(&buf, false).unwrap().seq, 2);
        assert_eq!(&buf[0..4], &[0, 0, 0, 7]);
        assert_eq!(UdpHeader::parse(&buf[..11], false), None);
        let t = UdpHeader::from_ns(5_000_123_456, 1);
        assert_eq!((t.sec, t.usec), (5, 123));
    }

    #[test]
    fn udp_replies_mirror_the_hello() {
        assert_eq!(udp_reply_for(b"9876"), *b"6789");
        assert_eq!(udp_reply_for(b"6789"), *b"9876");
        assert_eq!(udp_reply_for(b"zz"), *b"6789");
        assert!(is_udp_reply(b"6789"));
        assert!(!is_udp_reply(b"0000"));
        assert_eq!(encode_server_error(121, 0)[..5], [0xFE, 0, 0, 0, 121]);
    }
}
