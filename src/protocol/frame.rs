//! Length-prefixed framing: a 4-byte big-endian payload length, then a JSON
//! payload. JSON keeps the messages self-describing and easy to extend; the
//! control channel carries a handful of small messages per test, so its cost
//! does not matter.

use super::message::Message;

/// The largest payload a frame may carry. Results of a 128-stream test fit
/// comfortably; anything larger is a protocol error, not an allocation.
pub const MAX_FRAME_LEN: usize = 256 * 1024;

/// Why bytes could not be read as a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the maximum of {MAX_FRAME_LEN} bytes")]
    Oversized { len: usize },
    #[error("empty frame: expected a JSON message")]
    Empty,
    #[error("malformed message: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Encodes one message as a frame.
pub fn encode_frame(msg: &Message) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; 4];
    serde_json::to_writer(&mut out, msg)?;
    let len = out.len() - 4;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::Oversized { len });
    }
    out[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// Reads the payload length from a frame header, rejecting oversized frames
/// before any payload is buffered.
pub fn frame_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::Oversized { len });
    }
    if len == 0 {
        return Err(FrameError::Empty);
    }
    Ok(len)
}

/// Decodes a frame payload (without its header).
pub fn decode_payload(payload: &[u8]) -> Result<Message, FrameError> {
    Ok(serde_json::from_slice(payload)?)
}

/// Decodes the first frame in `buf`. Returns `Ok(None)` when `buf` holds only
/// part of a frame, and the message with the number of bytes it used otherwise.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Message, usize)>, FrameError> {
    let Some(header) = buf.get(..4) else {
        return Ok(None);
    };
    let len = frame_len(header.try_into().expect("4 bytes"))?;
    let Some(payload) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    Ok(Some((decode_payload(payload)?, 4 + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::message::*;

    /// A hello with a fixed stamp, so that two calls make equal messages.
    fn hello() -> Message {
        Message::Hello(Hello {
            time_us: Some(1_700_000_000_000_000),
            ..Hello::new()
        })
    }

    #[test]
    fn round_trip() {
        let frame = encode_frame(&hello()).unwrap();
        assert_eq!(
            u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
            frame.len() - 4
        );
        let (msg, used) = decode_frame(&frame).unwrap().unwrap();
        assert_eq!(used, frame.len());
        assert_eq!(msg, hello());
    }

    #[test]
    fn two_frames_back_to_back() {
        let mut buf = encode_frame(&hello()).unwrap();
        buf.extend(encode_frame(&Message::Start).unwrap());
        let (first, used) = decode_frame(&buf).unwrap().unwrap();
        assert_eq!(first, hello());
        let (second, used2) = decode_frame(&buf[used..]).unwrap().unwrap();
        assert_eq!(second, Message::Start);
        assert_eq!(used + used2, buf.len());
    }

    #[test]
    fn truncated_frames_need_more_bytes() {
        let frame = encode_frame(&hello()).unwrap();
        for cut in 0..frame.len() {
            assert!(
                decode_frame(&frame[..cut]).unwrap().is_none(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn oversized_frames_are_refused_from_the_header() {
        let header = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes();
        match decode_frame(&header) {
            Err(FrameError::Oversized { len }) => assert_eq!(len, MAX_FRAME_LEN + 1),
            other => panic!("expected oversized, got {other:?}"),
        }
        // An iperf3 client opens with a 37-byte ASCII cookie: as a length it is huge.
        let cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";
        assert!(matches!(
            decode_frame(cookie),
            Err(FrameError::Oversized { .. })
        ));
    }

    #[test]
    fn garbage_payloads_are_errors_not_panics() {
        let mut buf = 5u32.to_be_bytes().to_vec();
        buf.extend(b"{\"ty");
        buf.push(0xff);
        assert!(matches!(decode_frame(&buf), Err(FrameError::Malformed(_))));
        let mut unknown = 19u32.to_be_bytes().to_vec();
        unknown.extend(b"{\"type\":\"launch\"}  ");
        assert!(matches!(
            decode_frame(&unknown),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(
            decode_frame(&[0, 0, 0, 0]),
            Err(FrameError::Empty)
        ));
    }

    #[test]
    fn encode_refuses_oversized_messages() {
        let msg = Message::Error {
            message: "x".repeat(MAX_FRAME_LEN),
        };
        assert!(matches!(
            encode_frame(&msg),
            Err(FrameError::Oversized { .. })
        ));
    }
}
