//! Framing: splitting a TCP byte stream into OpenFlow messages by their header.

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::{Header, Message, Result, WireError, HEADER_LEN};

/// One OpenFlow message exactly as it crossed the wire. Decoding is a separate,
/// fallible step ([`Frame::decode`]): a proxy forwards the original bytes even
/// when it cannot understand them.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    bytes: Bytes,
}

impl Frame {
    /// Wraps a complete frame. Fails if `bytes` is not exactly one frame.
    pub fn new(bytes: Bytes) -> Result<Frame> {
        let header = Header::peek(&bytes).ok_or(WireError::TruncatedFrame { have: bytes.len(), need: HEADER_LEN })?;
        let len = header.check_length()?;
        if len != bytes.len() {
            return Err(WireError::TruncatedFrame { have: bytes.len(), need: len });
        }
        Ok(Frame { bytes })
    }

    /// Encodes a message into a frame.
    pub fn from_message(msg: &Message) -> Result<Frame> {
        Ok(Frame { bytes: Bytes::from(msg.emit()?) })
    }

    /// The frame's header (always present: checked on construction).
    pub fn header(&self) -> Header {
        Header::peek(&self.bytes).expect("a Frame always holds a full header")
    }

    /// The original bytes, header included.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Decodes the frame into a typed message.
    pub fn decode(&self) -> Result<Message> {
        Message::parse(self.bytes.clone())
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = self.header();
        write!(f, "Frame(v{:#x} type {} len {} xid {})", h.version, h.msg_type, h.length, h.xid)
    }
}

/// A tokio codec that frames OpenFlow messages. Decoding yields [`Frame`]s
/// without copying their bytes; a length field below 8, or a stream that ends
/// inside a frame, is a [`WireError`].
#[derive(Debug, Default, Clone, Copy)]
pub struct OfpCodec;

/// Errors of [`OfpCodec`]: the stream's I/O or its framing.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
}

impl Decoder for OfpCodec {
    type Item = Frame;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> std::result::Result<Option<Frame>, CodecError> {
        let Some(header) = Header::peek(src) else {
            src.reserve(HEADER_LEN);
            return Ok(None);
        };
        let len = header.check_length()?;
        if src.len() < len {
            // Reserve only what the header says is missing; at most 64 KiB.
            src.reserve(len - src.len());
            return Ok(None);
        }
        Ok(Some(Frame { bytes: src.split_to(len).freeze() }))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> std::result::Result<Option<Frame>, CodecError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => {
                let need = Header::peek(src).map_or(HEADER_LEN, |h| h.length as usize);
                let have = src.remaining();
                src.clear();
                Err(WireError::TruncatedFrame { have, need }.into())
            }
        }
    }
}

impl Encoder<Frame> for OfpCodec {
    type Error = CodecError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> std::result::Result<(), CodecError> {
        dst.extend_from_slice(&frame.bytes);
        Ok(())
    }
}

impl Encoder<&Message> for OfpCodec {
    type Error = CodecError;

    fn encode(&mut self, msg: &Message, dst: &mut BytesMut) -> std::result::Result<(), CodecError> {
        dst.extend_from_slice(&msg.emit()?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_reads_and_joined_in_one() {
        let mut codec = OfpCodec;
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[1, 2, 0, 10, 0, 0, 0, 1, 0xaa]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&[0xbb, 1, 0, 0, 8, 0, 0, 0, 2]);
        let a = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(a.header().xid, 1);
        assert_eq!(a.bytes().len(), 10);
        let b = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(b.header().xid, 2);
        assert!(codec.decode_eof(&mut buf).unwrap().is_none());
    }

    #[test]
    fn short_length_is_an_error_and_truncation_at_eof_too() {
        let mut buf = BytesMut::from(&[1u8, 0, 0, 7, 0, 0, 0, 0][..]);
        assert!(matches!(OfpCodec.decode(&mut buf), Err(CodecError::Wire(WireError::LengthTooSmall(7)))));
        let mut buf = BytesMut::from(&[1u8, 0, 0, 20, 0, 0, 0, 0, 1][..]);
        assert!(matches!(
            OfpCodec.decode_eof(&mut buf),
            Err(CodecError::Wire(WireError::TruncatedFrame { have: 9, need: 20 }))
        ));
    }
}
