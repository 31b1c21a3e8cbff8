//! serde helpers that read durations, bit rates and byte sizes the way users
//! write them (`30s`, `500M`, `4M`), through the parsers of
//! [`crate::units`], for use with `#[serde(deserialize_with = "...")]`.
//!
//! A plain number is accepted too, in the unit a bare number means to those
//! parsers: seconds for durations, bits per second for rates, bytes for
//! sizes. So `duration: 10` and `duration: 10s` mean the same.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

use crate::units::{parse_duration, parse_rate, parse_size};

/// One kind of quantity: how to read it from text and from a number.
trait Unit: Sized {
    const EXPECTING: &'static str;
    fn from_text(s: &str) -> Result<Self, String>;
    fn from_number(n: f64) -> Result<Self, String>;
}

struct Seconds(Duration);
/// A duration, or `auto` (an adaptive one).
struct SecondsOrAuto(Duration);
/// An adaptive probe's precision: `1%` or `0.01`.
struct Precision(f64);

/// What `duration: auto` reads as until the config resolves it to the
/// module's maximum (`Module::resolve_auto`): no duration a user can
/// write (those are at most an hour).
pub const AUTO_DURATION: Duration = Duration::MAX;

impl Unit for SecondsOrAuto {
    const EXPECTING: &'static str = "a duration such as 250ms, 30s or 5m, or auto";
    fn from_text(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(SecondsOrAuto(AUTO_DURATION));
        }
        Seconds::from_text(s).map(|d| SecondsOrAuto(d.0))
    }
    fn from_number(n: f64) -> Result<Self, String> {
        Seconds::from_number(n).map(|d| SecondsOrAuto(d.0))
    }
}

impl Unit for Precision {
    const EXPECTING: &'static str = "a share such as 1% or 0.01";
    fn from_text(s: &str) -> Result<Self, String> {
        crate::units::parse_precision(s)
            .map(Precision)
            .map_err(|e| e.to_string())
    }
    fn from_number(n: f64) -> Result<Self, String> {
        Precision::from_text(&n.to_string())
    }
}

pub fn duration_or_auto<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    SecondsOrAuto::deserialize(d).map(|s| s.0)
}

pub fn opt_precision<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Option::<Precision>::deserialize(d).map(|o| o.map(|p| p.0))
}
struct BitsPerSecond(u64);
struct Bytes(u64);
/// A size that must fit the `u32` of socket buffer and write sizes.
struct Bytes32(u32);

impl Unit for Seconds {
    const EXPECTING: &'static str = "a duration such as 250ms, 30s or 5m";
    fn from_text(s: &str) -> Result<Self, String> {
        parse_duration(s).map(Seconds).map_err(|e| e.to_string())
    }
    fn from_number(n: f64) -> Result<Self, String> {
        Duration::try_from_secs_f64(n)
            .map(Seconds)
            .map_err(|_| format!("invalid duration {n}: expected a non-negative number of seconds"))
    }
}

impl Unit for BitsPerSecond {
    const EXPECTING: &'static str = "a bit rate such as 500M or 1g";
    fn from_text(s: &str) -> Result<Self, String> {
        parse_rate(s).map(BitsPerSecond).map_err(|e| e.to_string())
    }
    fn from_number(n: f64) -> Result<Self, String> {
        whole(n, "rate").map(BitsPerSecond)
    }
}

impl Unit for Bytes {
    const EXPECTING: &'static str = "a size such as 128K or 4M";
    fn from_text(s: &str) -> Result<Self, String> {
        parse_size(s).map(Bytes).map_err(|e| e.to_string())
    }
    fn from_number(n: f64) -> Result<Self, String> {
        whole(n, "size").map(Bytes)
    }
}

fn whole(n: f64, what: &str) -> Result<u64, String> {
    if n >= 0.0 && n.fract() == 0.0 && n <= u64::MAX as f64 {
        Ok(n as u64)
    } else {
        Err(format!(
            "invalid {what} {n}: expected a non-negative whole number"
        ))
    }
}

impl Unit for Bytes32 {
    const EXPECTING: &'static str = Bytes::EXPECTING;
    // Checked here rather than after deserializing, so that the error still
    // carries the key path and position.
    fn from_text(s: &str) -> Result<Self, String> {
        Bytes::from_text(s).and_then(|b| fits(b.0))
    }
    fn from_number(n: f64) -> Result<Self, String> {
        Bytes::from_number(n).and_then(|b| fits(b.0))
    }
}

fn fits(n: u64) -> Result<Bytes32, String> {
    u32::try_from(n)
        .map(Bytes32)
        .map_err(|_| format!("size {n} is too large: expected at most 4G"))
}

struct UnitVisitor<U>(PhantomData<U>);

impl<U: Unit> Visitor<'_> for UnitVisitor<U> {
    type Value = U;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(U::EXPECTING)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<U, E> {
        U::from_text(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<U, E> {
        // Through the text parser so that huge values keep exact integers.
        U::from_text(&v.to_string()).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<U, E> {
        U::from_number(v as f64).map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<U, E> {
        U::from_number(v).map_err(E::custom)
    }
}

macro_rules! impl_deserialize {
    ($($t:ty),*) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(UnitVisitor::<$t>(PhantomData))
            }
        }
    )*};
}
impl_deserialize!(
    Seconds,
    SecondsOrAuto,
    Precision,
    BitsPerSecond,
    Bytes,
    Bytes32
);

pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    Seconds::deserialize(d).map(|s| s.0)
}

pub fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Option::<Seconds>::deserialize(d).map(|o| o.map(|s| s.0))
}

pub fn rate<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    BitsPerSecond::deserialize(d).map(|r| r.0)
}

pub fn opt_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<BitsPerSecond>::deserialize(d).map(|o| o.map(|r| r.0))
}

pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Bytes::deserialize(d).map(|b| b.0)
}

/// A size that must fit the `u32` of socket buffer and write sizes.
pub fn size_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Bytes32::deserialize(d).map(|b| b.0)
}

/// A size that must fit the `u32` of socket buffer and write sizes.
pub fn opt_size_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Option::<Bytes32>::deserialize(d).map(|o| o.map(|b| b.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct T {
        #[serde(default, deserialize_with = "opt_duration")]
        d: Option<Duration>,
        #[serde(default, deserialize_with = "opt_rate")]
        r: Option<u64>,
        #[serde(default, deserialize_with = "opt_size_u32")]
        s: Option<u32>,
    }

    fn t(yaml: &str) -> Result<T, String> {
        serde_yaml::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn text_and_numbers() {
        let v = t("d: 250ms\nr: 1g\ns: 128K").unwrap();
        assert_eq!(v.d, Some(Duration::from_millis(250)));
        assert_eq!(v.r, Some(1_000_000_000));
        assert_eq!(v.s, Some(131_072));
        let v = t("d: 10\nr: 2500\ns: 1400").unwrap();
        assert_eq!(v.d, Some(Duration::from_secs(10)));
        assert_eq!(v.r, Some(2500));
        assert_eq!(v.s, Some(1400));
        assert_eq!(t("d: 1.5").unwrap().d, Some(Duration::from_millis(1500)));
        let v = t("d: null").unwrap();
        assert_eq!(v.d, None);
        assert_eq!(t("{}").unwrap().r, None);
    }

    #[test]
    fn bad_values_say_what_was_expected() {
        assert_eq!(
            t("d: -3").unwrap_err(),
            "d: invalid duration -3: expected a non-negative number of seconds at line 1 column 4"
        );
        assert_eq!(
            t("r: [1]").unwrap_err(),
            "r: invalid type: sequence, expected a bit rate such as 500M or 1g at line 1 column 4"
        );
        assert_eq!(
            t("s: 5G").unwrap_err(),
            "s: size 5368709120 is too large: expected at most 4G at line 1 column 4"
        );
        assert!(t("r: 1.5").is_err());
        assert!(t("d: 5 parsecs")
            .unwrap_err()
            .contains("invalid duration \"5 parsecs\""));
    }
}
