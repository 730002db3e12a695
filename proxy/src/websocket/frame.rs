//! RFC 6455 §5.2 frames: reading a peer's frame headers, checked, and
//! writing new frames.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::events::WsOpcode;

/// Control frames carry at most 125 payload bytes (RFC 6455 §5.5).
pub(super) const MAX_CONTROL_PAYLOAD: usize = 125;

/// Who sent the frames being read: a client masks every frame and a server
/// masks none (RFC 6455 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sender {
    Client,
    Server,
}

/// A checked frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FrameHead {
    pub fin: bool,
    pub opcode: WsOpcode,
    pub mask: Option<[u8; 4]>,
    pub len: u64,
}

/// Why a peer is no longer speaking WebSocket.
#[derive(Debug, thiserror::Error)]
pub(super) enum FrameError {
    #[error("reserved bits set, and no extension was negotiated (RFC 6455 §5.2)")]
    ReservedBits,
    #[error("reserved opcode {0:#x} (RFC 6455 §5.2)")]
    ReservedOpcode(u8),
    #[error("an unmasked frame from the client (RFC 6455 §5.1)")]
    Unmasked,
    #[error("a masked frame from the server (RFC 6455 §5.1)")]
    Masked,
    #[error("a fragmented control frame (RFC 6455 §5.5)")]
    FragmentedControl,
    #[error("a control frame of {0} bytes, more than 125 (RFC 6455 §5.5)")]
    ControlTooLong(u64),
    #[error("a frame length with the most significant bit set (RFC 6455 §5.2)")]
    LengthTooLarge,
    #[error("a continuation frame with no message to continue (RFC 6455 §5.4)")]
    StrayContinuation,
    #[error("a new message before the previous one ended (RFC 6455 §5.4)")]
    InterleavedMessage,
    #[error("a close frame with a 1-byte payload (RFC 6455 §5.5.1)")]
    CloseOneByte,
    #[error("a close frame with the invalid status code {0} (RFC 6455 §7.4)")]
    CloseCode(u16),
    #[error("a close frame whose reason is not UTF-8 (RFC 6455 §5.5.1)")]
    CloseReason,
    #[error("the connection ended inside a frame")]
    Truncated,
    #[error("{0}")]
    Io(#[source] std::io::Error),
}

impl FrameError {
    /// True when the peer broke the protocol (rather than the connection failing).
    pub(super) fn is_protocol(&self) -> bool {
        !matches!(self, Self::Io(_))
    }
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Self::Truncated
        } else {
            Self::Io(e)
        }
    }
}

fn opcode(code: u8) -> Result<WsOpcode, FrameError> {
    Ok(match code {
        0x0 => WsOpcode::Continuation,
        0x1 => WsOpcode::Text,
        0x2 => WsOpcode::Binary,
        0x8 => WsOpcode::Close,
        0x9 => WsOpcode::Ping,
        0xA => WsOpcode::Pong,
        other => return Err(FrameError::ReservedOpcode(other)),
    })
}

pub(super) fn is_control(opcode: WsOpcode) -> bool {
    matches!(opcode, WsOpcode::Close | WsOpcode::Ping | WsOpcode::Pong)
}

/// Reads and checks the next frame header; None at a clean end of stream
/// (between frames).
pub(super) async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
    sender: Sender,
) -> Result<Option<FrameHead>, FrameError> {
    let mut first = [0u8; 2];
    if reader.read(&mut first[..1]).await? == 0 {
        return Ok(None);
    }
    reader.read_exact(&mut first[1..]).await?;
    let [b0, b1] = first;
    if b0 & 0x70 != 0 {
        return Err(FrameError::ReservedBits);
    }
    let fin = b0 & 0x80 != 0;
    let opcode = opcode(b0 & 0x0F)?;
    let masked = b1 & 0x80 != 0;
    match (sender, masked) {
        (Sender::Client, false) => return Err(FrameError::Unmasked),
        (Sender::Server, true) => return Err(FrameError::Masked),
        _ => {}
    }
    let len = match b1 & 0x7F {
        126 => u64::from(reader.read_u16().await?),
        127 => reader.read_u64().await?,
        short => u64::from(short),
    };
    if len > i64::MAX as u64 {
        return Err(FrameError::LengthTooLarge);
    }
    if is_control(opcode) {
        if !fin {
            return Err(FrameError::FragmentedControl);
        }
        if len > MAX_CONTROL_PAYLOAD as u64 {
            return Err(FrameError::ControlTooLong(len));
        }
    }
    let mask = if masked {
        let mut key = [0u8; 4];
        reader.read_exact(&mut key).await?;
        Some(key)
    } else {
        None
    };
    Ok(Some(FrameHead {
        fin,
        opcode,
        mask,
        len,
    }))
}

/// XORs `payload` with the mask, `offset` bytes into the frame's payload (RFC 6455 §5.3).
pub(super) fn apply_mask(payload: &mut [u8], mask: [u8; 4], offset: u64) {
    let start = (offset % 4) as usize;
    for (i, byte) in payload.iter_mut().enumerate() {
        *byte ^= mask[(start + i) % 4];
    }
}

/// One whole frame: header, then the payload masked with `mask` if given.
pub(super) fn encode(
    fin: bool,
    opcode: WsOpcode,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(if fin { 0x80 } else { 0 } | opcode.code());
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    // The minimal length encoding (RFC 6455 §5.2).
    match payload.len() {
        n @ 0..=125 => out.push(mask_bit | n as u8),
        n @ 126..=0xFFFF => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let start = out.len();
    if let Some(key) = mask {
        out.extend_from_slice(&key);
    }
    let payload_at = out.len();
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[payload_at..], key, 0);
    }
    debug_assert!(start <= payload_at);
    out
}

/// The status code and reason of a close frame's payload, checked
/// (RFC 6455 §5.5.1, §7.4.1). An empty payload has neither.
pub(super) fn parse_close(payload: &[u8]) -> Result<(Option<u16>, Option<String>), FrameError> {
    match payload {
        [] => Ok((None, None)),
        [_] => Err(FrameError::CloseOneByte),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            // 1004-1006 and 1015 are reserved and never sent; below 1000 and
            // above 4999 are not used (RFC 6455 §7.4.1, §7.4.2).
            if code < 1000 || matches!(code, 1004..=1006 | 1015) || code > 4999 {
                return Err(FrameError::CloseCode(code));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| FrameError::CloseReason)?;
            Ok((Some(code), (!reason.is_empty()).then(|| reason.to_owned())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn head(bytes: &[u8], sender: Sender) -> Result<Option<FrameHead>, FrameError> {
        let mut reader = bytes;
        read_head(&mut reader, sender).await
    }

    #[tokio::test]
    async fn what_a_peer_may_not_send_is_refused() {
        // A raw HTTP request is no WebSocket: 'D' = 0x44 has RSV1 set.
        assert!(matches!(
            head(b"DELETE /admin/users/1 HTTP/1.1\r\n", Sender::Client).await,
            Err(FrameError::ReservedBits)
        ));
        assert!(matches!(
            head(&[0x83, 0x80, 0, 0, 0, 0], Sender::Client).await,
            Err(FrameError::ReservedOpcode(3))
        ));
        assert!(matches!(
            head(&[0x81, 0x00], Sender::Client).await,
            Err(FrameError::Unmasked)
        ));
        assert!(matches!(
            head(&[0x81, 0x80, 1, 2, 3, 4], Sender::Server).await,
            Err(FrameError::Masked)
        ));
        assert!(matches!(
            head(&[0x09, 0x00], Sender::Server).await,
            Err(FrameError::FragmentedControl)
        ));
        assert!(matches!(
            head(&[0x89, 126, 0, 200], Sender::Server).await,
            Err(FrameError::ControlTooLong(200))
        ));
        assert!(matches!(
            head(&[0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0], Sender::Server).await,
            Err(FrameError::LengthTooLarge)
        ));
        assert!(matches!(
            head(&[0x81], Sender::Server).await,
            Err(FrameError::Truncated)
        ));
        assert!(matches!(head(&[], Sender::Server).await, Ok(None)));
    }

    #[tokio::test]
    async fn frames_written_read_back_with_the_mask_applied() {
        let key = [9, 8, 7, 6];
        let payload = vec![b'x'; 70_000];
        let bytes = encode(true, WsOpcode::Binary, &payload, Some(key));
        let mut reader = &bytes[..];
        let h = read_head(&mut reader, Sender::Client)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            h,
            FrameHead {
                fin: true,
                opcode: WsOpcode::Binary,
                mask: Some(key),
                len: 70_000
            }
        );
        let mut body = reader.to_vec();
        // Unmasking in two pieces gives the same as in one.
        let (a, b) = body.split_at_mut(1001);
        apply_mask(a, key, 0);
        apply_mask(b, key, 1001);
        assert_eq!(body, payload);
        assert_eq!(encode(true, WsOpcode::Text, b"hi", None), b"\x81\x02hi");
    }

    #[test]
    fn close_payloads_are_checked() {
        assert_eq!(parse_close(&[]).unwrap(), (None, None));
        assert_eq!(
            parse_close(b"\x03\xe8bye").unwrap(),
            (Some(1000), Some("bye".into()))
        );
        assert!(matches!(parse_close(&[3]), Err(FrameError::CloseOneByte)));
        assert!(matches!(
            parse_close(&[3, 0xED]),
            Err(FrameError::CloseCode(1005))
        ));
        assert!(matches!(
            parse_close(b"\x03\xe8\xff"),
            Err(FrameError::CloseReason)
        ));
    }
}
