//! `sts-trace`: what happened in a run, and where it is kept.
//!
//! - this module: the event vocabulary ([`External`], [`Internal`]) and the
//!   trace format, versioned JSON Lines (`docs/trace-format.md`), with a
//!   line-by-line [`Writer`] and a checked reader ([`Trace::load`]);
//! - [`dir`]: experiment directories (config, meta, trace, logs, violation),
//!   written atomically.
//!
//! The first line is a [`Header`]; every other line is one [`Record`]: an
//! external event sts injected, an internal event it observed (an OpenFlow
//! message, a controller log line, a dataplane report), or a violation. Records
//! carry a sequence number that orders everything, and the run's clock in
//! milliseconds. Other tools may write traces too: only the header and the
//! external events are required for replay.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sts_mocknet::{DataplaneEvent, Endpoint};
use sts_proxy::wire::Fingerprint;

pub mod dir;
pub mod legacy;
pub mod masks;

/// The `format` value of a trace's header.
pub const FORMAT: &str = "sts-trace";
/// The newest trace version this sts reads and the one it writes. Version 3
/// spells fingerprints in OpenFlow's names rather than the codec's Rust
/// paths ([`legacy`]); version 2 keeps each OpenFlow message's bytes and
/// types dataplane reports. Versions 1 and 2 still load (upgraded as read).
pub const VERSION: u32 = 3;

/// The first line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The fuzzer's seed (absent for hand-written traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The sts version that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sts: Option<String>,
    /// On virtual time: the run's wall-clock date when its clock was made
    /// (ns since the Unix epoch); a replay on virtual time serves the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_epoch_ns: Option<u64>,
}

impl Header {
    /// A header for a trace this sts writes.
    pub fn new(seed: Option<u64>) -> Header {
        Header {
            format: FORMAT.into(),
            version: VERSION,
            seed,
            sts: Some(env!("CARGO_PKG_VERSION").into()),
            wall_epoch_ns: None,
        }
    }
}

/// One switch port: the end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Port {
    pub switch: u64,
    pub port: u32,
}

/// Something sts does to the system. Hosts go by name (`h1`), switches by
/// datapath id, links by both of their ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum External {
    /// `src` pings `dst` (ARP first if needed).
    Ping { src: String, dst: String },
    /// A switch-to-switch link fails: both ports go down, PORT_STATUS to the controllers.
    LinkDown { a: Port, b: Port },
    /// A failed link recovers.
    LinkUp { a: Port, b: Port },
    /// A host moves: its old port goes down, it is plugged into `to`.
    HostMigrate { host: String, from: u64, to: u64 },
    /// A link starts dropping every frame (no port change: the controller is not told).
    DataplaneDrop { a: Port, b: Port },
    /// A dropping link heals.
    DataplaneDropEnd { a: Port, b: Port },
    /// A link starts delaying every frame by `ms`.
    DataplaneDelay { a: Port, b: Port, ms: u64 },
    /// A delaying link is prompt again.
    DataplaneDelayEnd { a: Port, b: Port },
    /// A switch crashes: control connections close, its links go down, its flow tables are lost.
    SwitchDown { switch: u64 },
    /// A failed switch comes back: links up, it connects to its controllers again.
    SwitchUp { switch: u64 },
    /// Messages from the controllers to a switch are held `ms` in the proxy (keepalives pass).
    ControlDelay { switch: u64, ms: u64 },
    /// Messages to the switch flow promptly again.
    ControlDelayEnd { switch: u64 },
    /// A controller process is killed (SIGKILL); `controller` is `c0`, `c1` ... in config order.
    ControllerCrash { controller: String },
    /// A crashed controller starts again on the same address; the switches reconnect.
    ControllerRestart { controller: String },
    /// The controller-to-controller relay `relay` (config `[[relays]]`) is
    /// blocked: its peers are partitioned.
    Partition { relay: String },
    /// The partition ends: what waited crosses, in order.
    PartitionHeal { relay: String },
    /// OpenFlow messages of `msg_type` (`flow_mod`, `packet_in` ...) on
    /// `switch`'s control connections, or every switch's, are held in the
    /// proxy from now on, until released or acted on one by one (the
    /// console's `hold`). Later messages on a connection queue behind a held
    /// one, keeping their order; keepalives pass.
    ControlHold {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        switch: Option<u64>,
        msg_type: MsgType,
    },
    /// No more messages are held (on `switch`, or anywhere); those held are
    /// delivered in order.
    ControlRelease {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        switch: Option<u64>,
    },
    /// The proxy drops the next message of `msg_type` to or from `switch`
    /// (one message, either direction; keepalives are never dropped): a
    /// message-level fault for the fuzzer (`[fuzz.rates] message_drop`).
    /// Armed until such a message comes.
    ControlDrop { switch: u64, msg_type: MsgType },
    /// The proxy delays the next message of `msg_type` to or from `switch`
    /// by `ms` (what follows it on that connection waits behind it, in
    /// order): `[fuzz.rates] message_delay`. Armed until such a message
    /// comes.
    ControlDelayNext { switch: u64, msg_type: MsgType, ms: u64 },
    /// The proxy delivers the next message of `msg_type` to or from
    /// `switch` `ms` late and lets the messages after it overtake it: a
    /// reordering (`[fuzz.rates] message_reorder`). Armed until such a
    /// message comes.
    ControlReorderNext { switch: u64, msg_type: MsgType, ms: u64 },
    /// One held message meets its fate: the `index`-th (from 0, oldest
    /// first) held message of `msg_type` on `switch`'s connections is
    /// delivered now, dropped, or delivered `ms` later (the console's
    /// `deliver`, `drop` and `delay`). Nothing happens when there is no such
    /// message.
    HeldMessage {
        switch: u64,
        msg_type: MsgType,
        #[serde(default, skip_serializing_if = "is_zero")]
        index: u32,
        fate: Fate,
    },
    /// The named policy change of the config's `[[policies]]` is applied (an
    /// HTTP request to a controller's REST API, or a command): an operator
    /// reconfiguring the network. Skipped when a policy it must come
    /// `after` was not applied earlier in the run.
    Policy {
        name: String,
        /// The controller the config applies it to (`c0` ...), for reports;
        /// the config decides.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        controller: Option<String>,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What becomes of a held message ([`External::HeldMessage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    Deliver,
    Drop,
    Delay { ms: u64 },
}

impl External {
    /// The switches (`s1`) and controllers (`c0`) the input acts on
    /// directly, in order, without repeats (a ping and a partition act on
    /// hosts and relays, none of these).
    pub fn touches(&self) -> Vec<String> {
        let s = |d: u64| format!("s{d}");
        let mut v = match self {
            External::LinkDown { a, b }
            | External::LinkUp { a, b }
            | External::DataplaneDrop { a, b }
            | External::DataplaneDropEnd { a, b }
            | External::DataplaneDelay { a, b, .. }
            | External::DataplaneDelayEnd { a, b } => vec![s(a.switch), s(b.switch)],
            External::HostMigrate { from, to, .. } => vec![s(*from), s(*to)],
            External::SwitchDown { switch }
            | External::SwitchUp { switch }
            | External::ControlDelay { switch, .. }
            | External::ControlDelayEnd { switch }
            | External::HeldMessage { switch, .. }
            | External::ControlDrop { switch, .. }
            | External::ControlDelayNext { switch, .. }
            | External::ControlReorderNext { switch, .. } => vec![s(*switch)],
            External::ControlHold { switch, .. } | External::ControlRelease { switch } => {
                switch.iter().map(|d| s(*d)).collect()
            }
            External::ControllerCrash { controller } | External::ControllerRestart { controller } => {
                vec![controller.clone()]
            }
            External::Policy { controller, .. } => controller.iter().cloned().collect(),
            External::Ping { .. } | External::Partition { .. } | External::PartitionHeal { .. } => vec![],
        };
        v.dedup();
        v
    }

    /// A short name for progress lines and reports.
    pub fn describe(&self) -> String {
        let link = |a: &Port, b: &Port| format!("s{}:{}-s{}:{}", a.switch, a.port, b.switch, b.port);
        match self {
            External::Ping { src, dst } => format!("ping {src} -> {dst}"),
            External::LinkDown { a, b } => format!("link down {}", link(a, b)),
            External::LinkUp { a, b } => format!("link up {}", link(a, b)),
            External::HostMigrate { host, from, to } => format!("migrate {host} s{from} -> s{to}"),
            External::DataplaneDrop { a, b } => format!("dataplane drop {}", link(a, b)),
            External::DataplaneDropEnd { a, b } => format!("dataplane drop ends {}", link(a, b)),
            External::DataplaneDelay { a, b, ms } => format!("dataplane delay {ms} ms {}", link(a, b)),
            External::DataplaneDelayEnd { a, b } => format!("dataplane delay ends {}", link(a, b)),
            External::SwitchDown { switch } => format!("switch s{switch} fails"),
            External::SwitchUp { switch } => format!("switch s{switch} recovers"),
            External::Partition { relay } => format!("partition {relay}"),
            External::PartitionHeal { relay } => format!("partition {relay} heals"),
            External::Policy { name, .. } => format!("policy {name}"),
            External::ControlDelay { switch, ms } => format!("control messages to s{switch} delayed {ms} ms"),
            External::ControlDelayEnd { switch } => format!("control delay to s{switch} ends"),
            External::ControllerCrash { controller } => format!("controller {controller} crashes"),
            External::ControllerRestart { controller } => format!("controller {controller} restarts"),
            External::ControlHold { switch, msg_type } => match switch {
                Some(d) => format!("hold {msg_type} messages of s{d}"),
                None => format!("hold {msg_type} messages"),
            },
            External::ControlRelease { switch: Some(d) } => format!("release the messages held for s{d}"),
            External::ControlRelease { switch: None } => "release the held messages".into(),
            External::ControlDrop { switch, msg_type } => format!("drop the next {msg_type} of s{switch}"),
            External::ControlDelayNext { switch, msg_type, ms } => {
                format!("delay the next {msg_type} of s{switch} by {ms} ms")
            }
            External::ControlReorderNext { switch, msg_type, ms } => {
                format!("let later messages overtake the next {msg_type} of s{switch} ({ms} ms late)")
            }
            External::HeldMessage { switch, msg_type, index, fate } => {
                let which = if *index == 0 { String::new() } else { format!(" #{}", index + 1) };
                match fate {
                    Fate::Deliver => format!("deliver the held {msg_type}{which} of s{switch}"),
                    Fate::Drop => format!("drop the held {msg_type}{which} of s{switch}"),
                    Fate::Delay { ms } => format!("delay the held {msg_type}{which} of s{switch} by {ms} ms"),
                }
            }
        }
    }
}

/// Which way an OpenFlow message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// From a switch to a controller (PACKET_IN, FEATURES_REPLY ...).
    ToController,
    /// From a controller to a switch (FLOW_MOD, PACKET_OUT ...).
    ToSwitch,
}

impl Direction {
    /// The name traces use: `to_controller` or `to_switch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::ToController => "to_controller",
            Direction::ToSwitch => "to_switch",
        }
    }
}

impl From<sts_proxy::interpose::Direction> for Direction {
    fn from(d: sts_proxy::interpose::Direction) -> Direction {
        match d {
            sts_proxy::interpose::Direction::SwitchToController => Direction::ToController,
            sts_proxy::interpose::Direction::ControllerToSwitch => Direction::ToSwitch,
        }
    }
}

/// An OpenFlow message type by its recorded name (`packet_in`, `flow_mod`
/// ...): one of the names of OpenFlow 1.0 and 1.3, or `unknown`. A trace
/// naming any other type does not load.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgType(&'static str);

impl MsgType {
    /// The type called `name`, if OpenFlow 1.0 or 1.3 has one (or `unknown`).
    pub fn from_name(name: &str) -> Option<MsgType> {
        // An immutable table, built once: the names never change.
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| {
            let mut all = sts_proxy::wire::type_names();
            all.push("unknown");
            all
        });
        names.iter().find(|n| **n == name).copied().map(MsgType)
    }

    /// The type the interposer recorded: a name from
    /// [`sts_proxy::wire::type_name`], which only gives known names.
    pub fn recorded(name: &'static str) -> MsgType {
        debug_assert!(MsgType::from_name(name).is_some(), "{name} is a recorded type name");
        MsgType(name)
    }

    /// The recorded name.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Debug for MsgType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::fmt::Display for MsgType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<&str> for MsgType {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<str> for MsgType {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl Serialize for MsgType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for MsgType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MsgType, D::Error> {
        let name = String::deserialize(d)?;
        MsgType::from_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{name:?} is not an OpenFlow 1.0 or 1.3 message type (types go by snake_case names: flow_mod, \
                 packet_in, barrier_request ...)"
            ))
        })
    }
}

/// What the dataplane reported by itself: a loop, a storm, a frame lost to a
/// fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DataplaneReport {
    /// A frame crossed more switches than the hop limit (or bounced between
    /// a switch and its controller): a forwarding loop.
    Loop { dpid: u64, in_port: u32, summary: String },
    /// One injection caused more deliveries than the step budget: a storm.
    Storm { deliveries: usize },
    /// A frame was lost to a dataplane drop fault on the link at `at`
    /// (`s1:2`, or a host name's index `host 0`).
    FaultDrop { at: String },
    /// A switch dropped a frame whose actions exceeded the work budget.
    WorkBudget { dpid: u64 },
}

impl From<&DataplaneEvent> for DataplaneReport {
    fn from(e: &DataplaneEvent) -> DataplaneReport {
        match e {
            DataplaneEvent::HopLimit { dpid, in_port, summary } => {
                DataplaneReport::Loop { dpid: *dpid, in_port: *in_port, summary: summary.clone() }
            }
            DataplaneEvent::StepBudget { deliveries } => DataplaneReport::Storm { deliveries: *deliveries },
            DataplaneEvent::WorkBudget { dpid } => DataplaneReport::WorkBudget { dpid: *dpid },
            DataplaneEvent::FaultDrop { at } => DataplaneReport::FaultDrop {
                at: match at {
                    Endpoint::Switch { dpid, port } => format!("s{dpid}:{port}"),
                    Endpoint::Host(i) => format!("host {i}"),
                },
            },
        }
    }
}

/// Something the system did by itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Internal {
    /// An OpenFlow message between a switch and a controller.
    Openflow {
        dpid: u64,
        /// The controller's index in config order.
        controller: usize,
        dir: Direction,
        msg: MsgType,
        /// The functionally-equivalent view (volatile values masked).
        fp: Fingerprint,
        /// The message's bytes as they crossed the proxy (hex in the file;
        /// absent in version-1 traces).
        #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_bytes")]
        raw: Option<Bytes>,
        /// What the proxy did with it when it came, unless it passed at once:
        /// dropped, or queued (held, delayed, or behind a queued message).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proxy: Option<ProxyDecision>,
    },
    /// A controller's stdout or stderr line.
    Log { controller: String, line: String, fp: String },
    /// The proxy delivered a message it had queued (held, delayed, or behind
    /// such a message): `of` is the `seq` of that message's `openflow`
    /// record (whose time is when it reached the proxy; this record's is
    /// when it went on). Not matched by replay.
    Delivered { of: u64 },
    /// The dataplane saw a loop or a storm, or dropped a frame by fault
    /// (version 2).
    Dataplane(DataplaneReportField),
    /// A frame a host sent (`sent`) or received, its bytes hex in the file:
    /// what `sts pcap` writes as the hosts' interfaces. Not matched by
    /// replay (the OpenFlow messages and logs say what the controllers did).
    Frame {
        host: String,
        sent: bool,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_bytes")]
        raw: Option<Bytes>,
    },
}

/// A frame in one line: `arp who-has 10.0.0.3 tell 10.0.0.1`,
/// `10.0.0.1 > 10.0.0.3 icmp 8/0`, or its addresses and type.
pub fn frame_summary(raw: &[u8]) -> String {
    use sts_proxy::wire::packet::{L3Summary, L4Summary, PacketSummary};
    let Some(p) = PacketSummary::of(raw) else { return format!("{} bytes (runt)", raw.len()) };
    match &p.l3 {
        L3Summary::Arp { op: 1, spa, tpa, .. } => format!("arp who-has {tpa} tell {spa}"),
        L3Summary::Arp { op: 2, spa, sha, .. } => format!("arp {spa} is-at {sha}"),
        L3Summary::Ipv4 { src, dst, l4: L4Summary::Icmp { icmp_type, code, .. }, .. } => {
            format!("{src} > {dst} icmp {icmp_type}/{code}")
        }
        L3Summary::Ipv4 { src, dst, proto, .. } => format!("{src} > {dst} proto {proto}"),
        _ => format!("{} > {} type {:#06x}", p.eth_src, p.eth_dst, p.eth_type),
    }
}

impl Internal {
    /// For an OpenFlow message: who sent it and who received it (`s1`,
    /// `c0`).
    pub fn sender_receiver(&self) -> Option<(String, String)> {
        let Internal::Openflow { dpid, controller, dir, .. } = self else { return None };
        let (sw, ctl) = (format!("s{dpid}"), format!("c{controller}"));
        Some(match dir {
            Direction::ToController => (sw, ctl),
            Direction::ToSwitch => (ctl, sw),
        })
    }
}

/// What the proxy did with an OpenFlow message that did not pass at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyDecision {
    /// Never delivered.
    Dropped,
    /// Delivered later: held (until released or given a fate), delayed, or
    /// queued behind such a message.
    Queued,
}

/// A dataplane record's body: typed in version 2, a description in
/// version-1 traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DataplaneReportField {
    Typed(DataplaneReport),
    /// A version-1 trace's `what` (the report's debug rendering).
    Legacy {
        what: String,
    },
}

impl DataplaneReportField {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            DataplaneReportField::Typed(DataplaneReport::Loop { dpid, in_port, summary }) => {
                format!("forwarding loop at s{dpid} port {in_port}: {summary}")
            }
            DataplaneReportField::Typed(DataplaneReport::Storm { deliveries }) => {
                format!("broadcast storm: over {deliveries} deliveries")
            }
            DataplaneReportField::Typed(DataplaneReport::WorkBudget { dpid }) => {
                format!("s{dpid} dropped a frame whose actions exceeded the work budget")
            }
            DataplaneReportField::Typed(DataplaneReport::FaultDrop { at }) => {
                format!("frame dropped by the fault at {at}")
            }
            DataplaneReportField::Legacy { what } => what.clone(),
        }
    }
}

impl Internal {
    /// What replay matches on: the kind, the channel and the fingerprint.
    pub fn key(&self) -> Option<String> {
        match self {
            Internal::Openflow { dpid, controller, dir, fp, .. } => {
                Some(format!("of {dpid} {controller} {} {fp}", dir.as_str()))
            }
            Internal::Log { controller, fp, .. } => Some(format!("log {controller} {fp}")),
            Internal::Dataplane { .. } | Internal::Frame { .. } | Internal::Delivered { .. } => None,
        }
    }

    /// A dataplane record from the network's report.
    pub fn dataplane(e: &DataplaneEvent) -> Internal {
        Internal::Dataplane(DataplaneReportField::Typed(e.into()))
    }
}

/// Optional bytes as lowercase hex.
mod hex_bytes {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => sts_proxy::wire::hex_bytes::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        let text = String::deserialize(d)?;
        sts_proxy::wire::hex_bytes::parse(&text).map(Some).map_err(serde::de::Error::custom)
    }
}

/// A violated invariant as a trace keeps it: the checker's verdict in plain
/// words and names, so the format does not change when the checker's types
/// do (`sts_engine::records` converts both ways).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViolationRecord {
    /// The invariant's name (`loop`, `blackhole`, `controller-errors`, ...).
    pub invariant: String,
    /// The network elements involved (`s<dpid>`, hosts, controllers), sorted.
    pub elements: Vec<String>,
    /// One line for humans.
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<WitnessRecord>,
    /// What causes it, where that can be found (`s3 table 0: ...`). Older
    /// traces have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub culprit: Option<String>,
}

/// A violation's concrete example as a trace keeps it: a header, where it
/// entered, the rules it crossed (`s2 in 1: table 0 #3 (priority 1)`), where
/// it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WitnessRecord {
    pub header: String,
    /// The frame itself, hex.
    pub frame: String,
    pub from: String,
    pub path: Vec<String>,
    pub end: String,
}

/// What one record holds: exactly one of these.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An external event sts injected.
    External(External),
    /// Something the system did by itself, as sts observed it.
    Internal(Internal),
    /// A violated invariant.
    Violation(ViolationRecord),
}

/// One line after the header: `{"seq":..,"t_ms":..,"external"|"internal"|
/// "violation":{...}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub seq: u64,
    /// Milliseconds on the run's clock.
    pub t_ms: u64,
    pub event: Event,
    /// The line it was read from (0 when not read from a file).
    pub line: usize,
}

impl Record {
    /// The external event this record holds, if it holds one.
    pub fn external(&self) -> Option<&External> {
        match &self.event {
            Event::External(e) => Some(e),
            _ => None,
        }
    }

    /// The internal event this record holds, if it holds one.
    pub fn internal(&self) -> Option<&Internal> {
        match &self.event {
            Event::Internal(i) => Some(i),
            _ => None,
        }
    }

    /// The violation this record holds, if it holds one.
    pub fn violation(&self) -> Option<&ViolationRecord> {
        match &self.event {
            Event::Violation(v) => Some(v),
            _ => None,
        }
    }
}

/// A record as the file spells it: one key of three.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordLine<E, I, V> {
    seq: u64,
    t_ms: u64,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    external: Option<E>,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    internal: Option<I>,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    violation: Option<V>,
}

fn none<T>() -> Option<T> {
    None
}

impl Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (seq, t_ms) = (self.seq, self.t_ms);
        let line: RecordLine<&External, &Internal, &ViolationRecord> = match &self.event {
            Event::External(e) => RecordLine { seq, t_ms, external: Some(e), internal: None, violation: None },
            Event::Internal(i) => RecordLine { seq, t_ms, external: None, internal: Some(i), violation: None },
            Event::Violation(v) => RecordLine { seq, t_ms, external: None, internal: None, violation: Some(v) },
        };
        line.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Record, D::Error> {
        let l = RecordLine::<External, Internal, ViolationRecord>::deserialize(d)?;
        let event = match (l.external, l.internal, l.violation) {
            (Some(e), None, None) => Event::External(e),
            (None, Some(i), None) => Event::Internal(i),
            (None, None, Some(v)) => Event::Violation(v),
            _ => return Err(serde::de::Error::custom("a record holds exactly one of external, internal, violation")),
        };
        Ok(Record { seq: l.seq, t_ms: l.t_ms, event, line: 0 })
    }
}

/// Writes a trace line by line, each line in one `write` call, so a run
/// killed half-way leaves every line written so far whole and readable.
pub struct Writer {
    out: File,
    next_seq: u64,
    last_t: u64,
    path: PathBuf,
}

impl Writer {
    /// Creates `path` and writes the header.
    pub fn create(path: &Path, header: &Header) -> std::io::Result<Writer> {
        let mut w = Writer { out: File::create(path)?, next_seq: 1, last_t: 0, path: path.to_owned() };
        w.line(&serde_json::to_string(header).map_err(std::io::Error::other)?)?;
        Ok(w)
    }

    fn line(&mut self, s: &str) -> std::io::Result<()> {
        let mut line = String::with_capacity(s.len() + 1);
        line.push_str(s);
        line.push('\n');
        self.out.write_all(line.as_bytes())
    }

    fn record(&mut self, t_ms: u64, event: Event) -> std::io::Result<u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        // Times never go back, even if a caller's clock readings interleave.
        let t_ms = t_ms.max(self.last_t);
        self.last_t = t_ms;
        let r = Record { seq, t_ms, event, line: 0 };
        self.line(&serde_json::to_string(&r).map_err(std::io::Error::other)?)?;
        Ok(seq)
    }

    /// Appends an external event; returns its sequence number.
    pub fn external(&mut self, t_ms: u64, e: External) -> std::io::Result<u64> {
        self.record(t_ms, Event::External(e))
    }

    /// Appends an internal event.
    pub fn internal(&mut self, t_ms: u64, e: Internal) -> std::io::Result<u64> {
        self.record(t_ms, Event::Internal(e))
    }

    /// Appends a violation.
    pub fn violation(&mut self, t_ms: u64, v: ViolationRecord) -> std::io::Result<u64> {
        self.record(t_ms, Event::Violation(v))
    }

    /// Where the trace is being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The trace as written so far, to come back to with [`Writer::truncate`].
    pub fn mark(&self) -> std::io::Result<WriterMark> {
        let written = std::fs::read(&self.path)?;
        Ok(WriterMark { written: std::sync::Arc::new(written), next_seq: self.next_seq, last_t: self.last_t })
    }

    /// Forgets everything written after `mark` (the console's `rewind`).
    /// The file is written back as it was at the mark, so marks can be
    /// returned to in any order (a rewind to an earlier mark, then to a
    /// later one, whose records the run since has overwritten).
    pub fn truncate(&mut self, mark: &WriterMark) -> std::io::Result<()> {
        use std::io::Seek;
        self.out.set_len(0)?;
        self.out.seek(std::io::SeekFrom::Start(0))?;
        self.out.write_all(&mark.written)?;
        self.next_seq = mark.next_seq;
        self.last_t = mark.last_t;
        Ok(())
    }

    /// A record line for `v` as the next record at `t_ms`, without writing
    /// it (to end a copy of the trace with the violation seen so far).
    pub fn violation_line(&self, t_ms: u64, v: ViolationRecord) -> String {
        let r = Record { seq: self.next_seq, t_ms: t_ms.max(self.last_t), event: Event::Violation(v), line: 0 };
        serde_json::to_string(&r).unwrap_or_default()
    }
}

/// A point in a trace being written ([`Writer::mark`]).
#[derive(Debug, Clone)]
pub struct WriterMark {
    /// The file's bytes up to the mark (shared by the mark's copies).
    written: std::sync::Arc<Vec<u8>>,
    next_seq: u64,
    last_t: u64,
}

/// `message` cut to at most about `max` characters, keeping its start and
/// its end (where parsers say what they expected): an error that quotes a
/// hostile input's 100,000-character line stays readable.
pub fn bounded_message(message: String, max: usize) -> String {
    let count = message.chars().count();
    if count <= max {
        return message;
    }
    let head: String = message.chars().take(max / 2).collect();
    let tail: String = message.chars().skip(count - max / 2).collect();
    format!("{head} [... {} characters ...] {tail}", count - 2 * (max / 2))
}

/// A trace that cannot be used: names the file, the line (0: the file as a
/// whole) and what is wrong.
#[derive(Debug, thiserror::Error)]
pub struct TraceError {
    pub path: PathBuf,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.path.display(), self.message),
            n => write!(f, "{}:{n}: {}", self.path.display(), self.message),
        }
    }
}

/// A whole trace in memory.
#[derive(Debug, Clone)]
pub struct Trace {
    pub header: Header,
    pub records: Vec<Record>,
}

impl Trace {
    /// Writes the trace to `path` as JSON Lines, records as they are
    /// (numbers included), atomically: a reader never sees half of it.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_string(&self.header).map_err(std::io::Error::other)?;
        text.push('\n');
        for r in &self.records {
            text.push_str(&serde_json::to_string(r).map_err(std::io::Error::other)?);
            text.push('\n');
        }
        dir::write_atomic(path, text.as_bytes())
    }

    /// A copy whose records are numbered 1, 2, ... in order (a trace cut
    /// from another: a minimization's candidate, its MCS). A `delivered`
    /// record follows its arrival's new number, and is left out with it.
    pub fn renumbered(&self) -> Trace {
        let mut renumbered = std::collections::BTreeMap::new();
        let mut records = Vec::with_capacity(self.records.len());
        for r in &self.records {
            let mut r = r.clone();
            if let Event::Internal(Internal::Delivered { of }) = &mut r.event {
                match renumbered.get(of) {
                    Some(&seq) => *of = seq,
                    None => continue,
                }
            }
            let seq = records.len() as u64 + 1;
            // Only queued arrivals are pointed at (a PEEKed candidate mixes
            // two runs' numbers: its inputs' and its dry run's internal events').
            if matches!(r.internal(), Some(Internal::Openflow { proxy: Some(ProxyDecision::Queued), .. })) {
                renumbered.insert(r.seq, seq);
            }
            r.seq = seq;
            records.push(r);
        }
        Trace { header: self.header.clone(), records }
    }

    /// Reads and validates a trace file.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let err = |line: usize, message: String| TraceError {
            path: path.to_owned(),
            line,
            message: bounded_message(message, 400),
        };
        // A trace is a file: not a device, a FIFO or a directory (reading
        // /dev/zero would never end).
        let meta = std::fs::metadata(path).map_err(|e| err(0, format!("cannot read: {e}")))?;
        if !meta.is_file() {
            return Err(err(0, "not a regular file (a trace is a file of JSON Lines)".into()));
        }
        let file = File::open(path).map_err(|e| err(0, format!("cannot read: {e}")))?;
        let mut lines = BufReader::new(file).lines().enumerate().peekable();
        let Some((_, first)) = lines.next() else {
            return Err(err(1, "empty file: a trace starts with its header line".into()));
        };
        let first = first.map_err(|e| err(1, format!("cannot read: {e}")))?;
        let header: Header = serde_json::from_str(&first).map_err(|e| err(1, format!("header: {e}")))?;
        if header.format != FORMAT {
            return Err(err(1, format!("header.format: expected \"{FORMAT}\", found {:?}", header.format)));
        }
        if header.version == 0 {
            return Err(err(1, "header.version: 0 is not a trace version (versions start at 1)".into()));
        }
        if header.version > VERSION {
            return Err(err(
                1,
                format!(
                    "header.version: this trace is version {}, newer than this sts reads ({VERSION}); upgrade sts",
                    header.version
                ),
            ));
        }
        let mut records = Vec::new();
        let mut last_seq = 0;
        let mut last_t = 0;
        while let Some((i, line)) = lines.next() {
            let n = i + 1;
            let line = line.map_err(|e| err(n, format!("cannot read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let mut r: Record = match serde_json::from_str(&line) {
                Ok(r) => r,
                // The last line cut short (a run killed, or a disk full, while
                // writing it): every line before it is good; keep those.
                Err(e) if e.is_eof() && lines.peek().is_none() => {
                    tracing::warn!(
                        "{}:{n}: the last line is cut short (was the run killed while writing?); using the {} records before it",
                        path.display(),
                        records.len()
                    );
                    break;
                }
                Err(e) => {
                    let hint = if e.is_eof() { " (the line is cut short)" } else { "" };
                    return Err(err(n, format!("{e}{hint}")));
                }
            };
            if r.seq <= last_seq {
                return Err(err(n, format!("seq: {} does not increase (previous {last_seq})", r.seq)));
            }
            if r.t_ms < last_t {
                return Err(err(n, format!("t_ms: {} goes back in time (previous {last_t})", r.t_ms)));
            }
            last_seq = r.seq;
            last_t = r.t_ms;
            r.line = n;
            if header.version < 3 {
                if let Event::Internal(Internal::Openflow { fp, .. }) = &mut r.event {
                    fp.0 = legacy::upgrade_fingerprint(&fp.0);
                }
            }
            records.push(r);
        }
        // What is in memory is in this version's format now, and is written
        // back so (a minimization's candidates, its MCS).
        let mut header = header;
        header.version = VERSION;
        Ok(Trace { header, records })
    }

    /// The external events, in order, with their times.
    pub fn externals(&self) -> Vec<(u64, &External)> {
        self.records.iter().filter_map(|r| r.external().map(|e| (r.t_ms, e))).collect()
    }

    /// Where the external events are: each one's time and its index in
    /// [`Trace::records`].
    pub fn external_positions(&self) -> Vec<(u64, usize)> {
        self.records.iter().enumerate().filter(|(_, r)| r.external().is_some()).map(|(i, r)| (r.t_ms, i)).collect()
    }

    /// The first violation recorded, if any.
    pub fn violation(&self) -> Option<&ViolationRecord> {
        self.records.iter().find_map(|r| r.violation())
    }

    /// The record with this `seq` (records are in `seq` order).
    pub fn record(&self, seq: u64) -> Option<&Record> {
        self.records.binary_search_by_key(&seq, |r| r.seq).ok().map(|i| &self.records[i])
    }

    /// Whether the trace recorded a run's OpenFlow messages (a
    /// hand-written trace holds inputs only; its replays record the run).
    pub fn records_messages(&self) -> bool {
        self.records.iter().any(|r| matches!(r.internal(), Some(Internal::Openflow { .. })))
    }

    /// Each message the proxy queued and later delivered: the `seq` of its
    /// `openflow` record → the index of its `delivered` record.
    pub fn deliveries(&self) -> std::collections::BTreeMap<u64, usize> {
        let delivered = |(i, r): (usize, &Record)| match r.internal() {
            Some(Internal::Delivered { of }) => Some((*of, i)),
            _ => None,
        };
        self.records.iter().enumerate().filter_map(delivered).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(i: usize, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("sts-trace-test-{}-{i}.jsonl", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn writes_and_reads_back() {
        let p = std::env::temp_dir().join(format!("sts-trace-rt-{}.jsonl", std::process::id()));
        let mut w = Writer::create(&p, &Header::new(Some(7))).unwrap();
        w.external(10, External::Ping { src: "h1".into(), dst: "h2".into() }).unwrap();
        let fp = Fingerprint(r#"{"packet_in":{}}"#.to_string());
        let raw = Some(Bytes::from_static(&[1, 10, 0, 8, 0, 0, 0, 7]));
        let msg = MsgType::from_name("packet_in").unwrap();
        w.internal(
            12,
            Internal::Openflow {
                dpid: 1,
                controller: 0,
                dir: Direction::ToController,
                msg,
                fp,
                raw: raw.clone(),
                proxy: None,
            },
        )
        .unwrap();
        w.internal(12, Internal::dataplane(&DataplaneEvent::StepBudget { deliveries: 9 })).unwrap();
        w.external(11, External::Ping { src: "h2".into(), dst: "h1".into() }).unwrap();
        drop(w);
        let t = Trace::load(&p).unwrap();
        assert_eq!(t.header.seed, Some(7));
        assert_eq!(t.header.version, VERSION);
        assert_eq!(t.records.len(), 4);
        assert_eq!(t.externals().len(), 2);
        assert!(
            matches!(t.records[1].internal(), Some(Internal::Openflow { raw: r, msg, .. }) if *r == raw && *msg == "packet_in"),
            "the bytes come back"
        );
        let storm = Internal::Dataplane(DataplaneReportField::Typed(DataplaneReport::Storm { deliveries: 9 }));
        assert_eq!(t.records[2].internal(), Some(&storm));
        assert_eq!(t.records[3].t_ms, 12, "a late clock reading is clamped, never going back");
    }

    #[test]
    fn a_cut_last_line_is_dropped_and_the_rest_kept() {
        let h = r#"{"format":"sts-trace","version":2}"#;
        let good = r#"{"seq":1,"t_ms":0,"external":{"type":"ping","src":"h1","dst":"h2"}}"#;
        let p = write(101, &format!("{h}\n{good}\n{{\"seq\":2,\"t_ms\":5,\"exter"));
        let t = Trace::load(&p).expect("the lines before the cut one");
        assert_eq!(t.records.len(), 1);
    }

    #[test]
    fn only_regular_files_are_traces() {
        let e = Trace::load(Path::new("/dev/zero")).expect_err("a device").to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = Trace::load(&std::env::temp_dir()).expect_err("a directory").to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_record_is_written_back_exactly_as_it_was_read() {
        let lines = [
            r#"{"seq":1,"t_ms":5,"external":{"type":"ping","src":"h1","dst":"h2"}}"#,
            r#"{"seq":2,"t_ms":6,"internal":{"type":"openflow","dpid":1,"controller":0,"dir":"to_switch","msg":"barrier_request","fp":"of4/barrier_request {}","raw":"0414000800000007","proxy":"queued"}}"#,
            r#"{"seq":3,"t_ms":7,"internal":{"type":"delivered","of":2}}"#,
            r#"{"seq":4,"t_ms":8,"violation":{"invariant":"blackhole","elements":["h1","h2"],"summary":"h1 cannot reach h2","culprit":"s1 table 0: no rule matches"}}"#,
        ];
        for line in lines {
            let r: Record = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&r).unwrap(), line);
        }
    }

    #[test]
    fn a_cut_trace_is_renumbered_and_saved_whole() {
        let of = |seq: u64, queued: bool| -> String {
            let proxy = if queued { r#","proxy":"queued""# } else { "" };
            format!(
                r#"{{"seq":{seq},"t_ms":{seq},"internal":{{"type":"openflow","dpid":1,"controller":0,"dir":"to_switch","msg":"flow_mod","fp":"of4/flow_mod {{}}"{proxy}}}}}"#
            )
        };
        let delivered =
            |seq: u64, of: u64| format!(r#"{{"seq":{seq},"t_ms":{seq},"internal":{{"type":"delivered","of":{of}}}}}"#);
        let text = [
            r#"{"format":"sts-trace","version":3}"#.to_string(),
            of(4, true),
            of(7, true),
            delivered(9, 4),
            delivered(12, 5),
        ]
        .join("\n");
        let t = Trace::load(&write(300, &text)).unwrap();
        let r = t.renumbered();
        let seqs: Vec<u64> = r.records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 2, 3], "the delivery of an arrival left out goes too");
        assert!(
            matches!(r.records[2].internal(), Some(Internal::Delivered { of: 1 })),
            "follows its arrival: {:?}",
            r.records[2]
        );
        let p = std::env::temp_dir().join(format!("sts-trace-saved-{}.jsonl", std::process::id()));
        r.save(&p).unwrap();
        let back = Trace::load(&p).unwrap();
        assert_eq!(
            back.records.iter().map(|r| (r.seq, r.internal().cloned())).collect::<Vec<_>>(),
            r.records.iter().map(|r| (r.seq, r.internal().cloned())).collect::<Vec<_>>()
        );
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn version_1_traces_still_load() {
        let text = concat!(
            r#"{"format":"sts-trace","version":1,"seed":3}"#,
            "\n",
            r#"{"seq":1,"t_ms":5,"internal":{"type":"openflow","dpid":1,"controller":0,"dir":"to_switch","msg":"flow_mod","fp":"of1/flow_mod {}"}}"#,
            "\n",
            r#"{"seq":2,"t_ms":6,"internal":{"type":"dataplane","what":"StepBudget { deliveries: 100001 }"}}"#,
            "\n",
            r#"{"seq":3,"t_ms":7,"external":{"type":"ping","src":"h1","dst":"h2"}}"#,
            "\n"
        );
        let t = Trace::load(&write(100, text)).unwrap();
        assert_eq!(t.header.version, VERSION, "read into this version's format");
        assert!(matches!(
            t.records[0].internal(),
            Some(Internal::Openflow { dir: Direction::ToSwitch, raw: None, .. })
        ));
        assert!(matches!(t.records[1].internal(), Some(Internal::Dataplane(DataplaneReportField::Legacy { .. }))));
        assert_eq!(t.records[0].internal().and_then(Internal::key).unwrap(), "of 1 0 to_switch of1/flow_mod {}");
    }

    #[test]
    fn bad_traces_name_the_line_and_field() {
        let h = r#"{"format":"sts-trace","version":1}"#;
        let cases = [
            (String::new(), ":1: empty file"),
            (r#"{"format":"sts-trace","version":9}"#.to_string(), "newer than this sts"),
            (r#"{"format":"pcap","version":1}"#.to_string(), "header.format"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"external\":{{\"type\":\"ping\",\"src\":\"h1\"\n{{\"seq\":2,\"t_ms\":0,\"external\":{{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}}}}"), ":2: EOF"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"external\":{{\"type\":\"teleport\"}}}}"), "unknown variant `teleport`"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"external\":{{\"type\":\"ping\",\"src\":\"h1\"}}}}"), "missing field `dst`"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"internal\":{{\"type\":\"openflow\",\"dpid\":1,\"controller\":0,\"dir\":\"up\",\"msg\":\"flow_mod\",\"fp\":\"x\"}}}}"), "unknown variant `up`"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"internal\":{{\"type\":\"openflow\",\"dpid\":1,\"controller\":0,\"dir\":\"to_switch\",\"msg\":\"flow_smod\",\"fp\":\"x\"}}}}"), "not an OpenFlow"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0}}"), ":2: a record holds exactly one of external, internal, violation"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"external\":{{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}},\"internal\":{{\"type\":\"delivered\",\"of\":1}}}}"), ":2: a record holds exactly one"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"external\":{{\"type\":\"control_hold\",\"msg_type\":\"flowmod\"}}}}"), ":2: \"flowmod\" is not an OpenFlow"),
            (format!("{h}\n{{\"seq\":1,\"t_ms\":0,\"internal\":{{\"type\":\"openflow\",\"dpid\":1,\"controller\":0,\"dir\":\"to_switch\",\"msg\":\"flow_mod\",\"fp\":\"x\",\"raw\":\"0g\"}}}}"), "hex"),
            (format!("{h}\n{{\"seq\":2,\"t_ms\":0,\"external\":{{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}}}}\n{{\"seq\":1,\"t_ms\":0,\"external\":{{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}}}}"), ":3: seq"),
        ];
        for (i, (text, want)) in cases.into_iter().enumerate() {
            let p = write(i, &text);
            let e = Trace::load(&p).expect_err(&text).to_string();
            assert!(e.contains(want), "{e:?} should contain {want:?}");
        }
    }
}
