//! A software OpenFlow switch: the agent that answers controllers (1.0 or 1.3)
//! and the pipeline that forwards frames through its flow tables.
//!
//! The switch is a plain state machine with no I/O: the caller hands it a
//! controller message or a frame arriving on a port, with the current time, and
//! gets back [`Output`]s (replies, asynchronous messages, frames to emit). That
//! keeps it deterministic, testable, and cheap to clone for checkpoints.

use std::collections::BTreeMap;

use bytes::Bytes;
use sts_proxy::wire::v13::multipart::{self as mp, ReplyBody, RequestBody};
use sts_proxy::wire::v13::{self, BasicOxm, Field};
use sts_proxy::wire::{v10, Body, FixedStr, Mac, Message, OFP10, OFP13};

use crate::flow::{
    self, Action, ActionSet, FlowEntry, FlowMatch, FlowTable, Instructions, Millis, RemovedReason, Selector, WireForm,
};
use crate::packet::{self, Fields};

/// Tables a 1.3 switch offers (faucet's pipeline uses up to about ten).
pub const TABLES_13: usize = 16;
/// Default capacity of each table.
pub const DEFAULT_TABLE_CAPACITY: usize = 100_000;

/// What handling an input produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A reply to the controller connection the request came from.
    Reply(Message),
    /// An asynchronous message for every controller (PACKET_IN, FLOW_REMOVED, PORT_STATUS).
    ToControllers(Message),
    /// A frame leaving through a port.
    Emit { port: u32, frame: Vec<u8> },
    /// One frame's actions exceeded [`WORK_BUDGET`]: the rest were dropped.
    OverBudget,
}

/// Actions a switch executes, group buckets it enters and copies it emits
/// for one frame (an arrival, a PACKET_OUT, a released buffer) before it
/// drops the rest of that frame's work, as Open vSwitch drops a packet whose
/// translation exceeds its limits. Bounds time and memory whatever rules a
/// controller installs (a group whose buckets all point back at it, an entry
/// with thousands of FLOOD outputs).
pub const WORK_BUDGET: usize = 4096;

/// A switch port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub no: u32,
    pub mac: Mac,
    pub name: String,
    /// OpenFlow config bits (PORT_DOWN, NO_RECV, NO_FWD, NO_PACKET_IN; 1.0 NO_FLOOD).
    pub config: u32,
    /// Physical link state (a failed link or detached host makes it false).
    pub link_up: bool,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// 1.0's OFPPC_NO_FLOOD (gone in 1.3).
pub const NO_FLOOD_10: u32 = 1 << 4;

impl Port {
    /// Port `no` of switch `dpid`, link down.
    fn new(dpid: u64, no: u32) -> Port {
        let b = dpid.to_be_bytes();
        Port {
            no,
            mac: Mac([0x0a, b[4], b[5], b[6], b[7], no as u8]),
            name: format!("s{dpid}-eth{no}"),
            config: 0,
            link_up: false,
            rx_packets: 0,
            tx_packets: 0,
            rx_bytes: 0,
            tx_bytes: 0,
        }
    }

    /// The switch's LOCAL port as Open vSwitch describes a bridge's own
    /// interface (named after the bridge, administratively down): listed in
    /// the port descriptions, never forwarding (apps such as os-ken's igmplib
    /// read its address).
    fn local(dpid: u64) -> Port {
        let mut p = Port::new(dpid, v13::port::LOCAL);
        p.name = format!("s{dpid}");
        p.config = v13::port_config::PORT_DOWN;
        p
    }

    /// True if the port can carry frames.
    pub fn is_live(&self) -> bool {
        self.link_up && self.config & v13::port_config::PORT_DOWN == 0
    }

    fn state(&self) -> u32 {
        if self.link_up {
            v13::port_state::LIVE
        } else {
            v13::port_state::LINK_DOWN
        }
    }

    fn to_v13(&self) -> v13::Port {
        v13::Port {
            port_no: self.no,
            hw_addr: self.mac,
            name: FixedStr::new(&self.name),
            config: self.config,
            state: self.state(),
            curr: 0x800 | 0x20, // 1 Gb full duplex, copper
            advertised: 0,
            supported: 0,
            peer: 0,
            curr_speed: 1_000_000,
            max_speed: 1_000_000,
        }
    }

    fn to_v10(&self) -> v10::PhyPort {
        v10::PhyPort {
            port_no: self.no as u16,
            hw_addr: self.mac,
            name: FixedStr::new(&self.name),
            config: self.config,
            state: if self.link_up { 0 } else { 1 },
            curr: 0x20 | 0x80,
            advertised: 0,
            supported: 0,
            peer: 0,
        }
    }
}

/// A group (1.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub group_type: u8,
    pub buckets: Vec<(v13::Bucket, Vec<Action>)>,
    pub wire: Vec<v13::Bucket>,
}

/// A software OpenFlow switch.
#[derive(Debug, Clone)]
pub struct Switch {
    pub dpid: u64,
    /// The OpenFlow version this switch speaks (offered alone in its HELLO).
    pub version: u8,
    pub ports: BTreeMap<u32, Port>,
    pub tables: Vec<FlowTable>,
    pub groups: BTreeMap<u32, Group>,
    pub table_capacity: usize,
    pub miss_send_len: u16,
    pub config_flags: u16,
    /// The largest generation id a MASTER or SLAVE request has carried.
    pub generation_id: Option<u64>,
    /// Per controller connection (by index): its role and async config.
    pub conns: BTreeMap<usize, ConnState>,
    /// The connection whose message is being handled.
    requester: usize,
    /// Frames sent to the controller truncated, waiting for a PACKET_OUT or
    /// FLOW_MOD that names their buffer id.
    pub buffers: PacketBuffers,
    /// What is left of [`WORK_BUDGET`] for the frame being processed.
    work_left: usize,
    /// The addresses the NORMAL action learned (Open vSwitch's L2 learning
    /// switch): each source MAC and the port it was last seen on. Entries on
    /// a port whose link goes down are forgotten; at most [`MAC_TABLE_MAX`].
    pub mac_table: BTreeMap<[u8; 6], u32>,
}

/// The most addresses a switch's NORMAL action learns (Open vSwitch's
/// default `mac-table-size`); past it, new sources are not learned and their
/// replies are flooded.
pub const MAC_TABLE_MAX: usize = 2048;

/// What a switch keeps per controller connection (OpenFlow 1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnState {
    /// EQUAL, MASTER or SLAVE (`v13::role`).
    pub role: u32,
    /// Which asynchronous messages the connection wants, for (master or
    /// equal, slave).
    pub async_config: v13::AsyncConfig,
}

impl Default for ConnState {
    fn default() -> ConnState {
        // The spec's defaults: a slave gets only PORT_STATUS.
        ConnState {
            role: v13::role::EQUAL,
            async_config: v13::AsyncConfig {
                packet_in_mask: [3, 0],
                port_status_mask: [7, 7],
                flow_removed_mask: [15, 0],
            },
        }
    }
}

/// The switch's packet buffers (off by default, as in Open vSwitch since
/// 2.7, which retired buffering). With a capacity, a frame is buffered when a
/// PACKET_IN may carry fewer bytes than the frame has (`max_len`, or 1.0's
/// `miss_send_len`): the PACKET_IN carries the first `max_len` bytes and a
/// buffer id, and the controller names the id instead of sending the frame
/// back. The oldest buffer is reused when all are taken, and a buffer is
/// released by its first use, so a stale or repeated id gets BUFFER_UNKNOWN.
/// Without a capacity every PACKET_IN carries the whole frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PacketBuffers {
    /// How many frames can be buffered (advertised as `n_buffers`).
    pub capacity: usize,
    /// How many buffered frames a PACKET_OUT or FLOW_MOD has sent on.
    pub released: u64,
    next_id: u32,
    /// (buffer id, in_port, frame), oldest first.
    held: std::collections::VecDeque<(u32, u32, Vec<u8>)>,
}

impl PacketBuffers {
    /// Buffers that hold up to `capacity` frames.
    pub fn new(capacity: usize) -> PacketBuffers {
        PacketBuffers { capacity, ..PacketBuffers::default() }
    }

    /// Buffers `frame`, returning its id (`None` without a capacity).
    fn hold(&mut self, in_port: u32, frame: &[u8]) -> Option<u32> {
        if self.capacity == 0 {
            return None;
        }
        if self.held.len() >= self.capacity {
            self.held.pop_front();
        }
        let id = self.next_id;
        // Ids stay below NO_BUFFER (0xffffffff) and wrap long after any
        // buffer holding them is gone.
        self.next_id = (self.next_id + 1) % 0x00ff_ffff;
        self.held.push_back((id, in_port, frame.to_vec()));
        Some(id)
    }

    /// Takes buffer `id`: its in_port and frame, or `None` if unknown.
    fn take(&mut self, id: u32) -> Option<(u32, Vec<u8>)> {
        let at = self.held.iter().position(|(i, _, _)| *i == id)?;
        self.released += 1;
        self.held.remove(at).map(|(_, port, frame)| (port, frame))
    }

    /// How many frames are buffered.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// True if nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Error (type, code) pairs, per version.
mod err {
    pub const BAD_REQUEST: u16 = 1;
    pub const BAD_TYPE: u16 = 1;
    pub const BAD_STAT: u16 = 2;
    pub const BUFFER_UNKNOWN: u16 = 8;
    pub const IS_SLAVE: u16 = 10;
    /// 1.3: OFPET_ROLE_REQUEST_FAILED = 11 (STALE 0, UNSUP 1, BAD_ROLE 2).
    pub const ROLE_REQUEST_FAILED: u16 = 11;
    pub const STALE: u16 = 0;
    pub const BAD_ROLE: u16 = 2;
    pub const BAD_VERSION: u16 = 0;
    pub const HELLO_FAILED: u16 = 0;
    pub const INCOMPATIBLE: u16 = 0;
    /// 1.0: OFPET_FLOW_MOD_FAILED = 3 (ALL_TABLES_FULL 0, OVERLAP 1).
    pub const FLOW_MOD_FAILED_10: u16 = 3;
    /// 1.3: OFPET_FLOW_MOD_FAILED = 5 (TABLE_FULL 1, BAD_TABLE_ID 2, OVERLAP 3).
    pub const FLOW_MOD_FAILED_13: u16 = 5;
}

impl Switch {
    /// A switch with ports `1..=n_ports` (all links down until wired).
    pub fn new(dpid: u64, version: u8, n_ports: u32) -> Switch {
        let ports = (1..=n_ports).map(|no| (no, Port::new(dpid, no))).collect();
        let n_tables = if version == OFP10 { 1 } else { TABLES_13 };
        Switch {
            dpid,
            version,
            ports,
            tables: vec![FlowTable::default(); n_tables],
            groups: BTreeMap::new(),
            table_capacity: DEFAULT_TABLE_CAPACITY,
            miss_send_len: 128,
            config_flags: 0,
            generation_id: None,
            conns: BTreeMap::new(),
            requester: 0,
            buffers: PacketBuffers::default(),
            work_left: WORK_BUDGET,
            mac_table: BTreeMap::new(),
        }
    }

    /// The ports the NORMAL action sends `frame` (from `in_port`) to, after
    /// learning its source: the port its destination was learned on, or,
    /// for a broadcast, multicast or unknown destination (or one learned on
    /// a port that is down), every port but the ingress one. A destination
    /// learned on the ingress port goes nowhere.
    pub fn normal_ports(&mut self, frame: &[u8], in_port: u32) -> Vec<u32> {
        if frame.len() < 14 {
            return Vec::new();
        }
        let (dst, src): ([u8; 6], [u8; 6]) =
            (frame[0..6].try_into().expect("6 bytes"), frame[6..12].try_into().expect("6 bytes"));
        if src[0] & 1 == 0 && (self.mac_table.len() < MAC_TABLE_MAX || self.mac_table.contains_key(&src)) {
            self.mac_table.insert(src, in_port);
        }
        self.normal_lookup(&dst, in_port)
    }

    /// Where NORMAL sends a frame for `dst` that came in on `in_port`, by
    /// what the switch has learned (nothing is learned here).
    pub fn normal_lookup(&self, dst: &[u8; 6], in_port: u32) -> Vec<u32> {
        let learned = (dst[0] & 1 == 0).then(|| self.mac_table.get(dst)).flatten();
        match learned {
            Some(&p) if p == in_port => Vec::new(),
            Some(&p) if self.ports.get(&p).is_some_and(|port| port.is_live()) => vec![p],
            _ => self.flood_ports(v13::port::FLOOD, in_port),
        }
    }

    /// The ports a FLOOD (or ALL) output from `in_port` reaches: every port
    /// but the ingress one, less 1.0's NO_FLOOD ports for FLOOD.
    pub fn flood_ports(&self, port: u32, in_port: u32) -> Vec<u32> {
        self.ports
            .values()
            .filter(|p| {
                p.no != in_port && !(port == v13::port::FLOOD && self.version == OFP10 && p.config & NO_FLOOD_10 != 0)
            })
            .map(|p| p.no)
            .collect()
    }

    /// The HELLO this switch sends when it connects.
    pub fn hello(&self) -> Message {
        Message::new(
            0,
            Body::Hello { version: self.version, hello: sts_proxy::wire::Hello::with_versions(&[self.version]) },
        )
    }

    fn error(&self, xid: u32, err_type: u16, code: u16, offending: &[u8]) -> Message {
        let data = Bytes::copy_from_slice(&offending[..offending.len().min(64)]);
        let body = if self.version == OFP10 {
            Body::V10(v10::Msg::Error(v10::Error { err_type, code, data }))
        } else {
            Body::V13(v13::Msg::Error(v13::Error::Standard { err_type, code, data }))
        };
        Message::new(xid, body)
    }

    /// Handles one message from a controller. `raw` is its bytes (quoted in errors).
    pub fn handle(&mut self, raw: &[u8], msg: &Message, now: Millis) -> Vec<Output> {
        self.handle_from(0, raw, msg, now)
    }

    /// Handles a message from controller connection `conn` (roles and async
    /// configs are per connection).
    pub fn handle_from(&mut self, conn: usize, raw: &[u8], msg: &Message, now: Millis) -> Vec<Output> {
        self.requester = conn;
        let mut out = Vec::new();
        let xid = msg.xid;
        match &msg.body {
            Body::Hello { version, hello } => {
                if !hello.versions(*version).contains(&self.version) {
                    out.push(Output::Reply(self.error(xid, err::HELLO_FAILED, err::INCOMPATIBLE, raw)));
                }
            }
            Body::V10(m) if self.version == OFP10 => self.handle_v10(raw, xid, m, now, &mut out),
            Body::V13(m) if self.version == OFP13 => self.handle_v13(raw, xid, m, now, &mut out),
            Body::V10(_) | Body::V13(_) => {
                out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BAD_VERSION, raw)))
            }
            Body::Raw { .. } => out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BAD_TYPE, raw))),
        }
        out
    }

    fn reply10(xid: u32, m: v10::Msg) -> Output {
        Output::Reply(Message::new(xid, Body::V10(m)))
    }

    fn reply13(xid: u32, m: v13::Msg) -> Output {
        Output::Reply(Message::new(xid, Body::V13(m)))
    }

    fn handle_v10(&mut self, raw: &[u8], xid: u32, m: &v10::Msg, now: Millis, out: &mut Vec<Output>) {
        use v10::Msg as M;
        match m {
            M::EchoRequest(d) => out.push(Self::reply10(xid, M::EchoReply(d.clone()))),
            M::FeaturesRequest => out.push(Self::reply10(
                xid,
                M::FeaturesReply(v10::FeaturesReply {
                    datapath_id: self.dpid,
                    n_buffers: self.buffers.capacity as u32,
                    n_tables: 1,
                    capabilities: 0x87, // flow, table, port stats; ARP match IP
                    actions: 0xfff,
                    ports: self.ports.values().chain([&Port::local(self.dpid)]).map(Port::to_v10).collect(),
                }),
            )),
            M::GetConfigRequest => out.push(Self::reply10(
                xid,
                M::GetConfigReply(v10::SwitchConfig { flags: self.config_flags, miss_send_len: self.miss_send_len }),
            )),
            M::SetConfig(c) => {
                self.config_flags = c.flags;
                self.miss_send_len = c.miss_send_len;
            }
            M::BarrierRequest => out.push(Self::reply10(xid, M::BarrierReply)),
            M::FlowMod(fm) => self.flow_mod_v10(raw, xid, fm, now, out),
            M::PacketOut(po) => {
                let Some(frame) = self.packet_out_frame(po.buffer_id, &po.data) else {
                    out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BUFFER_UNKNOWN, raw)));
                    return;
                };
                let actions: Vec<Action> = po.actions.iter().map(Action::from_v10).collect();
                let hit = Hit { packet_out: true, ..Hit::default() };
                self.budgeted(out, |sw, out| {
                    sw.run_actions(&actions, frame, flow::port10(po.in_port), hit, now, out);
                });
            }
            M::PortMod(pm) => self.port_mod(pm.port_no as u32, pm.config, pm.mask, out),
            M::StatsRequest(req) => {
                use v10::stats::{StatsReplyBody as R, StatsRequestBody as Q};
                let body = match &req.body {
                    Q::Desc => R::Desc(Box::new(desc())),
                    Q::Flow(f) | Q::Aggregate(f) => {
                        let fm = FlowMatch::from_v10(&f.r#match);
                        let sel = Selector {
                            r#match: &fm,
                            strict: false,
                            priority: 0,
                            cookie: 0,
                            cookie_mask: 0,
                            out_port: if f.out_port == v10::port::NONE {
                                v13::port::ANY
                            } else {
                                flow::port10(f.out_port)
                            },
                            out_group: v13::GROUP_ANY,
                        };
                        let entries: Vec<&FlowEntry> = self.tables[0].select(&sel).collect();
                        if matches!(req.body, Q::Aggregate(_)) {
                            R::Aggregate(v10::stats::AggregateStats {
                                packet_count: entries.iter().map(|e| e.packet_count).sum(),
                                byte_count: entries.iter().map(|e| e.byte_count).sum(),
                                flow_count: entries.len() as u32,
                            })
                        } else {
                            R::Flow(entries.iter().map(|e| flow_stats10(e, now)).collect())
                        }
                    }
                    Q::Table => R::Table(vec![v10::stats::TableStats {
                        table_id: 0,
                        name: FixedStr::new("classifier"),
                        wildcards: v10::wildcards::ALL,
                        max_entries: self.table_capacity as u32,
                        active_count: self.tables[0].len() as u32,
                        lookup_count: self.tables[0].lookup_count,
                        matched_count: self.tables[0].matched_count,
                    }]),
                    Q::Port { port_no } => R::Port(
                        self.ports
                            .values()
                            .filter(|p| *port_no == v10::port::NONE || p.no == *port_no as u32)
                            .map(|p| v10::stats::PortStats {
                                port_no: p.no as u16,
                                counters: [p.rx_packets, p.tx_packets, p.rx_bytes, p.tx_bytes, 0, 0, 0, 0, 0, 0, 0, 0],
                            })
                            .collect(),
                    ),
                    Q::Queue { .. } => R::Queue(vec![]),
                    Q::Vendor { .. } | Q::Unknown { .. } => {
                        out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BAD_STAT, raw)));
                        return;
                    }
                };
                out.extend(reply_parts(body, |flags, body| {
                    Message::new(xid, Body::V10(M::StatsReply(v10::StatsReply { flags, body })))
                }));
            }
            M::QueueGetConfigRequest { port } => {
                out.push(Self::reply10(xid, M::QueueGetConfigReply { port: *port, queues: vec![] }))
            }
            M::Vendor(_) => out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, 3 /* BAD_VENDOR */, raw))),
            // Replies and asynchronous messages are for controllers, not switches.
            _ => out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BAD_TYPE, raw))),
        }
    }

    fn handle_v13(&mut self, raw: &[u8], xid: u32, m: &v13::Msg, now: Millis, out: &mut Vec<Output>) {
        use v13::Msg as M;
        let conn = self.requester;
        let changes_state = matches!(
            m,
            M::FlowMod(_) | M::GroupMod(_) | M::PortMod(_) | M::TableMod { .. } | M::MeterMod(_) | M::PacketOut(_)
        );
        if changes_state && self.conn(conn).role == v13::role::SLAVE {
            out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::IS_SLAVE, raw)));
            return;
        }
        match m {
            M::EchoRequest(d) => out.push(Self::reply13(xid, M::EchoReply(d.clone()))),
            M::FeaturesRequest => out.push(Self::reply13(
                xid,
                M::FeaturesReply(v13::FeaturesReply {
                    datapath_id: self.dpid,
                    n_buffers: self.buffers.capacity as u32,
                    n_tables: self.tables.len() as u8,
                    auxiliary_id: 0,
                    capabilities: 0x4f, // flow, table, port, group stats; queue stats
                    reserved: 0,
                }),
            )),
            M::GetConfigRequest => out.push(Self::reply13(
                xid,
                M::GetConfigReply(v13::SwitchConfig { flags: self.config_flags, miss_send_len: self.miss_send_len }),
            )),
            M::SetConfig(c) => {
                self.config_flags = c.flags;
                self.miss_send_len = c.miss_send_len;
            }
            M::BarrierRequest => out.push(Self::reply13(xid, M::BarrierReply)),
            M::FlowMod(fm) => self.flow_mod_v13(raw, xid, fm, now, out),
            M::GroupMod(gm) => self.group_mod(gm),
            M::MeterMod(_) | M::TableMod { .. } => {}
            M::PacketOut(po) => {
                let Some(frame) = self.packet_out_frame(po.buffer_id, &po.data) else {
                    out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BUFFER_UNKNOWN, raw)));
                    return;
                };
                let actions: Vec<Action> = po.actions.iter().map(Action::from_v13).collect();
                let hit = Hit { packet_out: true, ..Hit::default() };
                self.budgeted(out, |sw, out| {
                    sw.run_actions(&actions, frame, po.in_port, hit, now, out);
                });
            }
            M::PortMod(pm) => self.port_mod(pm.port_no, pm.config, pm.mask, out),
            M::RoleRequest(r) => {
                use v13::role::{EQUAL, MASTER, NOCHANGE, SLAVE};
                if !matches!(r.role, NOCHANGE | EQUAL | MASTER | SLAVE) {
                    out.push(Output::Reply(self.error(xid, err::ROLE_REQUEST_FAILED, err::BAD_ROLE, raw)));
                    return;
                }
                if matches!(r.role, MASTER | SLAVE) {
                    // Generation ids compare by wrapping distance: older is stale.
                    if self.generation_id.is_some_and(|g| (r.generation_id.wrapping_sub(g) as i64) < 0) {
                        out.push(Output::Reply(self.error(xid, err::ROLE_REQUEST_FAILED, err::STALE, raw)));
                        return;
                    }
                    self.generation_id = Some(r.generation_id);
                }
                if r.role == MASTER {
                    // One master: the previous one becomes a slave.
                    self.conns.values_mut().filter(|c| c.role == MASTER).for_each(|c| c.role = SLAVE);
                }
                if r.role != NOCHANGE {
                    self.conns.entry(conn).or_default().role = r.role;
                }
                let reply = v13::Role {
                    role: self.conn(conn).role,
                    generation_id: self.generation_id.unwrap_or(r.generation_id),
                };
                out.push(Self::reply13(xid, M::RoleReply(reply)));
            }
            M::GetAsyncRequest => out.push(Self::reply13(xid, M::GetAsyncReply(self.conn(conn).async_config))),
            M::SetAsync(a) => self.conns.entry(conn).or_default().async_config = *a,
            M::QueueGetConfigRequest { port } => {
                out.push(Self::reply13(xid, M::QueueGetConfigReply { port: *port, queues: vec![] }))
            }
            M::MultipartRequest(req) => match self.multipart(&req.body, now) {
                Some(body) => out.extend(reply_parts(body, |flags, body| {
                    Message::new(xid, Body::V13(M::MultipartReply(v13::MultipartReply { flags, body })))
                })),
                None => out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BAD_STAT, raw))),
            },
            M::Experimenter(_) => {
                out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, 3 /* BAD_EXPERIMENTER */, raw)))
            }
            _ => out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BAD_TYPE, raw))),
        }
    }

    fn multipart(&self, req: &RequestBody, now: Millis) -> Option<ReplyBody> {
        Some(match req {
            RequestBody::Desc => ReplyBody::Desc(Box::new(desc())),
            RequestBody::PortDesc => {
                ReplyBody::PortDesc(self.ports.values().chain([&Port::local(self.dpid)]).map(Port::to_v13).collect())
            }
            RequestBody::Flow(f) | RequestBody::Aggregate(f) => {
                let fm = FlowMatch::from_v13(&f.r#match).ok()?;
                let sel = Selector {
                    r#match: &fm,
                    strict: false,
                    priority: 0,
                    cookie: f.cookie,
                    cookie_mask: f.cookie_mask,
                    out_port: f.out_port,
                    out_group: f.out_group,
                };
                let entries: Vec<(u8, &FlowEntry)> = self
                    .tables
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| f.table_id == v13::TABLE_ALL || *i == f.table_id as usize)
                    .flat_map(|(i, t)| t.select(&sel).map(move |e| (i as u8, e)))
                    .collect();
                if matches!(req, RequestBody::Aggregate(_)) {
                    ReplyBody::Aggregate(mp::AggregateStats {
                        packet_count: entries.iter().map(|(_, e)| e.packet_count).sum(),
                        byte_count: entries.iter().map(|(_, e)| e.byte_count).sum(),
                        flow_count: entries.len() as u32,
                    })
                } else {
                    ReplyBody::Flow(entries.iter().map(|(t, e)| flow_stats13(*t, e, now)).collect())
                }
            }
            RequestBody::Table => ReplyBody::Table(
                self.tables
                    .iter()
                    .enumerate()
                    .map(|(i, t)| mp::TableStats {
                        table_id: i as u8,
                        active_count: t.len() as u32,
                        lookup_count: t.lookup_count,
                        matched_count: t.matched_count,
                    })
                    .collect(),
            ),
            RequestBody::PortStats { port_no } => ReplyBody::PortStats(
                self.ports
                    .values()
                    .filter(|p| *port_no == v13::port::ANY || p.no == *port_no)
                    .map(|p| mp::PortStats {
                        port_no: p.no,
                        counters: [p.rx_packets, p.tx_packets, p.rx_bytes, p.tx_bytes, 0, 0, 0, 0, 0, 0, 0, 0],
                        duration_sec: (now / 1000) as u32,
                        duration_nsec: 0,
                    })
                    .collect(),
            ),
            RequestBody::GroupDesc => ReplyBody::GroupDesc(
                self.groups
                    .iter()
                    .map(|(id, g)| mp::GroupDesc { group_type: g.group_type, group_id: *id, buckets: g.wire.clone() })
                    .collect(),
            ),
            RequestBody::Group { .. } => ReplyBody::Group(vec![]),
            RequestBody::GroupFeatures => ReplyBody::GroupFeatures(mp::GroupFeatures {
                types: 0b1111,
                capabilities: 0,
                max_groups: [4096; 4],
                actions: [0x03ff_ffff; 4],
            }),
            RequestBody::Meter { .. } => ReplyBody::Meter(vec![]),
            RequestBody::MeterConfig { .. } => ReplyBody::MeterConfig(vec![]),
            RequestBody::MeterFeatures => ReplyBody::MeterFeatures(mp::MeterFeatures {
                max_meter: 0,
                band_types: 0,
                capabilities: 0,
                max_bands: 0,
                max_color: 0,
            }),
            RequestBody::Queue { .. } => ReplyBody::Queue(vec![]),
            RequestBody::TableFeatures(_) => ReplyBody::TableFeatures(Bytes::new()),
            RequestBody::Experimenter(_) | RequestBody::Unknown { .. } => return None,
        })
    }

    fn port_mod(&mut self, port_no: u32, config: u32, mask: u32, out: &mut Vec<Output>) {
        let version = self.version;
        if let Some(p) = self.ports.get_mut(&port_no) {
            p.config = (p.config & !mask) | (config & mask);
            let status = port_status(version, v13::port_reason::MODIFY, p);
            out.push(Output::ToControllers(status));
        }
    }

    fn group_mod(&mut self, gm: &v13::GroupMod) {
        const ADD: u16 = 0;
        const MODIFY: u16 = 1;
        const DELETE: u16 = 2;
        let group = || Group {
            group_type: gm.group_type,
            buckets: gm.buckets.iter().map(|b| (b.clone(), b.actions.iter().map(Action::from_v13).collect())).collect(),
            wire: gm.buckets.clone(),
        };
        match gm.command {
            ADD | MODIFY => {
                self.groups.insert(gm.group_id, group());
            }
            DELETE if gm.group_id == 0xffff_fffc => self.groups.clear(), // OFPG_ALL
            DELETE => {
                self.groups.remove(&gm.group_id);
            }
            _ => {}
        }
    }

    fn flow_mod_v10(&mut self, raw: &[u8], xid: u32, fm: &v10::FlowMod, now: Millis, out: &mut Vec<Output>) {
        let m = FlowMatch::from_v10(&fm.r#match);
        // What an entry stores (a delete stores nothing).
        let (instructions, wire) = if fm.command <= v10::flow_mod_command::MODIFY_STRICT {
            (
                Instructions { apply: fm.actions.iter().map(Action::from_v10).collect(), ..Default::default() },
                WireForm::V10 { r#match: fm.r#match.clone(), actions: fm.actions.clone() },
            )
        } else {
            (Instructions::default(), WireForm::V10 { r#match: v10::Match::default(), actions: Vec::new() })
        };
        let out_port = if fm.out_port == v10::port::NONE { v13::port::ANY } else { flow::port10(fm.out_port) };
        let cmd = match fm.command {
            v10::flow_mod_command::ADD => 0,
            v10::flow_mod_command::MODIFY => 1,
            v10::flow_mod_command::MODIFY_STRICT => 2,
            v10::flow_mod_command::DELETE => 3,
            v10::flow_mod_command::DELETE_STRICT => 4,
            _ => {
                out.push(Output::Reply(self.error(xid, err::FLOW_MOD_FAILED_10, 5 /* BAD_COMMAND */, raw)));
                return;
            }
        };
        // 1.0: CHECK_OVERLAP is flag bit 1, as in 1.3; there is no cookie mask.
        let req = FlowModRequest {
            table: 0,
            command: cmd,
            m,
            priority: fm.priority,
            cookie: fm.cookie,
            cookie_mask: if cmd >= 1 { 0 } else { u64::MAX },
            idle: fm.idle_timeout,
            hard: fm.hard_timeout,
            flags: fm.flags,
            out_port,
            out_group: v13::GROUP_ANY,
            instructions,
            wire,
            modify_adds: true,
        };
        if let Err(code) = self.apply_flow_mod(req, now, out) {
            let code10 = if code == 3 { 1 } else { 0 };
            out.push(Output::Reply(self.error(xid, err::FLOW_MOD_FAILED_10, code10, raw)));
        } else if cmd <= 2 {
            self.release_buffer(raw, xid, fm.buffer_id, now, out);
        }
    }

    fn flow_mod_v13(&mut self, raw: &[u8], xid: u32, fm: &v13::FlowMod, now: Millis, out: &mut Vec<Output>) {
        let Ok(m) = FlowMatch::from_v13(&fm.r#match) else {
            out.push(Output::Reply(self.error(xid, 4 /* BAD_MATCH */, 3 /* BAD_FIELD */, raw)));
            return;
        };
        if fm.table_id as usize >= self.tables.len() && !(fm.table_id == v13::TABLE_ALL && fm.command >= 3) {
            out.push(Output::Reply(self.error(xid, err::FLOW_MOD_FAILED_13, 2, raw)));
            return;
        }
        // What an entry stores (a delete stores nothing).
        let (instructions, wire) = if fm.command <= v13::flow_mod_command::MODIFY_STRICT {
            (
                Instructions::from_v13(&fm.instructions),
                WireForm::V13 { r#match: fm.r#match.clone(), instructions: fm.instructions.clone() },
            )
        } else {
            (Instructions::default(), WireForm::V13 { r#match: v13::Match::default(), instructions: Vec::new() })
        };
        let req = FlowModRequest {
            table: fm.table_id,
            command: fm.command,
            m,
            priority: fm.priority,
            cookie: fm.cookie,
            cookie_mask: fm.cookie_mask,
            idle: fm.idle_timeout,
            hard: fm.hard_timeout,
            flags: fm.flags,
            out_port: fm.out_port,
            out_group: fm.out_group,
            instructions,
            wire,
            modify_adds: false,
        };
        if let Err(code) = self.apply_flow_mod(req, now, out) {
            out.push(Output::Reply(self.error(xid, err::FLOW_MOD_FAILED_13, code, raw)));
        } else if fm.command <= 2 {
            self.release_buffer(raw, xid, fm.buffer_id, now, out);
        }
    }

    /// Splits a controller message into the frame it sends or releases
    /// (taking it out of its buffer) and what remains to apply: `None` for a
    /// PACKET_OUT, the same FLOW_MOD naming no buffer, the message itself
    /// otherwise. Used to drop a frame that loops through the controller.
    pub fn without_frame(&mut self, msg: &Message) -> (Option<Vec<u8>>, Option<Message>) {
        let mut rest = msg.clone();
        let frame = match &mut rest.body {
            Body::V10(v10::Msg::PacketOut(p)) => return (self.packet_out_frame(p.buffer_id, &p.data), None),
            Body::V13(v13::Msg::PacketOut(p)) => return (self.packet_out_frame(p.buffer_id, &p.data), None),
            Body::V10(v10::Msg::FlowMod(f)) => self.buffers.take(std::mem::replace(&mut f.buffer_id, v10::NO_BUFFER)),
            Body::V13(v13::Msg::FlowMod(f)) => self.buffers.take(std::mem::replace(&mut f.buffer_id, v13::NO_BUFFER)),
            _ => None,
        };
        (frame.map(|(_, f)| f), Some(rest))
    }

    /// Connection `conn`'s role and async config (the defaults if it never
    /// set them).
    pub fn conn(&self, conn: usize) -> ConnState {
        self.conns.get(&conn).copied().unwrap_or_default()
    }

    /// Forgets what connection `conn` set (it closed; a new one starts equal).
    pub fn forget_connection(&mut self, conn: usize) {
        self.conns.remove(&conn);
    }

    /// Whether connection `conn` gets asynchronous message `msg` (PACKET_IN,
    /// PORT_STATUS, FLOW_REMOVED), by its role and async config; anything
    /// else always goes. OpenFlow 1.0 has no roles: everything goes.
    pub fn wants(&self, conn: usize, msg: &Message) -> bool {
        let c = self.conn(conn);
        let slot = usize::from(c.role == v13::role::SLAVE);
        let bit = |mask: [u32; 2], reason: u8| mask[slot] & (1u32 << reason.min(31)) != 0;
        match &msg.body {
            Body::V13(v13::Msg::PacketIn(p)) => bit(c.async_config.packet_in_mask, p.reason),
            Body::V13(v13::Msg::PortStatus(p)) => bit(c.async_config.port_status_mask, p.reason),
            Body::V13(v13::Msg::FlowRemoved(f)) => bit(c.async_config.flow_removed_mask, f.reason),
            _ => true,
        }
    }

    /// The frame a PACKET_OUT sends: the buffered one it names, or its data
    /// (`None`: an unknown buffer id).
    fn packet_out_frame(&mut self, buffer_id: u32, data: &[u8]) -> Option<Vec<u8>> {
        if buffer_id == v13::NO_BUFFER {
            Some(data.to_vec())
        } else {
            self.buffers.take(buffer_id).map(|(_, frame)| frame)
        }
    }

    /// After an add or modify naming `buffer_id`: the buffered frame goes
    /// through the pipeline from the first table, as if it had just arrived
    /// (the 1.3 spec's reading; with 1.0 this is what the new entry does to
    /// it, since the entry was made for it).
    fn release_buffer(&mut self, raw: &[u8], xid: u32, buffer_id: u32, now: Millis, out: &mut Vec<Output>) {
        if buffer_id == v13::NO_BUFFER {
            return;
        }
        match self.buffers.take(buffer_id) {
            Some((in_port, frame)) => self.budgeted(out, |sw, out| sw.pipeline(frame, in_port, 0, now, out)),
            None => out.push(Output::Reply(self.error(xid, err::BAD_REQUEST, err::BUFFER_UNKNOWN, raw))),
        }
    }

    /// Applies a FLOW_MOD; `Err(code)` with the 1.3 FLOW_MOD_FAILED code.
    fn apply_flow_mod(&mut self, r: FlowModRequest, now: Millis, out: &mut Vec<Output>) -> Result<(), u16> {
        let tables =
            if r.table == v13::TABLE_ALL { 0..self.tables.len() } else { r.table as usize..r.table as usize + 1 };
        let sel = Selector {
            r#match: &r.m,
            strict: matches!(r.command, 2 | 4),
            priority: r.priority,
            cookie: r.cookie,
            cookie_mask: if r.command == 0 { 0 } else { r.cookie_mask },
            out_port: if matches!(r.command, 3 | 4) { r.out_port } else { v13::port::ANY },
            out_group: if matches!(r.command, 3 | 4) { r.out_group } else { v13::GROUP_ANY },
        };
        // The request's parts move into the entry (an add is most FLOW_MODs).
        let entry = |r: FlowModRequest| FlowEntry {
            r#match: r.m,
            priority: r.priority,
            cookie: r.cookie,
            idle_timeout: r.idle,
            hard_timeout: r.hard,
            flags: r.flags,
            instructions: r.instructions,
            wire: r.wire,
            installed_at: now,
            last_used: now,
            packet_count: 0,
            byte_count: 0,
        };
        match r.command {
            0 => {
                let capacity = self.table_capacity;
                let check = r.flags & v13::flow_mod_flags::CHECK_OVERLAP != 0;
                self.tables[tables.start]
                    .add(entry(r), check, capacity)
                    .map_err(|overlap| if overlap { 3u16 } else { 1 })?;
            }
            1 | 2 => {
                let reset = r.flags & v13::flow_mod_flags::RESET_COUNTS != 0;
                let n: usize =
                    tables.clone().map(|t| self.tables[t].modify(&sel, &r.instructions, &r.wire, reset)).sum();
                if n == 0 && r.modify_adds {
                    // 1.0: a modify that matches nothing acts as an add.
                    let capacity = self.table_capacity;
                    self.tables[tables.start].add(entry(r), false, capacity).map_err(|_| 1u16)?;
                }
            }
            3 | 4 => {
                for t in tables {
                    for gone in self.tables[t].delete(&sel) {
                        if gone.flags & v13::flow_mod_flags::SEND_FLOW_REM != 0 {
                            out.push(Output::ToControllers(flow_removed(
                                self.version,
                                t as u8,
                                &gone,
                                RemovedReason::Delete,
                                now,
                            )));
                        }
                    }
                }
            }
            _ => return Err(6), // BAD_COMMAND
        }
        Ok(())
    }

    /// When the first flow entry expires, if none is used before
    /// ([`FlowTable::next_expiry`]).
    pub fn next_expiry(&self) -> Option<Millis> {
        self.tables.iter().filter_map(FlowTable::next_expiry).min()
    }

    /// Expires flows whose timeouts passed; returns FLOW_REMOVED messages where flagged.
    pub fn expire(&mut self, now: Millis) -> Vec<Output> {
        let mut out = Vec::new();
        for t in 0..self.tables.len() {
            for (gone, reason) in self.tables[t].expire(now) {
                if gone.flags & v13::flow_mod_flags::SEND_FLOW_REM != 0 {
                    out.push(Output::ToControllers(flow_removed(self.version, t as u8, &gone, reason, now)));
                }
            }
        }
        out
    }

    /// A frame arrives on `in_port`: run it through the pipeline.
    pub fn receive(&mut self, in_port: u32, frame: Vec<u8>, now: Millis) -> Vec<Output> {
        let mut out = Vec::new();
        let Some(p) = self.ports.get_mut(&in_port) else { return out };
        if !p.is_live() || p.config & v13::port_config::NO_RECV != 0 {
            return out;
        }
        p.rx_packets += 1;
        p.rx_bytes += frame.len() as u64;
        self.budgeted(&mut out, |sw, out| sw.pipeline(frame, in_port, 0, now, out));
        out
    }

    /// Runs one frame's processing with a fresh [`WORK_BUDGET`]; says so in
    /// `out` when it ran out.
    fn budgeted(&mut self, out: &mut Vec<Output>, work: impl FnOnce(&mut Switch, &mut Vec<Output>)) {
        self.work_left = WORK_BUDGET;
        work(self, out);
        if self.work_left == 0 {
            out.push(Output::OverBudget);
        }
        self.work_left = WORK_BUDGET;
    }

    /// Takes one unit of the frame's work budget; false when none is left.
    fn spend(&mut self) -> bool {
        if self.work_left == 0 {
            return false;
        }
        self.work_left -= 1;
        true
    }

    fn pipeline(&mut self, mut frame: Vec<u8>, in_port: u32, first_table: u8, now: Millis, out: &mut Vec<Output>) {
        let mut table = first_table as usize;
        let mut metadata = 0u64;
        let mut action_set = ActionSet::default();
        loop {
            let fields = Fields::extract(&frame, in_port, metadata);
            let Some(t) = self.tables.get_mut(table) else { return };
            let Some(entry) = t.lookup(&fields, frame.len(), now) else {
                if self.version == OFP10 {
                    // 1.0: a table miss goes to the controller.
                    let max_len = self.miss_send_len;
                    self.packet_in(&frame, in_port, v10::packet_in_reason::NO_MATCH, 0, 0, max_len, out);
                }
                return; // 1.3: a miss without a table-miss entry drops.
            };
            let ins = entry.instructions.clone();
            let hit = Hit {
                table: table as u8,
                cookie: entry.cookie,
                table_miss: entry.priority == 0 && entry.r#match.fields.is_empty(),
                ..Hit::default()
            };
            if !ins.apply.is_empty() {
                frame = self.run_actions(&ins.apply, frame, in_port, hit, now, out);
            }
            if ins.clear {
                action_set.clear();
            }
            if let Some(w) = &ins.write {
                action_set.write(w);
            }
            if let Some((v, m)) = ins.write_metadata {
                metadata = (metadata & !m) | (v & m);
            }
            match ins.goto {
                Some(next) if (next as usize) > table => table = next as usize,
                _ => {
                    let actions = action_set.into_ordered();
                    if !actions.is_empty() {
                        self.run_actions(&actions, frame, in_port, hit, now, out);
                    }
                    return;
                }
            }
        }
    }

    /// Executes `actions` on `frame` in order; outputs copy the frame as it is at
    /// that point. Returns the frame after the last rewrite.
    fn run_actions(
        &mut self,
        actions: &[Action],
        mut frame: Vec<u8>,
        in_port: u32,
        hit: Hit,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Vec<u8> {
        for a in actions {
            if !self.spend() {
                break;
            }
            match a {
                Action::Output { port, max_len } => self.output(*port, *max_len, &frame, in_port, hit, now, out),
                Action::SetField(f, v) => {
                    packet::set_field(&mut frame, *f, *v);
                }
                Action::SetVlanVid10(vid) => {
                    if Fields::extract(&frame, 0, 0).get(Field::VlanVid) == Some(0) {
                        packet::push_vlan(&mut frame, packet::ETH_VLAN);
                    }
                    packet::set_field(&mut frame, Field::VlanVid, *vid as u128);
                }
                Action::SetVlanPcp10(pcp) => {
                    if Fields::extract(&frame, 0, 0).get(Field::VlanVid) == Some(0) {
                        packet::push_vlan(&mut frame, packet::ETH_VLAN);
                    }
                    packet::set_field(&mut frame, Field::VlanPcp, *pcp as u128);
                }
                Action::PushVlan(tpid) => packet::push_vlan(&mut frame, *tpid),
                Action::PopVlan => packet::pop_vlan(&mut frame),
                Action::Group(g) => self.group(*g, &frame, in_port, hit, now, out),
                Action::Ignored => {}
            }
        }
        frame
    }

    fn group(&mut self, id: u32, frame: &[u8], in_port: u32, mut hit: Hit, now: Millis, out: &mut Vec<Output>) {
        if hit.group_depth >= MAX_GROUP_DEPTH {
            return;
        }
        hit.group_depth += 1;
        let Some(g) = self.groups.get(&id).cloned() else { return };
        let live = |sw: &Switch, b: &v13::Bucket| {
            b.watch_port == v13::port::ANY || sw.ports.get(&b.watch_port).is_some_and(Port::is_live)
        };
        let chosen: Vec<&Vec<Action>> = match g.group_type {
            v13::group_type::ALL => g.buckets.iter().map(|(_, a)| a).collect(),
            v13::group_type::INDIRECT => g.buckets.iter().take(1).map(|(_, a)| a).collect(),
            v13::group_type::FF => g.buckets.iter().find(|(b, _)| live(self, b)).map(|(_, a)| a).into_iter().collect(),
            _ => {
                // SELECT: a deterministic choice by flow hash, weighted.
                let total: u64 = g.buckets.iter().map(|(b, _)| b.weight.max(1) as u64).sum();
                if total == 0 {
                    return;
                }
                let mut h = sts_proxy::wire::packet::digest(&frame[..frame.len().min(34)]);
                h.truncate(8);
                let mut pick = u64::from_str_radix(&h, 16).unwrap_or(0) % total;
                g.buckets
                    .iter()
                    .find(|(b, _)| {
                        let w = b.weight.max(1) as u64;
                        if pick < w {
                            true
                        } else {
                            pick -= w;
                            false
                        }
                    })
                    .map(|(_, a)| a)
                    .into_iter()
                    .collect()
            }
        };
        for actions in chosen {
            if self.work_left == 0 {
                break;
            }
            self.run_actions(actions, frame.to_vec(), in_port, hit, now, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn output(
        &mut self,
        port: u32,
        max_len: u16,
        frame: &[u8],
        in_port: u32,
        hit: Hit,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        use v13::port as P;
        let version = self.version;
        let mut emit = |sw: &mut Switch, p: u32| {
            let live = sw.ports.get(&p).is_some_and(|port| port.is_live());
            if live && !sw.spend() {
                return;
            }
            if let Some(port) = sw.ports.get_mut(&p) {
                if port.is_live() && port.config & v13::port_config::NO_FWD == 0 {
                    port.tx_packets += 1;
                    port.tx_bytes += frame.len() as u64;
                    out.push(Output::Emit { port: p, frame: frame.to_vec() });
                }
            }
        };
        match port {
            P::IN_PORT => emit(self, in_port),
            P::FLOOD | P::ALL => {
                for p in self.flood_ports(port, in_port) {
                    emit(self, p);
                }
            }
            P::NORMAL => {
                for p in self.normal_ports(frame, in_port) {
                    emit(self, p);
                }
            }
            P::CONTROLLER => {
                let reason = match (version, hit.table_miss) {
                    (OFP10, _) => v10::packet_in_reason::ACTION,
                    (_, true) => v13::packet_in_reason::NO_MATCH,
                    (_, false) => v13::packet_in_reason::ACTION,
                };
                self.packet_in(frame, in_port, reason, hit.table, hit.cookie, max_len, out);
            }
            P::TABLE if hit.packet_out => self.pipeline(frame.to_vec(), in_port, 0, now, out),
            P::TABLE => {}
            P::LOCAL | P::ANY => {}
            // The spec: a frame never leaves through its ingress port unless the
            // action names IN_PORT (faucet's flood rules rely on this).
            p if p == in_port => {}
            p => emit(self, p),
        }
    }

    /// Sends `frame` to the controllers: whole, or, when the switch buffers
    /// and the frame is longer than `max_len` (an output action's, or 1.0's
    /// miss_send_len), buffered and cut to `max_len` bytes. `max_len` 0xffff
    /// (1.3's OFPCML_NO_BUFFER) always sends the whole frame.
    #[allow(clippy::too_many_arguments)]
    fn packet_in(
        &mut self,
        frame: &[u8],
        in_port: u32,
        reason: u8,
        table: u8,
        cookie: u64,
        max_len: u16,
        out: &mut Vec<Output>,
    ) {
        // NO_PACKET_IN suppresses table-miss packet-ins only, as Open vSwitch
        // reads it: an explicit output to CONTROLLER still goes up (os-ken's STP
        // sets NO_PACKET_IN on listening ports and still expects its BPDUs).
        let miss = reason == v13::packet_in_reason::NO_MATCH;
        if miss && self.ports.get(&in_port).is_some_and(|p| p.config & v13::port_config::NO_PACKET_IN != 0) {
            return;
        }
        let cut = max_len != v13::CML_NO_BUFFER && frame.len() > max_len as usize;
        let (buffer_id, data) = match cut.then(|| self.buffers.hold(in_port, frame)).flatten() {
            Some(id) => (id, Bytes::copy_from_slice(&frame[..max_len as usize])),
            None => (v13::NO_BUFFER, Bytes::copy_from_slice(frame)),
        };
        let body = if self.version == OFP10 {
            Body::V10(v10::Msg::PacketIn(v10::PacketIn {
                buffer_id,
                total_len: frame.len() as u16,
                in_port: flow::port_to10(in_port),
                reason,
                data,
            }))
        } else {
            Body::V13(v13::Msg::PacketIn(v13::PacketIn {
                buffer_id,
                total_len: frame.len() as u16,
                reason,
                table_id: table,
                cookie,
                r#match: v13::Match::new([BasicOxm::exact(Field::InPort, in_port as u128)]),
                data,
            }))
        };
        out.push(Output::ToControllers(Message::new(0, body)));
    }

    /// Sets a port's physical link state; returns the PORT_STATUS to send if it changed.
    pub fn set_link(&mut self, port_no: u32, up: bool) -> Option<Message> {
        let version = self.version;
        let p = self.ports.get_mut(&port_no)?;
        if p.link_up == up {
            return None;
        }
        p.link_up = up;
        let status = port_status(version, v13::port_reason::MODIFY, p);
        if !up {
            // As Open vSwitch: addresses learned on a port that went away are forgotten.
            self.mac_table.retain(|_, learned| *learned != port_no);
        }
        Some(status)
    }

    /// Adds a port (link up, as when a cable is plugged into a new interface)
    /// and returns its number and the PORT_STATUS (reason ADD) to send.
    pub fn add_port(&mut self) -> (u32, Message) {
        let no = self.ports.keys().next_back().map_or(1, |n| n + 1);
        let mut p = Port::new(self.dpid, no);
        p.link_up = true;
        let msg = port_status(self.version, v13::port_reason::ADD, &p);
        self.ports.insert(no, p);
        (no, msg)
    }

    /// A human-readable dump of ports and flow tables (for debugging and the console).
    pub fn describe(&self) -> String {
        let mut s = format!("switch {} (OpenFlow {:#x})\n", self.dpid, self.version);
        for p in self.ports.values() {
            s.push_str(&format!(
                "  port {} {} link {} config {:#x}\n",
                p.no,
                p.name,
                if p.link_up { "up" } else { "down" },
                p.config
            ));
        }
        for (t, table) in self.tables.iter().enumerate() {
            for e in table.entries() {
                let m: Vec<String> = e
                    .r#match
                    .fields
                    .iter()
                    .map(|f| format!("{}={:#x}/{:#x}", f.field.name(), f.value, f.mask))
                    .collect();
                s.push_str(&format!(
                    "  table {t} prio {} [{}] -> {:?} packets {}\n",
                    e.priority,
                    m.join(","),
                    e.instructions,
                    e.packet_count
                ));
            }
        }
        s
    }

    /// Total flow entries across tables.
    pub fn flow_count(&self) -> usize {
        self.tables.iter().map(FlowTable::len).sum()
    }
}

/// Which flow entry sent a frame on (for PACKET_IN's table, cookie and reason).
#[derive(Debug, Clone, Copy, Default)]
struct Hit {
    table: u8,
    cookie: u64,
    /// The table-miss entry (priority 0, empty match): its PACKET_INs carry
    /// reason NO_MATCH in 1.3, as Open vSwitch sends them.
    table_miss: bool,
    /// Set for PACKET_OUT actions: only they may output to TABLE (a flow entry
    /// doing so would resubmit forever; Open vSwitch refuses such entries).
    packet_out: bool,
    /// Groups entered so far: chains deeper than [`MAX_GROUP_DEPTH`] (a group
    /// that reaches itself) drop the frame instead of recursing forever.
    group_depth: u8,
}

/// OFPMPF_REPLY_MORE (1.3) and OFPSF_REPLY_MORE (1.0): more parts follow.
const REPLY_MORE: u16 = 1;

/// A statistics or multipart reply body, in one piece or, when its message
/// would not fit in 65,535 bytes (a thousand flows, a switch with many
/// ports), cut into parts that each fit, as a real switch sends them
/// ([`reply_parts`] flags all but the last with REPLY_MORE).
fn split_reply<B: Splittable>(body: B, fits: &dyn Fn(&B) -> bool) -> Vec<B> {
    if fits(&body) {
        return vec![body];
    }
    match body.halves() {
        Ok((a, b)) => {
            let mut parts = split_reply(a, fits);
            parts.extend(split_reply(b, fits));
            parts
        }
        // One entry that does not fit alone: the encoder reports it.
        Err(body) => vec![body],
    }
}

/// A reply `body` as the messages that carry it (`message(flags, part)`),
/// cut into parts that fit, REPLY_MORE on all but the last.
fn reply_parts<B: Splittable + Clone>(body: B, message: impl Fn(u16, B) -> Message) -> Vec<Output> {
    let parts = split_reply(body, &|b: &B| message(0, b.clone()).emit().is_ok());
    let last = parts.len() - 1;
    parts
        .into_iter()
        .enumerate()
        .map(|(i, b)| Output::Reply(message(if i < last { REPLY_MORE } else { 0 }, b)))
        .collect()
}

/// A reply body made of a list of entries that can be cut in two.
trait Splittable: Sized {
    /// The two halves of the list, or the body back when it cannot be cut.
    fn halves(self) -> Result<(Self, Self), Self>;
}

macro_rules! halves {
    ($body:expr, $ty:ident, [$($variant:ident),*]) => {
        match $body {
            $($ty::$variant(mut list) if list.len() > 1 => {
                let back = list.split_off(list.len() / 2);
                Ok(($ty::$variant(list), $ty::$variant(back)))
            })*
            other => Err(other),
        }
    };
}

impl Splittable for ReplyBody {
    fn halves(self) -> Result<(Self, Self), Self> {
        halves!(self, ReplyBody, [Flow, Table, PortStats, Queue, Group, GroupDesc, Meter, MeterConfig, PortDesc])
    }
}

impl Splittable for v10::stats::StatsReplyBody {
    fn halves(self) -> Result<(Self, Self), Self> {
        use v10::stats::StatsReplyBody as B;
        halves!(self, B, [Flow, Table, Port, Queue])
    }
}

/// How deep group actions may chain before the frame is dropped.
const MAX_GROUP_DEPTH: u8 = 8;

struct FlowModRequest {
    table: u8,
    command: u8,
    m: FlowMatch,
    priority: u16,
    cookie: u64,
    cookie_mask: u64,
    idle: u16,
    hard: u16,
    flags: u16,
    out_port: u32,
    out_group: u32,
    instructions: Instructions,
    wire: WireForm,
    /// 1.0 semantics: a modify matching nothing adds.
    modify_adds: bool,
}

fn desc() -> v10::stats::DescStats {
    v10::stats::DescStats {
        mfr_desc: FixedStr::new("sts"),
        hw_desc: FixedStr::new("sts mock switch"),
        sw_desc: FixedStr::new(env!("CARGO_PKG_VERSION")),
        serial_num: FixedStr::new("none"),
        dp_desc: FixedStr::new("sts mocknet"),
    }
}

fn port_status(version: u8, reason: u8, p: &Port) -> Message {
    let body = if version == OFP10 {
        Body::V10(v10::Msg::PortStatus(v10::PortStatus { reason, desc: p.to_v10() }))
    } else {
        Body::V13(v13::Msg::PortStatus(v13::PortStatus { reason, desc: p.to_v13() }))
    };
    Message::new(0, body)
}

fn duration(e: &FlowEntry, now: Millis) -> (u32, u32) {
    let d = now.saturating_sub(e.installed_at);
    ((d / 1000) as u32, ((d % 1000) * 1_000_000) as u32)
}

fn flow_removed(version: u8, table: u8, e: &FlowEntry, reason: RemovedReason, now: Millis) -> Message {
    let (sec, nsec) = duration(e, now);
    let body = match &e.wire {
        WireForm::V10 { r#match, .. } => Body::V10(v10::Msg::FlowRemoved(v10::FlowRemoved {
            r#match: r#match.clone(),
            cookie: e.cookie,
            priority: e.priority,
            reason: reason as u8,
            duration_sec: sec,
            duration_nsec: nsec,
            idle_timeout: e.idle_timeout,
            packet_count: e.packet_count,
            byte_count: e.byte_count,
        })),
        WireForm::V13 { r#match, .. } => Body::V13(v13::Msg::FlowRemoved(v13::FlowRemoved {
            cookie: e.cookie,
            priority: e.priority,
            reason: reason as u8,
            table_id: table,
            duration_sec: sec,
            duration_nsec: nsec,
            idle_timeout: e.idle_timeout,
            hard_timeout: e.hard_timeout,
            packet_count: e.packet_count,
            byte_count: e.byte_count,
            r#match: r#match.clone(),
        })),
    };
    debug_assert!(matches!((&body, version), (Body::V10(_), OFP10) | (Body::V13(_), OFP13)));
    Message::new(0, body)
}

fn flow_stats10(e: &FlowEntry, now: Millis) -> v10::stats::FlowStats {
    let (sec, nsec) = duration(e, now);
    let (m, actions) = match &e.wire {
        WireForm::V10 { r#match, actions } => (r#match.clone(), actions.clone()),
        WireForm::V13 { .. } => (v10::Match::default(), vec![]),
    };
    v10::stats::FlowStats {
        table_id: 0,
        r#match: m,
        duration_sec: sec,
        duration_nsec: nsec,
        priority: e.priority,
        idle_timeout: e.idle_timeout,
        hard_timeout: e.hard_timeout,
        cookie: e.cookie,
        packet_count: e.packet_count,
        byte_count: e.byte_count,
        actions,
    }
}

fn flow_stats13(table: u8, e: &FlowEntry, now: Millis) -> mp::FlowStats {
    let (sec, nsec) = duration(e, now);
    let (m, instructions) = match &e.wire {
        // As Open vSwitch reports it: an apply-actions instruction without
        // actions is no instruction at all (a drop rule comes back with none;
        // checked against OVS 3.1, and Cerberus recognises its drop rules by it).
        WireForm::V13 { r#match, instructions } => (
            r#match.clone(),
            instructions
                .iter()
                .filter(|i| !matches!(i, v13::Instruction::ApplyActions(a) if a.is_empty()))
                .cloned()
                .collect(),
        ),
        WireForm::V10 { .. } => (v13::Match::default(), vec![]),
    };
    mp::FlowStats {
        table_id: table,
        duration_sec: sec,
        duration_nsec: nsec,
        priority: e.priority,
        idle_timeout: e.idle_timeout,
        hard_timeout: e.hard_timeout,
        flags: e.flags,
        cookie: e.cookie,
        packet_count: e.packet_count,
        byte_count: e.byte_count,
        r#match: m,
        instructions,
    }
}
