//! Fuzzes the UDP datagram header and hello parsers: every datagram that
//! reaches a responder's or prober's UDP socket goes through them, from any
//! source address. A parsed header must write back to the same bytes, and a
//! parsed hello must rebuild into a datagram that parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathprobe::protocol::udp::{
    hello_datagram, parse_hello, UdpHeader, UdpHeaderError, HEADER_LEN, HELLO_LEN,
};

fuzz_target!(|data: &[u8]| {
    match UdpHeader::parse(data) {
        Ok(header) => {
            let mut buf = [0u8; HEADER_LEN];
            header.write(&mut buf);
            assert_eq!(&buf[..], &data[..HEADER_LEN], "header does not write back");
            assert_eq!(UdpHeader::parse(&buf), Ok(header));
        }
        Err(UdpHeaderError::Short(n)) => assert!(n == data.len() && n < HEADER_LEN),
        Err(UdpHeaderError::BadMagic) => assert_ne!(&data[..2], b"pp"),
        Err(UdpHeaderError::Version(v)) => assert_eq!(v, data[2]),
    }

    if let Some((token, stream)) = parse_hello(data) {
        assert!(data.len() >= HELLO_LEN);
        assert_eq!(token.len(), 32);
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let rebuilt = hello_datagram(&token, stream);
        assert_eq!(&rebuilt[HEADER_LEN..], &data[HEADER_LEN..HELLO_LEN]);
        assert_eq!(parse_hello(&rebuilt), Some((token, stream)));
    }
});
