//! The OpenFlow wire protocol: framing, typed messages for 1.0 and 1.3, and
//! fingerprints.
//!
//! The shape follows smoltcp's `wire` module: each structure is a plain Rust
//! value (a *repr*) with `parse` from a bounds-checked [`Reader`] and `emit` into a
//! [`Writer`]. Parsing never panics and never allocates more than the bytes
//! present: every length a peer claims is checked against the frame first.
//!
//! Layers, from bytes up:
//! - [`frame`]: splits a byte stream into frames by the 8-byte header
//!   ([`OfpCodec`] is a tokio decoder). A [`Frame`] keeps its original bytes, so
//!   a proxy forwards exactly what it received, decoded or not.
//! - [`Message`]: one decoded frame. HELLO is shared by all versions; 1.0 and
//!   1.3 have their own modules ([`v10`], [`v13`]); any other version, and any
//!   type a version does not define, is kept whole as [`Body::Raw`].
//! - [`fingerprint`]: the functionally-equivalent view of a message, used to
//!   match events across runs.
//!
//! Round trip: for every message whose padding is zero (as the specification
//! asks), `Message::parse(b)?.emit()? == b`. Padding is ignored on input and
//! written as zeros, and unknown actions, instructions, OXM classes, properties
//! and experimenter bodies are kept as raw bytes.

pub mod buf;
pub mod fingerprint;
pub mod frame;
pub mod packet;
pub mod v10;
pub mod v13;

#[cfg(feature = "arbitrary")]
mod arb;

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;
use bytes::Bytes;
use serde::{Serialize, Serializer};

pub use buf::{align8, Reader, Result, WireError, Writer};
pub use fingerprint::Fingerprint;
pub use frame::{Frame, OfpCodec};

/// Wire version byte of OpenFlow 1.0.
pub const OFP10: u8 = 0x01;
/// Wire version byte of OpenFlow 1.3.
pub const OFP13: u8 = 0x04;
/// Size of the common OpenFlow header.
pub const HEADER_LEN: usize = 8;
/// Message type of HELLO in every OpenFlow version.
pub const TYPE_HELLO: u8 = 0;

/// The common 8-byte header every OpenFlow message starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Header {
    pub version: u8,
    pub msg_type: u8,
    pub length: u16,
    pub xid: u32,
}

impl Header {
    /// Reads a header from the first 8 bytes of `b`; `None` if fewer are present.
    /// The length is not validated here: see [`Header::check_length`].
    pub fn peek(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(Header {
            version: b[0],
            msg_type: b[1],
            length: u16::from_be_bytes([b[2], b[3]]),
            xid: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }

    /// Rejects a length field below the header size (a stream with such a frame
    /// cannot be resynchronised).
    pub fn check_length(&self) -> Result<usize> {
        if (self.length as usize) < HEADER_LEN {
            return Err(WireError::LengthTooSmall(self.length));
        }
        Ok(self.length as usize)
    }

    fn emit(&self, w: &mut Writer) {
        w.u8(self.version);
        w.u8(self.msg_type);
        w.u16(self.length);
        w.u32(self.xid);
    }
}

/// An Ethernet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: Mac = Mac([0xff; 6]);
    /// True for group (multicast and broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

impl Serialize for Mac {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A fixed-size, NUL-padded string field (port names, descriptions). Kept as the
/// exact bytes so that round trips are exact; shown as text up to the first NUL.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FixedStr<const N: usize>(pub [u8; N]);

impl<const N: usize> FixedStr<N> {
    /// Encodes `s`, truncated to leave room for a terminating NUL.
    pub fn new(s: &str) -> Self {
        let mut b = [0u8; N];
        let n = s.len().min(N.saturating_sub(1));
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        FixedStr(b)
    }
    /// The text up to the first NUL, lossily decoded.
    pub fn text(&self) -> String {
        let end = self.0.iter().position(|&c| c == 0).unwrap_or(N);
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }
    fn parse(r: &mut Reader, what: &'static str) -> Result<Self> {
        Ok(FixedStr(r.array(what)?))
    }
    fn emit(&self, w: &mut Writer) {
        w.bytes(&self.0)
    }
}

impl<const N: usize> std::fmt::Debug for FixedStr<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.text())
    }
}

impl<const N: usize> Serialize for FixedStr<N> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

/// Serializes [`Bytes`] as lowercase hex (for records outside this module).
pub mod hex_bytes {
    /// Serializes `b` as lowercase hex.
    pub fn serialize<S: serde::Serializer>(b: &bytes::Bytes, s: S) -> Result<S::Ok, S::Error> {
        super::hex::serialize(b, s)
    }

    /// Parses hex (either case) back into bytes; says what is wrong
    /// otherwise.
    pub fn parse(text: &str) -> Result<bytes::Bytes, String> {
        if !text.len().is_multiple_of(2) {
            return Err(format!("hex: {} digits, an odd number", text.len()));
        }
        let digit = |i: usize, c: u8| {
            (c as char).to_digit(16).ok_or_else(|| format!("hex: {:?} at offset {i} is not a hex digit", c as char))
        };
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len() / 2);
        for i in (0..bytes.len()).step_by(2) {
            out.push((digit(i, bytes[i])? * 16 + digit(i + 1, bytes[i + 1])?) as u8);
        }
        Ok(bytes::Bytes::from(out))
    }

    /// Deserializes what [`serialize`] wrote.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bytes::Bytes, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Serializes byte payloads as lowercase hex, readable in traces and fingerprints.
pub(crate) mod hex {
    use serde::Serializer;

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&Hex(b))
    }

    /// Displays bytes as lowercase hex.
    pub struct Hex<'a>(pub &'a [u8]);

    impl std::fmt::Display for Hex<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            // By table, 128 bytes at a time: formatting each byte with
            // `{:02x}` cost more than the rest of recording a message.
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut buf = [0u8; 256];
            for chunk in self.0.chunks(128) {
                for (i, b) in chunk.iter().enumerate() {
                    buf[2 * i] = DIGITS[(b >> 4) as usize];
                    buf[2 * i + 1] = DIGITS[(b & 15) as usize];
                }
                f.write_str(std::str::from_utf8(&buf[..2 * chunk.len()]).map_err(|_| std::fmt::Error)?)?;
            }
            Ok(())
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn hex_by_table_is_what_the_format_macro_gives_across_chunks() {
            for len in [0usize, 1, 2, 127, 128, 129, 255, 256, 257, 1000] {
                let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
                let slow: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(super::Hex(&bytes).to_string(), slow, "{len} bytes");
                assert_eq!(super::super::hex_bytes::parse(&slow).unwrap(), bytes::Bytes::from(bytes));
            }
        }
    }
}

/// One element of a HELLO body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum HelloElement {
    /// OFPHET_VERSIONBITMAP: bit `v` of the bitmap set means wire version `v` is supported.
    VersionBitmap(Vec<u32>),
    /// Any other element type, kept raw (body without the 4-byte element header).
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::hello_element_type))]
        element_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
}

/// A HELLO message, shared by every OpenFlow version (1.0 bodies are normally empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Hello {
    pub elements: Vec<HelloElement>,
}

impl Hello {
    /// A HELLO advertising exactly the given wire versions.
    pub fn with_versions(versions: &[u8]) -> Self {
        let mut bitmap = 0u32;
        for &v in versions {
            bitmap |= 1 << (v & 31);
        }
        Hello { elements: vec![HelloElement::VersionBitmap(vec![bitmap])] }
    }

    /// The versions this HELLO offers: the bitmap if there is one, otherwise
    /// every version up to the header's.
    pub fn versions(&self, header_version: u8) -> Vec<u8> {
        for e in &self.elements {
            if let HelloElement::VersionBitmap(words) = e {
                let mut out = Vec::new();
                for (i, word) in words.iter().enumerate() {
                    for bit in 0..32 {
                        if word & (1 << bit) != 0 {
                            out.push((i * 32 + bit) as u8);
                        }
                    }
                }
                return out;
            }
        }
        (1..=header_version).collect()
    }

    fn parse(r: &mut Reader) -> Result<Self> {
        let elements = r.many(|r| {
            // Element length excludes the padding to 8 bytes that follows it.
            let element_type = r.peek_u16("hello element", 0)?;
            let len = r.peek_u16("hello element", 2)? as usize;
            if len < 4 || len > r.remaining() {
                return Err(WireError::BadLength { what: "hello element", offset: r.offset(), len });
            }
            let padded = align8(len).min(r.remaining());
            let mut e = r.sub("hello element", padded)?;
            e.pad(4)?;
            let mut body = e.sub("hello element", len - 4)?;
            if element_type == 1 {
                if body.remaining() % 4 != 0 {
                    return Err(WireError::BadLength { what: "version bitmap", offset: body.offset(), len });
                }
                Ok(HelloElement::VersionBitmap(body.many(|b| b.u32("version bitmap"))?))
            } else {
                Ok(HelloElement::Unknown { element_type, data: body.rest() })
            }
        })?;
        Ok(Hello { elements })
    }

    fn emit(&self, w: &mut Writer) {
        for e in &self.elements {
            let start = w.len();
            let (ty, body_len) = match e {
                HelloElement::VersionBitmap(words) => (1, words.len() * 4),
                HelloElement::Unknown { element_type, data } => (*element_type, data.len()),
            };
            w.u16(ty);
            w.u16((4 + body_len) as u16);
            match e {
                HelloElement::VersionBitmap(words) => words.iter().for_each(|&x| w.u32(x)),
                HelloElement::Unknown { data, .. } => w.bytes(data),
            }
            w.pad_to(start, 8);
        }
    }
}

/// The body of a decoded message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Body {
    /// HELLO, in any version (the header version is the sender's highest).
    Hello { version: u8, hello: Hello },
    /// An OpenFlow 1.0 message.
    V10(v10::Msg),
    /// An OpenFlow 1.3 message.
    V13(v13::Msg),
    /// A message of another version, or of a type its version does not define:
    /// kept whole (the body after the header).
    Raw {
        version: u8,
        msg_type: u8,
        #[serde(with = "hex")]
        data: Bytes,
    },
}

/// A decoded OpenFlow message: the transaction id and a typed body. The
/// header's version, type and length are derived from the body when emitting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub xid: u32,
    pub body: Body,
}

impl Message {
    /// A message with the given transaction id.
    pub fn new(xid: u32, body: Body) -> Self {
        Message { xid, body }
    }

    /// The wire version byte this message is sent with.
    pub fn version(&self) -> u8 {
        match &self.body {
            Body::Hello { version, .. } | Body::Raw { version, .. } => *version,
            Body::V10(_) => OFP10,
            Body::V13(_) => OFP13,
        }
    }

    /// The wire message type byte.
    pub fn msg_type(&self) -> u8 {
        match &self.body {
            Body::Hello { .. } => TYPE_HELLO,
            Body::V10(m) => m.msg_type(),
            Body::V13(m) => m.msg_type(),
            Body::Raw { msg_type, .. } => *msg_type,
        }
    }

    /// A short lowercase name of the message type, such as `flow_mod`.
    pub fn type_name(&self) -> &'static str {
        match &self.body {
            Body::Hello { .. } => "hello",
            Body::V10(m) => m.type_name(),
            Body::V13(m) => m.type_name(),
            Body::Raw { .. } => "unknown",
        }
    }

    /// Decodes one complete frame (header included). Types a version does not
    /// define, and versions other than 1.0 and 1.3, become [`Body::Raw`]; a
    /// known type whose body is malformed is an error.
    pub fn parse(frame: Bytes) -> Result<Message> {
        let header = Header::peek(&frame).ok_or(WireError::TruncatedFrame { have: frame.len(), need: HEADER_LEN })?;
        let len = header.check_length()?;
        if frame.len() != len {
            return Err(WireError::TruncatedFrame { have: frame.len(), need: len });
        }
        let mut r = Reader::new(&frame);
        r.pad(HEADER_LEN)?;
        let body = if header.msg_type == TYPE_HELLO {
            Body::Hello { version: header.version, hello: Hello::parse(&mut r)? }
        } else {
            let parsed = match header.version {
                OFP10 => v10::Msg::parse(header.msg_type, &mut r)?.map(Body::V10),
                OFP13 => v13::Msg::parse(header.msg_type, &mut r)?.map(Body::V13),
                _ => None,
            };
            match parsed {
                Some(b) => b,
                None => Body::Raw { version: header.version, msg_type: header.msg_type, data: r.rest() },
            }
        };
        r.finish("message body")?;
        Ok(Message { xid: header.xid, body })
    }

    /// Encodes the message, header included. Fails only if it would exceed the
    /// 65,535-byte limit of the length field.
    pub fn emit(&self) -> Result<Vec<u8>> {
        // Room for most messages at once (a PACKET_IN with its frame, a
        // FLOW_MOD with matches and actions): growing from 64 bytes was a
        // reallocation for most of them.
        let mut w = Writer::with_capacity(256);
        Header { version: self.version(), msg_type: self.msg_type(), length: 0, xid: self.xid }.emit(&mut w);
        match &self.body {
            Body::Hello { hello, .. } => hello.emit(&mut w),
            Body::V10(m) => m.emit(&mut w),
            Body::V13(m) => m.emit(&mut w),
            Body::Raw { data, .. } => w.bytes(data),
        }
        let len = w.len();
        if len > u16::MAX as usize {
            return Err(WireError::TooLong(len));
        }
        w.patch_u16(2, len as u16);
        Ok(w.into_vec())
    }
}

/// OpenFlow 1.0 message type names, by type code.
const TYPE_NAMES_10: [&str; 22] = [
    "hello",
    "error",
    "echo_request",
    "echo_reply",
    "vendor",
    "features_request",
    "features_reply",
    "get_config_request",
    "get_config_reply",
    "set_config",
    "packet_in",
    "flow_removed",
    "port_status",
    "packet_out",
    "flow_mod",
    "port_mod",
    "stats_request",
    "stats_reply",
    "barrier_request",
    "barrier_reply",
    "queue_get_config_request",
    "queue_get_config_reply",
];

/// OpenFlow 1.3 message type names, by type code.
const TYPE_NAMES_13: [&str; 30] = [
    "hello",
    "error",
    "echo_request",
    "echo_reply",
    "experimenter",
    "features_request",
    "features_reply",
    "get_config_request",
    "get_config_reply",
    "set_config",
    "packet_in",
    "flow_removed",
    "port_status",
    "packet_out",
    "flow_mod",
    "group_mod",
    "port_mod",
    "table_mod",
    "multipart_request",
    "multipart_reply",
    "barrier_request",
    "barrier_reply",
    "queue_get_config_request",
    "queue_get_config_reply",
    "role_request",
    "role_reply",
    "get_async_request",
    "get_async_reply",
    "set_async",
    "meter_mod",
];

/// The type name of a message from its header alone (no decoding): what
/// [`Message::type_name`] would say, or `unknown`.
pub fn type_name(version: u8, msg_type: u8) -> &'static str {
    let table: &[&str] = match version {
        OFP10 => &TYPE_NAMES_10,
        OFP13 => &TYPE_NAMES_13,
        _ if msg_type == TYPE_HELLO => return "hello",
        _ => return "unknown",
    };
    table.get(msg_type as usize).copied().unwrap_or("unknown")
}

/// Every message type name of OpenFlow 1.0 and 1.3, sorted (for checking
/// names a user typed).
pub fn type_names() -> Vec<&'static str> {
    let mut all: Vec<&str> = TYPE_NAMES_10.iter().chain(TYPE_NAMES_13.iter()).copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

#[cfg(feature = "arbitrary")]
impl<'a> Arbitrary<'a> for Message {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let body = match u.int_in_range(0..=9)? {
            0 => Body::Hello { version: u.int_in_range(1..=6)?, hello: Hello::arbitrary(u)? },
            1 => {
                let (version, msg_type) = arb::raw_message_type(u)?;
                Body::Raw { version, msg_type, data: arb::bytes(u)? }
            }
            2..=5 => Body::V10(v10::Msg::arbitrary(u)?),
            _ => Body::V13(v13::Msg::arbitrary(u)?),
        };
        Ok(Message { xid: u32::arbitrary(u)?, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_with_bitmap_round_trips_and_lists_versions() {
        // os-ken's HELLO: version 0x06 header with a bitmap for 1.0, 1.3, 1.4, 1.5.
        let b: &[u8] = &[6, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0x72];
        let m = Message::parse(Bytes::from_static(b)).unwrap();
        let Body::Hello { version: 6, hello } = &m.body else { panic!("{m:?}") };
        assert_eq!(hello.versions(6), vec![1, 4, 5, 6]);
        assert_eq!(m.emit().unwrap(), b);
    }

    #[test]
    fn plain_hello_offers_every_version_up_to_its_own() {
        let m = Message::parse(Bytes::from_static(&[1, 0, 0, 8, 0, 0, 0, 9])).unwrap();
        let Body::Hello { hello, .. } = &m.body else { panic!() };
        assert_eq!(hello.versions(1), vec![1]);
    }

    #[test]
    fn unknown_versions_and_types_are_kept_raw() {
        let b: &[u8] = &[5, 77, 0, 10, 0, 0, 0, 3, 0xab, 0xcd];
        let m = Message::parse(Bytes::from_static(b)).unwrap();
        assert!(matches!(m.body, Body::Raw { version: 5, msg_type: 77, .. }));
        assert_eq!(m.emit().unwrap(), b);
        let b: &[u8] = &[1, 99, 0, 8, 0, 0, 0, 3];
        assert!(matches!(Message::parse(Bytes::from_static(b)).unwrap().body, Body::Raw { .. }));
    }

    #[test]
    #[cfg(feature = "arbitrary")]
    fn header_type_names_agree_with_decoded_ones() {
        let mut rng = 0u64;
        let mut buf = vec![0u8; 1024];
        let mut checked = 0;
        for _ in 0..5000 {
            for b in buf.iter_mut() {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                *b = (rng >> 33) as u8;
            }
            if let Ok(m) = Message::arbitrary(&mut arbitrary::Unstructured::new(&buf)) {
                if !matches!(m.body, Body::Raw { .. }) {
                    assert_eq!(type_name(m.version(), m.msg_type()), m.type_name(), "{m:?}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn length_mismatch_and_short_length_are_errors() {
        assert_eq!(Message::parse(Bytes::from_static(&[1, 0, 0, 4, 0, 0, 0, 0])), Err(WireError::LengthTooSmall(4)));
        assert!(Message::parse(Bytes::from_static(&[1, 0, 0, 12, 0, 0, 0, 0])).is_err());
    }
}
