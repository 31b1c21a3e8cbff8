//! Copy-free TCP data movement: a sender that hands the kernel references
//! to pages it already holds (`sendfile(2)` from a memfd) instead of
//! copying a user buffer on every `write`, and a receiver that lets the
//! kernel drop what arrived (`recv` with `MSG_TRUNC`) instead of copying it
//! to a buffer nobody reads.
//!
//! A TCP throughput stream's payload is filler: neither end looks at it, so
//! the two copies are pure CPU cost, paid by the host being measured.
//!
//! Why sendfile rather than `MSG_ZEROCOPY`: measured, not only argued.
//! benches/zerocopy_send.rs ran the three senders taking turns
//! (docs/PERFORMANCE.md, "MSG_ZEROCOPY, measured"; 5 rounds of 2.5 s on a
//! loaded machine). The kernel flagged every `MSG_ZEROCOPY` completion
//! `SO_EE_CODE_ZEROCOPY_COPIED`, on loopback and on veth: delivery to a
//! local socket copies the pinned pages (`skb_orphan_frags_rx`). So it paid
//! the copy plus the pinning and the notifications. Its medians lost to
//! `write` on both: loopback 19.3 against 23.0 Gbit/s at 0.175 against
//! 0.157 sender s/GB; veth 9.6 against 12.2 at 0.311 against 0.233. A
//! second, more loaded run had it behind on loopback and tied on veth,
//! never ahead. It stays a measurement part
//! ([`crate::engine::msg_zerocopy`]), not a mode.
//! sendfile's pages are page-cache pages that the receiving socket may
//! hold without a copy.
//!
//! The default (`auto`) chooses by where the peer is, as measured: plain
//! `write` to a peer on this host (loopback, or one of its own addresses)
//! and `sendfile` across a link, `MSG_TRUNC` to receive either way. The
//! halves cost differently, and the sending half differs by path. In one
//! quiet-machine run of benches/compare.sh (5 runs of 3 s, medians;
//! docs/PERFORMANCE.md), sendfile lost on loopback: 38.2 against 40.4
//! Gbit/s for 1 stream, 38.6 against 67.6 for 4, at more CPU per GB on
//! every row. Across a veth pair it won the 1-stream rows: 25.1 against
//! 19.9 Gbit/s at 0.36 against 0.47 CPU s/GB (both ends), `-R` 24.9
//! against 20.2 at 0.36 against 0.45; with 4 streams it cost the same per
//! GB (0.29 against 0.28) at 39.9 against 44.4 Gbit/s. A probe's CPU is the
//! cost it puts on the host it measures, and a real NIC takes sendfile's
//! pages without any copy, so across a link the sender does not copy.
//! Discarding saved the receiver's copy for almost nothing everywhere.
//!
//! Everything here falls back: a kernel or file system that refuses
//! memfd_create or sendfile leaves the stream on `write`, and the mode the
//! stream ran in is reported (`tcp.send_mode`, `tcp.receive_mode`).

use std::io;
use std::net::{IpAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

/// Whether TCP streams move data without copying it (`--zerocopy`, the
/// `zerocopy` config key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroCopy {
    /// The measured default: `MSG_TRUNC` to receive; `sendfile` to send
    /// across a link, plain `write` to a peer on this host (module docs).
    /// It stays a separate word from `on` and `receive` so that a later
    /// measurement can change it without changing what an explicit word
    /// means.
    #[default]
    Auto,
    /// Copy-free where the kernel allows it, `write`/`read` elsewhere.
    On,
    /// Plain `write` and `read`, as iperf3 without `-Z`.
    Off,
    /// Copy-free on receive only: plain `write` when sending, `MSG_TRUNC`
    /// when receiving (iperf3's `--skip-rx-copy` alone). The two halves
    /// cost differently (docs/PERFORMANCE.md), so each can be had alone.
    Receive,
    /// Copy-free on send only: `sendfile` when sending, plain `read` when
    /// receiving (iperf3's `-Z` alone).
    Send,
}

impl ZeroCopy {
    /// Whether a sender to a peer `on_host` (see [`on_this_host`]) tries
    /// `sendfile`: when asked for, and by default across a link.
    pub fn sends_copy_free(self, on_host: bool) -> bool {
        match self {
            ZeroCopy::On | ZeroCopy::Send => true,
            ZeroCopy::Auto => !on_host,
            ZeroCopy::Off | ZeroCopy::Receive => false,
        }
    }

    /// Whether receivers try `MSG_TRUNC`: by default, unless turned off.
    pub fn receives_copy_free(self) -> bool {
        matches!(self, ZeroCopy::Auto | ZeroCopy::On | ZeroCopy::Receive)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ZeroCopy::Auto => "auto",
            ZeroCopy::On => "on",
            ZeroCopy::Off => "off",
            ZeroCopy::Receive => "receive",
            ZeroCopy::Send => "send",
        }
    }
}

impl std::str::FromStr for ZeroCopy {
    type Err = String;
    fn from_str(s: &str) -> Result<ZeroCopy, String> {
        match s {
            "auto" => Ok(ZeroCopy::Auto),
            "on" => Ok(ZeroCopy::On),
            "off" => Ok(ZeroCopy::Off),
            "receive" => Ok(ZeroCopy::Receive),
            "send" => Ok(ZeroCopy::Send),
            _ => Err(format!(
                "zerocopy must be auto, on, off, receive or send, not {s:?}"
            )),
        }
    }
}

impl std::fmt::Display for ZeroCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a connection from `local` to `peer` stays on this host: a
/// loopback peer, or one of this host's own addresses, which the kernel
/// reaches over loopback with that same address as the source.
pub fn on_this_host(local: IpAddr, peer: IpAddr) -> bool {
    let plain = |a: IpAddr| a.to_canonical();
    plain(peer).is_loopback() || plain(peer) == plain(local)
}

/// [`on_this_host`] for a connected stream; on this host when its
/// addresses cannot be read (the plain `write` is never wrong).
pub fn stream_on_this_host(stream: &TcpStream) -> bool {
    match (stream.local_addr(), stream.peer_addr()) {
        (Ok(l), Ok(p)) => on_this_host(l.ip(), p.ip()),
        _ => true,
    }
}

/// A sealed in-memory file holding one write's worth of filler, the
/// source of a copy-free sender's `sendfile` calls. Its pages stay in the
/// page cache for the stream's life, so every call sends the same pages.
#[derive(Debug)]
pub struct PayloadFile {
    fd: OwnedFd,
    len: usize,
}

impl PayloadFile {
    /// A file holding `payload`, or why the kernel would not make one.
    pub fn new(payload: &[u8]) -> io::Result<PayloadFile> {
        // SAFETY: a constant NUL-terminated name and valid flags.
        let raw = unsafe { libc::memfd_create(c"pathprobe-payload".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor that we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut file = std::fs::File::from(fd);
        io::Write::write_all(&mut file, payload)?;
        Ok(PayloadFile {
            fd: file.into(),
            len: payload.len(),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sends up to the file's length to `stream` from its start, and
    /// returns how much the kernel took: as `write` would, with the
    /// socket's send timeout (`WouldBlock`) and errors.
    pub fn send_to(&self, stream: &TcpStream) -> io::Result<usize> {
        let mut offset: libc::off_t = 0;
        // SAFETY: both descriptors are open for the call; offset is a
        // local the kernel advances and we discard.
        let n = unsafe {
            libc::sendfile(
                stream.as_raw_fd(),
                self.fd.as_raw_fd(),
                &mut offset,
                self.len,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// Reads and discards up to `len` bytes from `stream` without copying
/// them out of the kernel (`MSG_TRUNC` on a TCP socket). Returns the
/// bytes consumed, 0 at EOF, and `read`'s errors (the receive timeout
/// as `WouldBlock`).
pub fn discard(stream: &TcpStream, len: usize) -> io::Result<usize> {
    // SAFETY: with MSG_TRUNC a TCP socket writes nothing to the buffer,
    // so a null pointer is never dereferenced.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::MSG_TRUNC,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn the_setting_parses_and_prints_its_five_words() {
        for (s, z) in [
            ("auto", ZeroCopy::Auto),
            ("on", ZeroCopy::On),
            ("off", ZeroCopy::Off),
            ("receive", ZeroCopy::Receive),
            ("send", ZeroCopy::Send),
        ] {
            assert_eq!(s.parse::<ZeroCopy>(), Ok(z));
            assert_eq!(z.to_string(), s);
        }
        assert!("yes".parse::<ZeroCopy>().is_err());
        // (sends copy-free on host, across a link, receives copy-free)
        // for each: the default discards, and sends copy-free across a link
        // only (module docs); `receive`/`send` turn on one half each.
        let halves = |z: ZeroCopy| {
            (
                z.sends_copy_free(true),
                z.sends_copy_free(false),
                z.receives_copy_free(),
            )
        };
        assert_eq!(halves(ZeroCopy::default()), (false, true, true));
        assert_eq!(halves(ZeroCopy::Off), (false, false, false));
        assert_eq!(halves(ZeroCopy::On), (true, true, true));
        assert_eq!(halves(ZeroCopy::Receive), (false, false, true));
        assert_eq!(halves(ZeroCopy::Send), (true, true, false));
    }

    #[test]
    fn a_peer_on_this_host_is_loopback_or_the_hosts_own_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(on_this_host(ip("127.0.0.1"), ip("127.0.0.1")));
        assert!(on_this_host(ip("127.0.0.1"), ip("127.0.0.53")));
        assert!(on_this_host(ip("::1"), ip("::1")));
        // A connection to one of the host's own addresses has it as its
        // source too; as an IPv4-mapped IPv6 peer as well.
        assert!(on_this_host(ip("10.0.0.5"), ip("10.0.0.5")));
        assert!(on_this_host(ip("::ffff:10.0.0.5"), ip("10.0.0.5")));
        assert!(on_this_host(ip("::ffff:10.0.0.5"), ip("::ffff:127.0.0.1")));
        // Across a link.
        assert!(!on_this_host(ip("10.0.0.5"), ip("10.0.0.6")));
        assert!(!on_this_host(ip("fd00::1"), ip("fd00::2")));
        let (a, b) = pair();
        assert!(stream_on_this_host(&a) && stream_on_this_host(&b));
    }

    #[test]
    fn sendfile_sends_the_payload_and_discard_counts_it_exactly() {
        let (a, mut b) = pair();
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let file = PayloadFile::new(&payload).unwrap();
        assert_eq!(file.len(), 10_000);
        let mut sent = 0;
        while sent < 10_000 {
            sent += file.send_to(&a).unwrap();
        }
        assert_eq!(sent, 10_000, "one file's worth, not more");
        // The bytes on the wire are the file's.
        let mut got = vec![0u8; 10_000];
        b.read_exact(&mut got).unwrap();
        assert_eq!(got, payload);
        // Discarding consumes exactly what arrived, then sees EOF.
        (&a).write_all(&payload[..7_000]).unwrap();
        drop(a);
        let mut discarded = 0;
        loop {
            match discard(&b, 4096).unwrap() {
                0 => break,
                n => {
                    assert!(n <= 4096);
                    discarded += n;
                }
            }
        }
        assert_eq!(discarded, 7_000);
    }
}
