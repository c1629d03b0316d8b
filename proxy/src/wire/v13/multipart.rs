//! OpenFlow 1.3 multipart requests and replies.

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;
use bytes::Bytes;
use serde::Serialize;

use super::{Bucket, Instruction, Match, MeterBand, Port};
#[cfg(feature = "arbitrary")]
use crate::wire::arb;
use crate::wire::v10::stats::DescStats;
use crate::wire::{hex, Reader, Result, Writer};

/// Multipart type codes.
pub mod types {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const QUEUE: u16 = 5;
    pub const GROUP: u16 = 6;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const TABLE_FEATURES: u16 = 12;
    pub const PORT_DESC: u16 = 13;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Flag meaning more parts follow.
pub const MORE: u16 = 1;

/// Body of a FLOW or AGGREGATE request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowStatsRequest {
    pub table_id: u8,
    pub out_port: u32,
    pub out_group: u32,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub r#match: Match,
}

/// Experimenter multipart body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct ExperimenterBody {
    pub experimenter: u32,
    pub exp_type: u32,
    #[serde(with = "hex")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
    pub data: Bytes,
}

/// A multipart request body, by type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum RequestBody {
    Desc,
    Flow(FlowStatsRequest),
    Aggregate(FlowStatsRequest),
    Table,
    PortStats {
        port_no: u32,
    },
    Queue {
        port_no: u32,
        queue_id: u32,
    },
    Group {
        group_id: u32,
    },
    GroupDesc,
    GroupFeatures,
    Meter {
        meter_id: u32,
    },
    MeterConfig {
        meter_id: u32,
    },
    MeterFeatures,
    /// Table features: kept raw (an empty body asks for the current features).
    TableFeatures(
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        Bytes,
    ),
    PortDesc,
    Experimenter(ExperimenterBody),
    /// A type 1.3 does not define, kept raw.
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_multipart13))]
        mp_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
}

/// MULTIPART_REQUEST.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct MultipartRequest {
    pub flags: u16,
    pub body: RequestBody,
}

/// One `ofp_flow_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowStats {
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub cookie: u64,
    pub packet_count: u64,
    pub byte_count: u64,
    pub r#match: Match,
    pub instructions: Vec<Instruction>,
}

/// `ofp_aggregate_stats_reply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct AggregateStats {
    pub packet_count: u64,
    pub byte_count: u64,
    pub flow_count: u32,
}

/// One `ofp_table_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct TableStats {
    pub table_id: u8,
    pub active_count: u32,
    pub lookup_count: u64,
    pub matched_count: u64,
}

/// One `ofp_port_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PortStats {
    pub port_no: u32,
    /// rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped,
    /// rx_errors, tx_errors, rx_frame_err, rx_over_err, rx_crc_err, collisions.
    pub counters: [u64; 12],
    pub duration_sec: u32,
    pub duration_nsec: u32,
}

/// One `ofp_queue_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct QueueStats {
    pub port_no: u32,
    pub queue_id: u32,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
}

/// Packet and byte counters (of a bucket or a meter band).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct Counters {
    pub packet_count: u64,
    pub byte_count: u64,
}

/// One `ofp_group_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct GroupStats {
    pub group_id: u32,
    pub ref_count: u32,
    pub packet_count: u64,
    pub byte_count: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub bucket_stats: Vec<Counters>,
}

/// One `ofp_group_desc_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct GroupDesc {
    pub group_type: u8,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
}

/// `ofp_group_features`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct GroupFeatures {
    pub types: u32,
    pub capabilities: u32,
    pub max_groups: [u32; 4],
    pub actions: [u32; 4],
}

/// One `ofp_meter_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct MeterStats {
    pub meter_id: u32,
    pub flow_count: u32,
    pub packet_in_count: u64,
    pub byte_in_count: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub band_stats: Vec<Counters>,
}

/// One `ofp_meter_config` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct MeterConfig {
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<MeterBand>,
}

/// `ofp_meter_features`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct MeterFeatures {
    pub max_meter: u32,
    pub band_types: u32,
    pub capabilities: u32,
    pub max_bands: u8,
    pub max_color: u8,
}

/// A multipart reply body, by type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum ReplyBody {
    Desc(Box<DescStats>),
    Flow(Vec<FlowStats>),
    Aggregate(AggregateStats),
    Table(Vec<TableStats>),
    PortStats(Vec<PortStats>),
    Queue(Vec<QueueStats>),
    Group(Vec<GroupStats>),
    GroupDesc(Vec<GroupDesc>),
    GroupFeatures(GroupFeatures),
    Meter(Vec<MeterStats>),
    MeterConfig(Vec<MeterConfig>),
    MeterFeatures(MeterFeatures),
    /// Table features: kept raw.
    TableFeatures(
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        Bytes,
    ),
    PortDesc(Vec<Port>),
    Experimenter(ExperimenterBody),
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_multipart13))]
        mp_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
}

/// MULTIPART_REPLY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct MultipartReply {
    pub flags: u16,
    pub body: ReplyBody,
}

impl FlowStatsRequest {
    fn parse(r: &mut Reader) -> Result<Self> {
        let table_id = r.u8("table_id")?;
        r.pad(3)?;
        let out_port = r.u32("out_port")?;
        let out_group = r.u32("out_group")?;
        r.pad(4)?;
        Ok(FlowStatsRequest {
            table_id,
            out_port,
            out_group,
            cookie: r.u64("cookie")?,
            cookie_mask: r.u64("cookie_mask")?,
            r#match: Match::parse(r)?,
        })
    }
    fn emit(&self, w: &mut Writer) {
        w.u8(self.table_id);
        w.pad(3);
        w.u32(self.out_port);
        w.u32(self.out_group);
        w.pad(4);
        w.u64(self.cookie);
        w.u64(self.cookie_mask);
        self.r#match.emit(w);
    }
}

impl ExperimenterBody {
    fn parse(r: &mut Reader) -> Result<Self> {
        Ok(ExperimenterBody { experimenter: r.u32("experimenter")?, exp_type: r.u32("exp_type")?, data: r.rest() })
    }
    fn emit(&self, w: &mut Writer) {
        w.u32(self.experimenter);
        w.u32(self.exp_type);
        w.bytes(&self.data);
    }
}

/// Reads `id` then 4 bytes of padding (group, meter, port-stats requests).
fn id_pad4(r: &mut Reader, what: &'static str) -> Result<u32> {
    let id = r.u32(what)?;
    r.pad(4)?;
    Ok(id)
}

fn counters(r: &mut Reader) -> Result<Counters> {
    Ok(Counters { packet_count: r.u64("packet_count")?, byte_count: r.u64("byte_count")? })
}

impl MultipartRequest {
    fn type_code(&self) -> u16 {
        use types::*;
        match &self.body {
            RequestBody::Desc => DESC,
            RequestBody::Flow(_) => FLOW,
            RequestBody::Aggregate(_) => AGGREGATE,
            RequestBody::Table => TABLE,
            RequestBody::PortStats { .. } => PORT_STATS,
            RequestBody::Queue { .. } => QUEUE,
            RequestBody::Group { .. } => GROUP,
            RequestBody::GroupDesc => GROUP_DESC,
            RequestBody::GroupFeatures => GROUP_FEATURES,
            RequestBody::Meter { .. } => METER,
            RequestBody::MeterConfig { .. } => METER_CONFIG,
            RequestBody::MeterFeatures => METER_FEATURES,
            RequestBody::TableFeatures(_) => TABLE_FEATURES,
            RequestBody::PortDesc => PORT_DESC,
            RequestBody::Experimenter(_) => EXPERIMENTER,
            RequestBody::Unknown { mp_type, .. } => *mp_type,
        }
    }

    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        use types::*;
        let ty = r.u16("multipart.type")?;
        let flags = r.u16("multipart.flags")?;
        r.pad(4)?;
        let body = match ty {
            DESC => RequestBody::Desc,
            FLOW => RequestBody::Flow(FlowStatsRequest::parse(r)?),
            AGGREGATE => RequestBody::Aggregate(FlowStatsRequest::parse(r)?),
            TABLE => RequestBody::Table,
            PORT_STATS => RequestBody::PortStats { port_no: id_pad4(r, "port_no")? },
            QUEUE => RequestBody::Queue { port_no: r.u32("port_no")?, queue_id: r.u32("queue_id")? },
            GROUP => RequestBody::Group { group_id: id_pad4(r, "group_id")? },
            GROUP_DESC => RequestBody::GroupDesc,
            GROUP_FEATURES => RequestBody::GroupFeatures,
            METER => RequestBody::Meter { meter_id: id_pad4(r, "meter_id")? },
            METER_CONFIG => RequestBody::MeterConfig { meter_id: id_pad4(r, "meter_id")? },
            METER_FEATURES => RequestBody::MeterFeatures,
            TABLE_FEATURES => RequestBody::TableFeatures(r.rest()),
            PORT_DESC => RequestBody::PortDesc,
            EXPERIMENTER => RequestBody::Experimenter(ExperimenterBody::parse(r)?),
            _ => RequestBody::Unknown { mp_type: ty, data: r.rest() },
        };
        Ok(MultipartRequest { flags, body })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        w.u16(self.type_code());
        w.u16(self.flags);
        w.pad(4);
        match &self.body {
            RequestBody::Desc
            | RequestBody::Table
            | RequestBody::GroupDesc
            | RequestBody::GroupFeatures
            | RequestBody::MeterFeatures
            | RequestBody::PortDesc => {}
            RequestBody::Flow(f) | RequestBody::Aggregate(f) => f.emit(w),
            RequestBody::PortStats { port_no: id }
            | RequestBody::Group { group_id: id }
            | RequestBody::Meter { meter_id: id }
            | RequestBody::MeterConfig { meter_id: id } => {
                w.u32(*id);
                w.pad(4);
            }
            RequestBody::Queue { port_no, queue_id } => {
                w.u32(*port_no);
                w.u32(*queue_id);
            }
            RequestBody::TableFeatures(data) | RequestBody::Unknown { data, .. } => w.bytes(data),
            RequestBody::Experimenter(e) => e.emit(w),
        }
    }
}

impl MultipartReply {
    fn type_code(&self) -> u16 {
        use types::*;
        match &self.body {
            ReplyBody::Desc(_) => DESC,
            ReplyBody::Flow(_) => FLOW,
            ReplyBody::Aggregate(_) => AGGREGATE,
            ReplyBody::Table(_) => TABLE,
            ReplyBody::PortStats(_) => PORT_STATS,
            ReplyBody::Queue(_) => QUEUE,
            ReplyBody::Group(_) => GROUP,
            ReplyBody::GroupDesc(_) => GROUP_DESC,
            ReplyBody::GroupFeatures(_) => GROUP_FEATURES,
            ReplyBody::Meter(_) => METER,
            ReplyBody::MeterConfig(_) => METER_CONFIG,
            ReplyBody::MeterFeatures(_) => METER_FEATURES,
            ReplyBody::TableFeatures(_) => TABLE_FEATURES,
            ReplyBody::PortDesc(_) => PORT_DESC,
            ReplyBody::Experimenter(_) => EXPERIMENTER,
            ReplyBody::Unknown { mp_type, .. } => *mp_type,
        }
    }

    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        use types::*;
        let ty = r.u16("multipart.type")?;
        let flags = r.u16("multipart.flags")?;
        r.pad(4)?;
        let body = match ty {
            DESC => ReplyBody::Desc(Box::new(DescStats::parse(r)?)),
            FLOW => ReplyBody::Flow(r.many(|r| {
                let mut f = r.tlv("flow stats", 0, 56, 8)?;
                f.pad(2)?;
                let table_id = f.u8("table_id")?;
                f.pad(1)?;
                let duration_sec = f.u32("duration_sec")?;
                let duration_nsec = f.u32("duration_nsec")?;
                let priority = f.u16("priority")?;
                let idle_timeout = f.u16("idle_timeout")?;
                let hard_timeout = f.u16("hard_timeout")?;
                let flags = f.u16("flags")?;
                f.pad(4)?;
                Ok(FlowStats {
                    table_id,
                    duration_sec,
                    duration_nsec,
                    priority,
                    idle_timeout,
                    hard_timeout,
                    flags,
                    cookie: f.u64("cookie")?,
                    packet_count: f.u64("packet_count")?,
                    byte_count: f.u64("byte_count")?,
                    r#match: Match::parse(&mut f)?,
                    instructions: Instruction::parse_list(&mut f)?,
                })
            })?),
            AGGREGATE => {
                let a = AggregateStats {
                    packet_count: r.u64("packet_count")?,
                    byte_count: r.u64("byte_count")?,
                    flow_count: r.u32("flow_count")?,
                };
                r.pad(4)?;
                ReplyBody::Aggregate(a)
            }
            TABLE => ReplyBody::Table(r.many(|r| {
                let table_id = r.u8("table_id")?;
                r.pad(3)?;
                Ok(TableStats {
                    table_id,
                    active_count: r.u32("active_count")?,
                    lookup_count: r.u64("lookup_count")?,
                    matched_count: r.u64("matched_count")?,
                })
            })?),
            PORT_STATS => ReplyBody::PortStats(r.many(|r| {
                let port_no = id_pad4(r, "port_no")?;
                let mut counters = [0u64; 12];
                for c in &mut counters {
                    *c = r.u64("port counter")?;
                }
                Ok(PortStats {
                    port_no,
                    counters,
                    duration_sec: r.u32("duration_sec")?,
                    duration_nsec: r.u32("duration_nsec")?,
                })
            })?),
            QUEUE => ReplyBody::Queue(r.many(|r| {
                Ok(QueueStats {
                    port_no: r.u32("port_no")?,
                    queue_id: r.u32("queue_id")?,
                    tx_bytes: r.u64("tx_bytes")?,
                    tx_packets: r.u64("tx_packets")?,
                    tx_errors: r.u64("tx_errors")?,
                    duration_sec: r.u32("duration_sec")?,
                    duration_nsec: r.u32("duration_nsec")?,
                })
            })?),
            GROUP => ReplyBody::Group(r.many(|r| {
                let mut g = r.tlv("group stats", 0, 40, 8)?;
                g.pad(4)?;
                let group_id = g.u32("group_id")?;
                let ref_count = g.u32("ref_count")?;
                g.pad(4)?;
                Ok(GroupStats {
                    group_id,
                    ref_count,
                    packet_count: g.u64("packet_count")?,
                    byte_count: g.u64("byte_count")?,
                    duration_sec: g.u32("duration_sec")?,
                    duration_nsec: g.u32("duration_nsec")?,
                    bucket_stats: g.many(counters)?,
                })
            })?),
            GROUP_DESC => ReplyBody::GroupDesc(r.many(|r| {
                let mut g = r.tlv("group desc", 0, 8, 8)?;
                g.pad(2)?;
                let group_type = g.u8("group type")?;
                g.pad(1)?;
                Ok(GroupDesc { group_type, group_id: g.u32("group_id")?, buckets: g.many(Bucket::parse)? })
            })?),
            GROUP_FEATURES => {
                let types = r.u32("types")?;
                let capabilities = r.u32("capabilities")?;
                let mut max_groups = [0u32; 4];
                for v in &mut max_groups {
                    *v = r.u32("max_groups")?;
                }
                let mut actions = [0u32; 4];
                for v in &mut actions {
                    *v = r.u32("actions")?;
                }
                ReplyBody::GroupFeatures(GroupFeatures { types, capabilities, max_groups, actions })
            }
            METER => ReplyBody::Meter(r.many(|r| {
                let meter_id = r.u32("meter_id")?;
                // The length field sits after meter_id: re-read through a sub-reader.
                let len = r.peek_u16("meter stats", 0)? as usize;
                if len < 40 || !len.is_multiple_of(8) {
                    return Err(crate::wire::WireError::BadLength { what: "meter stats", offset: r.offset(), len });
                }
                let mut m = r.sub("meter stats", len - 4)?;
                m.pad(8)?;
                Ok(MeterStats {
                    meter_id,
                    flow_count: m.u32("flow_count")?,
                    packet_in_count: m.u64("packet_in_count")?,
                    byte_in_count: m.u64("byte_in_count")?,
                    duration_sec: m.u32("duration_sec")?,
                    duration_nsec: m.u32("duration_nsec")?,
                    band_stats: m.many(counters)?,
                })
            })?),
            METER_CONFIG => ReplyBody::MeterConfig(r.many(|r| {
                let mut m = r.tlv("meter config", 0, 8, 8)?;
                m.pad(2)?;
                Ok(MeterConfig {
                    flags: m.u16("flags")?,
                    meter_id: m.u32("meter_id")?,
                    bands: m.many(MeterBand::parse)?,
                })
            })?),
            METER_FEATURES => {
                let f = MeterFeatures {
                    max_meter: r.u32("max_meter")?,
                    band_types: r.u32("band_types")?,
                    capabilities: r.u32("capabilities")?,
                    max_bands: r.u8("max_bands")?,
                    max_color: r.u8("max_color")?,
                };
                r.pad(2)?;
                ReplyBody::MeterFeatures(f)
            }
            TABLE_FEATURES => ReplyBody::TableFeatures(r.rest()),
            PORT_DESC => {
                if !r.remaining().is_multiple_of(Port::LEN) {
                    return Err(crate::wire::WireError::BadLength {
                        what: "port desc",
                        offset: r.offset(),
                        len: r.remaining(),
                    });
                }
                ReplyBody::PortDesc(r.many(Port::parse)?)
            }
            EXPERIMENTER => ReplyBody::Experimenter(ExperimenterBody::parse(r)?),
            _ => ReplyBody::Unknown { mp_type: ty, data: r.rest() },
        };
        Ok(MultipartReply { flags, body })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        w.u16(self.type_code());
        w.u16(self.flags);
        w.pad(4);
        match &self.body {
            ReplyBody::Desc(d) => d.emit(w),
            ReplyBody::Flow(flows) => {
                for f in flows {
                    let start = w.len();
                    let at = w.len_placeholder();
                    w.u8(f.table_id);
                    w.pad(1);
                    w.u32(f.duration_sec);
                    w.u32(f.duration_nsec);
                    w.u16(f.priority);
                    w.u16(f.idle_timeout);
                    w.u16(f.hard_timeout);
                    w.u16(f.flags);
                    w.pad(4);
                    w.u64(f.cookie);
                    w.u64(f.packet_count);
                    w.u64(f.byte_count);
                    f.r#match.emit(w);
                    Instruction::emit_list(&f.instructions, w);
                    w.patch_len_from(at, start);
                }
            }
            ReplyBody::Aggregate(a) => {
                w.u64(a.packet_count);
                w.u64(a.byte_count);
                w.u32(a.flow_count);
                w.pad(4);
            }
            ReplyBody::Table(tables) => {
                for t in tables {
                    w.u8(t.table_id);
                    w.pad(3);
                    w.u32(t.active_count);
                    w.u64(t.lookup_count);
                    w.u64(t.matched_count);
                }
            }
            ReplyBody::PortStats(ports) => {
                for p in ports {
                    w.u32(p.port_no);
                    w.pad(4);
                    p.counters.iter().for_each(|&c| w.u64(c));
                    w.u32(p.duration_sec);
                    w.u32(p.duration_nsec);
                }
            }
            ReplyBody::Queue(queues) => {
                for q in queues {
                    w.u32(q.port_no);
                    w.u32(q.queue_id);
                    w.u64(q.tx_bytes);
                    w.u64(q.tx_packets);
                    w.u64(q.tx_errors);
                    w.u32(q.duration_sec);
                    w.u32(q.duration_nsec);
                }
            }
            ReplyBody::Group(groups) => {
                for g in groups {
                    let start = w.len();
                    let at = w.len_placeholder();
                    w.pad(2);
                    w.u32(g.group_id);
                    w.u32(g.ref_count);
                    w.pad(4);
                    w.u64(g.packet_count);
                    w.u64(g.byte_count);
                    w.u32(g.duration_sec);
                    w.u32(g.duration_nsec);
                    for c in &g.bucket_stats {
                        w.u64(c.packet_count);
                        w.u64(c.byte_count);
                    }
                    w.patch_len_from(at, start);
                }
            }
            ReplyBody::GroupDesc(groups) => {
                for g in groups {
                    let start = w.len();
                    let at = w.len_placeholder();
                    w.u8(g.group_type);
                    w.pad(1);
                    w.u32(g.group_id);
                    g.buckets.iter().for_each(|b| b.emit(w));
                    w.patch_len_from(at, start);
                }
            }
            ReplyBody::GroupFeatures(f) => {
                w.u32(f.types);
                w.u32(f.capabilities);
                f.max_groups.iter().chain(&f.actions).for_each(|&v| w.u32(v));
            }
            ReplyBody::Meter(meters) => {
                for m in meters {
                    let start = w.len();
                    w.u32(m.meter_id);
                    let at = w.len_placeholder();
                    w.pad(6);
                    w.u32(m.flow_count);
                    w.u64(m.packet_in_count);
                    w.u64(m.byte_in_count);
                    w.u32(m.duration_sec);
                    w.u32(m.duration_nsec);
                    for c in &m.band_stats {
                        w.u64(c.packet_count);
                        w.u64(c.byte_count);
                    }
                    w.patch_len_from(at, start);
                }
            }
            ReplyBody::MeterConfig(configs) => {
                for c in configs {
                    let start = w.len();
                    let at = w.len_placeholder();
                    w.u16(c.flags);
                    w.u32(c.meter_id);
                    c.bands.iter().for_each(|b| b.emit(w));
                    w.patch_len_from(at, start);
                }
            }
            ReplyBody::MeterFeatures(f) => {
                w.u32(f.max_meter);
                w.u32(f.band_types);
                w.u32(f.capabilities);
                w.u8(f.max_bands);
                w.u8(f.max_color);
                w.pad(2);
            }
            ReplyBody::TableFeatures(data) | ReplyBody::Unknown { data, .. } => w.bytes(data),
            ReplyBody::PortDesc(ports) => ports.iter().for_each(|p| p.emit(w)),
            ReplyBody::Experimenter(e) => e.emit(w),
        }
    }
}
