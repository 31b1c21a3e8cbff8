//! Property tests of the iperf3 control messages ([`super::iperf3`]): the
//! parameters and results survive an encode/decode round trip whatever
//! their numbers and strings hold, and no bytes from a peer (a stock client
//! or server, or anything pretending to be one) make a decoder panic. The
//! fuzz target in `fuzz/` explores the same decoders for longer.

use proptest::prelude::*;

use super::iperf3::{
    check_json_len, encode_json_len, encode_server_error, is_cookie, make_cookie, same_cookie,
    udp_reply_for, JsonError, Params, Results, State, StreamResult, UdpHeader, COOKIE_LEN,
};

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter)
}

fn float() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |f| f.is_finite())
}

/// A boolean key is on by its presence, so only "absent" and "on" can
/// cross the wire.
fn flag() -> impl Strategy<Value = Option<bool>> {
    proptest::option::of(Just(true))
}

fn params() -> impl Strategy<Value = Params> {
    (
        prop::collection::vec(flag(), 7),
        any::<[i64; 5]>(),
        prop::collection::vec(proptest::option::of(any::<i64>()), 16),
        (
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
        ),
    )
        .prop_map(
            |(f, n, o, (congestion, authtoken, client_version))| Params {
                tcp: f[0],
                udp: f[1],
                sctp: f[2],
                nodelay: f[3],
                reverse: f[4],
                bidirectional: f[5],
                mptcp: f[6],
                omit: n[0],
                time: n[1],
                num: n[2],
                blockcount: n[3],
                parallel: n[4],
                len: o[0],
                bandwidth: o[1],
                fqrate: o[2],
                pacing_timer: o[3],
                burst: o[4],
                mss: o[5],
                window: o[6],
                tos: o[7],
                flowlabel: o[8],
                get_server_output: o[9],
                udp_counters_64bit: o[10],
                repeating_payload: o[11],
                zerocopy: o[12],
                dont_fragment: o[13],
                server_affinity: o[14],
                skip_rx_copy: o[15],
                congestion,
                authtoken,
                client_version,
            },
        )
}

fn stream() -> impl Strategy<Value = StreamResult> {
    (
        any::<[i64; 5]>(),
        (float(), float(), float()),
        (
            proptest::option::of(any::<i64>()),
            proptest::option::of(any::<i64>()),
        ),
    )
        .prop_map(
            |(n, (jitter, start_time, end_time), (omitted_errors, omitted_packets))| StreamResult {
                id: n[0],
                bytes: n[1],
                retransmits: n[2],
                jitter,
                errors: n[3],
                omitted_errors,
                packets: n[4],
                omitted_packets,
                start_time,
                end_time,
            },
        )
}

fn results() -> impl Strategy<Value = Results> {
    (
        (float(), float(), float(), any::<i64>()),
        proptest::option::of(text()),
        prop::collection::vec(stream(), 0..5),
        proptest::option::of(text()),
        proptest::option::of((text(), any::<i64>())),
    )
        .prop_map(
            |((total, user, system, retr), congestion_used, streams, text, json)| Results {
                cpu_util_total: total,
                cpu_util_user: user,
                cpu_util_system: system,
                sender_has_retransmits: retr,
                congestion_used,
                streams,
                server_output_text: text,
                server_output_json: json.map(|(k, v)| serde_json::json!({ k: v })),
            },
        )
}

/// JSON values of any shape, to throw at the decoders as almost-right
/// messages: right keys, wrong types.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        float().prop_map(serde_json::Value::from),
        text().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("tcp".to_string()),
                    Just("time".to_string()),
                    Just("parallel".to_string()),
                    Just("len".to_string()),
                    Just("streams".to_string()),
                    Just("bytes".to_string()),
                    Just("id".to_string()),
                    Just("cpu_util_total".to_string()),
                    Just("sender_has_retransmits".to_string()),
                    text(),
                ],
                inner,
                0..6
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn params_round_trip(p in params()) {
        prop_assert_eq!(Params::decode(&p.encode()), Ok(p));
    }

    #[test]
    fn results_round_trip(r in results()) {
        prop_assert_eq!(Results::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Params::decode(&bytes);
        let _ = Results::decode(&bytes);
        let _ = is_cookie(&bytes);
        let _ = same_cookie(&bytes, &bytes);
        let _ = udp_reply_for(&bytes);
        for counters64 in [false, true] {
            // A header is read only from a datagram long enough to hold it.
            let h = UdpHeader::parse(&bytes, counters64);
            prop_assert_eq!(h.is_some(), bytes.len() >= UdpHeader::len(counters64));
            if let Some(h) = h {
                let _ = h.send_ns();
            }
        }
        if let Some(&b) = bytes.first() {
            prop_assert_eq!(State::from_byte(b).byte(), b);
        }
    }

    #[test]
    fn any_json_decodes_or_errs(v in json_value()) {
        let body = serde_json::to_vec(&v).unwrap();
        let errs = [Params::decode(&body).err(), Results::decode(&body).err()];
        for e in errs.into_iter().flatten() {
            prop_assert!(matches!(e, JsonError::Syntax(_)));
        }
    }

    #[test]
    fn json_length_prefix_round_trips(len in 1usize..=u32::MAX as usize, max in any::<u32>()) {
        let got = check_json_len(encode_json_len(len), max);
        if len as u64 <= u64::from(max) {
            prop_assert_eq!(got, Ok(len));
        } else {
            prop_assert_eq!(got, Err(JsonError::TooLong { len: len as u32, max }));
        }
    }

    #[test]
    fn udp_header_round_trips(sec in any::<u32>(), usec in any::<u32>(), seq in any::<u64>()) {
        let h = UdpHeader { sec, usec, seq };
        let mut buf = [0u8; 16];
        h.write(&mut buf, true);
        prop_assert_eq!(UdpHeader::parse(&buf, true), Some(h));
        h.write(&mut buf, false);
        let short = UdpHeader { seq: u64::from(seq as u32), ..h };
        prop_assert_eq!(UdpHeader::parse(&buf, false), Some(short));
    }

    #[test]
    fn cookies_are_recognised(random in any::<[u8; 36]>(), other in any::<[u8; 36]>()) {
        let c = make_cookie(&random);
        prop_assert_eq!(c.len(), COOKIE_LEN);
        prop_assert!(is_cookie(&c));
        prop_assert!(same_cookie(&c, &c));
        let d = make_cookie(&other);
        prop_assert_eq!(same_cookie(&c, &d), c == d);
    }

    #[test]
    fn server_error_trailer_carries_its_codes(code in any::<i32>(), errno in any::<i32>()) {
        let b = encode_server_error(code, errno);
        prop_assert_eq!(State::from_byte(b[0]), State::ServerError);
        prop_assert_eq!(i32::from_be_bytes(b[1..5].try_into().unwrap()), code);
        prop_assert_eq!(i32::from_be_bytes(b[5..9].try_into().unwrap()), errno);
    }
}
