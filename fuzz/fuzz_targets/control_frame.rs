//! Fuzzes the control-channel framing: the bytes a prober or responder reads
//! from a TCP peer it does not trust. Beyond "no panic", a decoded message
//! must survive a re-encode unchanged, and a frame cut short must ask for
//! more bytes rather than fail or misread.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathprobe::protocol::frame::{
    decode_frame, decode_payload, encode_frame, frame_len, FrameError, MAX_FRAME_LEN,
};

fuzz_target!(|data: &[u8]| {
    // The payload decoder is also called on its own by readers that took the
    // header off the socket first.
    let _ = decode_payload(data);

    if let Some(header) = data.get(..4) {
        let header: [u8; 4] = header.try_into().unwrap();
        if let Ok(len) = frame_len(header) {
            assert!((1..=MAX_FRAME_LEN).contains(&len));
        }
    }

    let Ok(Some((msg, used))) = decode_frame(data) else {
        return;
    };
    assert!(used > 4 && used <= data.len());
    // Any shorter prefix of a complete frame is just an incomplete frame.
    assert!(matches!(decode_frame(&data[..used - 1]), Ok(None)));
    assert!(matches!(decode_frame(&data[..4]), Ok(None)));

    let frame = match encode_frame(&msg) {
        Ok(frame) => frame,
        // Re-encoding may legitimately grow a payload near the limit (an
        // integer-valued float `1` comes back as `1.0`); any other failure
        // would mean we accept messages we could not send.
        Err(FrameError::Oversized { .. }) if used > MAX_FRAME_LEN / 2 => return,
        Err(e) => panic!("decoded message does not re-encode: {e}: {msg:?}"),
    };
    let (again, used_again) = decode_frame(&frame)
        .expect("re-encoded frame decodes")
        .expect("re-encoded frame is complete");
    assert_eq!(used_again, frame.len());
    assert_eq!(again, msg, "re-encoded message differs");
});
