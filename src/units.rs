//! Parsing and formatting of the quantities users type: bit rates (`500M`,
//! `1g`), byte sizes (`128K`, `4M`), durations (`30s`, `5m`, `1.5`), and
//! the TOS byte and CPU affinity of `pathprobe probe`, and listen addresses
//! (`:9813`, `127.0.0.1:5301`, `[::]:5301`), one parser for every flag and
//! the configuration file.
//!
//! Rates use decimal multiples (k = 1000), as iperf3's `-b` and every network
//! engineer do; sizes use binary multiples (K = 1024), as iperf3's `-l`/`-w`.

#![warn(missing_docs)]

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// A quantity that could not be parsed, with what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: expected {expected}")]
pub struct ParseError {
    what: &'static str,
    input: String,
    expected: &'static str,
}

/// Splits `12.5 ms` into its number text and its unit.
fn split_digits(s: &str) -> (&str, &str) {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, rest) = s.split_at(end);
    (num, rest.trim())
}

fn split_number(s: &str) -> Option<(f64, &str)> {
    let (num, rest) = split_digits(s);
    let value: f64 = num.parse().ok()?;
    value.is_finite().then_some((value, rest))
}

fn scaled(value: f64, multiplier: f64) -> Option<u64> {
    let v = value * multiplier;
    (v.is_finite() && v >= 0.0 && v <= u64::MAX as f64).then(|| v.round() as u64)
}

/// Parses a bit rate in bits per second: `1000000`, `500k`, `500M`, `1.5g`,
/// `10G`. An optional trailing `bit`, `bps` or `b/s` is accepted.
pub fn parse_rate(input: &str) -> Result<u64, ParseError> {
    let err = || ParseError {
        what: "rate",
        input: input.to_string(),
        expected:
            "a number of bits per second with an optional k, m, g or t suffix (e.g. 500M, 1g)",
    };
    let (value, rest) = split_number(input).ok_or_else(err)?;
    let lower = rest.to_ascii_lowercase();
    let unit = lower
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
        .trim_end_matches("b/s")
        .trim_end_matches("bit");
    let multiplier = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => return Err(err()),
    };
    scaled(value, multiplier).ok_or_else(err)
}

/// Parses a size in bytes: `1400`, `128K`, `4M`, `1G` (binary multiples). An
/// optional trailing `B` or `iB` is accepted.
pub fn parse_size(input: &str) -> Result<u64, ParseError> {
    let err = || ParseError {
        what: "size",
        input: input.to_string(),
        expected: "a number of bytes with an optional K, M or G suffix (e.g. 128K, 4M)",
    };
    let (value, rest) = split_number(input).ok_or_else(err)?;
    let lower = rest.to_ascii_lowercase();
    let unit = lower.trim_end_matches("ib").trim_end_matches('b');
    let multiplier = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(err()),
    };
    scaled(value, multiplier).ok_or_else(err)
}

/// Parses an adaptive probe's precision, a relative half-width: `1%`,
/// `0.5%` or `0.01`; more than 0 and at most 50%.
pub fn parse_precision(input: &str) -> Result<f64, ParseError> {
    let err = || ParseError {
        what: "precision",
        input: input.to_string(),
        expected:
            "a share above 0 and at most 50%, as a percentage or a fraction (e.g. 1% or 0.01)",
    };
    let t = input.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| err())?;
    let v = v * scale;
    if v.is_finite() && v > 0.0 && v <= 0.5 {
        Ok(v)
    } else {
        Err(err())
    }
}

/// Parses a duration: `10` or `2.5` (seconds), `250ms`, `30s`, `5m`, `1h`.
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    let err = || ParseError {
        what: "duration",
        input: input.to_string(),
        expected: "a number with an optional ms, s, m or h suffix (e.g. 250ms, 30s, 5m)",
    };
    let (value, rest) = split_number(input).ok_or_else(err)?;
    let (unit_ms, seconds) = match rest {
        "" | "s" => (1000, value),
        "ms" => (1, value / 1e3),
        "m" => (60_000, value * 60.0),
        "h" => (3_600_000, value * 3600.0),
        _ => return Err(err()),
    };
    // Whole numbers are counted exactly: through f64, `95706767288ms` came
    // back some nanoseconds off, so a formatted duration did not read back
    // as itself.
    if let Ok(whole) = split_digits(input).0.parse::<u64>() {
        return whole
            .checked_mul(unit_ms)
            .map(Duration::from_millis)
            .ok_or_else(err);
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| err())
}

/// Parses an IP type-of-service / traffic-class byte: decimal (`16`) or
/// hexadecimal with a `0x` prefix (`0x10`), as iperf3's `--tos` takes it.
pub fn parse_tos(input: &str) -> Result<u8, ParseError> {
    let v = match input
        .strip_prefix("0x")
        .or_else(|| input.strip_prefix("0X"))
    {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => input.parse(),
    };
    v.map_err(|_| ParseError {
        what: "TOS",
        input: input.to_string(),
        expected: "a byte, e.g. 0x10 or 16",
    })
}

/// Parses CPU affinity as iperf3's `-A` writes it: `n` pins the local side
/// to CPU n, `n,m` also asks the remote side for CPU m, and `,m` pins only
/// the remote side.
pub fn parse_affinity(input: &str) -> Result<(Option<usize>, Option<usize>), ParseError> {
    let err = || ParseError {
        what: "affinity",
        input: input.to_string(),
        expected: "n or n,m (CPU numbers)",
    };
    let (local, remote) = match input.split_once(',') {
        Some((l, r)) => (l, Some(r)),
        None => (input, None),
    };
    let local = if local.is_empty() {
        None
    } else {
        Some(local.trim().parse().map_err(|_| err())?)
    };
    let remote = remote
        .map(|r| r.trim().parse().map_err(|_| err()))
        .transpose()?;
    Ok((local, remote))
}

const LISTEN_EXPECTED: &str =
    "an IP address and port: ip:port, [ipv6]:port or :port (every address), e.g. :9813, 127.0.0.1:5301 or [::]:5301";

/// Parses a listen address as Prometheus' exporters take
/// `--web.listen-address`: `ip:port`, `[ipv6]:port`, or `:port` for every
/// address (the IPv6 wildcard, which also takes IPv4 where the host allows).
pub fn parse_listen_address(input: &str) -> Result<SocketAddr, ParseError> {
    match parse_listen_host(input)? {
        (ip, Some(port)) => Ok(SocketAddr::new(ip, port)),
        (_, None) => Err(ParseError {
            what: "listen address",
            input: input.to_string(),
            expected: LISTEN_EXPECTED,
        }),
    }
}

/// As [`parse_listen_address`], and also a bare address (`127.0.0.1`,
/// `::`, `[::1]`), whose port is then `None`: `respond --listen` takes the
/// port from `--port` too.
pub fn parse_listen_host(input: &str) -> Result<(IpAddr, Option<u16>), ParseError> {
    let err = || ParseError {
        what: "listen address",
        input: input.to_string(),
        expected: LISTEN_EXPECTED,
    };
    let s = input.trim();
    if let Some(port) = s.strip_prefix(':') {
        // `::1` also starts with ':', and is an address, not a port.
        if let Ok(port) = port.parse::<u16>() {
            return Ok((IpAddr::V6(Ipv6Addr::UNSPECIFIED), Some(port)));
        }
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok((addr.ip(), Some(addr.port())));
    }
    let bare = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    bare.parse::<IpAddr>()
        .map(|ip| (ip, None))
        .map_err(|_| err())
}

/// Formats a duration the way [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The divisor and unit a bit rate reads best in, for a person: 474.5e6
/// is 474.5 Mbit/s. One rule for every place that prints a rate.
pub fn bit_rate_unit(bits_per_second: f64) -> (f64, &'static str) {
    if bits_per_second >= 1e9 {
        (1e9, "Gbit/s")
    } else if bits_per_second >= 1e6 {
        (1e6, "Mbit/s")
    } else if bits_per_second >= 1e3 {
        (1e3, "kbit/s")
    } else {
        (1.0, "bit/s")
    }
}

/// Formats a rate in bits per second with a decimal suffix (`500M`).
pub fn format_rate(bits_per_second: u64) -> String {
    for (div, suffix) in [
        (1_000_000_000_000, "T"),
        (1_000_000_000, "G"),
        (1_000_000, "M"),
        (1000, "K"),
    ] {
        if bits_per_second >= div && bits_per_second.is_multiple_of(div) {
            return format!("{}{suffix}", bits_per_second / div);
        }
    }
    bits_per_second.to_string()
}

/// Formats a size in bytes with a binary suffix (`16M`), the way
/// [`parse_size`] reads it back.
pub fn format_size(bytes: u64) -> String {
    for (div, suffix) in [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
        if bytes >= div && bytes.is_multiple_of(div) {
            return format!("{}{suffix}", bytes / div);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
#[path = "units_proptests.rs"]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_use_decimal_multiples() {
        assert_eq!(parse_rate("1g").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("500M").unwrap(), 500_000_000);
        assert_eq!(parse_rate("1.5G").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("64k").unwrap(), 64_000);
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("2500").unwrap(), 2500);
        assert_eq!(parse_rate("0").unwrap(), 0);
    }

    #[test]
    fn bad_rates_say_what_was_expected() {
        let e = parse_rate("fast").unwrap_err().to_string();
        assert!(e.contains("invalid rate \"fast\""), "{e}");
        assert!(e.contains("k, m, g or t suffix"), "{e}");
        assert!(parse_rate("10x").is_err());
        assert!(parse_rate("").is_err());
        assert!(parse_rate("-5m").is_err());
        assert!(parse_rate("1e400").is_err());
    }

    #[test]
    fn sizes_use_binary_multiples() {
        assert_eq!(parse_size("128K").unwrap(), 131_072);
        assert_eq!(parse_size("4M").unwrap(), 4 * 1024 * 1024);
        assert_eq!(parse_size("1400").unwrap(), 1400);
        assert_eq!(parse_size("2MiB").unwrap(), 2 * 1024 * 1024);
        assert!(parse_size("4Q").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("5 parsecs").is_err());
        // Found by units::proptests: whole numbers went through f64 and
        // came back nanoseconds off.
        assert_eq!(
            parse_duration("95706767288ms").unwrap(),
            Duration::from_millis(95_706_767_288)
        );
        assert!(parse_duration("18446744073709551615h").is_err());
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_rate(500_000_000), "500M");
        assert_eq!(format_rate(1_500_000), "1500K");
        assert_eq!(format_size(16 << 20), "16M");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(0), "0");
        assert_eq!(parse_size(&format_size(3 << 30)).unwrap(), 3 << 30);
    }

    #[test]
    fn tos_takes_decimal_or_hex() {
        assert_eq!(parse_tos("16").unwrap(), 16);
        assert_eq!(parse_tos("0x10").unwrap(), 16);
        assert_eq!(parse_tos("0XB8").unwrap(), 0xb8);
        assert_eq!(
            parse_tos("256").unwrap_err().to_string(),
            "invalid TOS \"256\": expected a byte, e.g. 0x10 or 16"
        );
        assert!(parse_tos("0x").is_err());
        assert!(parse_tos("-1").is_err());
    }

    #[test]
    fn listen_addresses_take_the_exporter_and_config_forms() {
        let a = |s: &str| parse_listen_address(s).unwrap();
        assert_eq!(a(":9813"), "[::]:9813".parse().unwrap());
        assert_eq!(a("127.0.0.1:5301"), "127.0.0.1:5301".parse().unwrap());
        assert_eq!(a("[::]:5301"), "[::]:5301".parse().unwrap());
        assert_eq!(a(" [::1]:1 "), "[::1]:1".parse().unwrap());
        let e = parse_listen_address("127.0.0.1").unwrap_err().to_string();
        assert!(
            e.contains("expected an IP address and port: ip:port, [ipv6]:port or :port"),
            "{e}"
        );
        for bad in ["", ":", ":99999", "localhost:x", "1.2.3.4:", "[::1]:"] {
            assert!(parse_listen_address(bad).is_err(), "{bad}");
        }
        let h = |s: &str| parse_listen_host(s).unwrap();
        assert_eq!(h("::"), ("::".parse().unwrap(), None));
        assert_eq!(h("::1"), ("::1".parse().unwrap(), None));
        assert_eq!(h("[::1]"), ("::1".parse().unwrap(), None));
        assert_eq!(h("127.0.0.1"), ("127.0.0.1".parse().unwrap(), None));
        assert_eq!(h(":5301"), ("::".parse().unwrap(), Some(5301)));
        assert_eq!(h("[::]:5301"), ("::".parse().unwrap(), Some(5301)));
        assert!(parse_listen_host("nohost").is_err());
    }

    #[test]
    fn affinity_is_local_then_remote() {
        assert_eq!(parse_affinity("2").unwrap(), (Some(2), None));
        assert_eq!(parse_affinity("2,3").unwrap(), (Some(2), Some(3)));
        assert_eq!(parse_affinity(" 1 , 0 ").unwrap(), (Some(1), Some(0)));
        assert_eq!(parse_affinity(",3").unwrap(), (None, Some(3)));
        assert_eq!(
            parse_affinity("a").unwrap_err().to_string(),
            "invalid affinity \"a\": expected n or n,m (CPU numbers)"
        );
        assert!(parse_affinity("1,").is_err());
        assert!(parse_affinity("1,2,3").is_err());
    }
}

/// `1 module`, `2 modules`, `0 entries`: a count with its noun in the
/// right number (a noun in -y after a consonant takes -ies). Any integer
/// count: the sentences count in usize, u32 and u64 alike.
pub fn plural<N: Copy + std::fmt::Display + TryInto<u64>>(n: N, noun: &str) -> String {
    if n.try_into().ok() == Some(1) {
        return format!("1 {noun}");
    }
    match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'o', 'u']) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod plural_tests {
    #[test]
    fn counts_take_the_right_number() {
        assert_eq!(super::plural(1, "module"), "1 module");
        assert_eq!(super::plural(0, "module"), "0 modules");
        assert_eq!(
            super::plural(2, "dns discovery entry"),
            "2 dns discovery entries"
        );
        assert_eq!(super::plural(3, "day"), "3 days");
        assert_eq!(super::plural(1u64, "byte"), "1 byte");
        assert_eq!(super::plural(1u8, "hop"), "1 hop");
        assert_eq!(
            super::plural(u64::MAX, "byte"),
            "18446744073709551615 bytes"
        );
    }
}
