//! The options both ends apply to a TCP data socket (window, congestion
//! control, TOS, pacing) and its blocking mode, for every TCP kind.

use socket2::SockRef;

/// Options both ends set on a TCP data socket.
#[derive(Debug, Clone, Default)]
pub struct TcpOptions {
    pub window: Option<u32>,
    pub congestion: Option<String>,
    pub tos: Option<u8>,
    /// Bits per second for this stream, through the kernel's TCP pacing.
    pub bitrate: u64,
}

/// Applies `opts` to a data socket. Call before connect where possible, so
/// the receive window scale is negotiated for the requested window.
pub fn apply_options(sock: &SockRef<'_>, opts: &TcpOptions, ipv6: bool) -> std::io::Result<()> {
    if let Some(w) = opts.window {
        sock.set_send_buffer_size(w as usize)?;
        sock.set_recv_buffer_size(w as usize)?;
    }
    if let Some(algo) = &opts.congestion {
        sock.set_tcp_congestion(algo.as_bytes()).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("congestion control {algo:?} is not available ({e}); see /proc/sys/net/ipv4/tcp_allowed_congestion_control"),
            )
        })?;
    }
    if let Some(tos) = opts.tos {
        if ipv6 {
            sock.set_tclass_v6(tos as u32)?;
        } else {
            sock.set_tos_v4(tos as u32)?;
        }
    }
    if opts.bitrate > 0 {
        let bytes_per_second: u64 = opts.bitrate / 8;
        // SAFETY: SO_MAX_PACING_RATE takes a u64 of bytes per second.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&**sock),
                libc::SOL_SOCKET,
                libc::SO_MAX_PACING_RATE,
                (&bytes_per_second as *const u64).cast(),
                std::mem::size_of::<u64>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
