//! Bounds-checked reading and length-patching writing of OpenFlow structures.
//!
//! Every parser in [`crate::wire`] reads through a [`Reader`], which never indexes
//! past its slice: a short buffer becomes [`WireError::Truncated`], never a panic.
//! Every length a peer claims is checked against the bytes actually present before
//! anything is allocated, so a hostile length field cannot make us allocate more
//! than the frame holds.

use bytes::{BufMut, Bytes};

/// Why a sequence of bytes is not a valid OpenFlow message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The header's length field is below the 8-byte minimum.
    #[error("length field {0} is shorter than the 8-byte OpenFlow header")]
    LengthTooSmall(u16),
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame: {have} of {need} bytes")]
    TruncatedFrame { have: usize, need: usize },
    /// A structure needs more bytes than its enclosing container has left.
    #[error("{what} truncated: needs {need} bytes at offset {offset}, {have} left")]
    Truncated { what: &'static str, offset: usize, need: usize, have: usize },
    /// An embedded length field is impossible (too small, misaligned, or past the end).
    #[error("{what} has bad length {len} at offset {offset}")]
    BadLength { what: &'static str, offset: usize, len: usize },
    /// A value that the specification fixes has another value.
    #[error("{what}: unexpected value {value:#x}")]
    BadValue { what: &'static str, value: u64 },
    /// The message is too large to be framed (over 65,535 bytes).
    #[error("message of {0} bytes exceeds the 65535-byte OpenFlow limit")]
    TooLong(usize),
}

/// Shorthand used throughout the codec.
pub type Result<T> = std::result::Result<T, WireError>;

/// A cursor over part of a frame. It borrows the frame, so sub-readers cost
/// nothing; only payloads kept in the decoded message ([`Reader::bytes`],
/// [`Reader::rest`]) become [`Bytes`] slices, which share the frame's buffer.
#[derive(Clone)]
pub struct Reader<'a> {
    frame: &'a Bytes,
    /// This reader's window ends at `frame[end]`; the cursor is at `pos`.
    end: usize,
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over the whole of `frame`.
    pub fn new(frame: &'a Bytes) -> Self {
        Reader { frame, end: frame.len(), pos: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// True when every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Offset of the cursor within the frame.
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn need(&self, what: &'static str, n: usize) -> Result<()> {
        if self.remaining() < n {
            return Err(WireError::Truncated { what, offset: self.offset(), need: n, have: self.remaining() });
        }
        Ok(())
    }

    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        self.need(what, N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.frame[self.pos..self.pos + N]);
        self.pos += N;
        Ok(out)
    }

    /// Reads one byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.take::<1>(what)?[0])
    }
    /// Reads a big-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_be_bytes(self.take(what)?))
    }
    /// Reads a big-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take(what)?))
    }
    /// Reads a big-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take(what)?))
    }
    /// Reads a fixed-size array (MAC addresses, names).
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        self.take(what)
    }
    /// Skips `n` bytes of padding. Padding content is ignored on input and written
    /// as zeros on output.
    pub fn pad(&mut self, n: usize) -> Result<()> {
        self.need("padding", n)?;
        self.pos += n;
        Ok(())
    }
    /// Takes the next `n` bytes as a zero-copy slice.
    pub fn bytes(&mut self, what: &'static str, n: usize) -> Result<Bytes> {
        self.need(what, n)?;
        let out = self.frame.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }
    /// Takes everything left as a zero-copy slice.
    pub fn rest(&mut self) -> Bytes {
        let out = self.frame.slice(self.pos..self.end);
        self.pos = self.end;
        out
    }
    /// Borrows the next `n` bytes without copying.
    pub fn slice(&mut self, what: &'static str, n: usize) -> Result<&'a [u8]> {
        self.need(what, n)?;
        let frame: &'a Bytes = self.frame;
        let out = &frame[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }
    /// Peeks at a big-endian u16 `at` bytes ahead without consuming.
    pub fn peek_u16(&self, what: &'static str, at: usize) -> Result<u16> {
        self.need(what, at + 2)?;
        let p = self.pos + at;
        Ok(u16::from_be_bytes([self.frame[p], self.frame[p + 1]]))
    }
    /// Splits off a sub-reader over the next `n` bytes (an embedded structure
    /// whose length the peer claimed). Fails if fewer than `n` bytes remain.
    pub fn sub(&mut self, what: &'static str, n: usize) -> Result<Reader<'a>> {
        if self.remaining() < n {
            return Err(WireError::BadLength { what, offset: self.offset(), len: n });
        }
        let sub = Reader { frame: self.frame, end: self.pos + n, pos: self.pos };
        self.pos += n;
        Ok(sub)
    }
    /// Reads a length-prefixed TLV-style item: peeks the u16 length at `len_at`,
    /// checks it against `min` and `align`, and returns a sub-reader over the item.
    pub fn tlv(&mut self, what: &'static str, len_at: usize, min: usize, align: usize) -> Result<Reader<'a>> {
        let len = self.peek_u16(what, len_at)? as usize;
        if len < min || (align > 1 && !len.is_multiple_of(align)) || len > self.remaining() {
            return Err(WireError::BadLength { what, offset: self.offset(), len });
        }
        self.sub(what, len)
    }
    /// Parses items with `f` until the reader is exhausted.
    pub fn many<T>(&mut self, mut f: impl FnMut(&mut Reader<'a>) -> Result<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        while !self.is_empty() {
            out.push(f(self)?);
        }
        Ok(out)
    }
    /// Fails unless a structure's claimed length `len` is the fixed `want`
    /// (for fixed-size TLVs such as most actions).
    pub fn expect_len(&self, what: &'static str, len: usize, want: usize) -> Result<()> {
        if len != want {
            return Err(WireError::BadLength { what, offset: self.offset(), len });
        }
        Ok(())
    }

    /// Fails unless the reader has been consumed exactly.
    pub fn finish(&self, what: &'static str) -> Result<()> {
        if !self.is_empty() {
            return Err(WireError::BadLength { what, offset: self.offset(), len: self.remaining() });
        }
        Ok(())
    }
}

/// An append-only output buffer that can patch length fields once the length of
/// what follows is known.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        Writer { buf: Vec::with_capacity(cap) }
    }
    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// True when nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Writes one byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.put_u8(v)
    }
    /// Writes a big-endian u16.
    pub fn u16(&mut self, v: u16) {
        self.buf.put_u16(v)
    }
    /// Writes a big-endian u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.put_u32(v)
    }
    /// Writes a big-endian u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.put_u64(v)
    }
    /// Writes raw bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v)
    }
    /// Writes `n` zero bytes of padding.
    pub fn pad(&mut self, n: usize) {
        self.buf.resize(self.buf.len() + n, 0)
    }
    /// Pads with zeros up to the next multiple of `align` counted from `start`.
    pub fn pad_to(&mut self, start: usize, align: usize) {
        let len = self.buf.len() - start;
        self.pad((align - len % align) % align)
    }
    /// Overwrites a u16 written earlier at `at`.
    pub fn patch_u16(&mut self, at: usize, v: u16) {
        self.buf[at..at + 2].copy_from_slice(&v.to_be_bytes())
    }
    /// Writes a u16 length placeholder at the cursor and returns its position.
    pub fn len_placeholder(&mut self) -> usize {
        let at = self.buf.len();
        self.u16(0);
        at
    }
    /// Patches the placeholder at `at` with the number of bytes from `start` to
    /// the cursor. Lengths over 65,535 are caught by the message-level check.
    pub fn patch_len_from(&mut self, at: usize, start: usize) {
        let len = self.buf.len() - start;
        self.patch_u16(at, len.min(u16::MAX as usize) as u16)
    }
    /// The bytes written.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }
    /// A view of the bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
}

/// Rounds `n` up to a multiple of 8, the alignment of most OpenFlow structures.
pub const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_are_errors_not_panics() {
        let frame = Bytes::from_static(&[1, 2, 3]);
        let mut r = Reader::new(&frame);
        assert_eq!(r.u16("a").unwrap(), 0x0102);
        assert!(matches!(r.u16("b"), Err(WireError::Truncated { need: 2, have: 1, .. })));
        assert!(r.sub("c", 2).is_err());
        assert_eq!(r.u8("d").unwrap(), 3);
        assert!(r.is_empty());
    }

    #[test]
    fn tlv_rejects_lengths_beyond_the_buffer_and_below_minimum() {
        let frame = Bytes::from_static(&[0, 0, 0, 200, 0, 0, 0, 0]);
        let mut r = Reader::new(&frame);
        assert!(matches!(r.tlv("t", 2, 4, 8), Err(WireError::BadLength { len: 200, .. })));
        let frame = Bytes::from_static(&[0, 0, 0, 2, 0, 0, 0, 0]);
        let mut r = Reader::new(&frame);
        assert!(r.tlv("t", 2, 4, 1).is_err());
    }

    #[test]
    fn writer_patches_lengths() {
        let mut w = Writer::default();
        let start = w.len();
        let at = w.len_placeholder();
        w.u32(7);
        w.pad_to(start, 8);
        w.patch_len_from(at, start);
        assert_eq!(w.into_vec(), vec![0, 8, 0, 0, 0, 7, 0, 0]);
    }
}
