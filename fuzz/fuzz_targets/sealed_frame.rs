//! Fuzzes the opening of sealed control frames: what a prober or responder
//! with a shared secret reads from a peer after the handshake. Beyond "no
//! panic", no input but the frame the other end sealed may ever open, and
//! what opens is exactly what was sealed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathprobe::auth::{FrameSealer, Nonce, Secret, Side};

fuzz_target!(|data: &[u8]| {
    let secret = Secret::new(b"fuzzing secret, sixteen bytes or more").unwrap();
    let key = || secret.session_key(&Nonce([1; 32]), &Nonce([2; 32]));
    // Arbitrary bytes never open (a forgery would need the key).
    let mut victim = FrameSealer::new(key(), Side::Responder);
    assert!(victim.open(data).is_err(), "forged frame opened");

    // A frame sealed by the other end opens to what it sealed; changed in
    // any one byte, it does not.
    let mut payload = b"{\"type\":\"x\",\"d\":\"".to_vec();
    payload.extend(data.iter().map(|b| b'a' + b % 26));
    payload.extend_from_slice(b"\"}");
    let mut prober = FrameSealer::new(key(), Side::Prober);
    let sealed = prober.seal(&payload).unwrap();
    let mut responder = FrameSealer::new(key(), Side::Responder);
    assert_eq!(responder.open(&sealed).unwrap(), payload);
    if let Some(&first) = data.first() {
        let at = first as usize % sealed.len();
        let mut bad = sealed.clone();
        bad[at] ^= 0x01;
        let mut fresh = FrameSealer::new(key(), Side::Responder);
        assert!(fresh.open(&bad).is_err(), "changed frame opened");
    }
});
