//! The options both ends apply to a TCP data socket (window, congestion
//! control, TOS, pacing) and its blocking mode, for every TCP kind, and how
//! a prober's socket takes a source address.

use std::net::{IpAddr, SocketAddr};

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

/// Binds `sock` to the source address `ip` and leaves its port to
/// connect(). With IP_BIND_ADDRESS_NO_PORT the kernel picks the port when
/// it connects, as for an unbound socket: any port whose 4-tuple is free,
/// TIME_WAIT ports reused where `tcp_tw_reuse` allows. A plain bind to
/// port 0 takes a port no other connect() may share, and keeps it through
/// its TIME_WAIT: a `tcp_crr` prober binding each connection so would use
/// up the ephemeral ports for every destination in one TIME_WAIT period.
/// The option is best effort (Linux 4.2 and later); without it the bind
/// still holds.
pub fn bind_source(sock: &SockRef<'_>, ip: IpAddr) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: IP_BIND_ADDRESS_NO_PORT takes an int flag; the kernel reads
    // it at SOL_IP for IPv6 sockets too.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&**sock),
            libc::SOL_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    sock.bind(&SocketAddr::new(ip, 0).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Socket, Type};
    use std::net::TcpListener;

    fn local_port(s: &Socket) -> u16 {
        s.local_addr().unwrap().as_socket().unwrap().port()
    }

    #[test]
    fn a_source_address_takes_no_port_until_connect() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        for ip in [IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2])] {
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
            bind_source(&SockRef::from(&s), ip).unwrap();
            let bound = s.local_addr().unwrap().as_socket().unwrap();
            // The address is taken, the port left to connect().
            assert_eq!((bound.ip(), bound.port()), (ip, 0));
            s.connect(&listener.local_addr().unwrap().into()).unwrap();
            let connected = s.local_addr().unwrap().as_socket().unwrap();
            assert_eq!(connected.ip(), ip);
            assert_ne!(connected.port(), 0);
        }
        // A plain bind takes its port at once: what bind_source avoids.
        let plain = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        plain
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        assert_ne!(local_port(&plain), 0);
    }

    #[test]
    fn a_source_address_not_on_the_host_is_refused() {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        // TEST-NET-3: on no interface of the machine.
        let err = bind_source(&SockRef::from(&s), IpAddr::from([203, 0, 113, 7])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EADDRNOTAVAIL), "{err}");
    }
}
