//! Reading and writing control messages on a tokio stream, each with a
//! timeout, so that a silent or slow peer can never hold a side forever.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::protocol::frame::{decode_payload, encode_frame, frame_len, FrameError};
use crate::protocol::Message;

/// Why a control exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("timed out after {0:?} waiting for the peer")]
    Timeout(Duration),
    #[error("the peer closed the control connection")]
    Closed,
    #[error("control connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Frame(#[from] FrameError),
}

/// The largest frame read by [`read_message`]: every message but the
/// responder's results is far smaller, and a responder that buffered the
/// protocol maximum for each of many junk connections would be a memory
/// lever.
pub const SMALL_FRAME_LEN: usize = 16 * 1024;

/// Reads one message of at most [`SMALL_FRAME_LEN`] bytes, waiting at most
/// `timeout` for all of it.
pub async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    timeout: Duration,
) -> Result<Message, ControlError> {
    read_message_max(r, timeout, SMALL_FRAME_LEN).await
}

/// Reads one message of at most `max_len` bytes (capped at the protocol's
/// maximum), waiting at most `timeout` for all of it.
pub async fn read_message_max<R: AsyncRead + Unpin>(
    r: &mut R,
    timeout: Duration,
    max_len: usize,
) -> Result<Message, ControlError> {
    tokio::time::timeout(timeout, async {
        let mut header = [0u8; 4];
        if let Err(e) = r.read_exact(&mut header).await {
            return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ControlError::Closed
            } else {
                ControlError::Io(e)
            });
        }
        let len = frame_len(header)?;
        if len > max_len {
            return Err(FrameError::Oversized { len }.into());
        }
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ControlError::Closed
            } else {
                ControlError::Io(e)
            }
        })?;
        Ok(decode_payload(&payload)?)
    })
    .await
    .map_err(|_| ControlError::Timeout(timeout))?
}

/// Writes one message, waiting at most `timeout`.
pub async fn write_message<W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &Message,
    timeout: Duration,
) -> Result<(), ControlError> {
    let frame = encode_frame(msg)?;
    tokio::time::timeout(timeout, async {
        w.write_all(&frame).await?;
        w.flush().await
    })
    .await
    .map_err(|_| ControlError::Timeout(timeout))??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_cross_a_pipe() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        write_message(&mut a, &Message::Start, Duration::from_secs(1))
            .await
            .unwrap();
        let got = read_message(&mut b, Duration::from_secs(1)).await.unwrap();
        assert_eq!(got, Message::Start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_times_out() {
        let (_a, mut b) = tokio::io::duplex(1024);
        let err = read_message(&mut b, Duration::from_secs(3))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ControlError::Timeout(d) if d == Duration::from_secs(3)),
            "{err}"
        );
    }

    #[tokio::test]
    async fn frames_over_the_caller_limit_are_refused_before_buffering() {
        let (mut a, mut b) = tokio::io::duplex(64);
        // Only the header is sent: the refusal must not wait for the payload.
        a.write_all(&((SMALL_FRAME_LEN + 1) as u32).to_be_bytes())
            .await
            .unwrap();
        let err = read_message(&mut b, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ControlError::Frame(FrameError::Oversized { len }) if len == SMALL_FRAME_LEN + 1),
            "{err}"
        );
        let big = Message::Error {
            message: "x".repeat(SMALL_FRAME_LEN),
        };
        let (mut c, mut d) = tokio::io::duplex(1 << 20);
        write_message(&mut c, &big, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(
            read_message_max(
                &mut d,
                Duration::from_secs(1),
                crate::protocol::MAX_FRAME_LEN
            )
            .await
            .unwrap(),
            big
        );
    }

    #[tokio::test]
    async fn a_partial_frame_then_close_is_closed() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[0, 0, 0, 10, b'{']).await.unwrap();
        drop(a);
        assert!(matches!(
            read_message(&mut b, Duration::from_secs(1)).await,
            Err(ControlError::Closed)
        ));
    }
}
