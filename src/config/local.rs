//! Whether an address belongs to this host, so that mesh mode can leave
//! the host itself out of the peers it probes.

use std::net::{IpAddr, SocketAddr, UdpSocket};

/// True when `ip` is one of this host's addresses (or loopback, or the
/// unspecified address, which also mean "here").
///
/// The routing table decides: for a destination that is a local address,
/// the kernel picks that same address as the source (the `local` routing
/// table on Linux, rule 1 of RFC 6724 for IPv6). Connecting a UDP socket
/// sends nothing and needs no privilege. Unlike a test bind, it is not
/// fooled by `ip_nonlocal_bind`, which VRRP setups often turn on.
pub fn is_local_address(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    if ip.is_multicast() {
        return false;
    }
    let wildcard: IpAddr = match ip {
        IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let source = UdpSocket::bind(SocketAddr::new(wildcard, 0))
        // Any port: connect() on UDP only selects the route.
        .and_then(|s| s.connect(SocketAddr::new(ip, 9)).map(|()| s))
        .and_then(|s| s.local_addr());
    matches!(source, Ok(local) if local.ip().to_canonical() == ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_unspecified_are_local() {
        assert!(is_local_address("127.0.0.1".parse().unwrap()));
        assert!(is_local_address("127.0.0.53".parse().unwrap()));
        assert!(is_local_address("::1".parse().unwrap()));
        assert!(is_local_address("::ffff:127.0.0.1".parse().unwrap()));
        assert!(is_local_address("0.0.0.0".parse().unwrap()));
    }

    #[test]
    fn documentation_addresses_are_not_ours() {
        // TEST-NET-3 and the v6 documentation prefix are never assigned to
        // a real host (the test hosts here use TEST-NET-1 and fd00::/8).
        assert!(!is_local_address("203.0.113.9".parse().unwrap()));
        assert!(!is_local_address("2001:db8::9".parse().unwrap()));
        assert!(!is_local_address("224.0.0.1".parse().unwrap()));
    }

    #[test]
    fn this_hosts_interface_addresses_are_local() {
        // The address the host would use towards an outside peer is, by
        // definition, one of its own; skip where there is no route at all.
        let Ok(socket) = UdpSocket::bind("0.0.0.0:0") else {
            return;
        };
        if socket.connect("203.0.113.9:9").is_err() {
            return;
        }
        let own = socket.local_addr().unwrap().ip();
        assert!(is_local_address(own), "{own}");
    }
}
