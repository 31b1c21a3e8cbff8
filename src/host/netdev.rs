//! /proc/net/dev: bytes an interface received and sent, all traffic, for
//! telling a probe's own traffic from other traffic on its interface
//! (cross traffic).
//!
//! The file is per network namespace; the process reads its own.

#![warn(missing_docs)]

use super::error::{read_to_string, HostError};

const FILE: &str = "/proc/net/dev";

/// One interface's counters since boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetDevCounters {
    /// Bytes and packets received.
    pub rx_bytes: u64,
    /// Packets received (a GRO packet counts once on most drivers).
    pub rx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent (a GSO packet counts once on veth and some drivers).
    pub tx_packets: u64,
}

/// Interface `name`'s counters, from the text of /proc/net/dev; `None`
/// when the file has no such interface.
pub fn parse_net_dev(text: &str, name: &str) -> Result<Option<NetDevCounters>, HostError> {
    for (i, line) in text.lines().enumerate() {
        // Two header lines, then `  name: rx_bytes rx_packets ... (8 receive
        // columns) tx_bytes ...`.
        let Some((iface, counts)) = line.split_once(':') else {
            continue;
        };
        if iface.trim() != name {
            continue;
        }
        let fields: Vec<&str> = counts.split_whitespace().collect();
        let number = |k: usize| -> Result<u64, HostError> {
            fields.get(k).and_then(|v| v.parse().ok()).ok_or_else(|| {
                HostError::line(FILE, i + 1, format!("expected 16 counters for {name}"))
            })
        };
        return Ok(Some(NetDevCounters {
            rx_bytes: number(0)?,
            rx_packets: number(1)?,
            tx_bytes: number(8)?,
            tx_packets: number(9)?,
        }));
    }
    Ok(None)
}

/// [`parse_net_dev`] of this namespace's /proc/net/dev.
pub fn read_net_dev(name: &str) -> Result<Option<NetDevCounters>, HostError> {
    parse_net_dev(&read_to_string(FILE)?, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0
  eth0: 9876543210 7000000 0 12 0 0 0 55 1234567890 6000000 0 0 0 0 0 0
";

    #[test]
    fn bytes_of_one_interface() {
        assert_eq!(
            parse_net_dev(TEXT, "eth0").unwrap(),
            Some(NetDevCounters {
                rx_bytes: 9_876_543_210,
                rx_packets: 7_000_000,
                tx_bytes: 1_234_567_890,
                tx_packets: 6_000_000,
            })
        );
        assert_eq!(parse_net_dev(TEXT, "lo").unwrap().unwrap().tx_packets, 100);
        assert_eq!(parse_net_dev(TEXT, "eth1").unwrap(), None);
        assert!(parse_net_dev("  eth0: 1 2 3\n", "eth0").is_err());
        // The real file of this namespace has loopback.
        assert!(read_net_dev("lo").unwrap().is_some());
    }
}
