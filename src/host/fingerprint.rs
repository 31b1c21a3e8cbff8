//! This host's fingerprint (see `crate::protocol::fingerprint`): the
//! settings that change what a path delivers. [`read_fingerprint`] reads
//! them (/proc/sys, /sys/class/net, the ethtool ioctl, the CPU cgroup,
//! uname) into [`FingerprintSources`]; [`build_fingerprint`] turns those
//! raw texts into the bounded map that goes on the wire, and is what the
//! tests exercise, on texts they hold.

#![warn(missing_docs)]

use std::collections::BTreeMap;

use crate::protocol::fingerprint::{setting, HostFingerprint, MAX_VALUE};

/// The sysctls read, by their `sysctl` names: what bounds a TCP window
/// (buffer limits and TCP memory), how TCP paces (congestion control) and
/// how the interface queues (default qdisc).
pub const SYSCTLS: &[&str] = &[
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_mem",
    "net.core.wmem_max",
    "net.core.rmem_max",
    "net.ipv4.tcp_congestion_control",
    "net.core.default_qdisc",
];

/// The raw texts a fingerprint is made of, as read; `None` where the
/// file was missing or unreadable (a container may hide /proc/sys).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FingerprintSources {
    /// `uname -r`.
    pub kernel_release: String,
    /// pathprobe's version.
    pub software: String,
    /// Each of [`SYSCTLS`] with its file's text.
    pub sysctls: Vec<(&'static str, Option<String>)>,
    /// The interface that carries the path, if known.
    pub interface: Option<String>,
    /// Its driver (ethtool's, or the `device/driver` link's name).
    pub driver: Option<String>,
    /// The text of `/sys/class/net/<if>/mtu`.
    pub mtu: Option<String>,
    /// Offload features that ethtool reports, on or off.
    pub offloads: Vec<(&'static str, bool)>,
    /// CPUs the process's cgroup quota allows; `None` for no quota.
    pub cpu_quota: Option<f64>,
}

/// The fingerprint of this host for a path over `interface` (the one the
/// kernel routes the peer's traffic through; `None` when unknown).
pub fn read_fingerprint(interface: Option<&str>) -> HostFingerprint {
    build_fingerprint(&read_sources(interface))
}

/// Reads every source; never fails (a missing one is left out).
pub fn read_sources(interface: Option<&str>) -> FingerprintSources {
    let sysctls = SYSCTLS
        .iter()
        .map(|&name| {
            let path = format!("/proc/sys/{}", name.replace('.', "/"));
            (name, read_small(&path))
        })
        .collect();
    // A name with a slash or dots could climb out of /sys/class/net.
    let interface = interface.filter(|i| valid_interface_name(i));
    let (driver, mtu, offloads) = match interface {
        Some(i) => (
            ethtool::driver(i).or_else(|| {
                std::fs::read_link(format!("/sys/class/net/{i}/device/driver"))
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            }),
            read_small(&format!("/sys/class/net/{i}/mtu")),
            ethtool::offloads(i),
        ),
        None => (None, None, Vec::new()),
    };
    FingerprintSources {
        kernel_release: super::kernel_release(),
        software: env!("CARGO_PKG_VERSION").to_string(),
        sysctls,
        interface: interface.map(str::to_string),
        driver,
        mtu,
        offloads,
        cpu_quota: super::read_cpu_cgroup().and_then(|(_, q)| q),
    }
}

/// Whether `name` can be an interface name (IFNAMSIZ, no path parts).
fn valid_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
}

/// A /proc or /sys file's text, at most a page: these are one-line files.
fn read_small(path: &str) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The wire form of `src`: values with their whitespace runs made single
/// spaces (tcp_wmem's tabs), non-printable bytes dropped, each cut to
/// [`MAX_VALUE`]; empty values left out.
pub fn build_fingerprint(src: &FingerprintSources) -> HostFingerprint {
    let mut settings = BTreeMap::new();
    let mut put = |name: &str, value: &str| {
        let v = clean(value);
        if !v.is_empty() {
            settings.insert(name.to_string(), v);
        }
    };
    put(setting::KERNEL, &src.kernel_release);
    put(setting::PATHPROBE, &src.software);
    for (name, text) in &src.sysctls {
        if let Some(t) = text {
            put(name, t);
        }
    }
    if let Some(i) = &src.interface {
        put(setting::INTERFACE, i);
    }
    if let Some(d) = &src.driver {
        put(setting::DRIVER, d);
    }
    if let Some(m) = &src.mtu {
        // Only a number is an MTU.
        if let Ok(n) = m.trim().parse::<u32>() {
            put(setting::MTU, &n.to_string());
        }
    }
    if !src.offloads.is_empty() {
        let text: Vec<String> = src
            .offloads
            .iter()
            .map(|(name, on)| format!("{name}:{}", if *on { "on" } else { "off" }))
            .collect();
        put(setting::OFFLOADS, &text.join(" "));
    }
    let quota = match src.cpu_quota {
        Some(q) if q.is_finite() && q > 0.0 => format!("{q:.2}"),
        _ => "none".to_string(),
    };
    put(setting::CPU_QUOTA, &quota);
    HostFingerprint { settings }
}

fn clean(value: &str) -> String {
    let words: Vec<&str> = value.split_whitespace().collect();
    let mut v: String = words
        .join(" ")
        .chars()
        .filter(|c| (' '..='~').contains(c))
        .collect();
    v.truncate(MAX_VALUE);
    v
}

/// The legacy ethtool ioctls, which every driver that has offloads
/// answers: the driver's name and the on/off state of the offloads that
/// change a flow's cost (segmentation and receive coalescing, checksums,
/// scatter-gather).
mod ethtool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const GDRVINFO: u32 = 0x03;

    /// The offloads read, by ethtool's short names and their get commands.
    const OFFLOADS: &[(&str, u32)] = &[
        ("tso", 0x1e),
        ("gso", 0x23),
        ("gro", 0x2b),
        ("sg", 0x18),
        ("rx-csum", 0x14),
        ("tx-csum", 0x16),
    ];

    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }

    #[repr(C)]
    struct Value {
        cmd: u32,
        data: u32,
    }

    /// `struct ifreq` with its union as the data pointer, padded to size.
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        data: *mut libc::c_void,
        _pad: [u8; 16],
    }

    fn socket() -> Option<OwnedFd> {
        // SAFETY: plain socket(2); the descriptor is owned at once below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        // SAFETY: fd is a fresh descriptor nothing else owns.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Runs one ethtool command whose buffer is `data`.
    fn call<T>(sock: &OwnedFd, iface: &str, data: &mut T) -> bool {
        let mut req = IfReq {
            name: [0; 16],
            data: (data as *mut T).cast(),
            _pad: [0; 16],
        };
        // The caller checked the name is shorter than IFNAMSIZ.
        let n = iface.len().min(15);
        req.name[..n].copy_from_slice(&iface.as_bytes()[..n]);
        // SAFETY: `req` is a valid ifreq whose data points to a live,
        // writable buffer of the type this command fills.
        unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) == 0 }
    }

    pub(super) fn driver(iface: &str) -> Option<String> {
        let sock = socket()?;
        // SAFETY: DrvInfo is integers and byte arrays: all-zero is valid.
        let mut info: DrvInfo = unsafe { std::mem::zeroed() };
        info.cmd = GDRVINFO;
        if !call(&sock, iface, &mut info) {
            return None;
        }
        let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
        let name = String::from_utf8_lossy(&info.driver[..end]).into_owned();
        (!name.is_empty()).then_some(name)
    }

    pub(super) fn offloads(iface: &str) -> Vec<(&'static str, bool)> {
        let Some(sock) = socket() else {
            return Vec::new();
        };
        OFFLOADS
            .iter()
            .filter_map(|&(name, cmd)| {
                let mut v = Value { cmd, data: 0 };
                call(&sock, iface, &mut v).then_some((name, v.data != 0))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> FingerprintSources {
        FingerprintSources {
            kernel_release: "6.18.44".into(),
            software: "0.9.0".into(),
            sysctls: vec![
                ("net.ipv4.tcp_wmem", Some("4096\t16384\t196608\n".into())),
                ("net.core.default_qdisc", Some("fq_codel\n".into())),
                ("net.core.rmem_max", None),
            ],
            interface: Some("eth0".into()),
            driver: Some("veth".into()),
            mtu: Some("1500\n".into()),
            offloads: vec![("tso", true), ("gro", false)],
            cpu_quota: Some(1.5),
        }
    }

    #[test]
    fn builds_the_wire_map_from_raw_texts() {
        let fp = build_fingerprint(&sources());
        let get = |k: &str| fp.get(k).map(str::to_string);
        assert_eq!(get("kernel").as_deref(), Some("6.18.44"));
        assert_eq!(get("pathprobe").as_deref(), Some("0.9.0"));
        assert_eq!(
            get("net.ipv4.tcp_wmem").as_deref(),
            Some("4096 16384 196608")
        );
        assert_eq!(get("net.core.default_qdisc").as_deref(), Some("fq_codel"));
        assert_eq!(get("net.core.rmem_max"), None);
        assert_eq!(get("interface.driver").as_deref(), Some("veth"));
        assert_eq!(get("interface.mtu").as_deref(), Some("1500"));
        assert_eq!(get("interface.offloads").as_deref(), Some("tso:on gro:off"));
        assert_eq!(get("cpu_quota").as_deref(), Some("1.50"));
        assert!(fp.check().is_ok());
    }

    #[test]
    fn odd_texts_are_bounded_or_left_out() {
        let mut s = sources();
        s.mtu = Some("lots".into());
        s.cpu_quota = None;
        s.driver = Some(format!("{}\u{7}", "d".repeat(500)));
        let fp = build_fingerprint(&s);
        assert_eq!(fp.get("interface.mtu"), None);
        assert_eq!(fp.get("cpu_quota"), Some("none"));
        assert_eq!(fp.get("interface.driver").unwrap().len(), MAX_VALUE);
        assert!(fp.check().is_ok());
    }

    #[test]
    fn interface_names_that_climb_out_are_not_read() {
        assert!(valid_interface_name("eth0"));
        assert!(!valid_interface_name("../../etc"));
        assert!(!valid_interface_name(".."));
        assert!(!valid_interface_name("a-very-long-interface-name"));
        let s = read_sources(Some("../x"));
        assert_eq!(s.interface, None);
    }

    #[test]
    fn reads_this_hosts_loopback() {
        // Every Linux host has lo with an MTU and the TCP sysctls.
        let fp = read_fingerprint(Some("lo"));
        assert_eq!(fp.get("interface"), Some("lo"));
        assert!(fp
            .get("interface.mtu")
            .is_some_and(|m| m.parse::<u32>().is_ok()));
        assert!(fp
            .get("net.ipv4.tcp_wmem")
            .is_some_and(|v| v.split(' ').count() == 3));
        assert_eq!(
            fp.get("kernel"),
            Some(crate::host::kernel_release().as_str())
        );
        assert!(fp.check().is_ok());
    }
}
