//! /proc/net/snmp: the kernel's IPv4 TCP and UDP counters that explain a
//! poor throughput result (retransmissions, receive buffer overflows).
//!
//! procfs has a parser for this file, but it insists on every field of
//! every protocol, including UdpLite, which recent kernels deprecate, and
//! fields added as late as Linux 3.19. One missing column would cost us all
//! counters, so this parser reads the header/value line pairs generically
//! and requires only the counters we expose.

use std::collections::HashMap;

use super::error::{quoted, read_to_string, HostError};

const FILE: &str = "/proc/net/snmp";

/// Counters since boot, host-wide, IPv4 only (IPv6 UDP errors live in
/// /proc/net/snmp6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnmpCounters {
    pub tcp_in_segs: u64,
    pub tcp_out_segs: u64,
    pub tcp_retrans_segs: u64,
    pub udp_in_datagrams: u64,
    pub udp_out_datagrams: u64,
    pub udp_no_ports: u64,
    pub udp_in_errors: u64,
    pub udp_rcvbuf_errors: u64,
    pub udp_sndbuf_errors: u64,
}

impl SnmpCounters {
    /// Counter increases since `earlier`, 0 where a counter went backwards.
    pub fn since(&self, earlier: &SnmpCounters) -> SnmpCounters {
        SnmpCounters {
            tcp_in_segs: self.tcp_in_segs.saturating_sub(earlier.tcp_in_segs),
            tcp_out_segs: self.tcp_out_segs.saturating_sub(earlier.tcp_out_segs),
            tcp_retrans_segs: self
                .tcp_retrans_segs
                .saturating_sub(earlier.tcp_retrans_segs),
            udp_in_datagrams: self
                .udp_in_datagrams
                .saturating_sub(earlier.udp_in_datagrams),
            udp_out_datagrams: self
                .udp_out_datagrams
                .saturating_sub(earlier.udp_out_datagrams),
            udp_no_ports: self.udp_no_ports.saturating_sub(earlier.udp_no_ports),
            udp_in_errors: self.udp_in_errors.saturating_sub(earlier.udp_in_errors),
            udp_rcvbuf_errors: self
                .udp_rcvbuf_errors
                .saturating_sub(earlier.udp_rcvbuf_errors),
            udp_sndbuf_errors: self
                .udp_sndbuf_errors
                .saturating_sub(earlier.udp_sndbuf_errors),
        }
    }
}

/// Parses the text of /proc/net/snmp.
pub fn parse_snmp(text: &str) -> Result<SnmpCounters, HostError> {
    // ("Tcp", "RetransSegs") -> (line number, value text)
    let mut fields: HashMap<(&str, &str), (usize, &str)> = HashMap::new();
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line))
        .filter(|(_, line)| !line.trim().is_empty());

    while let Some((header_no, header)) = lines.next() {
        let (protocol, names) = split_protocol(header_no, header)?;
        let Some((values_no, values_line)) = lines.next() else {
            return Err(HostError::line(
                FILE,
                header_no,
                format!(
                    "expected a line of values after the \"{protocol}:\" header, found end of file"
                ),
            ));
        };
        let (value_protocol, values) = split_protocol(values_no, values_line)?;
        if value_protocol != protocol {
            return Err(HostError::line(
                FILE,
                values_no,
                format!(
                    "expected the values of \"{protocol}:\", found {}",
                    quoted(&format!("{value_protocol}:"))
                ),
            ));
        }
        let names: Vec<&str> = names.split_whitespace().collect();
        let values: Vec<&str> = values.split_whitespace().collect();
        if names.len() != values.len() {
            return Err(HostError::line(
                FILE,
                values_no,
                format!(
                    "expected {} values to match the header on line {header_no}, found {}",
                    names.len(),
                    values.len()
                ),
            ));
        }
        for (name, value) in names.into_iter().zip(values) {
            fields.insert((protocol, name), (values_no, value));
        }
    }

    let counter = |protocol: &str, name: &str| -> Result<u64, HostError> {
        let Some(&(line_no, value)) = fields.get(&(protocol, name)) else {
            return Err(HostError::file(
                FILE,
                format!("expected a {protocol} {name} counter, found none"),
            ));
        };
        value.parse().map_err(|_| {
            HostError::line(
                FILE,
                line_no,
                format!(
                    "{protocol} {name}: expected a non-negative count, found {}",
                    quoted(value)
                ),
            )
        })
    };

    Ok(SnmpCounters {
        tcp_in_segs: counter("Tcp", "InSegs")?,
        tcp_out_segs: counter("Tcp", "OutSegs")?,
        tcp_retrans_segs: counter("Tcp", "RetransSegs")?,
        udp_in_datagrams: counter("Udp", "InDatagrams")?,
        udp_out_datagrams: counter("Udp", "OutDatagrams")?,
        udp_no_ports: counter("Udp", "NoPorts")?,
        udp_in_errors: counter("Udp", "InErrors")?,
        udp_rcvbuf_errors: counter("Udp", "RcvbufErrors")?,
        udp_sndbuf_errors: counter("Udp", "SndbufErrors")?,
    })
}

/// Splits `Tcp: a b c` into `("Tcp", " a b c")`.
fn split_protocol(line_no: usize, line: &str) -> Result<(&str, &str), HostError> {
    match line.split_once(':') {
        Some((protocol, rest))
            if !protocol.is_empty() && !protocol.contains(char::is_whitespace) =>
        {
            Ok((protocol, rest))
        }
        _ => Err(HostError::line(
            FILE,
            line_no,
            format!(
                "expected a line starting with a protocol such as \"Tcp:\", found {}",
                quoted(line)
            ),
        )),
    }
}

/// Reads and parses /proc/net/snmp.
pub fn read_snmp() -> Result<SnmpCounters, HostError> {
    parse_snmp(&read_to_string(FILE)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/proc/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn parses_real_vm_file() {
        let c = parse_snmp(&fixture("snmp_vm")).unwrap();
        assert_eq!(
            c,
            SnmpCounters {
                tcp_in_segs: 2847,
                tcp_out_segs: 1814,
                tcp_retrans_segs: 0,
                udp_in_datagrams: 91,
                udp_out_datagrams: 92,
                udp_no_ports: 0,
                udp_in_errors: 0,
                udp_rcvbuf_errors: 0,
                udp_sndbuf_errors: 0,
            }
        );
    }

    #[test]
    fn tolerates_missing_protocols_and_fields_it_does_not_use() {
        // No Icmp, no UdpLite, no InCsumErrors/IgnoredMulti columns.
        let c = parse_snmp(&fixture("snmp_no_udplite")).unwrap();
        assert_eq!(c.tcp_retrans_segs, 1234);
        assert_eq!(c.tcp_out_segs, 750000);
        assert_eq!(c.udp_in_errors, 321);
        assert_eq!(c.udp_rcvbuf_errors, 300);
        assert_eq!(c.udp_sndbuf_errors, 4);
        assert_eq!(c.udp_no_ports, 17);
    }

    #[test]
    fn since_saturates() {
        let later = parse_snmp(&fixture("snmp_no_udplite")).unwrap();
        let earlier = SnmpCounters {
            tcp_retrans_segs: 1000,
            udp_rcvbuf_errors: 500,
            ..later
        };
        let d = later.since(&earlier);
        assert_eq!(d.tcp_retrans_segs, 234);
        assert_eq!(d.udp_rcvbuf_errors, 0);
        assert_eq!(d.tcp_out_segs, 0);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let tcp_h = "Tcp: InSegs OutSegs RetransSegs";
        let udp_h = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors";
        let udp_v = "Udp: 1 2 3 4 5 6";
        let cases = [
            (
                format!("{tcp_h}\nTcp: 1 2 3\n{udp_h}\n{udp_v}\n"),
                None,
            ),
            (
                format!("{tcp_h}\nTcp: 1 2\n{udp_h}\n{udp_v}\n"),
                Some("/proc/net/snmp: line 2: expected 3 values to match the header on line 1, found 2"),
            ),
            (
                format!("{tcp_h}\nTcp: 1 2 3 4\n{udp_h}\n{udp_v}\n"),
                Some("/proc/net/snmp: line 2: expected 3 values to match the header on line 1, found 4"),
            ),
            (
                format!("{tcp_h}\nTcp: 1 x 3\n{udp_h}\n{udp_v}\n"),
                Some("/proc/net/snmp: line 2: Tcp OutSegs: expected a non-negative count, found \"x\""),
            ),
            (
                format!("{tcp_h}\nTcp: 1 2 3\n{udp_h}\n"),
                Some("/proc/net/snmp: line 3: expected a line of values after the \"Udp:\" header, found end of file"),
            ),
            (
                format!("{tcp_h}\n{udp_v}\n"),
                Some("/proc/net/snmp: line 2: expected the values of \"Tcp:\", found \"Udp:\""),
            ),
            (
                format!("{tcp_h}\nTcp: 1 2 3\n"),
                Some("/proc/net/snmp: expected a Udp InDatagrams counter, found none"),
            ),
            (
                "garbage\n".to_string(),
                Some("/proc/net/snmp: line 1: expected a line starting with a protocol such as \"Tcp:\", found \"garbage\""),
            ),
        ];
        for (text, want) in cases {
            match (parse_snmp(&text), want) {
                (Ok(c), None) => assert_eq!(c.tcp_retrans_segs, 3),
                (Err(e), Some(want)) => assert_eq!(e.to_string(), want, "input {text:?}"),
                (got, want) => panic!("input {text:?}: got {got:?}, want {want:?}"),
            }
        }
        let text = fixture("snmp_vm");
        for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
            let _ = parse_snmp(&text[..cut]);
        }
    }

    #[test]
    fn reads_this_machine() {
        let before = read_snmp().unwrap();
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(rx.recv(&mut buf).unwrap(), 1);
        let d = read_snmp().unwrap().since(&before);
        // Host-wide counters: other traffic can only add to ours.
        assert!(d.udp_out_datagrams >= 1, "{d:?}");
        assert!(d.udp_in_datagrams >= 1, "{d:?}");
    }
}
