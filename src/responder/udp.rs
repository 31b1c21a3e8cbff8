//! The responder's UDP side: one socket on the responder's port receives
//! the probers' hello datagrams; each registered flow then gets its own
//! socket, bound to the same port and connected to the prober's address.
//!
//! With SO_REUSEPORT, the kernel delivers a datagram to the connected socket
//! whose 4-tuple matches it before the unconnected one, so each stream
//! thread reads only its own flow. A flow is accepted only from the address
//! of the test's control connection, and the responder only ever sends to
//! the address a flow's hello came from: it cannot be aimed at a third host.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::UdpSocket;

use super::{normalize, ResponderCounters, ResponderState};
use crate::engine::datapath::DataSocket;
use crate::protocol::udp::parse_hello;

fn socket_for(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        None,
    )?;
    if addr.is_ipv6() {
        let _ = sock.set_only_v6(false);
    }
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    Ok(sock)
}

/// Binds the unconnected socket that receives hellos.
pub(super) fn bind_main(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let sock = socket_for(addr)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    UdpSocket::from_std(sock.into())
}

/// A socket for one flow: same local address and port, connected to `peer`.
pub(super) fn flow_socket(
    local: SocketAddr,
    peer: SocketAddr,
) -> std::io::Result<std::net::UdpSocket> {
    let sock = socket_for(local)?;
    sock.bind(&local.into())?;
    sock.connect(&peer.into())?;
    let sock: std::net::UdpSocket = sock.into();
    // Sized again for the test's rate once it starts (`TestSide::prepare`).
    crate::kinds::udp::configure_socket(&sock, crate::kinds::udp::UDP_BUFFER);
    Ok(sock)
}

pub(super) async fn serve_hellos(main: Arc<UdpSocket>, shared: Arc<ResponderState>) {
    let Ok(local) = main.local_addr() else { return };
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = match main.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                // ICMP errors for earlier sends surface here; they are not fatal.
                tracing::trace!(error = %e, "UDP receive error");
                continue;
            }
        };
        let Some((token, stream)) = parse_hello(&buf[..n]) else {
            ResponderCounters::inc(&shared.counters.udp_ignored);
            continue;
        };
        let peer_ip = normalize(from).ip();
        if !shared.knows(&token, peer_ip, stream) {
            // Retransmitted hellos for a registered flow land here only in the
            // instant before its socket exists; anything else is a stray.
            ResponderCounters::inc(&shared.counters.udp_ignored);
            continue;
        }
        match flow_socket(local, from) {
            Ok(sock) => {
                if !shared.register(&token, peer_ip, stream, DataSocket::Udp(sock)) {
                    ResponderCounters::inc(&shared.counters.udp_ignored);
                }
            }
            Err(e) => tracing::warn!(%from, error = %e, "could not open a UDP flow socket"),
        }
    }
}
