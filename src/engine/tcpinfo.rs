//! TCP_INFO of a socket: retransmits, RTT, MSS and congestion window.
//!
//! `struct tcp_info` only ever grows at its end, so the fields are read by
//! their fixed offsets from the bytes the kernel returns, and a field beyond
//! what an older kernel returned reads as absent.

use std::os::fd::AsRawFd;

/// The TCP_INFO fields pathprobe uses, as the kernel reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    pub snd_mss: u32,
    /// Smoothed RTT and its variance, microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Retransmitted segments over the connection's life.
    pub total_retrans: u32,
    /// Minimum RTT seen, microseconds (kernel 4.6+).
    pub min_rtt_us: Option<u32>,
    /// The kernel's account of what limited a sender (kernel 4.10+), each
    /// microseconds since connect: time with data outstanding
    /// (`tcpi_busy_time`, which includes the two below), time stalled by
    /// the peer's receive window, and time with nothing to send because the
    /// send buffer was full of unacknowledged data.
    pub busy_time_us: Option<u64>,
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
    /// Latest delivery rate estimate, bytes per second (4.9+), and whether
    /// the sample was application-limited.
    pub delivery_rate: Option<u64>,
    pub delivery_rate_app_limited: Option<bool>,
    /// Bytes retransmitted over the connection's life (4.19+).
    pub bytes_retrans: Option<u64>,
    /// Bytes written but not yet sent (4.6+).
    pub notsent_bytes: Option<u32>,
    /// Receiver: its estimate of the peer's RTT, microseconds, and the
    /// receive space autotuning aims for, bytes.
    pub rcv_rtt_us: Option<u32>,
    pub rcv_space: Option<u32>,
    /// Slow-start threshold, segments: the kernel's "infinite" (0x7fffffff)
    /// until the connection first leaves slow start.
    pub snd_ssthresh: u32,
    /// Bytes the peer acknowledged over the connection's life (4.1+).
    pub bytes_acked: Option<u64>,
    /// Segments the peer has selectively acknowledged beyond a hole
    /// (`tcpi_sacked`): arrived, but not yet in `bytes_acked`, which
    /// waits for the hole's retransmission.
    pub sacked: u32,
    /// Bytes received over the connection's life (4.1+).
    pub bytes_received: Option<u64>,
}

/// `snd_ssthresh` of a connection still in its first slow start.
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

const OFF_SND_MSS: usize = 16;
const OFF_SACKED: usize = 28;
const OFF_RTT: usize = 68;
const OFF_RTTVAR: usize = 72;
const OFF_SND_SSTHRESH: usize = 76;
const OFF_SND_CWND: usize = 80;
const OFF_BYTES_ACKED: usize = 120;
const OFF_BYTES_RECEIVED: usize = 128;
const OFF_TOTAL_RETRANS: usize = 100;
const OFF_MIN_RTT: usize = 148;
/// The byte after `tcpi_snd_wscale`/`tcpi_rcv_wscale`, whose lowest bit is
/// `tcpi_delivery_rate_app_limited`.
const OFF_FLAGS: usize = 7;
const OFF_RCV_RTT: usize = 92;
const OFF_RCV_SPACE: usize = 96;
const OFF_NOTSENT: usize = 144;
const OFF_DELIVERY_RATE: usize = 160;
const OFF_BUSY_TIME: usize = 168;
const OFF_RWND_LIMITED: usize = 176;
const OFF_SNDBUF_LIMITED: usize = 184;
const OFF_BYTES_RETRANS: usize = 208;

fn u32_at(buf: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(buf.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(buf: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(buf.get(off..off + 8)?.try_into().ok()?))
}

impl TcpInfo {
    /// Parses the bytes getsockopt(TCP_INFO) returned.
    pub fn parse(buf: &[u8]) -> Option<TcpInfo> {
        Some(TcpInfo {
            snd_mss: u32_at(buf, OFF_SND_MSS)?,
            rtt_us: u32_at(buf, OFF_RTT)?,
            rttvar_us: u32_at(buf, OFF_RTTVAR)?,
            snd_cwnd: u32_at(buf, OFF_SND_CWND)?,
            total_retrans: u32_at(buf, OFF_TOTAL_RETRANS)?,
            min_rtt_us: u32_at(buf, OFF_MIN_RTT),
            busy_time_us: u64_at(buf, OFF_BUSY_TIME),
            rwnd_limited_us: u64_at(buf, OFF_RWND_LIMITED),
            sndbuf_limited_us: u64_at(buf, OFF_SNDBUF_LIMITED),
            // The flag arrived with the rate (4.9); without the rate the
            // bit is padding.
            delivery_rate: u64_at(buf, OFF_DELIVERY_RATE),
            delivery_rate_app_limited: u64_at(buf, OFF_DELIVERY_RATE)
                .and(buf.get(OFF_FLAGS).map(|b| b & 1 == 1)),
            bytes_retrans: u64_at(buf, OFF_BYTES_RETRANS),
            notsent_bytes: u32_at(buf, OFF_NOTSENT),
            rcv_rtt_us: u32_at(buf, OFF_RCV_RTT),
            rcv_space: u32_at(buf, OFF_RCV_SPACE),
            snd_ssthresh: u32_at(buf, OFF_SND_SSTHRESH)?,
            bytes_acked: u64_at(buf, OFF_BYTES_ACKED),
            sacked: u32_at(buf, OFF_SACKED)?,
            bytes_received: u64_at(buf, OFF_BYTES_RECEIVED),
        })
    }

    /// Reads TCP_INFO from a connected socket.
    pub fn read(sock: &impl AsRawFd) -> std::io::Result<TcpInfo> {
        let mut buf = [0u8; 256];
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: the buffer and its length are valid for the kernel to write.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                buf.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        TcpInfo::parse(&buf[..len as usize])
            .ok_or_else(|| std::io::Error::other("TCP_INFO shorter than expected"))
    }
}

/// The congestion control algorithm a socket uses.
pub fn congestion(sock: &impl std::os::fd::AsFd) -> Option<String> {
    let raw = socket2::SockRef::from(sock).tcp_congestion().ok()?;
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Some(String::from_utf8_lossy(&raw[..end]).into_owned())
}

/// Sets the congestion control algorithm, saying where to look when the
/// kernel does not have it.
pub fn set_congestion(sock: &impl std::os::fd::AsFd, algo: &str) -> std::io::Result<()> {
    socket2::SockRef::from(sock).set_tcp_congestion(algo.as_bytes()).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("congestion control {algo:?} is not available ({e}); see /proc/sys/net/ipv4/tcp_allowed_congestion_control"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_by_offset() {
        let mut buf = vec![0u8; 232];
        buf[OFF_SND_MSS..OFF_SND_MSS + 4].copy_from_slice(&1448u32.to_ne_bytes());
        buf[OFF_RTT..OFF_RTT + 4].copy_from_slice(&190u32.to_ne_bytes());
        buf[OFF_RTTVAR..OFF_RTTVAR + 4].copy_from_slice(&20u32.to_ne_bytes());
        buf[OFF_SND_CWND..OFF_SND_CWND + 4].copy_from_slice(&10u32.to_ne_bytes());
        buf[OFF_TOTAL_RETRANS..OFF_TOTAL_RETRANS + 4].copy_from_slice(&3u32.to_ne_bytes());
        buf[OFF_MIN_RTT..OFF_MIN_RTT + 4].copy_from_slice(&150u32.to_ne_bytes());
        buf[OFF_FLAGS] = 1;
        buf[OFF_BUSY_TIME..OFF_BUSY_TIME + 8].copy_from_slice(&5_000_000u64.to_ne_bytes());
        buf[OFF_RWND_LIMITED..OFF_RWND_LIMITED + 8].copy_from_slice(&4_000_000u64.to_ne_bytes());
        buf[OFF_BYTES_RETRANS..OFF_BYTES_RETRANS + 8].copy_from_slice(&2896u64.to_ne_bytes());
        buf[OFF_SACKED..OFF_SACKED + 4].copy_from_slice(&7u32.to_ne_bytes());
        let info = TcpInfo::parse(&buf).unwrap();
        assert_eq!(info.sacked, 7);
        assert_eq!(info.snd_mss, 1448);
        assert_eq!(info.rtt_us, 190);
        assert_eq!(info.rttvar_us, 20);
        assert_eq!(info.snd_cwnd, 10);
        assert_eq!(info.total_retrans, 3);
        assert_eq!(info.min_rtt_us, Some(150));
        assert_eq!(info.busy_time_us, Some(5_000_000));
        assert_eq!(info.rwnd_limited_us, Some(4_000_000));
        assert_eq!(info.sndbuf_limited_us, Some(0));
        assert_eq!(info.delivery_rate_app_limited, Some(true));
        // The 4.18 struct (ends after delivered_ce) has the time
        // accounting but not bytes_retrans.
        let k418 = TcpInfo::parse(&buf[..200]).unwrap();
        assert_eq!(k418.rwnd_limited_us, Some(4_000_000));
        assert_eq!(k418.bytes_retrans, None);
        // A 4.6 kernel's has no time accounting and no delivery rate: unknown, not 0.
        let k46 = TcpInfo::parse(&buf[..152]).unwrap();
        assert_eq!(k46.busy_time_us, None);
        assert_eq!(k46.delivery_rate_app_limited, None);
        // An old kernel's shorter struct has no min_rtt.
        assert_eq!(TcpInfo::parse(&buf[..104]).unwrap().min_rtt_us, None);
        assert_eq!(TcpInfo::parse(&buf[..50]), None);
    }

    #[test]
    fn reads_a_live_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let info = TcpInfo::read(&client).unwrap();
        // Loopback's MTU is 65536, so the MSS is far above Ethernet's.
        assert!(info.snd_mss > 1000, "{info:?}");
        assert!(info.snd_cwnd >= 1, "{info:?}");
        assert!(congestion(&client).is_some_and(|c| !c.is_empty()));
        assert!(set_congestion(&client, "no-such-algo").is_err());
    }
}
