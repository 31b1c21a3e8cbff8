//! Which network interface carries traffic to a peer, and which IRQs belong
//! to that interface, so a probe can count the interrupts its own traffic
//! caused rather than the whole host's.

#![warn(missing_docs)]

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;

use super::interrupts::{read_interrupts, IrqRow};

/// The interface whose address the kernel would use as the source for
/// traffic to `peer`; `"lo"` for loopback peers. `None` when there is no
/// route or the source address is on no interface.
pub fn interface_for_peer(peer: IpAddr) -> Option<String> {
    let local = source_address_for(peer).ok()?;
    let addresses = interface_addresses().ok()?;
    interface_with_address(&addresses, local)
}

/// True when `ip` is one of this host's addresses (or loopback, or the
/// unspecified address, which also mean "here"), so that mesh mode can
/// leave the host itself out of the peers it probes.
///
/// The routing table decides: for a destination that is a local address,
/// the kernel picks that same address as the source (the `local` routing
/// table on Linux, rule 1 of RFC 6724 for IPv6). Unlike a test bind, it is
/// not fooled by `ip_nonlocal_bind`, which VRRP setups often turn on.
pub fn is_local_address(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    if ip.is_multicast() {
        return false;
    }
    matches!(source_address_for(ip), Ok(local) if local.to_canonical() == ip)
}

/// Asks the routing table for the source address towards `peer`.
fn source_address_for(peer: IpAddr) -> io::Result<IpAddr> {
    let unspecified: IpAddr = match peer {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let socket = UdpSocket::bind(SocketAddr::new(unspecified, 0))?;
    // Connecting a UDP socket sends nothing; it only fixes the route and
    // therefore the source address. Any port will do.
    socket.connect(SocketAddr::new(peer, 9))?;
    Ok(socket.local_addr()?.ip())
}

fn interface_with_address(addresses: &[(String, IpAddr)], local: IpAddr) -> Option<String> {
    // An IPv6 socket reaching an IPv4 peer reports the IPv4-mapped form.
    let local = local.to_canonical();
    addresses
        .iter()
        .find(|(_, address)| *address == local)
        .map(|(name, _)| name.clone())
}

/// Every (interface name, IP address) pair on the host, via getifaddrs(3).
fn interface_addresses() -> io::Result<Vec<(String, IpAddr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs only writes the list head through the pointer we
    // pass; on success the list stays valid until freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut node = head;
    while !node.is_null() {
        // SAFETY: `node` is a non-null element of the list getifaddrs
        // returned, which has not been freed yet.
        let entry = unsafe { &*node };
        // SAFETY: ifa_addr is null or points to a sockaddr of the family
        // it names, allocated by getifaddrs.
        let address = unsafe { sockaddr_ip(entry.ifa_addr) };
        if let (Some(address), false) = (address, entry.ifa_name.is_null()) {
            // SAFETY: ifa_name is a non-null, NUL-terminated string owned
            // by the list.
            let name = unsafe { CStr::from_ptr(entry.ifa_name) };
            out.push((name.to_string_lossy().into_owned(), address));
        }
        node = entry.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once;
    // nothing borrowed from the list outlives this point.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// # Safety
/// `sa` must be null or point to a valid sockaddr whose storage is as large
/// as its `sa_family` implies.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // Unaligned reads because the C API makes no alignment promise for the
    // cast to the family-specific struct.
    match i32::from(std::ptr::read_unaligned(sa).sa_family) {
        libc::AF_INET => {
            let sin = std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>());
            Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into())
        }
        libc::AF_INET6 => {
            let sin6 = std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>());
            Some(Ipv6Addr::from(sin6.sin6_addr.s6_addr).into())
        }
        _ => None,
    }
}

/// IRQ ids (as in /proc/interrupts) that belong to `iface`, sorted
/// numerically; empty for virtual interfaces (lo, veth, bridges) and for
/// names that are not interface names.
///
/// The device's `msi_irqs` directory in sysfs is the authoritative list.
/// Without it (legacy interrupts, virtio, whose MSI vectors sit on the
/// parent PCI device) the /proc/interrupts rows are matched by name: the
/// interface name (`eth0-TxRx-0`) or the device's own name (`virtio2-input.0`,
/// `mlx5_comp0@pci:0000:3b:00.0`).
pub fn interface_irqs(iface: &str) -> Vec<String> {
    irqs_for(Path::new("/sys/class/net"), iface, || {
        read_interrupts().unwrap_or_default()
    })
}

fn irqs_for(
    sys_class_net: &Path,
    iface: &str,
    interrupts: impl FnOnce() -> Vec<IrqRow>,
) -> Vec<String> {
    // The name becomes part of a path; refuse anything that could leave
    // the sysfs directory.
    if iface.is_empty() || iface == "." || iface == ".." || iface.contains(['/', '\0']) {
        return Vec::new();
    }
    let device = sys_class_net.join(iface).join("device");
    // Virtual interfaces have no device link, and no interrupts of their own.
    let Ok(target) = std::fs::read_link(&device) else {
        return Vec::new();
    };

    let mut irqs = msi_irqs(&device.join("msi_irqs"));
    if irqs.is_empty() {
        let mut names = vec![iface.to_string()];
        if let Some(device_name) = target.file_name().and_then(|n| n.to_str()) {
            names.push(device_name.to_string());
        }
        irqs = irqs_named(&interrupts(), &names);
    }
    sort_irq_ids(&mut irqs);
    irqs
}

fn msi_irqs(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()))
        .collect()
}

/// Ids of the rows whose description mentions one of `names` as a whole
/// word, so that `eth0` does not claim `eth01`'s queues.
fn irqs_named(rows: &[IrqRow], names: &[String]) -> Vec<String> {
    rows.iter()
        .filter(|row| row.is_per_cpu())
        .filter(|row| names.iter().any(|name| mentions(&row.description, name)))
        .map(|row| row.id.clone())
        .collect()
}

fn mentions(description: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    description.match_indices(name).any(|(start, _)| {
        let before = description[..start].chars().next_back();
        let after = description[start + name.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

fn sort_irq_ids(ids: &mut Vec<String>) {
    ids.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    ids.dedup();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::interrupts::parse_interrupts;
    use std::os::unix::fs::symlink;

    fn server_rows() -> Vec<IrqRow> {
        let path = format!(
            "{}/tests/fixtures/proc/interrupts_4cpu_before",
            env!("CARGO_MANIFEST_DIR")
        );
        parse_interrupts(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// A fake /sys with `class/net/IFACE/device -> ../../../devices/DEVICE`.
    fn fake_sysfs(root: &Path, iface: &str, device: Option<(&str, &[&str])>) {
        let net = root.join("class/net").join(iface);
        std::fs::create_dir_all(&net).unwrap();
        if let Some((device, msi)) = device {
            let dev = root.join("devices").join(device);
            std::fs::create_dir_all(&dev).unwrap();
            if !msi.is_empty() {
                std::fs::create_dir_all(dev.join("msi_irqs")).unwrap();
                for irq in msi {
                    std::fs::write(dev.join("msi_irqs").join(irq), "msix\n").unwrap();
                }
            }
            symlink(format!("../../../devices/{device}"), net.join("device")).unwrap();
        }
    }

    #[test]
    fn loopback_peer_is_lo() {
        assert_eq!(
            interface_for_peer(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            Some("lo".to_string())
        );
        assert_eq!(
            interface_for_peer("127.0.0.2".parse().unwrap()),
            Some("lo".to_string())
        );
    }

    #[test]
    fn address_lookup_handles_mapped_addresses() {
        let table = vec![
            ("lo".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ("eth0".to_string(), "192.0.2.2".parse().unwrap()),
            ("eth0".to_string(), "2001:db8::2".parse().unwrap()),
        ];
        let mapped: IpAddr = "::ffff:192.0.2.2".parse().unwrap();
        assert_eq!(interface_with_address(&table, mapped), Some("eth0".into()));
        assert_eq!(
            interface_with_address(&table, "2001:db8::2".parse().unwrap()),
            Some("eth0".into())
        );
        assert_eq!(
            interface_with_address(&table, "198.51.100.1".parse().unwrap()),
            None
        );
    }

    #[test]
    fn this_host_lists_loopback_address() {
        let addresses = interface_addresses().unwrap();
        assert!(addresses
            .iter()
            .any(|(name, ip)| name == "lo" && *ip == IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }

    #[test]
    fn msi_irqs_directory_wins_and_sorts_numerically() {
        let root = tempfile::tempdir().unwrap();
        fake_sysfs(
            root.path(),
            "ens1f0",
            Some(("0000:3b:00.0", &["100", "92", "90", "91", "junk"])),
        );
        let irqs = irqs_for(&root.path().join("class/net"), "ens1f0", || {
            panic!("/proc/interrupts must not be needed")
        });
        assert_eq!(irqs, ["90", "91", "92", "100"]);
    }

    #[test]
    fn falls_back_to_names_in_proc_interrupts() {
        let root = tempfile::tempdir().unwrap();
        let net = root.path().join("class/net");
        fake_sysfs(root.path(), "eth0", Some(("0000:00:19.0", &[])));
        fake_sysfs(root.path(), "eth1", Some(("virtio0", &[])));
        fake_sysfs(root.path(), "ens2", Some(("0000:3b:00.0", &[])));
        // eth0's own queues and the bare "eth0" row, not eth01's.
        assert_eq!(irqs_for(&net, "eth0", server_rows), ["24", "25", "26"]);
        // virtio devices name their vectors after the device.
        assert_eq!(irqs_for(&net, "eth1", server_rows), ["27", "28"]);
        // mlx5 names vectors after the PCI address.
        assert_eq!(irqs_for(&net, "ens2", server_rows), ["90", "91", "92"]);
    }

    #[test]
    fn virtual_and_bogus_interfaces_have_no_irqs() {
        let root = tempfile::tempdir().unwrap();
        let net = root.path().join("class/net");
        fake_sysfs(root.path(), "veth1", None);
        assert!(irqs_for(&net, "veth1", server_rows).is_empty());
        assert!(irqs_for(&net, "missing0", server_rows).is_empty());
        for bogus in ["", ".", "..", "../../etc", "a\0b"] {
            assert!(irqs_for(&net, bogus, server_rows).is_empty(), "{bogus:?}");
        }
        assert!(interface_irqs("lo").is_empty());
        assert!(interface_irqs("../../../proc").is_empty());
    }

    #[test]
    fn whole_word_matching() {
        assert!(mentions("PCI-MSI 524288-edge eth0-TxRx-0", "eth0"));
        assert!(mentions("PCI-MSI 524290-edge eth0", "eth0"));
        assert!(!mentions("PCI-MSI 1048576-edge eth01-rx", "eth0"));
        assert!(!mentions("PCI-MSI 1-edge veth0", "eth0"));
        assert!(mentions(
            "IR-PCI-MSIX-0000:3b:00.0 1-edge mlx5_comp0@pci:0000:3b:00.0",
            "0000:3b:00.0"
        ));
        assert!(!mentions("anything", ""));
        assert!(mentions("é eth0 é", "eth0"));
    }

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
