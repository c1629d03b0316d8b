//! OXM (OpenFlow Extensible Match) TLVs and the 1.3 `ofp_match` that carries them.
//!
//! Fields of the OPENFLOW_BASIC class with a known width are decoded into
//! [`BasicOxm`] (value and optional mask held inline, no allocation); every other
//! class or field is kept as raw payload in [`Oxm::Other`].

#[cfg(feature = "arbitrary")]
use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use serde::{Serialize, Serializer};

use crate::wire::{align8, hex, Reader, Result, WireError, Writer};

/// The OPENFLOW_BASIC OXM class.
pub const CLASS_BASIC: u16 = 0x8000;
/// The experimenter OXM class (payload starts with a 4-byte experimenter id).
pub const CLASS_EXPERIMENTER: u16 = 0xffff;

macro_rules! oxm_fields {
    ($( $name:ident = $code:literal, $width:literal, $text:literal; )*) => {
        /// The OPENFLOW_BASIC match fields of OpenFlow 1.3.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Field { $( $name = $code, )* }

        impl Field {
            /// Every field, in code order.
            pub const ALL: &'static [Field] = &[ $( Field::$name, )* ];

            /// The field with wire code `code`, if 1.3 defines it.
            pub fn from_code(code: u8) -> Option<Field> {
                match code { $( $code => Some(Field::$name), )* _ => None }
            }
            /// Width of the value in bytes.
            pub fn width(self) -> usize {
                match self { $( Field::$name => $width, )* }
            }
            /// The field's name as os-ken spells it (e.g. `eth_dst`).
            pub fn name(self) -> &'static str {
                match self { $( Field::$name => $text, )* }
            }
        }
    };
}

oxm_fields! {
    InPort = 0, 4, "in_port";
    InPhyPort = 1, 4, "in_phy_port";
    Metadata = 2, 8, "metadata";
    EthDst = 3, 6, "eth_dst";
    EthSrc = 4, 6, "eth_src";
    EthType = 5, 2, "eth_type";
    VlanVid = 6, 2, "vlan_vid";
    VlanPcp = 7, 1, "vlan_pcp";
    IpDscp = 8, 1, "ip_dscp";
    IpEcn = 9, 1, "ip_ecn";
    IpProto = 10, 1, "ip_proto";
    Ipv4Src = 11, 4, "ipv4_src";
    Ipv4Dst = 12, 4, "ipv4_dst";
    TcpSrc = 13, 2, "tcp_src";
    TcpDst = 14, 2, "tcp_dst";
    UdpSrc = 15, 2, "udp_src";
    UdpDst = 16, 2, "udp_dst";
    SctpSrc = 17, 2, "sctp_src";
    SctpDst = 18, 2, "sctp_dst";
    Icmpv4Type = 19, 1, "icmpv4_type";
    Icmpv4Code = 20, 1, "icmpv4_code";
    ArpOp = 21, 2, "arp_op";
    ArpSpa = 22, 4, "arp_spa";
    ArpTpa = 23, 4, "arp_tpa";
    ArpSha = 24, 6, "arp_sha";
    ArpTha = 25, 6, "arp_tha";
    Ipv6Src = 26, 16, "ipv6_src";
    Ipv6Dst = 27, 16, "ipv6_dst";
    Ipv6Flabel = 28, 4, "ipv6_flabel";
    Icmpv6Type = 29, 1, "icmpv6_type";
    Icmpv6Code = 30, 1, "icmpv6_code";
    Ipv6NdTarget = 31, 16, "ipv6_nd_target";
    Ipv6NdSll = 32, 6, "ipv6_nd_sll";
    Ipv6NdTll = 33, 6, "ipv6_nd_tll";
    MplsLabel = 34, 4, "mpls_label";
    MplsTc = 35, 1, "mpls_tc";
    MplsBos = 36, 1, "mpls_bos";
    PbbIsid = 37, 3, "pbb_isid";
    TunnelId = 38, 8, "tunnel_id";
    Ipv6Exthdr = 39, 2, "ipv6_exthdr";
}

impl Serialize for Field {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// VLAN_VID flag meaning "a VLAN tag is present" (OFPVID_PRESENT).
pub const VID_PRESENT: u16 = 0x1000;

/// A fixed-width big-endian value of up to 16 bytes, stored inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value {
    len: u8,
    bytes: [u8; 16],
}

impl Value {
    /// A value from its big-endian bytes (at most 16).
    pub fn from_slice(b: &[u8]) -> Value {
        let mut bytes = [0u8; 16];
        let len = b.len().min(16);
        bytes[..len].copy_from_slice(&b[..len]);
        Value { len: len as u8, bytes }
    }
    /// The low `width` bytes of `v`, big-endian.
    pub fn from_u128(v: u128, width: usize) -> Value {
        Value::from_slice(&v.to_be_bytes()[16 - width.min(16)..])
    }
    /// The big-endian bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
    /// The value as an integer (fields are at most 128 bits wide).
    pub fn to_u128(&self) -> u128 {
        self.as_slice().iter().fold(0u128, |acc, &b| (acc << 8) | b as u128)
    }
    /// The value as a u64, truncating wider fields.
    pub fn to_u64(&self) -> u64 {
        self.to_u128() as u64
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{}", hex::Hex(self.as_slice()))
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{}", hex::Hex(self.as_slice())))
    }
}

/// A decoded OPENFLOW_BASIC match field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct BasicOxm {
    pub field: Field,
    pub value: Value,
    pub mask: Option<Value>,
}

impl BasicOxm {
    /// An exact match of `field` against the integer `v`.
    pub fn exact(field: Field, v: u128) -> BasicOxm {
        BasicOxm { field, value: Value::from_u128(v, field.width()), mask: None }
    }
    /// A masked match of `field`.
    pub fn masked(field: Field, v: u128, mask: u128) -> BasicOxm {
        let w = field.width();
        BasicOxm { field, value: Value::from_u128(v, w), mask: Some(Value::from_u128(mask, w)) }
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> Arbitrary<'a> for BasicOxm {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let field = *u.choose(Field::ALL)?;
        let w = field.width();
        let value = Value::from_slice(u.bytes(w)?);
        let mask = if bool::arbitrary(u)? { Some(Value::from_slice(u.bytes(w)?)) } else { None };
        Ok(BasicOxm { field, value, mask })
    }
}

/// One OXM TLV.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Oxm {
    Basic(BasicOxm),
    /// Another class (NXM, experimenter) or an OPENFLOW_BASIC field 1.3 does not
    /// define: the payload (after the 4-byte OXM header) kept raw.
    Other {
        class: u16,
        field: u8,
        has_mask: bool,
        #[serde(with = "hex")]
        payload: Bytes,
    },
}

#[cfg(feature = "arbitrary")]
impl<'a> Arbitrary<'a> for Oxm {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        if u.ratio(3, 4)? {
            return Ok(Oxm::Basic(BasicOxm::arbitrary(u)?));
        }
        let class = match u.int_in_range(0..=2)? {
            0 => CLASS_BASIC,
            1 => CLASS_EXPERIMENTER,
            _ => u.int_in_range(0..=0x7fff)?,
        };
        // Unknown basic fields only: known ones decode as `Basic`.
        let field = if class == CLASS_BASIC { u.int_in_range(40..=127)? } else { u.int_in_range(0..=127)? };
        let min = if class == CLASS_EXPERIMENTER { 4 } else { 0 };
        let n = u.int_in_range(min..=20)?;
        Ok(Oxm::Other { class, field, has_mask: bool::arbitrary(u)?, payload: Bytes::copy_from_slice(u.bytes(n)?) })
    }
}

impl Oxm {
    /// Parses one OXM TLV.
    pub(crate) fn parse(r: &mut Reader) -> Result<Oxm> {
        let offset = r.offset();
        let class = r.u16("oxm.class")?;
        let fh = r.u8("oxm.field")?;
        let len = r.u8("oxm.length")? as usize;
        let (code, has_mask) = (fh >> 1, fh & 1 == 1);
        let mut p = r.sub("oxm payload", len)?;
        if class == CLASS_BASIC {
            if let Some(field) = Field::from_code(code) {
                let w = field.width();
                if len != w * (1 + has_mask as usize) {
                    return Err(WireError::BadLength { what: "oxm field", offset, len });
                }
                let value = Value::from_slice(p.slice("oxm value", w)?);
                let mask = if has_mask { Some(Value::from_slice(p.slice("oxm mask", w)?)) } else { None };
                return Ok(Oxm::Basic(BasicOxm { field, value, mask }));
            }
        }
        if class == CLASS_EXPERIMENTER && len < 4 {
            return Err(WireError::BadLength { what: "experimenter oxm", offset, len });
        }
        Ok(Oxm::Other { class, field: code, has_mask, payload: p.rest() })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        match self {
            Oxm::Basic(b) => {
                w.u16(CLASS_BASIC);
                w.u8((b.field as u8) << 1 | b.mask.is_some() as u8);
                w.u8((b.value.len as usize * (1 + b.mask.is_some() as usize)) as u8);
                w.bytes(b.value.as_slice());
                if let Some(m) = &b.mask {
                    w.bytes(m.as_slice());
                }
            }
            Oxm::Other { class, field, has_mask, payload } => {
                w.u16(*class);
                w.u8(field << 1 | *has_mask as u8);
                w.u8(payload.len() as u8);
                w.bytes(payload);
            }
        }
    }

    /// Encoded length (header included).
    pub fn wire_len(&self) -> usize {
        4 + match self {
            Oxm::Basic(b) => b.value.len as usize * (1 + b.mask.is_some() as usize),
            Oxm::Other { payload, .. } => payload.len(),
        }
    }
}

/// Match type codes of `ofp_match`.
pub const MATCH_STANDARD: u16 = 0;
pub const MATCH_OXM: u16 = 1;

/// The 1.3 `ofp_match`: a list of OXM TLVs, padded to 8 bytes on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Match {
    pub fields: Vec<Oxm>,
}

impl Match {
    /// An OXM match from basic fields.
    pub fn new(fields: impl IntoIterator<Item = BasicOxm>) -> Match {
        Match { fields: fields.into_iter().map(Oxm::Basic).collect() }
    }

    /// The basic field `f`, if present.
    pub fn get(&self, f: Field) -> Option<&BasicOxm> {
        self.fields.iter().find_map(|o| match o {
            Oxm::Basic(b) if b.field == f => Some(b),
            _ => None,
        })
    }

    /// The ingress port, if matched.
    pub fn in_port(&self) -> Option<u32> {
        self.get(Field::InPort).map(|b| b.value.to_u64() as u32)
    }

    pub(crate) fn parse(r: &mut Reader) -> Result<Match> {
        let offset = r.offset();
        let ty = r.peek_u16("match.type", 0)?;
        let len = r.peek_u16("match.length", 2)? as usize;
        if ty != MATCH_OXM {
            return Err(WireError::BadValue { what: "match type (only OXM is supported in 1.3)", value: ty as u64 });
        }
        if len < 4 || align8(len) > r.remaining() {
            return Err(WireError::BadLength { what: "match", offset, len });
        }
        let mut m = r.sub("match", align8(len))?;
        m.pad(4)?;
        let mut fields = m.sub("match fields", len - 4)?;
        Ok(Match { fields: fields.many(Oxm::parse)? })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        let start = w.len();
        w.u16(MATCH_OXM);
        let at = w.len_placeholder();
        self.fields.iter().for_each(|f| f.emit(w));
        w.patch_len_from(at, start);
        w.pad_to(start, 8);
    }
}
