//! OpenFlow 1.0 statistics requests and replies (`ofp_stats_request`/`reply`).

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;
use bytes::Bytes;
use serde::Serialize;

use super::{Action, Match};
#[cfg(feature = "arbitrary")]
use crate::wire::arb;
use crate::wire::{hex, FixedStr, Reader, Result, Writer};

/// Statistics type codes.
pub mod types {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT: u16 = 4;
    pub const QUEUE: u16 = 5;
    pub const VENDOR: u16 = 0xffff;
}

/// `ofp_desc_stats`: the switch's description strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct DescStats {
    pub mfr_desc: FixedStr<256>,
    pub hw_desc: FixedStr<256>,
    pub sw_desc: FixedStr<256>,
    pub serial_num: FixedStr<32>,
    pub dp_desc: FixedStr<256>,
}

impl DescStats {
    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        Ok(DescStats {
            mfr_desc: FixedStr::parse(r, "mfr_desc")?,
            hw_desc: FixedStr::parse(r, "hw_desc")?,
            sw_desc: FixedStr::parse(r, "sw_desc")?,
            serial_num: FixedStr::parse(r, "serial_num")?,
            dp_desc: FixedStr::parse(r, "dp_desc")?,
        })
    }
    pub(crate) fn emit(&self, w: &mut Writer) {
        self.mfr_desc.emit(w);
        self.hw_desc.emit(w);
        self.sw_desc.emit(w);
        self.serial_num.emit(w);
        self.dp_desc.emit(w);
    }
}

/// Body of a FLOW or AGGREGATE statistics request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowStatsRequest {
    pub r#match: Match,
    pub table_id: u8,
    pub out_port: u16,
}

/// One `ofp_flow_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct FlowStats {
    pub table_id: u8,
    pub r#match: Match,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub cookie: u64,
    pub packet_count: u64,
    pub byte_count: u64,
    pub actions: Vec<Action>,
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
    pub name: FixedStr<32>,
    pub wildcards: u32,
    pub max_entries: u32,
    pub active_count: u32,
    pub lookup_count: u64,
    pub matched_count: u64,
}

/// One `ofp_port_stats` entry: twelve counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct PortStats {
    pub port_no: u16,
    /// rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped,
    /// rx_errors, tx_errors, rx_frame_err, rx_over_err, rx_crc_err, collisions.
    pub counters: [u64; 12],
}

/// One `ofp_queue_stats` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct QueueStats {
    pub port_no: u16,
    pub queue_id: u32,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
}

/// A statistics request body, by type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum StatsRequestBody {
    Desc,
    Flow(FlowStatsRequest),
    Aggregate(FlowStatsRequest),
    Table,
    Port {
        port_no: u16,
    },
    Queue {
        port_no: u16,
        queue_id: u32,
    },
    Vendor {
        vendor: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
    /// A statistics type 1.0 does not define, kept raw.
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_stats10))]
        stats_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
}

/// STATS_REQUEST.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct StatsRequest {
    pub flags: u16,
    pub body: StatsRequestBody,
}

/// A statistics reply body, by type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub enum StatsReplyBody {
    Desc(Box<DescStats>),
    Flow(Vec<FlowStats>),
    Aggregate(AggregateStats),
    Table(Vec<TableStats>),
    Port(Vec<PortStats>),
    Queue(Vec<QueueStats>),
    Vendor {
        vendor: u32,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
    Unknown {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::unknown_stats10))]
        stats_type: u16,
        #[serde(with = "hex")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = arb::bytes))]
        data: Bytes,
    },
}

/// STATS_REPLY (`flags` bit 0 = more replies follow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
pub struct StatsReply {
    pub flags: u16,
    pub body: StatsReplyBody,
}

impl FlowStatsRequest {
    fn parse(r: &mut Reader) -> Result<Self> {
        let m = Match::parse(r)?;
        let table_id = r.u8("table_id")?;
        r.pad(1)?;
        Ok(FlowStatsRequest { r#match: m, table_id, out_port: r.u16("out_port")? })
    }
    fn emit(&self, w: &mut Writer) {
        self.r#match.emit(w);
        w.u8(self.table_id);
        w.pad(1);
        w.u16(self.out_port);
    }
}

impl FlowStats {
    fn parse(r: &mut Reader) -> Result<Self> {
        let mut f = r.tlv("flow stats", 0, 88, 1)?;
        f.pad(2)?;
        let table_id = f.u8("table_id")?;
        f.pad(1)?;
        let m = Match::parse(&mut f)?;
        let duration_sec = f.u32("duration_sec")?;
        let duration_nsec = f.u32("duration_nsec")?;
        let priority = f.u16("priority")?;
        let idle_timeout = f.u16("idle_timeout")?;
        let hard_timeout = f.u16("hard_timeout")?;
        f.pad(6)?;
        Ok(FlowStats {
            table_id,
            r#match: m,
            duration_sec,
            duration_nsec,
            priority,
            idle_timeout,
            hard_timeout,
            cookie: f.u64("cookie")?,
            packet_count: f.u64("packet_count")?,
            byte_count: f.u64("byte_count")?,
            actions: Action::parse_list(&mut f)?,
        })
    }
    fn emit(&self, w: &mut Writer) {
        let start = w.len();
        let at = w.len_placeholder();
        w.u8(self.table_id);
        w.pad(1);
        self.r#match.emit(w);
        w.u32(self.duration_sec);
        w.u32(self.duration_nsec);
        w.u16(self.priority);
        w.u16(self.idle_timeout);
        w.u16(self.hard_timeout);
        w.pad(6);
        w.u64(self.cookie);
        w.u64(self.packet_count);
        w.u64(self.byte_count);
        Action::emit_list(&self.actions, w);
        w.patch_len_from(at, start);
    }
}

impl StatsRequest {
    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        let ty = r.u16("stats.type")?;
        let flags = r.u16("stats.flags")?;
        let body = match ty {
            types::DESC => StatsRequestBody::Desc,
            types::FLOW => StatsRequestBody::Flow(FlowStatsRequest::parse(r)?),
            types::AGGREGATE => StatsRequestBody::Aggregate(FlowStatsRequest::parse(r)?),
            types::TABLE => StatsRequestBody::Table,
            types::PORT => {
                let port_no = r.u16("port_no")?;
                r.pad(6)?;
                StatsRequestBody::Port { port_no }
            }
            types::QUEUE => {
                let port_no = r.u16("port_no")?;
                r.pad(2)?;
                StatsRequestBody::Queue { port_no, queue_id: r.u32("queue_id")? }
            }
            types::VENDOR => StatsRequestBody::Vendor { vendor: r.u32("vendor")?, data: r.rest() },
            _ => StatsRequestBody::Unknown { stats_type: ty, data: r.rest() },
        };
        Ok(StatsRequest { flags, body })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        let ty = match &self.body {
            StatsRequestBody::Desc => types::DESC,
            StatsRequestBody::Flow(_) => types::FLOW,
            StatsRequestBody::Aggregate(_) => types::AGGREGATE,
            StatsRequestBody::Table => types::TABLE,
            StatsRequestBody::Port { .. } => types::PORT,
            StatsRequestBody::Queue { .. } => types::QUEUE,
            StatsRequestBody::Vendor { .. } => types::VENDOR,
            StatsRequestBody::Unknown { stats_type, .. } => *stats_type,
        };
        w.u16(ty);
        w.u16(self.flags);
        match &self.body {
            StatsRequestBody::Desc | StatsRequestBody::Table => {}
            StatsRequestBody::Flow(f) | StatsRequestBody::Aggregate(f) => f.emit(w),
            StatsRequestBody::Port { port_no } => {
                w.u16(*port_no);
                w.pad(6);
            }
            StatsRequestBody::Queue { port_no, queue_id } => {
                w.u16(*port_no);
                w.pad(2);
                w.u32(*queue_id);
            }
            StatsRequestBody::Vendor { vendor, data } => {
                w.u32(*vendor);
                w.bytes(data);
            }
            StatsRequestBody::Unknown { data, .. } => w.bytes(data),
        }
    }
}

impl StatsReply {
    pub(crate) fn parse(r: &mut Reader) -> Result<Self> {
        let ty = r.u16("stats.type")?;
        let flags = r.u16("stats.flags")?;
        let body = match ty {
            types::DESC => StatsReplyBody::Desc(Box::new(DescStats::parse(r)?)),
            types::FLOW => StatsReplyBody::Flow(r.many(FlowStats::parse)?),
            types::AGGREGATE => {
                let a = AggregateStats {
                    packet_count: r.u64("packet_count")?,
                    byte_count: r.u64("byte_count")?,
                    flow_count: r.u32("flow_count")?,
                };
                r.pad(4)?;
                StatsReplyBody::Aggregate(a)
            }
            types::TABLE => StatsReplyBody::Table(r.many(|r| {
                let table_id = r.u8("table_id")?;
                r.pad(3)?;
                Ok(TableStats {
                    table_id,
                    name: FixedStr::parse(r, "table name")?,
                    wildcards: r.u32("wildcards")?,
                    max_entries: r.u32("max_entries")?,
                    active_count: r.u32("active_count")?,
                    lookup_count: r.u64("lookup_count")?,
                    matched_count: r.u64("matched_count")?,
                })
            })?),
            types::PORT => StatsReplyBody::Port(r.many(|r| {
                let port_no = r.u16("port_no")?;
                r.pad(6)?;
                let mut counters = [0u64; 12];
                for c in &mut counters {
                    *c = r.u64("port counter")?;
                }
                Ok(PortStats { port_no, counters })
            })?),
            types::QUEUE => StatsReplyBody::Queue(r.many(|r| {
                let port_no = r.u16("port_no")?;
                r.pad(2)?;
                Ok(QueueStats {
                    port_no,
                    queue_id: r.u32("queue_id")?,
                    tx_bytes: r.u64("tx_bytes")?,
                    tx_packets: r.u64("tx_packets")?,
                    tx_errors: r.u64("tx_errors")?,
                })
            })?),
            types::VENDOR => StatsReplyBody::Vendor { vendor: r.u32("vendor")?, data: r.rest() },
            _ => StatsReplyBody::Unknown { stats_type: ty, data: r.rest() },
        };
        Ok(StatsReply { flags, body })
    }

    pub(crate) fn emit(&self, w: &mut Writer) {
        let ty = match &self.body {
            StatsReplyBody::Desc(_) => types::DESC,
            StatsReplyBody::Flow(_) => types::FLOW,
            StatsReplyBody::Aggregate(_) => types::AGGREGATE,
            StatsReplyBody::Table(_) => types::TABLE,
            StatsReplyBody::Port(_) => types::PORT,
            StatsReplyBody::Queue(_) => types::QUEUE,
            StatsReplyBody::Vendor { .. } => types::VENDOR,
            StatsReplyBody::Unknown { stats_type, .. } => *stats_type,
        };
        w.u16(ty);
        w.u16(self.flags);
        match &self.body {
            StatsReplyBody::Desc(d) => d.emit(w),
            StatsReplyBody::Flow(flows) => flows.iter().for_each(|f| f.emit(w)),
            StatsReplyBody::Aggregate(a) => {
                w.u64(a.packet_count);
                w.u64(a.byte_count);
                w.u32(a.flow_count);
                w.pad(4);
            }
            StatsReplyBody::Table(tables) => {
                for t in tables {
                    w.u8(t.table_id);
                    w.pad(3);
                    t.name.emit(w);
                    w.u32(t.wildcards);
                    w.u32(t.max_entries);
                    w.u32(t.active_count);
                    w.u64(t.lookup_count);
                    w.u64(t.matched_count);
                }
            }
            StatsReplyBody::Port(ports) => {
                for p in ports {
                    w.u16(p.port_no);
                    w.pad(6);
                    p.counters.iter().for_each(|&c| w.u64(c));
                }
            }
            StatsReplyBody::Queue(queues) => {
                for q in queues {
                    w.u16(q.port_no);
                    w.pad(2);
                    w.u32(q.queue_id);
                    w.u64(q.tx_bytes);
                    w.u64(q.tx_packets);
                    w.u64(q.tx_errors);
                }
            }
            StatsReplyBody::Vendor { vendor, data } => {
                w.u32(*vendor);
                w.bytes(data);
            }
            StatsReplyBody::Unknown { data, .. } => w.bytes(data),
        }
    }
}
