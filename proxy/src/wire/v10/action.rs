//! OpenFlow 1.0 actions (`ofp_action_*`).

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;
use bytes::Bytes;
use serde::Serialize;

#[cfg(feature = "arbitrary")]
use crate::wire::arb;
use crate::wire::{hex, Mac, Reader, Result, Writer};

/// An OpenFlow 1.0 action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum Action {
    /// Output to a port; `max_len` bytes go to the controller when the port is CONTROLLER.
    Output {
        port: u16,
        max_len: u16,
    },
    SetVlanVid(u16),
    SetVlanPcp(u8),
    StripVlan,
    SetDlSrc(Mac),
    SetDlDst(Mac),
    SetNwSrc(u32),
    SetNwDst(u32),
    SetNwTos(u8),
    SetTpSrc(u16),
    SetTpDst(u16),
    Enqueue {
        port: u16,
        queue_id: u32,
    },
    /// OFPAT_VENDOR: vendor id and an opaque body.
    Vendor {
        vendor: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_8))]
        data: Bytes,
    },
    /// An action type 1.0 does not define, kept raw (body after the 4-byte header).
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_action10))]
        action_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_4))]
        data: Bytes,
    },
}

/// Action type codes.
pub mod types {
    pub const OUTPUT: u16 = 0;
    pub const SET_VLAN_VID: u16 = 1;
    pub const SET_VLAN_PCP: u16 = 2;
    pub const STRIP_VLAN: u16 = 3;
    pub const SET_DL_SRC: u16 = 4;
    pub const SET_DL_DST: u16 = 5;
    pub const SET_NW_SRC: u16 = 6;
    pub const SET_NW_DST: u16 = 7;
    pub const SET_NW_TOS: u16 = 8;
    pub const SET_TP_SRC: u16 = 9;
    pub const SET_TP_DST: u16 = 10;
    pub const ENQUEUE: u16 = 11;
    pub const VENDOR: u16 = 0xffff;
}

impl Action {
    /// Parses one action (type and length header included).
    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        let mut a = r.tlv("action", 2, 8, 8)?;
        let ty = a.u16("action.type")?;
        let len = a.u16("action.len")? as usize;
        let fixed = |want: usize| a.expect_len("action", len, want);
        use types::*;
        let act = match ty {
            OUTPUT => {
                fixed(8)?;
                Action::Output { port: a.u16("output.port")?, max_len: a.u16("output.max_len")? }
            }
            SET_VLAN_VID => {
                fixed(8)?;
                let v = a.u16("vlan_vid")?;
                a.pad(2)?;
                Action::SetVlanVid(v)
            }
            SET_VLAN_PCP => {
                fixed(8)?;
                let v = a.u8("vlan_pcp")?;
                a.pad(3)?;
                Action::SetVlanPcp(v)
            }
            STRIP_VLAN => {
                fixed(8)?;
                a.pad(4)?;
                Action::StripVlan
            }
            SET_DL_SRC | SET_DL_DST => {
                fixed(16)?;
                let mac = Mac(a.array("dl_addr")?);
                a.pad(6)?;
                if ty == SET_DL_SRC {
                    Action::SetDlSrc(mac)
                } else {
                    Action::SetDlDst(mac)
                }
            }
            SET_NW_SRC => {
                fixed(8)?;
                Action::SetNwSrc(a.u32("nw_addr")?)
            }
            SET_NW_DST => {
                fixed(8)?;
                Action::SetNwDst(a.u32("nw_addr")?)
            }
            SET_NW_TOS => {
                fixed(8)?;
                let v = a.u8("nw_tos")?;
                a.pad(3)?;
                Action::SetNwTos(v)
            }
            SET_TP_SRC | SET_TP_DST => {
                fixed(8)?;
                let v = a.u16("tp_port")?;
                a.pad(2)?;
                if ty == SET_TP_SRC {
                    Action::SetTpSrc(v)
                } else {
                    Action::SetTpDst(v)
                }
            }
            ENQUEUE => {
                fixed(16)?;
                let port = a.u16("enqueue.port")?;
                a.pad(6)?;
                Action::Enqueue { port, queue_id: a.u32("enqueue.queue_id")? }
            }
            VENDOR => Action::Vendor { vendor: a.u32("vendor")?, data: a.rest() },
            _ => Action::Unknown { action_type: ty, data: a.rest() },
        };
        a.finish("action")?;
        Ok(act)
    }

    /// Parses a list of actions filling the whole reader.
    pub(crate) fn parse_list(r: &mut Reader) -> Result<Vec<Action>> {
        r.many(Action::parse)
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        let start = w.len();
        use types::*;
        let ty = match self {
            Action::Output { .. } => OUTPUT,
            Action::SetVlanVid(_) => SET_VLAN_VID,
            Action::SetVlanPcp(_) => SET_VLAN_PCP,
            Action::StripVlan => STRIP_VLAN,
            Action::SetDlSrc(_) => SET_DL_SRC,
            Action::SetDlDst(_) => SET_DL_DST,
            Action::SetNwSrc(_) => SET_NW_SRC,
            Action::SetNwDst(_) => SET_NW_DST,
            Action::SetNwTos(_) => SET_NW_TOS,
            Action::SetTpSrc(_) => SET_TP_SRC,
            Action::SetTpDst(_) => SET_TP_DST,
            Action::Enqueue { .. } => ENQUEUE,
            Action::Vendor { .. } => VENDOR,
            Action::Unknown { action_type, .. } => *action_type,
        };
        w.u16(ty);
        let at = w.len_placeholder();
        match self {
            Action::Output { port, max_len } => {
                w.u16(*port);
                w.u16(*max_len);
            }
            Action::SetVlanVid(v) | Action::SetTpSrc(v) | Action::SetTpDst(v) => {
                w.u16(*v);
                w.pad(2);
            }
            Action::SetVlanPcp(v) | Action::SetNwTos(v) => {
                w.u8(*v);
                w.pad(3);
            }
            Action::StripVlan => w.pad(4),
            Action::SetDlSrc(m) | Action::SetDlDst(m) => {
                w.bytes(&m.0);
                w.pad(6);
            }
            Action::SetNwSrc(v) | Action::SetNwDst(v) => w.u32(*v),
            Action::Enqueue { port, queue_id } => {
                w.u16(*port);
                w.pad(6);
                w.u32(*queue_id);
            }
            Action::Vendor { vendor, data } => {
                w.u32(*vendor);
                w.bytes(data);
            }
            Action::Unknown { data, .. } => w.bytes(data),
        }
        w.patch_len_from(at, start);
    }

    pub(crate) fn emit_list(actions: &[Action], w: &mut Writer) {
        actions.iter().for_each(|a| a.emit(w))
    }
}
