//! `sts import`: a recording of real switches (`sts proxy --record`, Open
//! vSwitch in a QA testbed) made into a trace that replays against the mock
//! network with the same controller: record in the testbed, replay and
//! minimize in the lab (OFRewind's idea, with minimization added).
//!
//! The recording numbers its channels by connection order; each channel's
//! datapath id comes from its FEATURES_REPLY. Every message but keepalives
//! becomes an internal event, as sts records its own runs. The external
//! events are inferred: a PORT_STATUS saying a port on one of the config's
//! switch-to-switch links went down (link down, or the port administratively
//! down) is that link failing, one saying it came back up is its recovery.
//! What cannot be made an input, and where the testbed's switches differ
//! from the config's mock network (switches or ports it does not have), is
//! reported, not guessed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;
use serde::Deserialize;
use sts_mocknet::Network;
use sts_proxy::interpose::{ChannelId, Direction as ProxyDirection};
use sts_proxy::wire::{v10, v13, Body, Fingerprint, Message};
use sts_trace::{Direction, External, Header, Internal, MsgType, Port, Trace};

use crate::config::Config;
use crate::session::RunError;

/// One line of a recording (`sts proxy --record`).
#[derive(Debug, Deserialize)]
struct Line {
    time_ms: u64,
    channel: ChannelId,
    dir: ProxyDirection,
    msg_type: String,
    #[serde(with = "sts_proxy::wire::hex_bytes")]
    raw: Bytes,
}

/// What an import made and found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Imported {
    /// Each recorded channel (connection order) and the datapath id it
    /// served (from its FEATURES_REPLY).
    pub switches: BTreeMap<u64, u64>,
    /// Messages made internal events (keepalives left out).
    pub messages: usize,
    /// External events inferred (link failures and recoveries).
    pub inputs: Vec<String>,
    /// Where the recording and the config's mock network disagree, or what
    /// could not be made an input.
    pub disagreements: Vec<String>,
}

/// The recording's link state changes, as inputs on the config's links.
struct Links {
    /// Each switch port on a link, with its link.
    ends: BTreeMap<(u64, u32), (Port, Port)>,
    down: BTreeSet<(Port, Port)>,
}

impl Links {
    fn new(net: &Network) -> Links {
        let mut ends = BTreeMap::new();
        for ((d1, p1), (d2, p2)) in net.switch_links() {
            let link = (Port { switch: d1, port: p1 }, Port { switch: d2, port: p2 });
            ends.insert((d1, p1), link);
            ends.insert((d2, p2), link);
        }
        Links { ends, down: BTreeSet::new() }
    }

    /// The input a port's new state makes, if any.
    fn change(&mut self, dpid: u64, port: u32, down: bool) -> Option<External> {
        let &(a, b) = self.ends.get(&(dpid, port))?;
        match (down, self.down.contains(&(a, b))) {
            (true, false) => {
                self.down.insert((a, b));
                Some(External::LinkDown { a, b })
            }
            (false, true) => {
                self.down.remove(&(a, b));
                Some(External::LinkUp { a, b })
            }
            _ => None,
        }
    }
}

/// Pings a recording shows: the first PACKET_IN of an ARP request or ICMP
/// echo request that host X sends for host Y's address is X pinging Y
/// (frames of the same pair within [`PING_WINDOW_MS`] are the same ping).
/// A ping the switches forward without asking the controller leaves no
/// PACKET_IN, and so no input: its effects are not in the recording either.
struct Pings {
    hosts: Vec<(String, sts_proxy::wire::Mac, std::net::Ipv4Addr)>,
    last: BTreeMap<(usize, usize), u64>,
}

/// How close in time two frames of one host pair are one ping.
pub const PING_WINDOW_MS: u64 = 1000;

impl Pings {
    fn new(net: &Network) -> Pings {
        let hosts = net.hosts.iter().map(|h| (h.name.clone(), sts_proxy::wire::Mac(h.mac.0), h.ip)).collect();
        Pings { hosts, last: BTreeMap::new() }
    }

    fn packet_in(&mut self, t: u64, msg: &Message) -> Option<External> {
        use sts_proxy::wire::packet::{L3Summary, L4Summary, PacketSummary};
        let data = match &msg.body {
            Body::V13(v13::Msg::PacketIn(p)) => &p.data,
            Body::V10(v10::Msg::PacketIn(p)) => &p.data,
            _ => return None,
        };
        let p = PacketSummary::of(data)?;
        let (src_ip, dst_ip) = match p.l3 {
            L3Summary::Arp { op: 1, spa, tpa, .. } => (spa, tpa),
            L3Summary::Ipv4 { src, dst, l4: L4Summary::Icmp { icmp_type: 8, .. }, .. } => (src, dst),
            _ => return None,
        };
        let x = self.hosts.iter().position(|(_, mac, ip)| *mac == p.eth_src && *ip == src_ip)?;
        let y = self.hosts.iter().position(|(_, _, ip)| *ip == dst_ip)?;
        let last = self.last.insert((x, y), t);
        if last.is_some_and(|l| t < l + PING_WINDOW_MS) {
            return None;
        }
        Some(External::Ping { src: self.hosts[x].0.clone(), dst: self.hosts[y].0.clone() })
    }
}

/// A PORT_STATUS's port and whether it is down (its link, or by config) or
/// up; `None` for neither (Open vSwitch says a port is neither down nor live
/// for a moment as it goes down).
fn port_status(msg: &Message) -> Option<(u32, Option<bool>)> {
    const DOWN: u32 = 1; // OFPPS_LINK_DOWN, OFPPC_PORT_DOWN (both versions)
    const LIVE: u32 = 4; // 1.3's OFPPS_LIVE
    match &msg.body {
        Body::V13(v13::Msg::PortStatus(s)) => {
            let (config, state) = (s.desc.config, s.desc.state);
            let down = (state & DOWN != 0 || config & DOWN != 0).then_some(true);
            Some((s.desc.port_no, down.or((state & LIVE != 0).then_some(false))))
        }
        Body::V10(v10::Msg::PortStatus(s)) => {
            Some((u32::from(s.desc.port_no), Some(s.desc.state & DOWN != 0 || s.desc.config & DOWN != 0)))
        }
        _ => None,
    }
}

fn datapath_id(msg: &Message) -> Option<u64> {
    match &msg.body {
        Body::V13(v13::Msg::FeaturesReply(f)) => Some(f.datapath_id),
        Body::V10(v10::Msg::FeaturesReply(f)) => Some(f.datapath_id),
        _ => None,
    }
}

/// Reads `recording` and writes the trace it makes to `trace_path`, for
/// the network `config` describes.
pub fn import(recording: &Path, config: &Config, trace_path: &Path) -> Result<Imported, RunError> {
    let bad = |line: usize, m: String| RunError::BadInput(format!("{}:{line}: {m}", recording.display()));
    let text = std::fs::read_to_string(recording)
        .map_err(|e| RunError::BadInput(format!("cannot read {}: {e}", recording.display())))?;
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h))
            if [sts_proxy::standalone::RECORDING_HEADER, sts_proxy::standalone::RECORDING_HEADER_V1]
                .contains(&h.trim()) => {}
        _ => {
            return Err(bad(
                1,
                format!(
                    "not an sts proxy recording (its first line should be {})",
                    sts_proxy::standalone::RECORDING_HEADER
                ),
            ))
        }
    }
    let mut parsed = Vec::new();
    for (i, l) in lines {
        if l.trim().is_empty() {
            continue;
        }
        let line: Line =
            serde_json::from_str(l).map_err(|e| bad(i + 1, sts_trace::bounded_message(e.to_string(), 300)))?;
        let msg = Message::parse(line.raw.clone()).map_err(|e| bad(i + 1, format!("undecodable message: {e}")))?;
        parsed.push((line, msg));
    }
    let mut out = Imported::default();
    for (line, msg) in &parsed {
        if let (ProxyDirection::SwitchToController, Some(d)) = (line.dir, datapath_id(msg)) {
            out.switches.entry(line.channel.dpid).or_insert(d);
        }
    }
    let net = Network::new(&config.topology(), config.network.openflow.wire());
    for (&channel, &d) in &out.switches {
        if !net.switches.contains_key(&d) {
            out.disagreements.push(format!(
                "connection {channel} is datapath {d:#x}, which the config's network does not have (it has s1..s{})",
                net.switches.len()
            ));
        }
    }
    let unnamed: BTreeSet<u64> =
        parsed.iter().map(|(l, _)| l.channel.dpid).filter(|c| !out.switches.contains_key(c)).collect();
    for c in &unnamed {
        out.disagreements.push(format!("connection {c} never sent a FEATURES_REPLY: its messages are left out"));
    }

    let t0 = parsed.first().map_or(0, |(l, _)| l.time_ms);
    let mut links = Links::new(&net);
    let mut pings = Pings::new(&net);
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", trace_path.display()));
    let mut writer = sts_trace::Writer::create(trace_path, &Header::new(None)).map_err(env)?;
    for (line, msg) in &parsed {
        let Some(&dpid) = out.switches.get(&line.channel.dpid) else { continue };
        if matches!(line.msg_type.as_str(), "echo_request" | "echo_reply") {
            continue;
        }
        let t = line.time_ms.saturating_sub(t0);
        let dir = match line.dir {
            ProxyDirection::SwitchToController => Direction::ToController,
            ProxyDirection::ControllerToSwitch => Direction::ToSwitch,
        };
        if let (Direction::ToController, Some((port, state))) = (dir, port_status(msg)) {
            match state.and_then(|down| links.change(dpid, port, down)) {
                Some(e) => {
                    out.inputs.push(format!("{t} ms: {}", e.describe()));
                    writer.external(t, e).map_err(env)?;
                }
                None if !links.ends.contains_key(&(dpid, port)) => out.disagreements.push(format!(
                    "{t} ms: PORT_STATUS for s{dpid} port {port}, which is on no switch-to-switch link of the \
                     config's network: no input made of it"
                )),
                None => {}
            }
        }
        if let Some(e) = (dir == Direction::ToController).then(|| pings.packet_in(t, msg)).flatten() {
            out.inputs.push(format!("{t} ms: {}", e.describe()));
            writer.external(t, e).map_err(env)?;
        }
        let internal = Internal::Openflow {
            dpid,
            controller: line.channel.controller,
            dir,
            msg: MsgType::from_name(&line.msg_type).unwrap_or(MsgType::recorded("unknown")),
            fp: Fingerprint::of(msg),
            raw: Some(line.raw.clone()),
            // A testbed recording says what was relayed; its faults are the proxy's own.
            proxy: None,
        };
        writer.internal(t, internal).map_err(env)?;
        out.messages += 1;
    }
    drop(writer);
    Ok(out)
}

/// Per switch, how many times each controller-to-switch fingerprint occurs
/// in `trace` (keepalives left out).
pub fn to_switch(trace: &Trace) -> BTreeMap<u64, BTreeMap<String, usize>> {
    by_direction(trace, Direction::ToSwitch)
}

/// Per switch, how many times each switch-to-controller fingerprint occurs.
pub fn to_controller(trace: &Trace) -> BTreeMap<u64, BTreeMap<String, usize>> {
    by_direction(trace, Direction::ToController)
}

fn by_direction(trace: &Trace, want: Direction) -> BTreeMap<u64, BTreeMap<String, usize>> {
    let mut out: BTreeMap<u64, BTreeMap<String, usize>> = BTreeMap::new();
    for r in &trace.records {
        if let Some(Internal::Openflow { dpid, dir, msg, fp, .. }) = r.internal() {
            if *dir == want && !matches!(msg.as_str(), "echo_request" | "echo_reply") {
                *out.entry(*dpid).or_default().entry(fp.0.clone()).or_default() += 1;
            }
        }
    }
    out
}

/// How `replayed` differs from `recorded`: one line per fingerprint whose
/// count differs on a switch (at most `max` lines).
pub fn differences(
    recorded: &BTreeMap<u64, BTreeMap<String, usize>>,
    replayed: &BTreeMap<u64, BTreeMap<String, usize>>,
    max: usize,
) -> Vec<String> {
    let empty = BTreeMap::new();
    let dpids: BTreeSet<u64> = recorded.keys().chain(replayed.keys()).copied().collect();
    let mut out = Vec::new();
    for d in dpids {
        let (a, b) = (recorded.get(&d).unwrap_or(&empty), replayed.get(&d).unwrap_or(&empty));
        let fps: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for fp in fps {
            let (x, y) = (a.get(fp).copied().unwrap_or(0), b.get(fp).copied().unwrap_or(0));
            if x != y {
                out.push(format!("s{d}: {x} recorded, {y} replayed: {}", sts_trace::bounded_message(fp.clone(), 200)));
            }
        }
    }
    if out.len() > max {
        let more = out.len() - max;
        out.truncate(max);
        out.push(format!("... and {more} more"));
    }
    out
}

/// The wiring a testbed must have to match `config`'s network, one line
/// each: `switch DPID`, `link DPID PORT DPID PORT`, `host NAME DPID PORT MAC
/// IP` (what `scripts/ovs-testbed` builds).
pub fn wiring(config: &Config) -> String {
    let net = Network::new(&config.topology(), config.network.openflow.wire());
    let mut out = String::new();
    for d in net.switches.keys() {
        out.push_str(&format!("switch {d}\n"));
    }
    for ((d1, p1), (d2, p2)) in net.switch_links() {
        out.push_str(&format!("link {d1} {p1} {d2} {p2}\n"));
    }
    for (i, h) in net.hosts.iter().enumerate() {
        if let Some((d, p)) = net.host_port(i) {
            out.push_str(&format!("host {} {d} {p} {} {}\n", h.name, h.mac, h.ip));
        }
    }
    out
}
