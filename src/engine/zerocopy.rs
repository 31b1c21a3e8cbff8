//! Copy-free TCP data movement: a sender that hands the kernel references
//! to pages it already holds (`sendfile(2)` from a memfd) instead of
//! copying a user buffer on every `write`, and a receiver that lets the
//! kernel drop what arrived (`recv` with `MSG_TRUNC`) instead of copying it
//! to a buffer nobody reads.
//!
//! A TCP throughput stream's payload is filler: neither end looks at it, so
//! the two copies are pure CPU cost, paid by the host being measured. Why
//! sendfile rather than `MSG_ZEROCOPY`: on loopback and veth the kernel
//! copies a zerocopy skb's pages anyway when it is delivered to a local
//! socket (`skb_orphan_frags_rx`), so `MSG_ZEROCOPY` there pays the copy and
//! the completion notifications on top; sendfile's pages are page-cache
//! pages that the receiving socket may hold without a copy.
//!
//! Why it is not the default: on a quiet machine (benches/compare.sh, issue
//! 26) sendfile/discard moved less than plain write/read on loopback (TCP 1
//! stream 41.92 against 49.27 Gbit/s, 4 streams 47.21 against 57.07, `-R`
//! 41.43 against 47.79) and on veth with one stream (21.06 against 26.09,
//! `-R` 21.47 against 27.15); it won only on veth with 4 streams (42.84
//! against 38.29). The earlier figures that favoured it came from a machine
//! loaded by other builds, where the saved copies mattered more than the
//! per-call cost of sendfile and `MSG_TRUNC`. So `auto` is write/read and
//! zero copy is `on` when asked for.
//!
//! Everything here falls back: a kernel or file system that refuses
//! memfd_create or sendfile leaves the stream on `write`, and the mode the
//! stream ran in is reported (`tcp.send_mode`, `tcp.receive_mode`).

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

/// Whether TCP streams move data without copying it (`--zerocopy`, the
/// `zerocopy` config key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroCopy {
    /// The measured default: plain `write`/`read`, which a quiet machine
    /// measured faster on loopback and on veth for one stream (module
    /// docs). Today that is the same as `off`; it stays a separate word so
    /// that a later measurement can widen it (veth with several streams)
    /// without changing what an explicit `on` or `off` means.
    #[default]
    Auto,
    /// Copy-free where the kernel allows it, `write`/`read` elsewhere.
    On,
    /// Plain `write` and `read`, as iperf3 without `-Z`.
    Off,
}

impl ZeroCopy {
    /// Whether streams try the copy-free calls: only when asked for.
    pub fn enabled(self) -> bool {
        matches!(self, ZeroCopy::On)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ZeroCopy::Auto => "auto",
            ZeroCopy::On => "on",
            ZeroCopy::Off => "off",
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
            _ => Err(format!("zerocopy must be auto, on or off, not {s:?}")),
        }
    }
}

impl std::fmt::Display for ZeroCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
    fn the_setting_parses_and_prints_its_three_words() {
        for (s, z) in [
            ("auto", ZeroCopy::Auto),
            ("on", ZeroCopy::On),
            ("off", ZeroCopy::Off),
        ] {
            assert_eq!(s.parse::<ZeroCopy>(), Ok(z));
            assert_eq!(z.to_string(), s);
        }
        assert!("yes".parse::<ZeroCopy>().is_err());
        // The default is write/read (issue 26's quiet-machine figures);
        // only an explicit `on` tries sendfile and MSG_TRUNC.
        assert!(!ZeroCopy::Off.enabled());
        assert!(!ZeroCopy::default().enabled());
        assert!(ZeroCopy::On.enabled());
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
