//! OpenFlow 1.3 actions and instructions.

#[cfg(feature = "arbitrary")]
use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use serde::Serialize;

#[cfg(feature = "arbitrary")]
use super::oxm::BasicOxm;
use super::oxm::Oxm;
#[cfg(feature = "arbitrary")]
use crate::wire::arb;
use crate::wire::{hex, Reader, Result, WireError, Writer};

/// Action type codes.
pub mod types {
    pub const OUTPUT: u16 = 0;
    pub const COPY_TTL_OUT: u16 = 11;
    pub const COPY_TTL_IN: u16 = 12;
    pub const SET_MPLS_TTL: u16 = 15;
    pub const DEC_MPLS_TTL: u16 = 16;
    pub const PUSH_VLAN: u16 = 17;
    pub const POP_VLAN: u16 = 18;
    pub const PUSH_MPLS: u16 = 19;
    pub const POP_MPLS: u16 = 20;
    pub const SET_QUEUE: u16 = 21;
    pub const GROUP: u16 = 22;
    pub const SET_NW_TTL: u16 = 23;
    pub const DEC_NW_TTL: u16 = 24;
    pub const SET_FIELD: u16 = 25;
    pub const PUSH_PBB: u16 = 26;
    pub const POP_PBB: u16 = 27;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// An OpenFlow 1.3 action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum Action {
    Output {
        port: u32,
        max_len: u16,
    },
    CopyTtlOut,
    CopyTtlIn,
    SetMplsTtl(u8),
    DecMplsTtl,
    PushVlan(u16),
    PopVlan,
    PushMpls(u16),
    PopMpls(u16),
    SetQueue(u32),
    Group(u32),
    SetNwTtl(u8),
    DecNwTtl,
    /// Set a header field; the OXM must not be masked.
    SetField(#[cfg_attr(feature = "arbitrary", arbitrary(with = arb_set_field))] Oxm),
    PushPbb(u16),
    PopPbb,
    Experimenter {
        experimenter: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_8))]
        data: Bytes,
    },
    /// An action type 1.3 does not define, kept raw (body after the 4-byte header).
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_action13))]
        action_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_4))]
        data: Bytes,
    },
}

#[cfg(feature = "arbitrary")]
fn arb_set_field(u: &mut Unstructured) -> arbitrary::Result<Oxm> {
    let mut b = BasicOxm::arbitrary(u)?;
    b.mask = None;
    Ok(Oxm::Basic(b))
}

impl Action {
    pub(crate) fn parse(r: &mut Reader) -> Result<Action> {
        let mut a = r.tlv("action", 2, 8, 8)?;
        let ty = a.u16("action.type")?;
        let len = a.u16("action.len")? as usize;
        let offset = a.offset();
        let fixed = |want: usize| a.expect_len("action", len, want);
        use types::*;
        let act = match ty {
            OUTPUT => {
                fixed(16)?;
                let port = a.u32("output.port")?;
                let max_len = a.u16("output.max_len")?;
                a.pad(6)?;
                Action::Output { port, max_len }
            }
            COPY_TTL_OUT | COPY_TTL_IN | DEC_MPLS_TTL | POP_VLAN | DEC_NW_TTL | POP_PBB => {
                fixed(8)?;
                a.pad(4)?;
                match ty {
                    COPY_TTL_OUT => Action::CopyTtlOut,
                    COPY_TTL_IN => Action::CopyTtlIn,
                    DEC_MPLS_TTL => Action::DecMplsTtl,
                    POP_VLAN => Action::PopVlan,
                    DEC_NW_TTL => Action::DecNwTtl,
                    _ => Action::PopPbb,
                }
            }
            SET_MPLS_TTL | SET_NW_TTL => {
                fixed(8)?;
                let ttl = a.u8("ttl")?;
                a.pad(3)?;
                if ty == SET_MPLS_TTL {
                    Action::SetMplsTtl(ttl)
                } else {
                    Action::SetNwTtl(ttl)
                }
            }
            PUSH_VLAN | PUSH_MPLS | POP_MPLS | PUSH_PBB => {
                fixed(8)?;
                let et = a.u16("ethertype")?;
                a.pad(2)?;
                match ty {
                    PUSH_VLAN => Action::PushVlan(et),
                    PUSH_MPLS => Action::PushMpls(et),
                    POP_MPLS => Action::PopMpls(et),
                    _ => Action::PushPbb(et),
                }
            }
            SET_QUEUE => {
                fixed(8)?;
                Action::SetQueue(a.u32("queue_id")?)
            }
            GROUP => {
                fixed(8)?;
                Action::Group(a.u32("group_id")?)
            }
            SET_FIELD => {
                let oxm = Oxm::parse(&mut a)?;
                // The rest is padding up to the 8-byte boundary (fewer than 8 bytes).
                if a.remaining() >= 8 {
                    return Err(WireError::BadLength { what: "set_field", offset, len });
                }
                a.pad(a.remaining())?;
                Action::SetField(oxm)
            }
            EXPERIMENTER => Action::Experimenter { experimenter: a.u32("experimenter")?, data: a.rest() },
            _ => Action::Unknown { action_type: ty, data: a.rest() },
        };
        a.finish("action")?;
        Ok(act)
    }

    pub(crate) fn parse_list(r: &mut Reader) -> Result<Vec<Action>> {
        r.many(Action::parse)
    }

    /// The wire type code.
    pub fn action_type(&self) -> u16 {
        use types::*;
        match self {
            Action::Output { .. } => OUTPUT,
            Action::CopyTtlOut => COPY_TTL_OUT,
            Action::CopyTtlIn => COPY_TTL_IN,
            Action::SetMplsTtl(_) => SET_MPLS_TTL,
            Action::DecMplsTtl => DEC_MPLS_TTL,
            Action::PushVlan(_) => PUSH_VLAN,
            Action::PopVlan => POP_VLAN,
            Action::PushMpls(_) => PUSH_MPLS,
            Action::PopMpls(_) => POP_MPLS,
            Action::SetQueue(_) => SET_QUEUE,
            Action::Group(_) => GROUP,
            Action::SetNwTtl(_) => SET_NW_TTL,
            Action::DecNwTtl => DEC_NW_TTL,
            Action::SetField(_) => SET_FIELD,
            Action::PushPbb(_) => PUSH_PBB,
            Action::PopPbb => POP_PBB,
            Action::Experimenter { .. } => EXPERIMENTER,
            Action::Unknown { action_type, .. } => *action_type,
        }
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        let start = w.len();
        w.u16(self.action_type());
        let at = w.len_placeholder();
        match self {
            Action::Output { port, max_len } => {
                w.u32(*port);
                w.u16(*max_len);
                w.pad(6);
            }
            Action::CopyTtlOut
            | Action::CopyTtlIn
            | Action::DecMplsTtl
            | Action::PopVlan
            | Action::DecNwTtl
            | Action::PopPbb => w.pad(4),
            Action::SetMplsTtl(t) | Action::SetNwTtl(t) => {
                w.u8(*t);
                w.pad(3);
            }
            Action::PushVlan(e) | Action::PushMpls(e) | Action::PopMpls(e) | Action::PushPbb(e) => {
                w.u16(*e);
                w.pad(2);
            }
            Action::SetQueue(v) | Action::Group(v) => w.u32(*v),
            Action::SetField(oxm) => {
                oxm.emit(w);
                w.pad_to(start, 8);
            }
            Action::Experimenter { experimenter, data } => {
                w.u32(*experimenter);
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

/// Instruction type codes.
pub mod instruction_types {
    pub const GOTO_TABLE: u16 = 1;
    pub const WRITE_METADATA: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 3;
    pub const APPLY_ACTIONS: u16 = 4;
    pub const CLEAR_ACTIONS: u16 = 5;
    pub const METER: u16 = 6;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// An OpenFlow 1.3 instruction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum Instruction {
    GotoTable(u8),
    WriteMetadata {
        metadata: u64,
        mask: u64,
    },
    WriteActions(Vec<Action>),
    ApplyActions(Vec<Action>),
    ClearActions,
    Meter(u32),
    Experimenter {
        experimenter: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_8))]
        data: Bytes,
    },
    /// An instruction type 1.3 does not define, kept raw (body after the 4-byte header).
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_instruction13))]
        instruction_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_4))]
        data: Bytes,
    },
}

impl Instruction {
    pub(crate) fn parse(r: &mut Reader) -> Result<Instruction> {
        let mut i = r.tlv("instruction", 2, 8, 8)?;
        let ty = i.u16("instruction.type")?;
        let len = i.u16("instruction.len")? as usize;
        let fixed = |want: usize| i.expect_len("instruction", len, want);
        use instruction_types::*;
        let ins = match ty {
            GOTO_TABLE => {
                fixed(8)?;
                let t = i.u8("goto_table.table_id")?;
                i.pad(3)?;
                Instruction::GotoTable(t)
            }
            WRITE_METADATA => {
                fixed(24)?;
                i.pad(4)?;
                Instruction::WriteMetadata { metadata: i.u64("metadata")?, mask: i.u64("metadata_mask")? }
            }
            WRITE_ACTIONS | APPLY_ACTIONS => {
                i.pad(4)?;
                let actions = Action::parse_list(&mut i)?;
                if ty == WRITE_ACTIONS {
                    Instruction::WriteActions(actions)
                } else {
                    Instruction::ApplyActions(actions)
                }
            }
            CLEAR_ACTIONS => {
                fixed(8)?;
                i.pad(4)?;
                Instruction::ClearActions
            }
            METER => {
                fixed(8)?;
                Instruction::Meter(i.u32("meter_id")?)
            }
            EXPERIMENTER => Instruction::Experimenter { experimenter: i.u32("experimenter")?, data: i.rest() },
            _ => Instruction::Unknown { instruction_type: ty, data: i.rest() },
        };
        i.finish("instruction")?;
        Ok(ins)
    }

    pub(crate) fn parse_list(r: &mut Reader) -> Result<Vec<Instruction>> {
        r.many(Instruction::parse)
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        use instruction_types::*;
        let start = w.len();
        let ty = match self {
            Instruction::GotoTable(_) => GOTO_TABLE,
            Instruction::WriteMetadata { .. } => WRITE_METADATA,
            Instruction::WriteActions(_) => WRITE_ACTIONS,
            Instruction::ApplyActions(_) => APPLY_ACTIONS,
            Instruction::ClearActions => CLEAR_ACTIONS,
            Instruction::Meter(_) => METER,
            Instruction::Experimenter { .. } => EXPERIMENTER,
            Instruction::Unknown { instruction_type, .. } => *instruction_type,
        };
        w.u16(ty);
        let at = w.len_placeholder();
        match self {
            Instruction::GotoTable(t) => {
                w.u8(*t);
                w.pad(3);
            }
            Instruction::WriteMetadata { metadata, mask } => {
                w.pad(4);
                w.u64(*metadata);
                w.u64(*mask);
            }
            Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
                w.pad(4);
                Action::emit_list(a, w);
            }
            Instruction::ClearActions => w.pad(4),
            Instruction::Meter(m) => w.u32(*m),
            Instruction::Experimenter { experimenter, data } => {
                w.u32(*experimenter);
                w.bytes(data);
            }
            Instruction::Unknown { data, .. } => w.bytes(data),
        }
        w.patch_len_from(at, start);
    }

    pub(crate) fn emit_list(list: &[Instruction], w: &mut Writer) {
        list.iter().for_each(|i| i.emit(w))
    }
}
