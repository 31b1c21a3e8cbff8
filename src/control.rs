//! Reading and writing control messages on a tokio stream, each with a
//! timeout, so that a silent or slow peer can never hold a side forever.
//!
//! [`Control`] is one end of a control connection: once the shared-secret
//! handshake has given it a [`FrameSealer`], every frame it writes is
//! sealed and every frame it reads must open.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::auth::{FrameSealer, SealError};
use crate::protocol::frame::{decode_payload, encode_frame, frame_len, FrameError, MAX_FRAME_LEN};
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
    /// A frame after the handshake failed its MAC (see [`crate::auth::FrameSealer`]).
    #[error("{0}")]
    Unauthenticated(#[from] SealError),
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
    tokio::time::timeout(timeout, read_payload(r, max_len))
        .await
        .map_err(|_| ControlError::Timeout(timeout))?
        .and_then(|payload| Ok(decode_payload(&payload)?))
}

/// Reads one frame's payload of at most `max_len` bytes, refusing a larger
/// one from its header, before anything is buffered.
async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    max_len: usize,
) -> Result<Vec<u8>, ControlError> {
    let closed = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ControlError::Closed
        } else {
            ControlError::Io(e)
        }
    };
    let mut header = [0u8; 4];
    r.read_exact(&mut header).await.map_err(closed)?;
    let len = frame_len(header)?;
    if len > max_len.min(MAX_FRAME_LEN) {
        return Err(FrameError::Oversized { len }.into());
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await.map_err(closed)?;
    Ok(payload)
}

/// One end of a control connection, sealed once the handshake has agreed a
/// session key.
#[derive(Debug)]
pub struct Control<S> {
    stream: S,
    sealer: Option<FrameSealer>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Control<S> {
    pub fn new(stream: S) -> Control<S> {
        Control {
            stream,
            sealer: None,
        }
    }

    /// Seals every later frame, both ways.
    pub fn seal(&mut self, sealer: FrameSealer) {
        self.sealer = Some(sealer);
    }

    pub fn is_sealed(&self) -> bool {
        self.sealer.is_some()
    }

    pub fn stream(&mut self) -> &mut S {
        &mut self.stream
    }

    pub fn into_inner(self) -> S {
        self.stream
    }

    /// Writes one message, sealed if the connection is.
    pub async fn send(&mut self, msg: &Message, timeout: Duration) -> Result<(), ControlError> {
        let Some(sealer) = &mut self.sealer else {
            return write_message(&mut self.stream, msg, timeout).await;
        };
        let payload = serde_json::to_vec(msg).map_err(FrameError::from)?;
        let sealed = sealer.seal(&payload)?;
        if sealed.len() > MAX_FRAME_LEN {
            return Err(FrameError::Oversized { len: sealed.len() }.into());
        }
        let mut frame = Vec::with_capacity(4 + sealed.len());
        frame.extend_from_slice(&(sealed.len() as u32).to_be_bytes());
        frame.extend_from_slice(&sealed);
        tokio::time::timeout(timeout, async {
            self.stream.write_all(&frame).await?;
            self.stream.flush().await
        })
        .await
        .map_err(|_| ControlError::Timeout(timeout))??;
        Ok(())
    }

    /// Reads one message of at most [`SMALL_FRAME_LEN`] bytes.
    pub async fn recv(&mut self, timeout: Duration) -> Result<Message, ControlError> {
        self.recv_max(timeout, SMALL_FRAME_LEN).await
    }

    /// Reads one message of at most `max_len` bytes. On a sealed connection
    /// the frame must open; the one exception is a plain refusal
    /// (`Rejected` or `Error`), which a peer that could not verify us sends
    /// unsealed, and which can only end the test, never advance it.
    pub async fn recv_max(
        &mut self,
        timeout: Duration,
        max_len: usize,
    ) -> Result<Message, ControlError> {
        let payload = tokio::time::timeout(timeout, read_payload(&mut self.stream, max_len))
            .await
            .map_err(|_| ControlError::Timeout(timeout))??;
        let Some(sealer) = &mut self.sealer else {
            return Ok(decode_payload(&payload)?);
        };
        match sealer.open(&payload) {
            Ok(original) => Ok(decode_payload(&original)?),
            Err(e) => match decode_payload(&payload) {
                Ok(refusal @ (Message::Rejected { .. } | Message::Error { .. })) => Ok(refusal),
                _ => Err(e.into()),
            },
        }
    }
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
    async fn sealed_channels_carry_messages_and_refuse_tampering() {
        use crate::auth::{Nonce, Secret, Side};
        let secret = Secret::new(b"correct horse battery staple").unwrap();
        let (c, s) = (Nonce([1; 32]), Nonce([2; 32]));
        let t = Duration::from_secs(1);
        let (a, b) = tokio::io::duplex(4096);
        let mut prober = Control::new(a);
        let mut responder = Control::new(b);
        prober.seal(FrameSealer::new(secret.session_key(&c, &s), Side::Prober));
        responder.seal(FrameSealer::new(
            secret.session_key(&c, &s),
            Side::Responder,
        ));
        prober.send(&Message::Start, t).await.unwrap();
        assert_eq!(responder.recv(t).await.unwrap(), Message::Start);
        responder.send(&Message::Ready, t).await.unwrap();
        assert_eq!(prober.recv(t).await.unwrap(), Message::Ready);
        // A frame injected in plain text is refused, except a refusal.
        write_message(responder.stream(), &Message::Ready, t)
            .await
            .unwrap();
        assert!(matches!(
            prober.recv(t).await,
            Err(ControlError::Unauthenticated(SealError::Missing))
        ));
        let bye = Message::Error {
            message: "bye".into(),
        };
        write_message(responder.stream(), &bye, t).await.unwrap();
        assert_eq!(prober.recv(t).await.unwrap(), bye);
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
