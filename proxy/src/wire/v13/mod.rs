//! OpenFlow 1.3 (wire version 0x04).

pub mod action;
pub mod multipart;
pub mod oxm;

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;
use bytes::Bytes;
use serde::Serialize;

#[cfg(feature = "arbitrary")]
use super::arb;
use super::{hex, FixedStr, Mac, Reader, Result, WireError, Writer};
pub use action::{Action, Instruction};
pub use multipart::{MultipartReply, MultipartRequest};
pub use oxm::{BasicOxm, Field, Match, Oxm};

/// Message type codes.
pub mod types {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
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
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 22;
    pub const QUEUE_GET_CONFIG_REPLY: u8 = 23;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
}

/// Reserved port numbers.
pub mod port {
    pub const MAX: u32 = 0xffff_ff00;
    pub const IN_PORT: u32 = 0xffff_fff8;
    pub const TABLE: u32 = 0xffff_fff9;
    pub const NORMAL: u32 = 0xffff_fffa;
    pub const FLOOD: u32 = 0xffff_fffb;
    pub const ALL: u32 = 0xffff_fffc;
    pub const CONTROLLER: u32 = 0xffff_fffd;
    pub const LOCAL: u32 = 0xffff_fffe;
    pub const ANY: u32 = 0xffff_ffff;
}

/// The "no buffer" buffer id.
pub const NO_BUFFER: u32 = 0xffff_ffff;
/// An output action's `max_len` asking for the whole frame, unbuffered (OFPCML_NO_BUFFER).
pub const CML_NO_BUFFER: u16 = 0xffff;
/// The wildcard group id for filters.
pub const GROUP_ANY: u32 = 0xffff_ffff;
/// The table id meaning "all tables" in requests.
pub const TABLE_ALL: u8 = 0xff;

/// ERROR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum Error {
    /// A standard error: type, code and (usually) the start of the offending message.
    Standard {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::error_type13))]
        err_type: u16,
        code: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
    /// OFPET_EXPERIMENTER (type 0xffff).
    Experimenter {
        exp_type: u16,
        experimenter: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
}

/// EXPERIMENTER message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Experimenter {
    pub experimenter: u32,
    pub exp_type: u32,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// FEATURES_REPLY (1.3 carries no ports: see the PORT_DESC multipart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FeaturesReply {
    pub datapath_id: u64,
    pub n_buffers: u32,
    pub n_tables: u8,
    pub auxiliary_id: u8,
    pub capabilities: u32,
    pub reserved: u32,
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
    pub const INVALID_TTL: u8 = 2;
}

/// PACKET_IN.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PacketIn {
    pub buffer_id: u32,
    pub total_len: u16,
    pub reason: u8,
    pub table_id: u8,
    pub cookie: u64,
    pub r#match: Match,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// FLOW_REMOVED.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowRemoved {
    pub cookie: u64,
    pub priority: u16,
    pub reason: u8,
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub packet_count: u64,
    pub byte_count: u64,
    pub r#match: Match,
}

/// `ofp_port` (64 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Port {
    pub port_no: u32,
    pub hw_addr: Mac,
    pub name: FixedStr<16>,
    pub config: u32,
    pub state: u32,
    pub curr: u32,
    pub advertised: u32,
    pub supported: u32,
    pub peer: u32,
    pub curr_speed: u32,
    pub max_speed: u32,
}

/// Port config bits.
pub mod port_config {
    pub const PORT_DOWN: u32 = 1 << 0;
    pub const NO_RECV: u32 = 1 << 2;
    pub const NO_FWD: u32 = 1 << 5;
    pub const NO_PACKET_IN: u32 = 1 << 6;
}

/// Port state bits.
pub mod port_state {
    pub const LINK_DOWN: u32 = 1 << 0;
    pub const BLOCKED: u32 = 1 << 1;
    pub const LIVE: u32 = 1 << 2;
}

impl Port {
    pub const LEN: usize = 64;

    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        let port_no = r.u32("port.port_no")?;
        r.pad(4)?;
        let hw_addr = Mac(r.array("port.hw_addr")?);
        r.pad(2)?;
        Ok(Port {
            port_no,
            hw_addr,
            name: FixedStr::parse(r, "port.name")?,
            config: r.u32("port.config")?,
            state: r.u32("port.state")?,
            curr: r.u32("port.curr")?,
            advertised: r.u32("port.advertised")?,
            supported: r.u32("port.supported")?,
            peer: r.u32("port.peer")?,
            curr_speed: r.u32("port.curr_speed")?,
            max_speed: r.u32("port.max_speed")?,
        })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        w.u32(self.port_no);
        w.pad(4);
        w.bytes(&self.hw_addr.0);
        w.pad(2);
        self.name.emit(w);
        for v in [
            self.config,
            self.state,
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            w.u32(v);
        }
    }
}

/// PORT_STATUS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PortStatus {
    pub reason: u8,
    pub desc: Port,
}

/// PORT_STATUS reasons.
pub mod port_reason {
    pub const ADD: u8 = 0;
    pub const DELETE: u8 = 1;
    pub const MODIFY: u8 = 2;
}

/// PACKET_OUT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PacketOut {
    pub buffer_id: u32,
    pub in_port: u32,
    pub actions: Vec<Action>,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// FLOW_MOD commands.
pub mod flow_mod_command {
    pub const ADD: u8 = 0;
    pub const MODIFY: u8 = 1;
    pub const MODIFY_STRICT: u8 = 2;
    pub const DELETE: u8 = 3;
    pub const DELETE_STRICT: u8 = 4;
}

/// FLOW_MOD flags.
pub mod flow_mod_flags {
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    pub const RESET_COUNTS: u16 = 1 << 2;
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

/// FLOW_MOD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowMod {
    pub cookie: u64,
    pub cookie_mask: u64,
    pub table_id: u8,
    pub command: u8,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub buffer_id: u32,
    pub out_port: u32,
    pub out_group: u32,
    pub flags: u16,
    pub r#match: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    /// An ADD of a permanent entry (no timeouts, no cookie, no buffer, no
    /// flags): what tests, benchmarks and simple controllers mostly send.
    pub fn add(table_id: u8, priority: u16, r#match: Match, instructions: Vec<Instruction>) -> FlowMod {
        FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id,
            command: flow_mod_command::ADD,
            idle_timeout: 0,
            hard_timeout: 0,
            priority,
            buffer_id: NO_BUFFER,
            out_port: port::ANY,
            out_group: GROUP_ANY,
            flags: 0,
            r#match,
            instructions,
        }
    }
}

/// A group bucket (`ofp_bucket`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Bucket {
    pub weight: u16,
    pub watch_port: u32,
    pub watch_group: u32,
    pub actions: Vec<Action>,
}

impl Bucket {
    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        let mut b = r.tlv("bucket", 0, 16, 8)?;
        b.pad(2)?;
        let weight = b.u16("bucket.weight")?;
        let watch_port = b.u32("bucket.watch_port")?;
        let watch_group = b.u32("bucket.watch_group")?;
        b.pad(4)?;
        Ok(Bucket { weight, watch_port, watch_group, actions: Action::parse_list(&mut b)? })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        let start = w.len();
        let at = w.len_placeholder();
        w.u16(self.weight);
        w.u32(self.watch_port);
        w.u32(self.watch_group);
        w.pad(4);
        Action::emit_list(&self.actions, w);
        w.patch_len_from(at, start);
    }
}

/// Group types.
pub mod group_type {
    pub const ALL: u8 = 0;
    pub const SELECT: u8 = 1;
    pub const INDIRECT: u8 = 2;
    pub const FF: u8 = 3;
}

/// GROUP_MOD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct GroupMod {
    pub command: u16,
    pub group_type: u8,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
}

/// PORT_MOD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PortMod {
    pub port_no: u32,
    pub hw_addr: Mac,
    pub config: u32,
    pub mask: u32,
    pub advertise: u32,
}

/// A meter band.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum MeterBand {
    Drop {
        rate: u32,
        burst_size: u32,
    },
    DscpRemark {
        rate: u32,
        burst_size: u32,
        prec_level: u8,
    },
    Experimenter {
        rate: u32,
        burst_size: u32,
        experimenter: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_8))]
        data: Bytes,
    },
    /// A band type 1.3 does not define, kept raw (body after the 12-byte band header).
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_band13))]
        band_type: u16,
        rate: u32,
        burst_size: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_4))]
        data: Bytes,
    },
}

impl MeterBand {
    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        let mut b = r.tlv("meter band", 2, 16, 8)?;
        let ty = b.u16("band.type")?;
        let len = b.u16("band.len")? as usize;
        let rate = b.u32("band.rate")?;
        let burst_size = b.u32("band.burst_size")?;
        let band = match ty {
            1 => {
                if len != 16 {
                    return Err(WireError::BadLength { what: "drop band", offset: b.offset(), len });
                }
                b.pad(4)?;
                MeterBand::Drop { rate, burst_size }
            }
            2 => {
                if len != 16 {
                    return Err(WireError::BadLength { what: "dscp_remark band", offset: b.offset(), len });
                }
                let prec_level = b.u8("prec_level")?;
                b.pad(3)?;
                MeterBand::DscpRemark { rate, burst_size, prec_level }
            }
            0xffff => {
                MeterBand::Experimenter { rate, burst_size, experimenter: b.u32("experimenter")?, data: b.rest() }
            }
            _ => MeterBand::Unknown { band_type: ty, rate, burst_size, data: b.rest() },
        };
        b.finish("meter band")?;
        Ok(band)
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        let start = w.len();
        let (ty, rate, burst) = match self {
            MeterBand::Drop { rate, burst_size } => (1, rate, burst_size),
            MeterBand::DscpRemark { rate, burst_size, .. } => (2, rate, burst_size),
            MeterBand::Experimenter { rate, burst_size, .. } => (0xffff, rate, burst_size),
            MeterBand::Unknown { band_type, rate, burst_size, .. } => (*band_type, rate, burst_size),
        };
        w.u16(ty);
        let at = w.len_placeholder();
        w.u32(*rate);
        w.u32(*burst);
        match self {
            MeterBand::Drop { .. } => w.pad(4),
            MeterBand::DscpRemark { prec_level, .. } => {
                w.u8(*prec_level);
                w.pad(3);
            }
            MeterBand::Experimenter { experimenter, data, .. } => {
                w.u32(*experimenter);
                w.bytes(data);
            }
            MeterBand::Unknown { data, .. } => w.bytes(data),
        }
        w.patch_len_from(at, start);
    }
}

/// METER_MOD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct MeterMod {
    pub command: u16,
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<MeterBand>,
}

/// A queue property of the 1.3 QUEUE_GET_CONFIG_REPLY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum QueueProperty {
    MinRate(u16),
    MaxRate(u16),
    Experimenter {
        experimenter: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_8))]
        data: Bytes,
    },
    Other {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::queue_prop_type13))]
        property: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::padded_after_8))]
        data: Bytes,
    },
}

/// `ofp_packet_queue` of 1.3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PacketQueue {
    pub queue_id: u32,
    pub port: u32,
    pub properties: Vec<QueueProperty>,
}

impl QueueProperty {
    fn parse(r: &mut Reader) -> Result<Self> {
        let mut p = r.tlv("queue property", 2, 8, 8)?;
        let property = p.u16("property")?;
        let len = p.u16("property.len")? as usize;
        p.pad(4)?;
        let prop = match property {
            1 | 2 if len == 16 => {
                let rate = p.u16("rate")?;
                p.pad(6)?;
                if property == 1 {
                    QueueProperty::MinRate(rate)
                } else {
                    QueueProperty::MaxRate(rate)
                }
            }
            0xffff if len >= 16 => {
                let experimenter = p.u32("experimenter")?;
                p.pad(4)?;
                QueueProperty::Experimenter { experimenter, data: p.rest() }
            }
            1 | 2 | 0xffff => return Err(WireError::BadLength { what: "queue property", offset: p.offset(), len }),
            _ => QueueProperty::Other { property, data: p.rest() },
        };
        Ok(prop)
    }

    fn emit(&self, w: &mut Writer) {
        let start = w.len();
        let ty = match self {
            QueueProperty::MinRate(_) => 1,
            QueueProperty::MaxRate(_) => 2,
            QueueProperty::Experimenter { .. } => 0xffff,
            QueueProperty::Other { property, .. } => *property,
        };
        w.u16(ty);
        let at = w.len_placeholder();
        w.pad(4);
        match self {
            QueueProperty::MinRate(r) | QueueProperty::MaxRate(r) => {
                w.u16(*r);
                w.pad(6);
            }
            QueueProperty::Experimenter { experimenter, data } => {
                w.u32(*experimenter);
                w.pad(4);
                w.bytes(data);
            }
            QueueProperty::Other { data, .. } => w.bytes(data),
        }
        w.patch_len_from(at, start);
    }
}

impl PacketQueue {
    fn parse(r: &mut Reader) -> Result<Self> {
        let mut q = r.tlv("packet queue", 8, 16, 1)?;
        let queue_id = q.u32("queue_id")?;
        let port = q.u32("port")?;
        q.pad(8)?;
        Ok(PacketQueue { queue_id, port, properties: q.many(QueueProperty::parse)? })
    }

    fn emit(&self, w: &mut Writer) {
        let start = w.len();
        w.u32(self.queue_id);
        w.u32(self.port);
        let at = w.len_placeholder();
        w.pad(6);
        self.properties.iter().for_each(|p| p.emit(w));
        w.patch_len_from(at, start);
    }
}

/// ROLE_REQUEST and ROLE_REPLY body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Role {
    pub role: u32,
    pub generation_id: u64,
}

/// Controller roles.
pub mod role {
    pub const NOCHANGE: u32 = 0;
    pub const EQUAL: u32 = 1;
    pub const MASTER: u32 = 2;
    pub const SLAVE: u32 = 3;
}

/// GET_ASYNC_REPLY and SET_ASYNC body: for (master/equal, slave), which reasons
/// of each asynchronous message the controller wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct AsyncConfig {
    pub packet_in_mask: [u32; 2],
    pub port_status_mask: [u32; 2],
    pub flow_removed_mask: [u32; 2],
}

impl AsyncConfig {
    fn parse(r: &mut Reader) -> Result<Self> {
        let mut m = [0u32; 6];
        for v in &mut m {
            *v = r.u32("async mask")?;
        }
        Ok(AsyncConfig {
            packet_in_mask: [m[0], m[1]],
            port_status_mask: [m[2], m[3]],
            flow_removed_mask: [m[4], m[5]],
        })
    }
    fn emit(&self, w: &mut Writer) {
        for v in self.packet_in_mask.iter().chain(&self.port_status_mask).chain(&self.flow_removed_mask) {
            w.u32(*v);
        }
    }
}

/// An OpenFlow 1.3 message other than HELLO.
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
    Experimenter(Experimenter),
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
    GroupMod(GroupMod),
    PortMod(PortMod),
    TableMod {
        table_id: u8,
        config: u32,
    },
    MultipartRequest(MultipartRequest),
    MultipartReply(MultipartReply),
    BarrierRequest,
    BarrierReply,
    QueueGetConfigRequest {
        port: u32,
    },
    QueueGetConfigReply {
        port: u32,
        queues: Vec<PacketQueue>,
    },
    RoleRequest(Role),
    RoleReply(Role),
    GetAsyncRequest,
    GetAsyncReply(AsyncConfig),
    SetAsync(AsyncConfig),
    MeterMod(MeterMod),
}

impl Msg {
    /// The wire type code.
    pub fn msg_type(&self) -> u8 {
        use types::*;
        match self {
            Msg::Error(_) => ERROR,
            Msg::EchoRequest(_) => ECHO_REQUEST,
            Msg::EchoReply(_) => ECHO_REPLY,
            Msg::Experimenter(_) => EXPERIMENTER,
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
            Msg::GroupMod(_) => GROUP_MOD,
            Msg::PortMod(_) => PORT_MOD,
            Msg::TableMod { .. } => TABLE_MOD,
            Msg::MultipartRequest(_) => MULTIPART_REQUEST,
            Msg::MultipartReply(_) => MULTIPART_REPLY,
            Msg::BarrierRequest => BARRIER_REQUEST,
            Msg::BarrierReply => BARRIER_REPLY,
            Msg::QueueGetConfigRequest { .. } => QUEUE_GET_CONFIG_REQUEST,
            Msg::QueueGetConfigReply { .. } => QUEUE_GET_CONFIG_REPLY,
            Msg::RoleRequest(_) => ROLE_REQUEST,
            Msg::RoleReply(_) => ROLE_REPLY,
            Msg::GetAsyncRequest => GET_ASYNC_REQUEST,
            Msg::GetAsyncReply(_) => GET_ASYNC_REPLY,
            Msg::SetAsync(_) => SET_ASYNC,
            Msg::MeterMod(_) => METER_MOD,
        }
    }

    /// A short lowercase name of the type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Msg::Error(_) => "error",
            Msg::EchoRequest(_) => "echo_request",
            Msg::EchoReply(_) => "echo_reply",
            Msg::Experimenter(_) => "experimenter",
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
            Msg::GroupMod(_) => "group_mod",
            Msg::PortMod(_) => "port_mod",
            Msg::TableMod { .. } => "table_mod",
            Msg::MultipartRequest(_) => "multipart_request",
            Msg::MultipartReply(_) => "multipart_reply",
            Msg::BarrierRequest => "barrier_request",
            Msg::BarrierReply => "barrier_reply",
            Msg::QueueGetConfigRequest { .. } => "queue_get_config_request",
            Msg::QueueGetConfigReply { .. } => "queue_get_config_reply",
            Msg::RoleRequest(_) => "role_request",
            Msg::RoleReply(_) => "role_reply",
            Msg::GetAsyncRequest => "get_async_request",
            Msg::GetAsyncReply(_) => "get_async_reply",
            Msg::SetAsync(_) => "set_async",
            Msg::MeterMod(_) => "meter_mod",
        }
    }

    /// Parses the body of a message of type `msg_type`; `None` for types 1.3 does
    /// not define (and for HELLO, which the caller handles).
    pub(crate) fn parse(msg_type: u8, r: &mut Reader) -> Result<Option<Msg>> {
        use types::*;
        let msg = match msg_type {
            ERROR => {
                let err_type = r.u16("error.type")?;
                if err_type == 0xffff {
                    Msg::Error(Error::Experimenter {
                        exp_type: r.u16("error.exp_type")?,
                        experimenter: r.u32("error.experimenter")?,
                        data: r.rest(),
                    })
                } else {
                    Msg::Error(Error::Standard { err_type, code: r.u16("error.code")?, data: r.rest() })
                }
            }
            ECHO_REQUEST => Msg::EchoRequest(r.rest()),
            ECHO_REPLY => Msg::EchoReply(r.rest()),
            EXPERIMENTER => Msg::Experimenter(Experimenter {
                experimenter: r.u32("experimenter")?,
                exp_type: r.u32("exp_type")?,
                data: r.rest(),
            }),
            FEATURES_REQUEST => Msg::FeaturesRequest,
            FEATURES_REPLY => {
                let datapath_id = r.u64("datapath_id")?;
                let n_buffers = r.u32("n_buffers")?;
                let n_tables = r.u8("n_tables")?;
                let auxiliary_id = r.u8("auxiliary_id")?;
                r.pad(2)?;
                Msg::FeaturesReply(FeaturesReply {
                    datapath_id,
                    n_buffers,
                    n_tables,
                    auxiliary_id,
                    capabilities: r.u32("capabilities")?,
                    reserved: r.u32("reserved")?,
                })
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
                let reason = r.u8("packet_in.reason")?;
                let table_id = r.u8("packet_in.table_id")?;
                let cookie = r.u64("packet_in.cookie")?;
                let m = Match::parse(r)?;
                r.pad(2)?;
                Msg::PacketIn(PacketIn { buffer_id, total_len, reason, table_id, cookie, r#match: m, data: r.rest() })
            }
            FLOW_REMOVED => Msg::FlowRemoved(FlowRemoved {
                cookie: r.u64("cookie")?,
                priority: r.u16("priority")?,
                reason: r.u8("reason")?,
                table_id: r.u8("table_id")?,
                duration_sec: r.u32("duration_sec")?,
                duration_nsec: r.u32("duration_nsec")?,
                idle_timeout: r.u16("idle_timeout")?,
                hard_timeout: r.u16("hard_timeout")?,
                packet_count: r.u64("packet_count")?,
                byte_count: r.u64("byte_count")?,
                r#match: Match::parse(r)?,
            }),
            PORT_STATUS => {
                let reason = r.u8("port_status.reason")?;
                r.pad(7)?;
                Msg::PortStatus(PortStatus { reason, desc: Port::parse(r)? })
            }
            PACKET_OUT => {
                let buffer_id = r.u32("packet_out.buffer_id")?;
                let in_port = r.u32("packet_out.in_port")?;
                let actions_len = r.u16("packet_out.actions_len")? as usize;
                r.pad(6)?;
                let actions = Action::parse_list(&mut r.sub("packet_out.actions", actions_len)?)?;
                Msg::PacketOut(PacketOut { buffer_id, in_port, actions, data: r.rest() })
            }
            FLOW_MOD => {
                let cookie = r.u64("cookie")?;
                let cookie_mask = r.u64("cookie_mask")?;
                let table_id = r.u8("table_id")?;
                let command = r.u8("command")?;
                let idle_timeout = r.u16("idle_timeout")?;
                let hard_timeout = r.u16("hard_timeout")?;
                let priority = r.u16("priority")?;
                let buffer_id = r.u32("buffer_id")?;
                let out_port = r.u32("out_port")?;
                let out_group = r.u32("out_group")?;
                let flags = r.u16("flags")?;
                r.pad(2)?;
                Msg::FlowMod(FlowMod {
                    cookie,
                    cookie_mask,
                    table_id,
                    command,
                    idle_timeout,
                    hard_timeout,
                    priority,
                    buffer_id,
                    out_port,
                    out_group,
                    flags,
                    r#match: Match::parse(r)?,
                    instructions: Instruction::parse_list(r)?,
                })
            }
            GROUP_MOD => {
                let command = r.u16("group_mod.command")?;
                let group_type = r.u8("group_mod.type")?;
                r.pad(1)?;
                let group_id = r.u32("group_mod.group_id")?;
                Msg::GroupMod(GroupMod { command, group_type, group_id, buckets: r.many(Bucket::parse)? })
            }
            PORT_MOD => {
                let port_no = r.u32("port_no")?;
                r.pad(4)?;
                let hw_addr = Mac(r.array("hw_addr")?);
                r.pad(2)?;
                let pm = PortMod {
                    port_no,
                    hw_addr,
                    config: r.u32("config")?,
                    mask: r.u32("mask")?,
                    advertise: r.u32("advertise")?,
                };
                r.pad(4)?;
                Msg::PortMod(pm)
            }
            TABLE_MOD => {
                let table_id = r.u8("table_id")?;
                r.pad(3)?;
                Msg::TableMod { table_id, config: r.u32("config")? }
            }
            MULTIPART_REQUEST => Msg::MultipartRequest(MultipartRequest::parse(r)?),
            MULTIPART_REPLY => Msg::MultipartReply(MultipartReply::parse(r)?),
            BARRIER_REQUEST => Msg::BarrierRequest,
            BARRIER_REPLY => Msg::BarrierReply,
            QUEUE_GET_CONFIG_REQUEST => {
                let port = r.u32("port")?;
                r.pad(4)?;
                Msg::QueueGetConfigRequest { port }
            }
            QUEUE_GET_CONFIG_REPLY => {
                let port = r.u32("port")?;
                r.pad(4)?;
                Msg::QueueGetConfigReply { port, queues: r.many(PacketQueue::parse)? }
            }
            ROLE_REQUEST | ROLE_REPLY => {
                let role = r.u32("role")?;
                r.pad(4)?;
                let role = Role { role, generation_id: r.u64("generation_id")? };
                if msg_type == ROLE_REQUEST {
                    Msg::RoleRequest(role)
                } else {
                    Msg::RoleReply(role)
                }
            }
            GET_ASYNC_REQUEST => Msg::GetAsyncRequest,
            GET_ASYNC_REPLY => Msg::GetAsyncReply(AsyncConfig::parse(r)?),
            SET_ASYNC => Msg::SetAsync(AsyncConfig::parse(r)?),
            METER_MOD => {
                let command = r.u16("meter_mod.command")?;
                let flags = r.u16("meter_mod.flags")?;
                let meter_id = r.u32("meter_mod.meter_id")?;
                Msg::MeterMod(MeterMod { command, flags, meter_id, bands: r.many(MeterBand::parse)? })
            }
            _ => return Ok(None),
        };
        Ok(Some(msg))
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        match self {
            Msg::Error(Error::Standard { err_type, code, data }) => {
                w.u16(*err_type);
                w.u16(*code);
                w.bytes(data);
            }
            Msg::Error(Error::Experimenter { exp_type, experimenter, data }) => {
                w.u16(0xffff);
                w.u16(*exp_type);
                w.u32(*experimenter);
                w.bytes(data);
            }
            Msg::EchoRequest(d) | Msg::EchoReply(d) => w.bytes(d),
            Msg::Experimenter(e) => {
                w.u32(e.experimenter);
                w.u32(e.exp_type);
                w.bytes(&e.data);
            }
            Msg::FeaturesRequest
            | Msg::GetConfigRequest
            | Msg::BarrierRequest
            | Msg::BarrierReply
            | Msg::GetAsyncRequest => {}
            Msg::FeaturesReply(f) => {
                w.u64(f.datapath_id);
                w.u32(f.n_buffers);
                w.u8(f.n_tables);
                w.u8(f.auxiliary_id);
                w.pad(2);
                w.u32(f.capabilities);
                w.u32(f.reserved);
            }
            Msg::GetConfigReply(c) | Msg::SetConfig(c) => {
                w.u16(c.flags);
                w.u16(c.miss_send_len);
            }
            Msg::PacketIn(p) => {
                w.u32(p.buffer_id);
                w.u16(p.total_len);
                w.u8(p.reason);
                w.u8(p.table_id);
                w.u64(p.cookie);
                p.r#match.emit(w);
                w.pad(2);
                w.bytes(&p.data);
            }
            Msg::FlowRemoved(f) => {
                w.u64(f.cookie);
                w.u16(f.priority);
                w.u8(f.reason);
                w.u8(f.table_id);
                w.u32(f.duration_sec);
                w.u32(f.duration_nsec);
                w.u16(f.idle_timeout);
                w.u16(f.hard_timeout);
                w.u64(f.packet_count);
                w.u64(f.byte_count);
                f.r#match.emit(w);
            }
            Msg::PortStatus(p) => {
                w.u8(p.reason);
                w.pad(7);
                p.desc.emit(w);
            }
            Msg::PacketOut(p) => {
                w.u32(p.buffer_id);
                w.u32(p.in_port);
                let at = w.len_placeholder();
                w.pad(6);
                let start = w.len();
                Action::emit_list(&p.actions, w);
                w.patch_len_from(at, start);
                w.bytes(&p.data);
            }
            Msg::FlowMod(f) => {
                w.u64(f.cookie);
                w.u64(f.cookie_mask);
                w.u8(f.table_id);
                w.u8(f.command);
                w.u16(f.idle_timeout);
                w.u16(f.hard_timeout);
                w.u16(f.priority);
                w.u32(f.buffer_id);
                w.u32(f.out_port);
                w.u32(f.out_group);
                w.u16(f.flags);
                w.pad(2);
                f.r#match.emit(w);
                Instruction::emit_list(&f.instructions, w);
            }
            Msg::GroupMod(g) => {
                w.u16(g.command);
                w.u8(g.group_type);
                w.pad(1);
                w.u32(g.group_id);
                g.buckets.iter().for_each(|b| b.emit(w));
            }
            Msg::PortMod(p) => {
                w.u32(p.port_no);
                w.pad(4);
                w.bytes(&p.hw_addr.0);
                w.pad(2);
                w.u32(p.config);
                w.u32(p.mask);
                w.u32(p.advertise);
                w.pad(4);
            }
            Msg::TableMod { table_id, config } => {
                w.u8(*table_id);
                w.pad(3);
                w.u32(*config);
            }
            Msg::MultipartRequest(m) => m.emit(w),
            Msg::MultipartReply(m) => m.emit(w),
            Msg::QueueGetConfigRequest { port } => {
                w.u32(*port);
                w.pad(4);
            }
            Msg::QueueGetConfigReply { port, queues } => {
                w.u32(*port);
                w.pad(4);
                queues.iter().for_each(|q| q.emit(w));
            }
            Msg::RoleRequest(r) | Msg::RoleReply(r) => {
                w.u32(r.role);
                w.pad(4);
                w.u64(r.generation_id);
            }
            Msg::GetAsyncReply(a) | Msg::SetAsync(a) => a.emit(w),
            Msg::MeterMod(m) => {
                w.u16(m.command);
                w.u16(m.flags);
                w.u32(m.meter_id);
                m.bands.iter().for_each(|b| b.emit(w));
            }
        }
    }
}
