//! The OpenFlow 1.0 12-tuple match (`ofp_match`, 40 bytes).

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;
use serde::Serialize;

use crate::wire::{Mac, Reader, Result, Writer};

/// Wildcard bits of [`Match::wildcards`].
pub mod wildcards {
    pub const IN_PORT: u32 = 1 << 0;
    pub const DL_VLAN: u32 = 1 << 1;
    pub const DL_SRC: u32 = 1 << 2;
    pub const DL_DST: u32 = 1 << 3;
    pub const DL_TYPE: u32 = 1 << 4;
    pub const NW_PROTO: u32 = 1 << 5;
    pub const TP_SRC: u32 = 1 << 6;
    pub const TP_DST: u32 = 1 << 7;
    /// Number of low bits of nw_src ignored, in bits 8..14 (values ≥ 32 mean all).
    pub const NW_SRC_SHIFT: u32 = 8;
    pub const NW_SRC_MASK: u32 = 0x3f << NW_SRC_SHIFT;
    /// Number of low bits of nw_dst ignored, in bits 14..20.
    pub const NW_DST_SHIFT: u32 = 14;
    pub const NW_DST_MASK: u32 = 0x3f << NW_DST_SHIFT;
    pub const DL_VLAN_PCP: u32 = 1 << 20;
    pub const NW_TOS: u32 = 1 << 21;
    /// Every field wildcarded.
    pub const ALL: u32 = (1 << 22) - 1;
}

/// `ofp_match`: the fields plus the wildcard bitmap, exactly as on the wire
/// (values of wildcarded fields are kept so the match re-encodes byte for byte).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Match {
    pub wildcards: u32,
    pub in_port: u16,
    pub dl_src: Mac,
    pub dl_dst: Mac,
    pub dl_vlan: u16,
    pub dl_vlan_pcp: u8,
    pub dl_type: u16,
    pub nw_tos: u8,
    pub nw_proto: u8,
    pub nw_src: u32,
    pub nw_dst: u32,
    pub tp_src: u16,
    pub tp_dst: u16,
}

impl Default for Match {
    /// The match-everything match.
    fn default() -> Self {
        Match {
            wildcards: wildcards::ALL,
            in_port: 0,
            dl_src: Mac::default(),
            dl_dst: Mac::default(),
            dl_vlan: 0,
            dl_vlan_pcp: 0,
            dl_type: 0,
            nw_tos: 0,
            nw_proto: 0,
            nw_src: 0,
            nw_dst: 0,
            tp_src: 0,
            tp_dst: 0,
        }
    }
}

impl Match {
    /// Encoded size.
    pub const LEN: usize = 40;

    /// True if the field with wildcard bit `bit` must match exactly.
    pub fn is_exact(&self, bit: u32) -> bool {
        self.wildcards & bit == 0
    }

    /// Number of leading bits of nw_src that must match (0 to 32).
    pub fn nw_src_prefix(&self) -> u32 {
        32 - ((self.wildcards & wildcards::NW_SRC_MASK) >> wildcards::NW_SRC_SHIFT).min(32)
    }

    /// Number of leading bits of nw_dst that must match (0 to 32).
    pub fn nw_dst_prefix(&self) -> u32 {
        32 - ((self.wildcards & wildcards::NW_DST_MASK) >> wildcards::NW_DST_SHIFT).min(32)
    }

    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        let m = Match {
            wildcards: r.u32("match.wildcards")?,
            in_port: r.u16("match.in_port")?,
            dl_src: Mac(r.array("match.dl_src")?),
            dl_dst: Mac(r.array("match.dl_dst")?),
            dl_vlan: r.u16("match.dl_vlan")?,
            dl_vlan_pcp: r.u8("match.dl_vlan_pcp")?,
            dl_type: {
                r.pad(1)?;
                r.u16("match.dl_type")?
            },
            nw_tos: r.u8("match.nw_tos")?,
            nw_proto: r.u8("match.nw_proto")?,
            nw_src: {
                r.pad(2)?;
                r.u32("match.nw_src")?
            },
            nw_dst: r.u32("match.nw_dst")?,
            tp_src: r.u16("match.tp_src")?,
            tp_dst: r.u16("match.tp_dst")?,
        };
        Ok(m)
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        w.u32(self.wildcards);
        w.u16(self.in_port);
        w.bytes(&self.dl_src.0);
        w.bytes(&self.dl_dst.0);
        w.u16(self.dl_vlan);
        w.u8(self.dl_vlan_pcp);
        w.pad(1);
        w.u16(self.dl_type);
        w.u8(self.nw_tos);
        w.u8(self.nw_proto);
        w.pad(2);
        w.u32(self.nw_src);
        w.u32(self.nw_dst);
        w.u16(self.tp_src);
        w.u16(self.tp_dst);
    }
}
