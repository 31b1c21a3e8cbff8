//! The header at the start of every UDP datagram pathprobe sends.
//!
//! ```text
//!  0      2      3      4              8                     16                    24
//!  +------+------+------+--------------+---------------------+---------------------+
//!  | "pp" | ver  | flags| test id (BE) | sequence (u64, BE)  | send time ns (BE)   |
//!  +------+------+------+--------------+---------------------+---------------------+
//! ```
//!
//! A hello datagram (flag `HELLO`) carries the full test token and the stream
//! number after the header; a `FIN` datagram carries, in the sequence field,
//! how many measured datagrams the sender sent. A `RUN` datagram starts a
//! run: it and the datagrams after it in one GSO message, all of one
//! length and numbered in sequence, how many in the 2 bytes (BE) after the
//! header. A receiver that trusts a run needs only its first datagram's
//! header; one that does not know the flag reads the datagrams as before.

/// Header length in bytes; the smallest datagram pathprobe sends.
pub const HEADER_LEN: usize = 24;
/// Length of a hello datagram: header, 16-byte token, 4-byte stream number.
pub const HELLO_LEN: usize = HEADER_LEN + 16 + 4;
const MAGIC: [u8; 2] = *b"pp";
const VERSION: u8 = 1;

/// Registers a flow with the responder; sent by the prober until the
/// responder reports on the control channel that every flow is known.
pub const FLAG_HELLO: u8 = 0x01;
/// The sender has finished; the sequence field holds its measured count.
pub const FLAG_FIN: u8 = 0x02;
/// Sent during the warm-up (`--omit`), so it does not count.
pub const FLAG_OMIT: u8 = 0x04;
/// The first datagram of a run (module docs); [`RUN_LEN`] bytes long at
/// least.
pub const FLAG_RUN: u8 = 0x08;
/// Bytes a run's first datagram needs: the header and the run's length.
pub const RUN_LEN: usize = HEADER_LEN + 2;

/// Marks the datagram whose header `buf` starts with as the first of a
/// run of `count` (see [`FLAG_RUN`]). `buf` holds at least [`RUN_LEN`]
/// bytes; callers size their datagrams.
pub fn write_run(buf: &mut [u8], count: u16) {
    buf[3] |= FLAG_RUN;
    buf[HEADER_LEN..RUN_LEN].copy_from_slice(&count.to_be_bytes());
}

/// The length of the run a datagram starts: `None` unless its header
/// carries [`FLAG_RUN`] and it is long enough to say how many.
pub fn run_count(buf: &[u8]) -> Option<u16> {
    let header = UdpHeader::parse(buf).ok()?;
    if header.flags & FLAG_RUN == 0 {
        return None;
    }
    Some(u16::from_be_bytes(
        buf.get(HEADER_LEN..RUN_LEN)?.try_into().ok()?,
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub flags: u8,
    pub test_id: u32,
    pub seq: u64,
    pub send_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UdpHeaderError {
    #[error("datagram of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short(usize),
    #[error("datagram does not start with the pathprobe magic")]
    BadMagic,
    #[error("datagram header version {0}, expected {VERSION}")]
    Version(u8),
}

impl UdpHeader {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than the header; callers size their buffers.
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..2].copy_from_slice(&MAGIC);
        buf[2] = VERSION;
        buf[3] = self.flags;
        buf[4..8].copy_from_slice(&self.test_id.to_be_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.send_ns.to_be_bytes());
    }

    pub fn parse(buf: &[u8]) -> Result<UdpHeader, UdpHeaderError> {
        if buf.len() < HEADER_LEN {
            return Err(UdpHeaderError::Short(buf.len()));
        }
        if buf[0..2] != MAGIC {
            return Err(UdpHeaderError::BadMagic);
        }
        if buf[2] != VERSION {
            return Err(UdpHeaderError::Version(buf[2]));
        }
        let u64_at = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        Ok(UdpHeader {
            flags: buf[3],
            test_id: u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")),
            seq: u64_at(8),
            send_ns: u64_at(16),
        })
    }
}

/// Builds a hello datagram for `stream` of the test with `token`.
pub fn hello_datagram(token: &str, stream: u32) -> Vec<u8> {
    let mut buf = vec![0u8; HELLO_LEN];
    UdpHeader {
        flags: FLAG_HELLO,
        test_id: token_id(token),
        seq: 0,
        send_ns: 0,
    }
    .write(&mut buf);
    let raw = token_bytes(token);
    buf[HEADER_LEN..HEADER_LEN + 16].copy_from_slice(&raw);
    buf[HEADER_LEN + 16..].copy_from_slice(&stream.to_be_bytes());
    buf
}

/// Reads a hello datagram: the token (hex) and the stream number.
pub fn parse_hello(buf: &[u8]) -> Option<(String, u32)> {
    let header = UdpHeader::parse(buf).ok()?;
    if header.flags & FLAG_HELLO == 0 || buf.len() < HELLO_LEN {
        return None;
    }
    let token: String = buf[HEADER_LEN..HEADER_LEN + 16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let stream = u32::from_be_bytes(buf[HEADER_LEN + 16..HELLO_LEN].try_into().ok()?);
    Some((token, stream))
}

fn token_bytes(token: &str) -> [u8; 16] {
    let mut raw = [0u8; 16];
    for (i, byte) in raw.iter_mut().enumerate() {
        *byte = token
            .get(2 * i..2 * i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
    }
    raw
}

/// The 32-bit test id carried in UDP datagrams (the control
/// token lives in `message`; this is what of it fits a datagram header): the token's first 4 bytes.
pub fn token_id(token: &str) -> u32 {
    let hex = token.get(..8).unwrap_or("");
    u32::from_str_radix(hex, 16).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_says_how_many_and_only_with_its_flag() {
        let mut buf = [0u8; RUN_LEN];
        UdpHeader {
            flags: FLAG_OMIT,
            test_id: 7,
            seq: 100,
            send_ns: 1,
        }
        .write(&mut buf);
        assert_eq!(run_count(&buf), None, "no flag, no run");
        write_run(&mut buf, 46);
        assert_eq!(run_count(&buf), Some(46));
        let h = UdpHeader::parse(&buf).unwrap();
        assert_eq!((h.flags, h.seq), (FLAG_OMIT | FLAG_RUN, 100));
        // Too short to say how many: no run, and no panic.
        assert_eq!(run_count(&buf[..RUN_LEN - 1]), None);
        assert_eq!(run_count(&buf[..3]), None);
    }

    use super::*;

    #[test]
    fn header_round_trip_and_layout() {
        let h = UdpHeader {
            flags: FLAG_OMIT,
            test_id: 0x0102_0304,
            seq: 0x1122_3344_5566_7788,
            send_ns: 42,
        };
        let mut buf = [0u8; 64];
        h.write(&mut buf);
        assert_eq!(&buf[..8], &[b'p', b'p', 1, FLAG_OMIT, 1, 2, 3, 4]);
        assert_eq!(
            &buf[8..16],
            &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
        assert_eq!(UdpHeader::parse(&buf).unwrap(), h);
        assert_eq!(UdpHeader::parse(&buf[..HEADER_LEN]).unwrap(), h);
    }

    #[test]
    fn bad_datagrams_are_errors() {
        let mut buf = [0u8; 32];
        UdpHeader {
            flags: 0,
            test_id: 1,
            seq: 1,
            send_ns: 1,
        }
        .write(&mut buf);
        assert_eq!(UdpHeader::parse(&buf[..23]), Err(UdpHeaderError::Short(23)));
        assert_eq!(UdpHeader::parse(&[]), Err(UdpHeaderError::Short(0)));
        let mut bad = buf;
        bad[0] = b'x';
        assert_eq!(UdpHeader::parse(&bad), Err(UdpHeaderError::BadMagic));
        let mut v = buf;
        v[2] = 9;
        assert_eq!(UdpHeader::parse(&v), Err(UdpHeaderError::Version(9)));
    }

    #[test]
    fn hello_carries_token_and_stream() {
        let token = "00112233445566778899aabbccddeeff";
        let dgram = hello_datagram(token, 7);
        assert_eq!(dgram.len(), HELLO_LEN);
        assert_eq!(parse_hello(&dgram), Some((token.to_string(), 7)));
        assert_eq!(UdpHeader::parse(&dgram).unwrap().test_id, 0x0011_2233);
        assert_eq!(parse_hello(&dgram[..HELLO_LEN - 1]), None);
        let mut data = dgram.clone();
        data[3] = 0;
        assert_eq!(parse_hello(&data), None);
    }

    #[test]
    fn token_id_reads_the_first_four_bytes() {
        assert_eq!(token_id("deadbeef00"), 0xdead_beef);
        assert_eq!(token_id("xx"), 0);
    }
}
