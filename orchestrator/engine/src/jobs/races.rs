//! Races in one trace: which events happened in an order nothing forced,
//! where that order matters, and which of those decide the violation
//! (`sts races`, judged and rendered by `sts_report::races`); and the orders
//! an interposer can flip (`sts explore`).
//!
//! The model follows SDNRacer's happens-before for SDN with the controller
//! a black box; docs/races.md has it in full. In short:
//! - **points**: each input, and each OpenFlow message's sending (when it
//!   reached the proxy) and receiving (when the proxy let it go on: later
//!   for a held one; a dropped one is never received);
//! - **happens-before**: one connection in order; a reply after its
//!   request; what a controller sends within the reaction window after what
//!   it received; a PACKET_IN after the PACKET_OUT or PACKET_IN that carried
//!   its frame, and after the rule that sent it up; everything recorded
//!   before an input before the input, the input before what is sent after
//!   it. Nothing orders what a switch sends after what it was sent, nor two
//!   switches' messages to a controller;
//! - **conflicts**: at a switch, a rule and a packet it would have taken, or
//!   two controllers' overlapping rules; at a controller, two switches'
//!   messages (or an input and a message) about one host or port, a policy
//!   change and what the controller learns around it;
//! - a **race** is a conflict no path orders; it is **harmful** when the
//!   later of the two leads (through messages and reactions) to the culprit
//!   rule's FLOW_MOD and concerns what it matches, or is what a failing
//!   controller was handling.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use bytes::Bytes;
use sts_mocknet::flow::{Action, FlowEntry, FlowMatch, Instructions};
use sts_mocknet::packet::Fields;
use sts_proxy::wire::v13::Field;
use sts_proxy::wire::{v10, v13, Body, Mac, Message};
use sts_trace::{Direction, External, Internal, ProxyDecision, Trace};

/// How the analysis reads a controller's reactions.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// A message a controller sends at most this long after it received one
    /// is taken as that one's reaction (later: a timer's, ordered after
    /// nothing it received).
    pub reaction_ms: u64,
    /// The most events analysed (the last ones before the violation): the
    /// happens-before relation takes (2n)²/8 bytes (50 MB for 10,000).
    pub max_events: usize,
    /// A FLOW_MOD's or PACKET_OUT's words in event descriptions
    /// (`sts_report::flows::message`: dump-flows words); none by default.
    pub describe: fn(&Message) -> Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options { reaction_ms: 50, max_events: 10_000, describe: |_| None }
    }
}

/// One event of a race, for people.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    pub seq: u64,
    pub t_ms: u64,
    /// `packet_in s1 → c0 (in_port=1: arp who-has ...)`, `policy split`.
    pub what: String,
    /// When a queued message was delivered: the `delivered` record's seq
    /// and time.
    pub delivered: Option<(u64, u64)>,
    /// A queued message that was not held itself but waited behind one
    /// that was (the proxy keeps each connection in order): that one's seq.
    #[serde(default)]
    pub behind: Option<u64>,
}

/// A conflicting pair of events no chain of happens-before orders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Race {
    /// Where the order was decided (`s1`, `c0`), and the two events in the
    /// order that place saw them.
    pub at: String,
    pub first: Event,
    pub second: Event,
    /// What both touch.
    pub conflict: String,
    /// Why its order decides the violation, when it does.
    pub harm: Option<String>,
}

/// What `sts races` found in one trace.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Events analysed, happens-before edges between them.
    pub events: usize,
    pub edges: usize,
    /// Events left out at the start (longer than `max_events`).
    pub skipped: usize,
    /// The violation the harm is judged against, and what it is judged by:
    /// the culprit rule and its FLOW_MOD, or the message a controller was
    /// handling when it failed.
    pub violation: Option<String>,
    pub judged_by: Option<String>,
    /// Why harm could not be judged, when it could not.
    pub unjudged: Option<String>,
    /// Harmful races first (those with an input first, then the latest),
    /// then the rest in trace order.
    pub races: Vec<Race>,
}

impl Report {
    pub fn harmful(&self) -> impl Iterator<Item = &Race> {
        self.races.iter().filter(|r| r.harm.is_some())
    }
}

/// The rule a violation's witness ends on, as the caller found it (the
/// flow tables rebuilt from the trace): its switch, its `dump-flows` line,
/// the entry, and the `seq` of the FLOW_MOD that installed it.
#[derive(Debug, Clone)]
pub struct Culprit {
    pub dpid: u64,
    pub rule: String,
    pub entry: FlowEntry,
    pub flow_mod: u64,
}

/// What an event touches at a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Key {
    Mac(Mac),
    Port(u64, u32),
    /// A switch as traffic meets it: just set up again by its controller
    /// after it came back, or not yet.
    Switch(u64),
}

impl Key {
    fn describe(&self, hosts: &[(String, [u8; 6])]) -> String {
        match *self {
            Key::Mac(mac) => match hosts.iter().find(|(_, m)| *m == mac.0) {
                Some((name, _)) => format!("host {name} ({mac})"),
                None => format!("host {mac}"),
            },
            Key::Port(d, p) => format!("s{d} port {p}"),
            Key::Switch(d) => format!("traffic and s{d}'s new connection"),
        }
    }
}

#[derive(Debug, Clone)]
struct FlowModView {
    table: u8,
    adds: bool,
    priority: u16,
    r#match: FlowMatch,
    /// Its rule sends packets to the controller.
    to_controller: bool,
    /// The switch ports it sends packets out of.
    outputs: Vec<u32>,
}

/// The switch ports (OFPP_MAX and below) `actions` send packets out of.
fn output_ports<'a>(actions: impl IntoIterator<Item = &'a Action>) -> Vec<u32> {
    actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Output { port, .. } if *port <= 0xffff_ff00 => Some(*port),
            _ => None,
        })
        .collect()
}

/// A PACKET_IN's packet: the table that sent it up, its header fields (at
/// its in_port), its frame. Boxed in [`Kind`]: the fields are large.
#[derive(Debug, Clone)]
struct PacketInView {
    table: u8,
    fields: Fields,
    frame: Bytes,
}

/// OFPP_CONTROLLER (1.0's 0xfffd reads as this too).
const CONTROLLER: u32 = 0xffff_fffd;

#[derive(Debug, Clone)]
enum Kind {
    Input {
        policy_of: Option<usize>,
        keys: Vec<Key>,
    },
    ToSwitch {
        dpid: u64,
        ctl: usize,
        xid: u32,
        flow_mod: Option<FlowModView>,
        /// A PACKET_OUT's frame and the ports it is sent out of.
        packet_out: Option<(Bytes, Vec<u32>)>,
    },
    ToController {
        dpid: u64,
        ctl: usize,
        xid: u32,
        asynchronous: bool,
        packet_in: Option<Box<PacketInView>>,
        keys: Vec<Key>,
    },
    /// A host received a frame: the frame read the flow tables of every
    /// switch it crossed (which ones, the model does not know).
    Delivery {
        frame: Bytes,
    },
}

#[derive(Debug, Clone)]
struct Node {
    /// Record index where it was sent, and where it was received.
    sent: usize,
    received: usize,
    kind: Kind,
    event: Event,
}

impl Node {
    /// The connection and direction a message travelled: (switch,
    /// controller, towards the controller).
    fn channel(&self) -> Option<(u64, usize, bool)> {
        match self.kind {
            Kind::ToSwitch { dpid, ctl, .. } => Some((dpid, ctl, false)),
            Kind::ToController { dpid, ctl, .. } => Some((dpid, ctl, true)),
            _ => None,
        }
    }

    fn controller_side(&self) -> Option<usize> {
        match self.kind {
            Kind::ToController { ctl, .. } => Some(ctl),
            _ => None,
        }
    }

    /// An input or a delivery: one point, no sending and receiving apart.
    fn single_point(&self) -> bool {
        matches!(self.kind, Kind::Input { .. } | Kind::Delivery { .. })
    }
}

fn mac_key(m: &[u8]) -> Key {
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&m[..6]);
    Key::Mac(Mac(mac))
}

/// The frame without an 802.1Q tag: a PACKET_OUT's frame and the
/// PACKET_IN it causes downstream may differ by one.
fn untagged(frame: &[u8]) -> Vec<u8> {
    let mut v = frame.to_vec();
    sts_mocknet::packet::pop_vlan(&mut v);
    v
}

fn input_keys(e: &External, places: &Places) -> Vec<Key> {
    let hosts = &places.hosts;
    match e {
        External::LinkDown { a, b } | External::LinkUp { a, b } => {
            vec![Key::Port(a.switch, a.port), Key::Port(b.switch, b.port)]
        }
        External::HostMigrate { host, .. } => {
            hosts.iter().filter(|(n, _)| n == host).map(|(_, m)| mac_key(m)).collect()
        }
        External::SwitchUp { switch } => vec![Key::Switch(*switch)],
        _ => Vec::new(),
    }
}

/// A PORT_STATUS's keys: its port, and the addresses the port has sent up
/// (what a controller tracking hosts by port forgets or moves on it).
fn port_status_keys(keys: &mut Vec<Key>, heard: &BTreeMap<(u64, u32), BTreeSet<[u8; 6]>>, dpid: u64, port: u32) {
    keys.push(Key::Port(dpid, port));
    keys.extend(heard.get(&(dpid, port)).into_iter().flatten().map(|mac| Key::Mac(Mac(*mac))));
}

/// Where the records analysed end: at the violation, or the trace's end.
fn violation_at(trace: &Trace) -> usize {
    trace.records.iter().position(|r| r.violation().is_some()).unwrap_or(trace.records.len())
}

fn controller_index(name: &str) -> Option<usize> {
    name.strip_prefix('c')?.parse().ok()
}

/// The events of `records` (up to the violation) as nodes, in send order.
fn nodes(
    trace: &Trace,
    start: usize,
    end: usize,
    places: &Places,
    describe: fn(&Message) -> Option<String>,
) -> Vec<Node> {
    let deliveries: HashMap<u64, (usize, u64, u64)> = trace.records[..end]
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r.internal() {
            Some(Internal::Delivered { of }) => Some((*of, (i, r.seq, r.t_ms))),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    // The addresses each port has sent up: a PORT_STATUS of that port and
    // a later sighting of one of them elsewhere do not commute (a
    // controller that tracks hosts by port reads both).
    let mut heard: BTreeMap<(u64, u32), BTreeSet<[u8; 6]>> = BTreeMap::new();
    for (i, r) in trace.records.iter().enumerate().take(end).skip(start) {
        if let Some(e) = r.external() {
            let policy_of = match e {
                External::Policy { controller, .. } => {
                    Some(controller.as_deref().and_then(controller_index).unwrap_or(0))
                }
                _ => None,
            };
            out.push(Node {
                sent: i,
                received: i,
                kind: Kind::Input { policy_of, keys: input_keys(e, places) },
                event: Event { seq: r.seq, t_ms: r.t_ms, what: e.describe(), delivered: None, behind: None },
            });
            continue;
        }
        if let Some(Internal::Frame { host, sent: false, raw: Some(frame) }) = r.internal() {
            let what = format!("{host} receives {}", sts_trace::frame_summary(frame));
            out.push(Node {
                sent: i,
                received: i,
                kind: Kind::Delivery { frame: frame.clone() },
                event: Event { seq: r.seq, t_ms: r.t_ms, what, delivered: None, behind: None },
            });
            continue;
        }
        let Some(Internal::Openflow { dpid, controller, dir, msg, raw, proxy, .. }) = r.internal() else { continue };
        let (received, delivered) = match proxy {
            Some(ProxyDecision::Dropped) => continue,
            Some(ProxyDecision::Queued) => match deliveries.get(&r.seq) {
                Some(&(at, seq, t)) => (at, Some((seq, t))),
                None => continue, // never arrived before the violation
            },
            None => (i, None),
        };
        let parsed = raw.as_ref().and_then(|b| Message::parse(b.clone()).ok());
        let (dpid, ctl) = (*dpid, *controller);
        let mut what = match dir {
            Direction::ToSwitch => format!("{msg} c{ctl} → s{dpid}"),
            Direction::ToController => format!("{msg} s{dpid} → c{ctl}"),
        };
        let kind = match dir {
            Direction::ToSwitch => {
                let (mut flow_mod, mut packet_out) = (None, None);
                if let Some(m) = &parsed {
                    match &m.body {
                        Body::V13(v13::Msg::FlowMod(f)) => {
                            let instructions = Instructions::from_v13(&f.instructions);
                            flow_mod = FlowMatch::from_v13(&f.r#match).ok().map(|r#match| FlowModView {
                                table: f.table_id,
                                adds: f.command <= 2,
                                priority: f.priority,
                                r#match,
                                to_controller: instructions.outputs_to(CONTROLLER),
                                outputs: output_ports(
                                    instructions.apply.iter().chain(instructions.write.iter().flatten()),
                                ),
                            })
                        }
                        Body::V10(v10::Msg::FlowMod(f)) => {
                            let apply: Vec<Action> = f.actions.iter().map(Action::from_v10).collect();
                            flow_mod = Some(FlowModView {
                                table: 0,
                                adds: f.command <= 2,
                                priority: f.priority,
                                r#match: FlowMatch::from_v10(&f.r#match),
                                outputs: output_ports(&apply),
                                to_controller: Instructions { apply, ..Instructions::default() }.outputs_to(CONTROLLER),
                            })
                        }
                        Body::V13(v13::Msg::PacketOut(p)) if !p.data.is_empty() => {
                            let actions: Vec<Action> = p.actions.iter().map(Action::from_v13).collect();
                            packet_out = Some((p.data.clone(), output_ports(&actions)));
                        }
                        Body::V10(v10::Msg::PacketOut(p)) if !p.data.is_empty() => {
                            let actions: Vec<Action> = p.actions.iter().map(Action::from_v10).collect();
                            packet_out = Some((p.data.clone(), output_ports(&actions)));
                        }
                        _ => {}
                    }
                    if let Some(words) = describe(m) {
                        let _ = write!(what, " ({words})");
                    }
                }
                Kind::ToSwitch { dpid, ctl, xid: parsed.as_ref().map_or(0, |m| m.xid), flow_mod, packet_out }
            }
            Direction::ToController => {
                let mut keys = Vec::new();
                let mut packet_in = None;
                if let Some(m) = &parsed {
                    let pin = match &m.body {
                        Body::V13(v13::Msg::PacketIn(p)) => {
                            p.r#match.in_port().map(|port| (p.table_id, port, p.data.clone()))
                        }
                        Body::V10(v10::Msg::PacketIn(p)) => {
                            Some((0, sts_mocknet::flow::port10(p.in_port), p.data.clone()))
                        }
                        Body::V13(v13::Msg::PortStatus(s)) => {
                            port_status_keys(&mut keys, &heard, dpid, s.desc.port_no);
                            None
                        }
                        Body::V10(v10::Msg::PortStatus(s)) => {
                            port_status_keys(&mut keys, &heard, dpid, sts_mocknet::flow::port10(s.desc.port_no));
                            None
                        }
                        _ => None,
                    };
                    if let Some((table, port, data)) = pin {
                        keys.push(Key::Port(dpid, port));
                        if data.len() >= 14 {
                            keys.push(mac_key(&data[6..12]));
                            let mut src = [0u8; 6];
                            src.copy_from_slice(&data[6..12]);
                            heard.entry((dpid, port)).or_default().insert(src);
                        }
                        let _ = write!(what, " (in_port={port}: {})", sts_trace::frame_summary(&data));
                        packet_in = Some(Box::new(PacketInView {
                            table,
                            fields: Fields::extract(&data, port, 0),
                            frame: data,
                        }));
                    }
                }
                let asynchronous = matches!(msg.as_str(), "packet_in" | "port_status" | "flow_removed");
                Kind::ToController {
                    dpid,
                    ctl,
                    xid: parsed.as_ref().map_or(0, |m| m.xid),
                    asynchronous,
                    packet_in,
                    keys,
                }
            }
        };
        let event = Event { seq: r.seq, t_ms: r.t_ms, what, delivered, behind: None };
        out.push(Node { sent: i, received, kind, event });
    }
    out
}

/// Happens-before over *points*: an input, or a message's sending or its
/// receiving (apart when the proxy held it). Points are in trace order
/// (a message's receiving at its `delivered` record) and every edge goes
/// forward in it, so ancestor sets fill in one pass: bit `a` of `anc[b]`
/// says point a happened before point b.
struct HappensBefore {
    words: usize,
    anc: Vec<u64>,
    edges: usize,
    /// Each node's sending (its input point for an input) and receiving.
    send: Vec<usize>,
    receive: Vec<usize>,
    /// Each point's direct predecessors (none listed for an input: every
    /// earlier point is one).
    preds: Vec<Vec<usize>>,
}

impl HappensBefore {
    fn before(&self, a: usize, b: usize) -> bool {
        a < b && self.anc[b * self.words + a / 64] >> (a % 64) & 1 == 1
    }

    fn ordered(&self, a: usize, b: usize) -> bool {
        self.before(a, b) || self.before(b, a)
    }

    /// The points that lead to `target` through messages and reactions
    /// alone: not through an input (after which everything recorded
    /// before it counts as before, which says nothing of cause).
    fn causes(&self, target: usize) -> Vec<bool> {
        let mut seen = vec![false; self.preds.len()];
        let mut stack = vec![target];
        while let Some(p) = stack.pop() {
            for &q in &self.preds[p] {
                if !seen[q] {
                    seen[q] = true;
                    stack.push(q);
                }
            }
        }
        seen
    }
}

/// For each PACKET_IN, the FLOW_MOD whose rule sent it up (the
/// highest-priority rule sending to the controller that matches its packet
/// in its table, among those the switch had been sent), with that rule's
/// priority; absent when none does (a miss). A higher rule matching the
/// packet had not been met yet: it races with the packet.
fn senders(nodes: &[Node]) -> HashMap<usize, (usize, u16)> {
    let mut rules: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Kind::ToSwitch { dpid, flow_mod: Some(f), .. } = &n.kind {
            if f.adds {
                rules.entry(*dpid).or_default().push(i);
            }
        }
    }
    let mut out = HashMap::new();
    for (p, n) in nodes.iter().enumerate() {
        let Kind::ToController { dpid, packet_in: Some(pin), .. } = &n.kind else { continue };
        let (table, fields) = (&pin.table, &pin.fields);
        let best = rules
            .get(dpid)
            .into_iter()
            .flatten()
            .filter(|&&f| nodes[f].received < n.sent)
            .filter_map(|&f| match &nodes[f].kind {
                Kind::ToSwitch { flow_mod: Some(m), .. }
                    if m.to_controller && m.table == *table && m.r#match.matches(fields) =>
                {
                    Some((m.priority, nodes[f].received, f))
                }
                _ => None,
            })
            .max();
        if let Some((prio, _, f)) = best {
            out.insert(p, (f, prio));
        }
    }
    out
}

fn happens_before(nodes: &[Node], senders: &HashMap<usize, (usize, u16)>, opts: &Options) -> HappensBefore {
    // The points, in order: (position, receiving?, node).
    let mut points: Vec<(usize, bool, usize)> = Vec::with_capacity(nodes.len() * 2);
    for (i, n) in nodes.iter().enumerate() {
        points.push((n.sent, false, i));
        if !n.single_point() {
            points.push((n.received, true, i));
        }
    }
    points.sort_unstable();
    let (mut send, mut receive) = (vec![0; nodes.len()], vec![0; nodes.len()]);
    for (pt, &(_, receiving, i)) in points.iter().enumerate() {
        if receiving {
            receive[i] = pt;
        } else {
            send[i] = pt;
            receive[i] = pt;
        }
    }
    let n = points.len();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut inputs: Vec<usize> = Vec::new();
    let mut last_input: Option<usize> = None;
    let mut channel_send: HashMap<(u64, usize, bool), usize> = HashMap::new();
    let mut channel_receive: HashMap<(u64, usize, bool), usize> = HashMap::new();
    // Per controller: what it received lately (point, time received).
    let mut recent: HashMap<usize, std::collections::VecDeque<(usize, u64)>> = HashMap::new();
    // Per controller: when it first spoke after its last receiving, and what
    // it had received in the reaction window before that (a slow reaction:
    // what it sends soon after its first word answers the same messages).
    let mut answering: HashMap<usize, Option<(u64, Vec<usize>)>> = HashMap::new();
    let mut requests: HashMap<(u64, usize, u32), usize> = HashMap::new();
    // The last point that carried each frame out of a switch or up from one.
    let mut frames: HashMap<Vec<u8>, usize> = HashMap::new();
    for (pt, &(_, receiving, i)) in points.iter().enumerate() {
        let node = &nodes[i];
        let p = &mut preds[pt];
        if receiving {
            // Received after sent, in the connection's order.
            p.push(send[i]);
            let (dpid, ctl, to_switch) = match &node.kind {
                Kind::ToSwitch { dpid, ctl, .. } => (*dpid, *ctl, true),
                Kind::ToController { dpid, ctl, .. } => (*dpid, *ctl, false),
                Kind::Input { .. } | Kind::Delivery { .. } => unreachable!("one point, no receiving"),
            };
            if let Some(prev) = channel_receive.insert((dpid, ctl, to_switch), pt) {
                p.push(prev);
            }
            match &node.kind {
                Kind::ToController { ctl, .. } => {
                    let t = node.event.delivered.map_or(node.event.t_ms, |(_, t)| t);
                    let q = recent.entry(*ctl).or_default();
                    q.push_back((pt, t));
                    answering.insert(*ctl, None);
                    if q.len() > 64 {
                        q.pop_front();
                    }
                }
                Kind::ToSwitch { dpid, ctl, xid, packet_out, .. } => {
                    requests.insert((*dpid, *ctl, *xid), pt);
                    if let Some((frame, _)) = packet_out {
                        frames.insert(untagged(frame), pt);
                    }
                }
                Kind::Input { .. } | Kind::Delivery { .. } => {}
            }
            continue;
        }
        if let Some(inp) = last_input {
            p.push(inp);
        }
        match &node.kind {
            Kind::Input { .. } => {
                // sts injects an input once it has seen everything recorded
                // before it: all earlier points happened before it.
                last_input = Some(pt);
                inputs.push(pt);
            }
            Kind::Delivery { frame } => {
                // After what carried the frame out of a switch last.
                if let Some(&carrier) = frames.get(&untagged(frame)) {
                    p.push(carrier);
                }
            }
            Kind::ToSwitch { dpid, ctl, .. } => {
                if let Some(prev) = channel_send.insert((*dpid, *ctl, true), pt) {
                    p.push(prev);
                }
                // A reaction to whatever the controller received just before;
                // or, when it had been silent since (busy: a reaction up to
                // four windows late), to what it received in the window before
                // its last receiving, as is what it sends soon after.
                let t_send = node.event.t_ms;
                let received = recent.get(ctl).into_iter().flatten();
                p.extend(received.filter(|(_, t)| t_send.saturating_sub(*t) <= opts.reaction_ms).map(|(c, _)| *c));
                let answer = answering.entry(*ctl).or_insert(None);
                if answer.is_none() {
                    if let Some(&(_, last)) = recent.get(ctl).and_then(|q| q.back()) {
                        if t_send.saturating_sub(last) <= 4 * opts.reaction_ms {
                            let burst = recent[ctl].iter().filter(|(_, t)| last - t <= opts.reaction_ms);
                            *answer = Some((t_send, burst.map(|(c, _)| *c).collect()));
                        }
                    }
                }
                if let Some((first, causes)) = answer {
                    if t_send.saturating_sub(*first) <= opts.reaction_ms {
                        p.extend(causes.iter().copied());
                    }
                }
            }
            Kind::ToController { dpid, ctl, xid, asynchronous, packet_in, .. } => {
                if let Some(prev) = channel_send.insert((*dpid, *ctl, false), pt) {
                    p.push(prev);
                }
                if !asynchronous {
                    if let Some(&req) = requests.get(&(*dpid, *ctl, *xid)) {
                        p.push(req);
                    }
                }
                if let Some(pin) = packet_in {
                    // The same frame sent out earlier (a PACKET_OUT) or sent
                    // up by the switch it came through.
                    if let Some(before) = frames.insert(untagged(&pin.frame), pt) {
                        p.push(before);
                    }
                    // The rule that sent it up was there first.
                    if let Some((rule, _)) = senders.get(&i) {
                        p.push(receive[*rule]);
                    }
                }
            }
        }
    }
    let words = n.div_ceil(64).max(1);
    let mut anc = vec![0u64; n * words];
    let mut edges = 0;
    let mut next_input = inputs.into_iter().peekable();
    for i in 0..n {
        if next_input.peek() == Some(&i) {
            next_input.next();
            // Every earlier point.
            preds[i].clear();
            let row = &mut anc[i * words..(i + 1) * words];
            for (w, word) in row.iter_mut().enumerate().take(i / 64 + 1) {
                let bits = (i - w * 64).min(64);
                *word = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
            }
            edges += 1;
            continue;
        }
        let ps = &mut preds[i];
        ps.sort_unstable();
        ps.dedup();
        edges += ps.len();
        for &q in ps.iter() {
            debug_assert!(q < i);
            let (head, tail) = anc.split_at_mut(i * words);
            let row = &mut tail[..words];
            for (w, a) in row.iter_mut().zip(&head[q * words..q * words + words]) {
                *w |= a;
            }
            row[q / 64] |= 1 << (q % 64);
        }
    }
    HappensBefore { words, anc, edges, send, receive, preds }
}

/// A conflicting pair, as (place, the two in the order the place saw them,
/// what both touch).
fn conflicts(
    nodes: &[Node],
    senders: &HashMap<usize, (usize, u16)>,
    places: &Places,
    reaction_ms: u64,
) -> Vec<(String, usize, usize, String)> {
    let hosts = &places.hosts[..];
    let mut out = Vec::new();
    // At a controller: messages (and inputs) sharing a key.
    let mut by_key: BTreeMap<(usize, Key), Vec<usize>> = BTreeMap::new();
    let mut input_keys: Vec<(usize, Key)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        match &n.kind {
            Kind::ToController { ctl, keys, .. } => {
                for k in keys {
                    by_key.entry((*ctl, *k)).or_default().push(i);
                }
            }
            Kind::Input { keys, .. } => input_keys.extend(keys.iter().map(|k| (i, *k))),
            _ => {}
        }
    }
    let seen_order = |a: usize, b: usize| if nodes[a].received <= nodes[b].received { (a, b) } else { (b, a) };
    let mut paired = BTreeSet::new();
    for ((ctl, key), members) in &by_key {
        for (x, &a) in members.iter().enumerate() {
            for &b in &members[x + 1..] {
                let (
                    Kind::ToController { dpid: da, packet_in: pa, .. },
                    Kind::ToController { dpid: db, packet_in: pb, .. },
                ) = (&nodes[a].kind, &nodes[b].kind)
                else {
                    continue;
                };
                // Two ports' reports of an address they heard commute: a
                // controller forgets it either way.
                let reports = pa.is_none() && pb.is_none() && matches!(key, Key::Mac(_));
                if da != db && !reports && paired.insert((a, b)) {
                    let (f, s) = seen_order(a, b);
                    out.push((format!("c{ctl}"), f, s, key.describe(hosts)));
                }
            }
        }
        for &(inp, k) in &input_keys {
            if k == *key {
                for &m in members {
                    let (f, s) = seen_order(inp, m);
                    out.push((format!("c{ctl}"), f, s, key.describe(hosts)));
                }
            }
        }
    }
    // A switch coming back and traffic a controller sent out elsewhere
    // before it: whether the traffic meets the switch before or after its
    // controller has set it up again (a controller's own timers around a
    // handshake are invisible; this is the order sts can change).
    for &(inp, k) in &input_keys {
        let Key::Switch(d) = k else { continue };
        for (m, n) in nodes.iter().enumerate() {
            if let Kind::ToSwitch { dpid, packet_out: Some(_), .. } = n.kind {
                if dpid != d {
                    let (f, s) = seen_order(inp, m);
                    out.push((format!("s{d}"), f, s, k.describe(hosts)));
                }
            }
        }
    }
    // A policy change and what its controller learns around it.
    for (i, n) in nodes.iter().enumerate() {
        let Kind::Input { policy_of: Some(c), .. } = n.kind else { continue };
        for (j, m) in nodes.iter().enumerate() {
            if let Kind::ToController { ctl, keys, .. } = &m.kind {
                if *ctl == c && !keys.is_empty() {
                    let (f, s) = seen_order(i, j);
                    let about = keys.iter().map(|k| k.describe(hosts)).collect::<Vec<_>>().join(", ");
                    out.push((format!("c{c}"), f, s, format!("c{c}'s configuration and what it learns of {about}")));
                }
            }
        }
    }
    // At a switch: a rule sent with a PACKET_OUT (in one reaction, to
    // another switch) and that packet's delivery, when the packet took the
    // rule: nothing but timing put the rule there before the packet came,
    // unless a barrier did (then the two are ordered). The packet's path is
    // followed from the PACKET_OUT's port through the links and, at each
    // switch, the rule it would take (the highest-priority match sent by
    // then).
    let mut packet_outs: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    let mut rules: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        match &n.kind {
            Kind::ToSwitch { packet_out: Some((frame, _)), .. } => {
                packet_outs.entry(untagged(frame)).or_default().push(i)
            }
            Kind::ToSwitch { dpid, flow_mod: Some(f), .. } if f.adds => rules.entry(*dpid).or_default().push(i),
            _ => {}
        }
    }
    for (d, n) in nodes.iter().enumerate() {
        let Kind::Delivery { frame } = &n.kind else { continue };
        let frame = untagged(frame);
        let Some(&p) = packet_outs.get(&frame).and_then(|ps| ps.iter().rev().find(|&&p| nodes[p].received < n.sent))
        else {
            continue;
        };
        let Kind::ToSwitch { dpid: out_at, ctl, packet_out: Some((_, ports)), .. } = &nodes[p].kind else { continue };
        let t_out = nodes[p].event.t_ms;
        let mut hops: Vec<(u64, u32)> = ports.iter().map(|&port| (*out_at, port)).collect();
        let mut visited = BTreeSet::new();
        while let Some(hop) = hops.pop() {
            let Some(&(dpid, in_port)) = places.links.get(&hop) else { continue };
            if !visited.insert((dpid, in_port)) || visited.len() > 64 {
                continue;
            }
            let fields = Fields::extract(&frame, in_port, 0);
            let taken = rules
                .get(&dpid)
                .into_iter()
                .flatten()
                .filter(|&&f| nodes[f].sent < n.sent)
                .filter_map(|&f| match &nodes[f].kind {
                    Kind::ToSwitch { flow_mod: Some(m), .. } if m.table == 0 && m.r#match.matches(&fields) => {
                        Some((m.priority, f))
                    }
                    _ => None,
                })
                .max();
            let Some((_, f)) = taken else { continue };
            let Kind::ToSwitch { ctl: cf, flow_mod: Some(fm), .. } = &nodes[f].kind else { continue };
            hops.extend(fm.outputs.iter().map(|&port| (dpid, port)));
            if cf == ctl && f < p && t_out - nodes[f].event.t_ms <= reaction_ms && !fm.to_controller {
                out.push((
                    format!("s{dpid}"),
                    f,
                    d,
                    format!(
                        "s{dpid} table {}: the rule (priority {}) on the path of the packet c{ctl} sent out at s{out_at} \
                         (seq {}) with no barrier",
                        fm.table, fm.priority, nodes[p].event.seq
                    ),
                ));
            }
        }
    }
    // At a switch: a rule and a packet it matches; two controllers' rules.
    let mut flow_mods: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut packet_ins: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        match &n.kind {
            Kind::ToSwitch { dpid, flow_mod: Some(_), .. } => flow_mods.entry(*dpid).or_default().push(i),
            Kind::ToController { dpid, packet_in: Some(_), .. } => packet_ins.entry(*dpid).or_default().push(i),
            _ => {}
        }
    }
    // The switch sees a FLOW_MOD when it arrives, a packet when it sends it up.
    let at_switch = |a: usize, b: usize| {
        let pos = |i: usize| if nodes[i].controller_side().is_some() { nodes[i].sent } else { nodes[i].received };
        if pos(a) <= pos(b) {
            (a, b)
        } else {
            (b, a)
        }
    };
    for (dpid, fms) in &flow_mods {
        for &f in fms {
            let Kind::ToSwitch { ctl: cf, flow_mod: Some(fm), .. } = &nodes[f].kind else { continue };
            if fm.adds {
                for &p in packet_ins.get(dpid).into_iter().flatten() {
                    let Kind::ToController { packet_in: Some(pin), .. } = &nodes[p].kind else {
                        continue;
                    };
                    // Had it come first, the rule would have taken the packet
                    // from the one that sent it up (or from the miss).
                    let outranks = match senders.get(&p) {
                        Some((sender, priority)) => *sender != f && fm.priority > *priority,
                        None => true,
                    };
                    if pin.table == fm.table && outranks && fm.r#match.matches(&pin.fields) {
                        let (a, b) = at_switch(f, p);
                        out.push((
                            format!("s{dpid}"),
                            a,
                            b,
                            format!(
                                "s{dpid} table {}: the rule (priority {}) matches the packet",
                                fm.table, fm.priority
                            ),
                        ));
                    }
                }
            }
            for &g in fms {
                let Kind::ToSwitch { ctl: cg, flow_mod: Some(gm), .. } = &nodes[g].kind else { continue };
                if g > f && cg != cf && gm.table == fm.table && gm.r#match.overlaps(&fm.r#match) {
                    let (a, b) = at_switch(f, g);
                    out.push((format!("s{dpid}"), a, b, format!("s{dpid} table {}: overlapping rules", fm.table)));
                }
            }
        }
    }
    out
}

/// The keys a rule concerns: the addresses it matches on and the ports it
/// matches or sends to.
fn rule_keys(dpid: u64, e: &FlowEntry) -> BTreeSet<Key> {
    let mut keys = BTreeSet::new();
    for f in &e.r#match.fields {
        match f.field {
            Field::EthSrc | Field::EthDst if f.mask == sts_mocknet::flow::full_mask(f.field) => {
                keys.insert(Key::Mac(Mac(sts_mocknet::packet::int_mac(f.value))));
            }
            Field::InPort => {
                keys.insert(Key::Port(dpid, f.value as u32));
            }
            _ => {}
        }
    }
    for p in 1..=64u32 {
        if e.instructions.outputs_to(p) {
            keys.insert(Key::Port(dpid, p));
        }
    }
    keys
}

/// What the analysis knows of the network: hosts by name and address, and
/// the links between switch ports (both ways). Empty without a config: then
/// no address is named and no packet's path is followed.
#[derive(Debug, Clone, Default)]
pub struct Places {
    pub hosts: Vec<(String, [u8; 6])>,
    pub links: HashMap<(u64, u32), (u64, u32)>,
    pub switches: Vec<u64>,
}

/// The config's hosts and links (as the mock network wires them).
pub fn places(config: &crate::config::Config) -> Places {
    let net = sts_mocknet::Network::new(&config.topology(), config.network.openflow.wire());
    let mut links = HashMap::new();
    for (a, b) in net.switch_links() {
        links.insert(a, b);
        links.insert(b, a);
    }
    Places {
        hosts: net.hosts.iter().map(|h| (h.name.clone(), h.mac.0)).collect(),
        links,
        switches: net.switches.keys().copied().collect(),
    }
}

/// A trace's events up to its violation, with their happens-before.
struct Model {
    /// The violation's record index (the trace's length without one).
    end: usize,
    nodes: Vec<Node>,
    senders: HashMap<usize, (usize, u16)>,
    hb: HappensBefore,
    /// Events left out at the start (past `max_events`).
    skipped: usize,
    reaction_ms: u64,
}

impl Model {
    fn build(trace: &Trace, places: &Places, opts: &Options) -> Model {
        let end = violation_at(trace);
        // The last `max_events` events only, found before anything is
        // parsed (a long trace's page must not decode all of it).
        let is_event = |r: &sts_trace::Record| {
            r.external().is_some()
                || matches!(r.internal(), Some(Internal::Openflow { proxy, .. }) if *proxy != Some(ProxyDecision::Dropped))
                || matches!(r.internal(), Some(Internal::Frame { sent: false, raw: Some(_), .. }))
        };
        let (mut start, mut kept) = (end, 0);
        while start > 0 && kept < opts.max_events {
            start -= 1;
            kept += usize::from(is_event(&trace.records[start]));
        }
        let skipped = trace.records[..start].iter().filter(|r| is_event(r)).count();
        let nodes = nodes(trace, start, end, places, opts.describe);
        let senders = senders(&nodes);
        let hb = happens_before(&nodes, &senders, opts);
        Model { end, nodes, senders, hb, skipped, reaction_ms: opts.reaction_ms }
    }
}

/// A conflicting pair: where (`s1`, `c0`), the two nodes in the order that
/// place met them, what both touch, and the points at which it met them (a
/// controller meets a message when it receives it; a switch meets a rule
/// when it receives it and a packet when it sends it up).
struct Conflict {
    at: String,
    first: usize,
    second: usize,
    what: String,
    points: (usize, usize),
}

impl Model {
    /// Each conflicting pair once.
    fn conflicts(&self, places: &Places) -> Vec<Conflict> {
        let mut seen = BTreeSet::new();
        let met = |x: usize, at_switch: bool| match self.nodes[x].kind {
            Kind::ToController { .. } if at_switch => self.hb.send[x],
            _ => self.hb.receive[x],
        };
        conflicts(&self.nodes, &self.senders, places, self.reaction_ms)
            .into_iter()
            .filter(|(_, a, b, _)| seen.insert((*a.min(b), *a.max(b))))
            .map(|(at, first, second, what)| {
                let at_switch = at.starts_with('s');
                Conflict { points: (met(first, at_switch), met(second, at_switch)), at, first, second, what }
            })
            .collect()
    }
}

/// The races of `trace` up to its violation (the whole trace without one);
/// `hosts` name addresses (and let a migration's host be known by its
/// address).
pub fn analyze(trace: &Trace, places: &Places, opts: &Options, culprit: Option<&Culprit>) -> Report {
    let model = Model::build(trace, places, opts);
    let Model { end, nodes, hb, skipped, .. } = &model;
    let (end, skipped) = (*end, *skipped);
    let mut report = Report { events: nodes.len(), edges: hb.edges, skipped, ..Report::default() };
    let violation = trace.violation();
    report.violation = violation.map(|v| v.summary.clone());
    let index_of: HashMap<u64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.event.seq, i)).collect();

    // What harm is judged by.
    enum Judge {
        Rule { installer: usize, keys: BTreeSet<Key>, r#match: FlowMatch },
        Handling(usize),
    }
    let mut judge = None;
    if let Some(v) = violation {
        let dropped = trace.records[..end].iter().rev().find_map(|r| match r.internal() {
            Some(Internal::Openflow { proxy: Some(ProxyDecision::Dropped), msg, dpid, .. }) => {
                Some(format!("{msg} of s{dpid} (seq {})", r.seq))
            }
            _ => None,
        });
        let installer = culprit.and_then(|c| index_of.get(&c.flow_mod).copied());
        let controller = v.elements.iter().find_map(|e| controller_index(e));
        if let (Some(c), Some(installer)) = (culprit, installer) {
            report.judged_by = Some(format!("s{} {} (installed by seq {})", c.dpid, c.rule.trim(), c.flow_mod));
            judge =
                Some(Judge::Rule { installer, keys: rule_keys(c.dpid, &c.entry), r#match: c.entry.r#match.clone() });
        } else if let Some(c) = controller.filter(|_| matches!(v.invariant.as_str(), "controller-errors" | "liveness"))
        {
            // The message the controller was handling when it failed: the
            // last it received before the error's log line (the violation
            // is recorded later, once it persisted).
            let name = format!("c{c}");
            let failed = trace.records[..end]
                .iter()
                .position(|r| {
                    matches!(r.internal(), Some(Internal::Log { controller, line, .. })
                        if *controller == name && !line.trim().is_empty() && v.summary.contains(line.trim()))
                })
                .unwrap_or(end);
            let handling = nodes.iter().rposition(|n| n.controller_side() == Some(c) && n.received < failed);
            if let Some(h) = handling {
                report.judged_by = Some(format!("what c{c} was handling when it failed: seq {}", nodes[h].event.seq));
                judge = Some(Judge::Handling(h));
            }
        }
        if judge.is_none() {
            report.unjudged = Some(match (&dropped, culprit) {
                (Some(d), _) => format!("the violation follows a dropped message ({d}): a lost message is not a race"),
                (None, Some(_)) => "the culprit rule's FLOW_MOD is not among the events analysed".into(),
                (None, None) => "the violation names no rule and no controller to judge races by".into(),
            });
        }
    }

    // Messages queued behind a held one: delivered at the same moment as
    // an earlier message of their connection and direction (the proxy
    // keeps each channel in order). The one held is what the test chose.
    let mut released: HashMap<((u64, usize, bool), u64), u64> = HashMap::new();
    let mut behind: Vec<Option<u64>> = vec![None; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let (Some(channel), Some((_, t))) = (n.channel(), n.event.delivered) {
            let first = *released.entry((channel, t)).or_insert(n.event.seq);
            behind[i] = (first != n.event.seq).then_some(first);
        }
    }
    let mut races = Vec::new();
    let mut judged_causes: Option<Vec<bool>> = None;
    for Conflict { at, first: a, second: b, what: conflict, points: (pa, pb) } in model.conflicts(places) {
        if hb.ordered(pa, pb) {
            continue;
        }
        let mut strength = 2;
        let harm = match &judge {
            Some(Judge::Rule { installer, keys, r#match }) => {
                let causes = judged_causes.get_or_insert_with(|| hb.causes(hb.send[*installer]));
                let leads = |x: usize| x == *installer || causes[if x == b { pb } else { pa }];
                // How it concerns the rule: it is about a host or port the
                // rule names (2), or carries a packet the rule takes, where
                // it came in aside (1).
                let concerns = |x: usize| match &nodes[x].kind {
                    Kind::ToController { keys: k, .. } if k.iter().any(|k| keys.contains(k)) => 2,
                    Kind::ToController { packet_in: Some(pin), .. } => {
                        let in_port = r#match.fields.iter().find(|f| f.field == Field::InPort);
                        let in_port = in_port.map_or(0, |f| f.value as u32);
                        u8::from(r#match.matches(&Fields::extract(&pin.frame, in_port, 0)))
                    }
                    Kind::ToSwitch { .. } => 2 * u8::from(x == *installer),
                    _ => 0,
                };
                // Either side: what the later one did depended on the
                // earlier one having come first, and what the earlier one
                // did on the later one not having come yet.
                let deciding = [(b, "later"), (a, "earlier")]
                    .into_iter()
                    .filter(|&(x, _)| !nodes[x].single_point() && leads(x))
                    .map(|(x, which)| (concerns(x), which))
                    .filter(|&(how, _)| how > 0)
                    .max_by_key(|&(how, _)| how);
                if a == *installer || b == *installer {
                    strength = 2;
                    Some(format!("one of the two is the culprit rule's FLOW_MOD (seq {})", nodes[*installer].event.seq))
                } else if let Some((how, which)) = deciding {
                    strength = how;
                    Some(format!(
                        "the {which} one leads to the culprit rule's FLOW_MOD (seq {}) and {}",
                        nodes[*installer].event.seq,
                        if how == 2 { "concerns what it matches" } else { "carries a packet it takes" }
                    ))
                } else {
                    None
                }
            }
            Some(Judge::Handling(h)) => {
                let causes = judged_causes.get_or_insert_with(|| hb.causes(hb.receive[*h]));
                if a == *h || b == *h {
                    Some(format!(
                        "one of the two is what the controller was handling when it failed (seq {})",
                        nodes[*h].event.seq
                    ))
                } else {
                    // About what it was handling: a host or port in common,
                    // or the very packet it carried.
                    let (handled_keys, handled_frame, handled_from) = match &nodes[*h].kind {
                        Kind::ToController { keys, packet_in, dpid, .. } => {
                            (&keys[..], packet_in.as_ref().map(|p| untagged(&p.frame)), Some(*dpid))
                        }
                        _ => (&[][..], None, None),
                    };
                    // An input that brought back the switch the handled
                    // message came from: what the controller did about that
                    // switch coming back and what it was handling from it
                    // depend on their order.
                    let returned = |y: usize| {
                        matches!(&nodes[y].kind, Kind::Input { keys, .. }
                            if handled_from.is_some_and(|d| keys.contains(&Key::Switch(d))))
                    };
                    let concerns = |x: usize| match &nodes[x].kind {
                        Kind::ToController { keys, packet_in, .. } => {
                            keys.iter().any(|k| handled_keys.contains(k))
                                || packet_in.as_ref().is_some_and(|p| Some(untagged(&p.frame)) == handled_frame)
                        }
                        Kind::ToSwitch { packet_out: Some((frame, _)), .. } => Some(untagged(frame)) == handled_frame,
                        _ => false,
                    };
                    [(b, pb, "later", a), (a, pa, "earlier", b)]
                        .into_iter()
                        .find(|&(x, px, _, other)| {
                            !matches!(nodes[x].kind, Kind::Input { .. })
                                && causes[px]
                                && (concerns(x) || returned(other))
                        })
                        .map(|(x, _, which, _)| {
                            let how = if concerns(x) {
                                "concerns it"
                            } else {
                                "the other brought back the switch it came from"
                            };
                            format!(
                                "the {which} one leads to what the controller was handling when it failed (seq {}) and \
                                 {how}",
                                nodes[*h].event.seq
                            )
                        })
                }
            }
            None => None,
        };
        let input = matches!(nodes[a].kind, Kind::Input { .. }) || matches!(nodes[b].kind, Kind::Input { .. });
        let held = |x: usize| nodes[x].event.delivered.is_some();
        let chosen = (held(a) && behind[a].is_none()) || (held(b) && behind[b].is_none());
        races.push((
            (harm.is_none(), !(held(a) || held(b)), !chosen, !input, 2 - strength),
            b,
            Race {
                at,
                first: Event { behind: behind[a], ..nodes[a].event.clone() },
                second: Event { behind: behind[b], ..nodes[b].event.clone() },
                conflict,
                harm,
            },
        ));
    }
    // Harmful first; among them those with a message the proxy held (where
    // timing was changed; the one held before those queued behind it),
    // then those with an input (its timing is what a
    // test controls), then those about what the rule names before those
    // carrying a packet it takes, then the latest (nearest the violation).
    // The rest in trace order.
    races.sort_by(|x, y| x.0.cmp(&y.0).then(if x.0 .0 { x.1.cmp(&y.1) } else { y.1.cmp(&x.1) }));
    report.races = races.into_iter().map(|(_, _, r)| r).collect();
    report
}

/// An order the interposer can flip: a message held at the proxy until
/// after an event that, in the recorded run, came after it at the same place
/// and conflicts with it, with nothing but timing between them (no message,
/// reply or reaction leads from the one to the other).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Flip {
    /// The message to hold: its record's seq, switch and type.
    pub message: u64,
    pub dpid: u64,
    pub msg_type: sts_trace::MsgType,
    /// The event it is to come after (its record's seq), and where.
    pub past: u64,
    pub at: String,
    pub conflict: String,
    /// How long to hold it: from its sending to a little after `past` met
    /// the place. Unused when it is dropped.
    pub delay_ms: u64,
    /// Lose the message instead of holding it (`past` is the message
    /// itself).
    pub drop: bool,
    /// Both events, for people.
    pub first: Event,
    pub second: Event,
}

/// The records of messages a variant can hold or drop as picked: after an
/// input, and the first of their type and switch since it (a
/// `control_delay_next` or `control_drop` armed at that input takes the
/// first such message that comes). HELLOs and echoes aside.
pub fn placeable(trace: &Trace) -> Vec<usize> {
    let end = violation_at(trace);
    let mut out = Vec::new();
    let mut since_input: Option<BTreeSet<(u64, sts_trace::MsgType)>> = None;
    for (i, r) in trace.records[..end].iter().enumerate() {
        if r.external().is_some() {
            since_input = Some(BTreeSet::new());
        }
        let (Some(seen), Some(Internal::Openflow { dpid, msg, proxy: None, .. })) =
            (since_input.as_mut(), r.internal())
        else {
            continue;
        };
        if seen.insert((*dpid, *msg)) && !matches!(msg.as_str(), "hello" | "echo_request" | "echo_reply") {
            out.push(i);
        }
    }
    out
}

/// Losses worth trying: each FLOW_MOD a variant can drop as picked
/// ([`placeable`]); first those of rules that send packets to the
/// controller (lost, they leave the switch silent: nothing it sends up will
/// prompt the controller to send the rule again), then in trace order.
pub fn drops(trace: &Trace, places: &Places, opts: &Options) -> Vec<Flip> {
    // The messages alone: a loss needs no happens-before.
    let nodes = nodes(trace, 0, violation_at(trace), places, opts.describe);
    let at: HashMap<usize, usize> = nodes.iter().enumerate().map(|(i, n)| (n.sent, i)).collect();
    let mut out: Vec<(bool, Flip)> = placeable(trace)
        .into_iter()
        .filter_map(|r| {
            let n = &nodes[*at.get(&r)?];
            let Kind::ToSwitch { dpid, flow_mod: Some(fm), .. } = &n.kind else { return None };
            let Some(Internal::Openflow { msg, .. }) = trace.records[r].internal() else { return None };
            let flip = Flip {
                message: n.event.seq,
                dpid: *dpid,
                msg_type: *msg,
                past: n.event.seq,
                at: format!("s{dpid}"),
                conflict: if fm.to_controller {
                    "lost: its rule sends packets to the controller".into()
                } else {
                    "lost".into()
                },
                delay_ms: 0,
                drop: true,
                first: n.event.clone(),
                second: n.event.clone(),
            };
            Some((!fm.to_controller, flip))
        })
        .collect();
    out.sort_by_key(|(later, f)| (*later, f.message));
    out.into_iter().map(|(_, f)| f).collect()
}

/// The time the activity following record `at` (an input) dies down: the
/// last record before the next input reached with no gap over half a second.
fn settled(trace: &Trace, at: usize, end: usize) -> u64 {
    let mut t = trace.records[at].t_ms;
    for r in &trace.records[at + 1..end] {
        if r.external().is_some() || r.t_ms > t + 500 {
            break;
        }
        t = r.t_ms;
    }
    t
}

/// The orders of `trace`'s conflicting pairs that timing alone decided, as
/// flips of the first message past the second event; those whose second
/// event is an input first (its timing is what a test controls), then in
/// trace order; each (message, past) once.
pub fn flips(trace: &Trace, places: &Places, opts: &Options) -> Vec<Flip> {
    let model = Model::build(trace, places, opts);
    let Model { end, nodes, hb, .. } = &model;
    let mut causes: HashMap<usize, Vec<bool>> = HashMap::new();
    let mut out = Vec::new();
    // Only messages a variant holds as picked (a handshake before the first
    // input, or a second FLOW_MOD to a switch after one, cannot be).
    let placeable: BTreeSet<usize> = placeable(trace).into_iter().collect();
    for Conflict { at, first: a, second: b, what: conflict, points: (pa, pb) } in model.conflicts(places) {
        if !placeable.contains(&nodes[a].sent) {
            continue;
        }
        // The first must be a message the proxy let through at once (a held
        // one cannot be delivered earlier than it was).
        let dpid = match &nodes[a].kind {
            Kind::ToSwitch { dpid, .. } | Kind::ToController { dpid, .. } => *dpid,
            Kind::Input { .. } | Kind::Delivery { .. } => continue,
        };
        if nodes[a].event.delivered.is_some() || hb.before(pb, pa) {
            continue;
        }
        // Led to it by messages or reactions: not timing's doing.
        if causes.entry(pb).or_insert_with(|| hb.causes(pb))[pa] {
            continue;
        }
        let Some(Internal::Openflow { msg, .. }) = trace.records[nodes[a].sent].internal() else { continue };
        // When the place was done with the second event: a message when it
        // arrived; an input once the burst of activity after it is over
        // (a controller may take a while to act on a policy change).
        // A margin past it: a controller's reaction to a message takes
        // about the reaction window, and so does a switch's handshake; its
        // reaction to other inputs (a reload) varies from run to run by
        // hundreds of milliseconds.
        let margin = |x: usize| match &nodes[x].kind {
            Kind::Input { keys, .. } if !keys.iter().any(|k| matches!(k, Key::Switch(_))) => 1000,
            _ => opts.reaction_ms.max(100),
        };
        let met = |x: usize| match nodes[x].kind {
            Kind::Input { .. } => settled(trace, nodes[x].sent, *end),
            _ => nodes[x].event.delivered.map_or(nodes[x].event.t_ms, |(_, t)| t),
        };
        out.push(Flip {
            message: nodes[a].event.seq,
            dpid,
            msg_type: *msg,
            past: nodes[b].event.seq,
            at,
            conflict,
            delay_ms: met(b).saturating_sub(nodes[a].event.t_ms) + margin(b),
            drop: false,
            first: nodes[a].event.clone(),
            second: nodes[b].event.clone(),
        });
    }
    out.sort_by_key(|f| {
        let input = trace.record(f.past).is_some_and(|r| r.external().is_some());
        (!input, f.message, f.past)
    });
    out
}
