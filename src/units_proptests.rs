//! Property tests of [`crate::units`]: the quantity parsers read operator
//! input from the command line and config files, so no string may make them
//! panic, and what the formatters write must read back as the same value.

use std::time::Duration;

use proptest::prelude::*;

use crate::units::{format_duration, format_rate, parse_duration, parse_rate, parse_size};

/// The largest integer an f64 holds exactly. The parsers go through f64 so
/// that `1.5G` works; beyond 2^53 (9 Pbit/s, 8 PiB) they round, which no
/// real rate or size comes near.
const EXACT: u64 = 1 << 53;

/// Text shaped like a quantity (digits, dots, unit letters, signs, spaces)
/// reaches far more of the parsers than arbitrary Unicode does.
fn quantity_like() -> impl Strategy<Value = String> {
    "[ 0-9.eE+-]{0,12}[kKmMgGtTbBiIsShH/pP ]{0,6}"
}

proptest! {
    #[test]
    fn parsers_never_panic(s in any::<String>()) {
        let _ = parse_rate(&s);
        let _ = parse_size(&s);
        let _ = parse_duration(&s);
    }

    #[test]
    fn parsers_never_panic_on_quantity_like_text(s in quantity_like()) {
        let _ = parse_rate(&s);
        let _ = parse_size(&s);
        let _ = parse_duration(&s);
    }

    #[test]
    fn rates_round_trip(bps in 0..=EXACT) {
        prop_assert_eq!(parse_rate(&format_rate(bps)), Ok(bps));
    }

    #[test]
    fn rates_with_suffixes(n in 0..=1_000_000u64) {
        prop_assert_eq!(parse_rate(&format!("{n}k")), Ok(n * 1000));
        prop_assert_eq!(parse_rate(&format!("{n}M")), Ok(n * 1_000_000));
        prop_assert_eq!(parse_rate(&format!("{n}Gbps")), Ok(n * 1_000_000_000));
    }

    #[test]
    fn sizes_with_suffixes(n in 0..=EXACT >> 30) {
        prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
        prop_assert_eq!(parse_size(&format!("{n}K")), Ok(n << 10));
        prop_assert_eq!(parse_size(&format!("{n}MiB")), Ok(n << 20));
        prop_assert_eq!(parse_size(&format!("{n}g")), Ok(n << 30));
    }

    /// Whole milliseconds, up to a thousand years: [`format_duration`]
    /// writes milliseconds at the finest, so that is what must come back.
    #[test]
    fn durations_round_trip(ms in 0..1000 * 365 * 86_400_000u64) {
        let d = Duration::from_millis(ms);
        let text = format_duration(d);
        prop_assert_eq!(parse_duration(&text), Ok(d), "{}", text);
    }
}
