//! Fuzzes the readers of iperf3's control messages: what the responder's
//! iperf3 port reads from a stock (or hostile) client, and what a prober
//! reads from an iperf3 server. Beyond "no panic": a length prefix over
//! its bound is refused before anything is allocated, and parameters that
//! parse are either refused with an iperf3 error code or become a test
//! within the responder's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathprobe::protocol::iperf3::{self, check_json_len, Params, Results, State, UdpHeader};
use pathprobe::responder::{iperf3::to_request, ResponderConfig};

fuzz_target!(|data: &[u8]| {
    if let Some(&b) = data.first() {
        assert_eq!(State::from_byte(b).byte(), b);
    }
    if data.len() >= 4 {
        let prefix = [data[0], data[1], data[2], data[3]];
        if let Ok(len) = check_json_len(prefix, iperf3::MAX_PARAMS_LEN) {
            assert!(len as u32 <= iperf3::MAX_PARAMS_LEN && len > 0);
        }
    }
    let config = ResponderConfig::default();
    if let Ok(p) = Params::decode(data) {
        if let Ok(r) = to_request(&p, &config) {
            assert!(r.streams >= 1 && r.streams <= config.max_streams);
            assert!(r.omit_ms + r.duration_ms <= config.max_duration.as_millis() as u64);
            assert!(r.length <= config.max_length);
        }
    }
    if let Ok(r) = Results::decode(data) {
        // What was read writes back and reads the same.
        let again = Results::decode(&r.encode()).expect("re-encoded results parse");
        assert_eq!(again.streams.len(), r.streams.len());
    }
    for wide in [false, true] {
        if let Some(h) = UdpHeader::parse(data, wide) {
            let _ = h.send_ns();
        }
    }
    let _ = iperf3::udp_reply_for(data);
});
