//! OpenFlow 1.0 (wire version 0x01): every message type of the specification.

pub mod action;
pub mod ofmatch;
pub mod stats;

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;
use bytes::Bytes;
use serde::Serialize;

#[cfg(feature = "arbitrary")]
use super::arb;
use super::{hex, FixedStr, Mac, Reader, Result, Writer};
pub use action::Action;
pub use ofmatch::{wildcards, Match};
pub use stats::{StatsReply, StatsRequest};

/// Message type codes.
pub mod types {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const VENDOR: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const PORT_MOD: u8 = 15;
    pub const STATS_REQUEST: u8 = 16;
    pub const STATS_REPLY: u8 = 17;
    pub const BARRIER_REQUEST: u8 = 18;
    pub const BARRIER_REPLY: u8 = 19;
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 20;
    pub const QUEUE_GET_CONFIG_REPLY: u8 = 21;
}

/// Reserved port numbers.
pub mod port {
    pub const MAX: u16 = 0xff00;
    pub const IN_PORT: u16 = 0xfff8;
    pub const TABLE: u16 = 0xfff9;
    pub const NORMAL: u16 = 0xfffa;
    pub const FLOOD: u16 = 0xfffb;
    pub const ALL: u16 = 0xfffc;
    pub const CONTROLLER: u16 = 0xfffd;
    pub const LOCAL: u16 = 0xfffe;
    pub const NONE: u16 = 0xffff;
}

/// FLOW_MOD commands.
pub mod flow_mod_command {
    pub const ADD: u16 = 0;
    pub const MODIFY: u16 = 1;
    pub const MODIFY_STRICT: u16 = 2;
    pub const DELETE: u16 = 3;
    pub const DELETE_STRICT: u16 = 4;
}

/// The "no buffer" buffer id.
pub const NO_BUFFER: u32 = 0xffff_ffff;

/// ERROR: type, code and (usually) the start of the offending message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Error {
    pub err_type: u16,
    pub code: u16,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// VENDOR message: vendor id and an opaque body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Vendor {
    pub vendor: u32,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// `ofp_phy_port` (48 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PhyPort {
    pub port_no: u16,
    pub hw_addr: Mac,
    pub name: FixedStr<16>,
    pub config: u32,
    pub state: u32,
    pub curr: u32,
    pub advertised: u32,
    pub supported: u32,
    pub peer: u32,
}

impl PhyPort {
    pub const LEN: usize = 48;

    fn parse(r: &mut Reader) -> Result<Self> {
        Ok(PhyPort {
            port_no: r.u16("port.port_no")?,
            hw_addr: Mac(r.array("port.hw_addr")?),
            name: FixedStr::parse(r, "port.name")?,
            config: r.u32("port.config")?,
            state: r.u32("port.state")?,
            curr: r.u32("port.curr")?,
            advertised: r.u32("port.advertised")?,
            supported: r.u32("port.supported")?,
            peer: r.u32("port.peer")?,
        })
    }

    fn emit(&self, w: &mut Writer) {
        w.u16(self.port_no);
        w.bytes(&self.hw_addr.0);
        self.name.emit(w);
        for v in [self.config, self.state, self.curr, self.advertised, self.supported, self.peer] {
            w.u32(v);
        }
    }
}

/// FEATURES_REPLY: the switch's identity, capabilities and ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FeaturesReply {
    pub datapath_id: u64,
    pub n_buffers: u32,
    pub n_tables: u8,
    pub capabilities: u32,
    pub actions: u32,
    pub ports: Vec<PhyPort>,
}

/// GET_CONFIG_REPLY and SET_CONFIG body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct SwitchConfig {
    pub flags: u16,
    pub miss_send_len: u16,
}

/// PACKET_IN reasons.
pub mod packet_in_reason {
    pub const NO_MATCH: u8 = 0;
    pub const ACTION: u8 = 1;
}

/// PACKET_IN: a packet sent to the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PacketIn {
    pub buffer_id: u32,
    pub total_len: u16,
    pub in_port: u16,
    pub reason: u8,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// FLOW_REMOVED: a flow expired or was deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowRemoved {
    pub r#match: Match,
    pub cookie: u64,
    pub priority: u16,
    pub reason: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub idle_timeout: u16,
    pub packet_count: u64,
    pub byte_count: u64,
}

/// PORT_STATUS: a port was added, deleted or modified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PortStatus {
    pub reason: u8,
    pub desc: PhyPort,
}

/// PACKET_OUT: send a packet (buffered or carried in `data`) through `actions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PacketOut {
    pub buffer_id: u32,
    pub in_port: u16,
    pub actions: Vec<Action>,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// FLOW_MOD: add, modify or delete flows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowMod {
    pub r#match: Match,
    pub cookie: u64,
    pub command: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub buffer_id: u32,
    pub out_port: u16,
    pub flags: u16,
    pub actions: Vec<Action>,
}

/// PORT_MOD: change a port's configuration bits under `mask`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PortMod {
    pub port_no: u16,
    pub hw_addr: Mac,
    pub config: u32,
    pub mask: u32,
    pub advertise: u32,
}

/// A queue property (`ofp_queue_prop_header` and body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum QueueProperty {
    /// OFPQT_MIN_RATE, in tenths of a percent.
    MinRate(u16),
    /// OFPQT_NONE or any other property, kept raw (body after the 8-byte header).
    Other {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::queue_prop_type10))]
        property: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_8))]
        data: Bytes,
    },
}

/// `ofp_packet_queue`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PacketQueue {
    pub queue_id: u32,
    pub properties: Vec<QueueProperty>,
}

impl QueueProperty {
    fn parse(r: &mut Reader) -> Result<Self> {
        let mut p = r.tlv("queue property", 2, 8, 8)?;
        let property = p.u16("property")?;
        let len = p.u16("property.len")? as usize;
        p.pad(4)?;
        if property == 1 && len == 16 {
            let rate = p.u16("min_rate")?;
            p.pad(6)?;
            return Ok(QueueProperty::MinRate(rate));
        }
        Ok(QueueProperty::Other { property, data: p.rest() })
    }

    fn emit(&self, w: &mut Writer) {
        match self {
            QueueProperty::MinRate(rate) => {
                w.u16(1);
                w.u16(16);
                w.pad(4);
                w.u16(*rate);
                w.pad(6);
            }
            QueueProperty::Other { property, data } => {
                w.u16(*property);
                w.u16((8 + data.len()) as u16);
                w.pad(4);
                w.bytes(data);
            }
        }
    }
}

impl PacketQueue {
    fn parse(r: &mut Reader) -> Result<Self> {
        let mut q = r.tlv("packet queue", 4, 8, 1)?;
        let queue_id = q.u32("queue_id")?;
        q.pad(4)?;
        Ok(PacketQueue { queue_id, properties: q.many(QueueProperty::parse)? })
    }

    fn emit(&self, w: &mut Writer) {
        let start = w.len();
        w.u32(self.queue_id);
        let at = w.len_placeholder();
        w.pad(2);
        self.properties.iter().for_each(|p| p.emit(w));
        w.patch_len_from(at, start);
    }
}

/// An OpenFlow 1.0 message other than HELLO (which is shared by all versions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum Msg {
    Error(Error),
    EchoRequest(
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        Bytes,
    ),
    EchoReply(
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        Bytes,
    ),
    Vendor(Vendor),
    FeaturesRequest,
    FeaturesReply(FeaturesReply),
    GetConfigRequest,
    GetConfigReply(SwitchConfig),
    SetConfig(SwitchConfig),
    PacketIn(PacketIn),
    FlowRemoved(FlowRemoved),
    PortStatus(PortStatus),
    PacketOut(PacketOut),
    FlowMod(FlowMod),
    PortMod(PortMod),
    StatsRequest(StatsRequest),
    StatsReply(StatsReply),
    BarrierRequest,
    BarrierReply,
    QueueGetConfigRequest {
        port: u16,
    },
    QueueGetConfigReply {
        port: u16,
        queues: Vec<PacketQueue>,
    },
}

impl Msg {
    /// The wire type code.
    pub fn msg_type(&self) -> u8 {
        use types::*;
        match self {
            Msg::Error(_) => ERROR,
            Msg::EchoRequest(_) => ECHO_REQUEST,
            Msg::EchoReply(_) => ECHO_REPLY,
            Msg::Vendor(_) => VENDOR,
            Msg::FeaturesRequest => FEATURES_REQUEST,
            Msg::FeaturesReply(_) => FEATURES_REPLY,
            Msg::GetConfigRequest => GET_CONFIG_REQUEST,
            Msg::GetConfigReply(_) => GET_CONFIG_REPLY,
            Msg::SetConfig(_) => SET_CONFIG,
            Msg::PacketIn(_) => PACKET_IN,
            Msg::FlowRemoved(_) => FLOW_REMOVED,
            Msg::PortStatus(_) => PORT_STATUS,
            Msg::PacketOut(_) => PACKET_OUT,
            Msg::FlowMod(_) => FLOW_MOD,
            Msg::PortMod(_) => PORT_MOD,
            Msg::StatsRequest(_) => STATS_REQUEST,
            Msg::StatsReply(_) => STATS_REPLY,
            Msg::BarrierRequest => BARRIER_REQUEST,
            Msg::BarrierReply => BARRIER_REPLY,
            Msg::QueueGetConfigRequest { .. } => QUEUE_GET_CONFIG_REQUEST,
            Msg::QueueGetConfigReply { .. } => QUEUE_GET_CONFIG_REPLY,
        }
    }

    /// A short lowercase name of the type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Msg::Error(_) => "error",
            Msg::EchoRequest(_) => "echo_request",
            Msg::EchoReply(_) => "echo_reply",
            Msg::Vendor(_) => "vendor",
            Msg::FeaturesRequest => "features_request",
            Msg::FeaturesReply(_) => "features_reply",
            Msg::GetConfigRequest => "get_config_request",
            Msg::GetConfigReply(_) => "get_config_reply",
            Msg::SetConfig(_) => "set_config",
            Msg::PacketIn(_) => "packet_in",
            Msg::FlowRemoved(_) => "flow_removed",
            Msg::PortStatus(_) => "port_status",
            Msg::PacketOut(_) => "packet_out",
            Msg::FlowMod(_) => "flow_mod",
            Msg::PortMod(_) => "port_mod",
            Msg::StatsRequest(_) => "stats_request",
            Msg::StatsReply(_) => "stats_reply",
            Msg::BarrierRequest => "barrier_request",
            Msg::BarrierReply => "barrier_reply",
            Msg::QueueGetConfigRequest { .. } => "queue_get_config_request",
            Msg::QueueGetConfigReply { .. } => "queue_get_config_reply",
        }
    }

    /// Parses the body of a message of type `msg_type`; `None` for types 1.0 does
    /// not define (and for HELLO, which the caller handles).
    pub(crate) fn parse(msg_type: u8, r: &mut Reader) -> Result<Option<Msg>> {
        use types::*;
        let msg = match msg_type {
            ERROR => Msg::Error(Error { err_type: r.u16("error.type")?, code: r.u16("error.code")?, data: r.rest() }),
            ECHO_REQUEST => Msg::EchoRequest(r.rest()),
            ECHO_REPLY => Msg::EchoReply(r.rest()),
            VENDOR => Msg::Vendor(Vendor { vendor: r.u32("vendor")?, data: r.rest() }),
            FEATURES_REQUEST => Msg::FeaturesRequest,
            FEATURES_REPLY => {
                let datapath_id = r.u64("datapath_id")?;
                let n_buffers = r.u32("n_buffers")?;
                let n_tables = r.u8("n_tables")?;
                r.pad(3)?;
                let capabilities = r.u32("capabilities")?;
                let actions = r.u32("actions")?;
                if !r.remaining().is_multiple_of(PhyPort::LEN) {
                    return Err(super::WireError::BadLength {
                        what: "features ports",
                        offset: r.offset(),
                        len: r.remaining(),
                    });
                }
                let ports = r.many(PhyPort::parse)?;
                Msg::FeaturesReply(FeaturesReply { datapath_id, n_buffers, n_tables, capabilities, actions, ports })
            }
            GET_CONFIG_REQUEST => Msg::GetConfigRequest,
            GET_CONFIG_REPLY | SET_CONFIG => {
                let c = SwitchConfig { flags: r.u16("config.flags")?, miss_send_len: r.u16("config.miss_send_len")? };
                if msg_type == SET_CONFIG {
                    Msg::SetConfig(c)
                } else {
                    Msg::GetConfigReply(c)
                }
            }
            PACKET_IN => {
                let buffer_id = r.u32("packet_in.buffer_id")?;
                let total_len = r.u16("packet_in.total_len")?;
                let in_port = r.u16("packet_in.in_port")?;
                let reason = r.u8("packet_in.reason")?;
                r.pad(1)?;
                Msg::PacketIn(PacketIn { buffer_id, total_len, in_port, reason, data: r.rest() })
            }
            FLOW_REMOVED => {
                let m = Match::parse(r)?;
                let cookie = r.u64("cookie")?;
                let priority = r.u16("priority")?;
                let reason = r.u8("reason")?;
                r.pad(1)?;
                let duration_sec = r.u32("duration_sec")?;
                let duration_nsec = r.u32("duration_nsec")?;
                let idle_timeout = r.u16("idle_timeout")?;
                r.pad(2)?;
                Msg::FlowRemoved(FlowRemoved {
                    r#match: m,
                    cookie,
                    priority,
                    reason,
                    duration_sec,
                    duration_nsec,
                    idle_timeout,
                    packet_count: r.u64("packet_count")?,
                    byte_count: r.u64("byte_count")?,
                })
            }
            PORT_STATUS => {
                let reason = r.u8("port_status.reason")?;
                r.pad(7)?;
                Msg::PortStatus(PortStatus { reason, desc: PhyPort::parse(r)? })
            }
            PACKET_OUT => {
                let buffer_id = r.u32("packet_out.buffer_id")?;
                let in_port = r.u16("packet_out.in_port")?;
                let actions_len = r.u16("packet_out.actions_len")? as usize;
                let actions = Action::parse_list(&mut r.sub("packet_out.actions", actions_len)?)?;
                Msg::PacketOut(PacketOut { buffer_id, in_port, actions, data: r.rest() })
            }
            FLOW_MOD => {
                let m = Match::parse(r)?;
                Msg::FlowMod(FlowMod {
                    r#match: m,
                    cookie: r.u64("cookie")?,
                    command: r.u16("command")?,
                    idle_timeout: r.u16("idle_timeout")?,
                    hard_timeout: r.u16("hard_timeout")?,
                    priority: r.u16("priority")?,
                    buffer_id: r.u32("buffer_id")?,
                    out_port: r.u16("out_port")?,
                    flags: r.u16("flags")?,
                    actions: Action::parse_list(r)?,
                })
            }
            PORT_MOD => {
                let pm = PortMod {
                    port_no: r.u16("port_no")?,
                    hw_addr: Mac(r.array("hw_addr")?),
                    config: r.u32("config")?,
                    mask: r.u32("mask")?,
                    advertise: r.u32("advertise")?,
                };
                r.pad(4)?;
                Msg::PortMod(pm)
            }
            STATS_REQUEST => Msg::StatsRequest(StatsRequest::parse(r)?),
            STATS_REPLY => Msg::StatsReply(StatsReply::parse(r)?),
            BARRIER_REQUEST => Msg::BarrierRequest,
            BARRIER_REPLY => Msg::BarrierReply,
            QUEUE_GET_CONFIG_REQUEST => {
                let port = r.u16("port")?;
                r.pad(2)?;
                Msg::QueueGetConfigRequest { port }
            }
            QUEUE_GET_CONFIG_REPLY => {
                let port = r.u16("port")?;
                r.pad(6)?;
                Msg::QueueGetConfigReply { port, queues: r.many(PacketQueue::parse)? }
            }
            _ => return Ok(None),
        };
        Ok(Some(msg))
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        match self {
            Msg::Error(e) => {
                w.u16(e.err_type);
                w.u16(e.code);
                w.bytes(&e.data);
            }
            Msg::EchoRequest(d) | Msg::EchoReply(d) => w.bytes(d),
            Msg::Vendor(v) => {
                w.u32(v.vendor);
                w.bytes(&v.data);
            }
            Msg::FeaturesRequest | Msg::GetConfigRequest | Msg::BarrierRequest | Msg::BarrierReply => {}
            Msg::FeaturesReply(f) => {
                w.u64(f.datapath_id);
                w.u32(f.n_buffers);
                w.u8(f.n_tables);
                w.pad(3);
                w.u32(f.capabilities);
                w.u32(f.actions);
                f.ports.iter().for_each(|p| p.emit(w));
            }
            Msg::GetConfigReply(c) | Msg::SetConfig(c) => {
                w.u16(c.flags);
                w.u16(c.miss_send_len);
            }
            Msg::PacketIn(p) => {
                w.u32(p.buffer_id);
                w.u16(p.total_len);
                w.u16(p.in_port);
                w.u8(p.reason);
                w.pad(1);
                w.bytes(&p.data);
            }
            Msg::FlowRemoved(f) => {
                f.r#match.emit(w);
                w.u64(f.cookie);
                w.u16(f.priority);
                w.u8(f.reason);
                w.pad(1);
                w.u32(f.duration_sec);
                w.u32(f.duration_nsec);
                w.u16(f.idle_timeout);
                w.pad(2);
                w.u64(f.packet_count);
                w.u64(f.byte_count);
            }
            Msg::PortStatus(p) => {
                w.u8(p.reason);
                w.pad(7);
                p.desc.emit(w);
            }
            Msg::PacketOut(p) => {
                w.u32(p.buffer_id);
                w.u16(p.in_port);
                let at = w.len_placeholder();
                let start = w.len();
                Action::emit_list(&p.actions, w);
                w.patch_len_from(at, start);
                w.bytes(&p.data);
            }
            Msg::FlowMod(f) => {
                f.r#match.emit(w);
                w.u64(f.cookie);
                w.u16(f.command);
                w.u16(f.idle_timeout);
                w.u16(f.hard_timeout);
                w.u16(f.priority);
                w.u32(f.buffer_id);
                w.u16(f.out_port);
                w.u16(f.flags);
                Action::emit_list(&f.actions, w);
            }
            Msg::PortMod(p) => {
                w.u16(p.port_no);
                w.bytes(&p.hw_addr.0);
                w.u32(p.config);
                w.u32(p.mask);
                w.u32(p.advertise);
                w.pad(4);
            }
            Msg::StatsRequest(s) => s.emit(w),
            Msg::StatsReply(s) => s.emit(w),
            Msg::QueueGetConfigRequest { port } => {
                w.u16(*port);
                w.pad(2);
            }
            Msg::QueueGetConfigReply { port, queues } => {
                w.u16(*port);
                w.pad(6);
                queues.iter().for_each(|q| q.emit(w));
            }
        }
    }
}
