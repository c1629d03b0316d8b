//! The whole mock network: switches, hosts, the wiring between their ports,
//! and the dataplane that carries frames hop by hop.
//!
//! Everything is plain data (`Clone`): a checkpoint is a clone. Nothing here
//! does I/O or reads a clock; controller messages come in and go out through
//! [`Network::handle_controller`] and the [`ToController`] values it returns.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use sts_proxy::wire::{v10, v13, Body, Message};

use crate::flow::Millis;
use crate::host::Host;
use crate::switch::{Output, PacketBuffers, Switch};
use crate::topology::Topology;

/// Switch traversals a frame may make before it is declared looping.
pub const HOP_LIMIT: u32 = 32;
/// How long after a PACKET_IN a PACKET_OUT of the same frame still counts as
/// its continuation (the controller forwarding it) for loop detection.
pub const CONTROLLER_ROUND_TRIP_MS: Millis = 500;

/// Frame deliveries one call may process before it reports a storm and stops.
pub const STEP_BUDGET: usize = 100_000;

/// Bytes of frames in flight one call may hold before it reports a storm and
/// stops (with [`crate::switch::WORK_BUDGET`] this bounds the dataplane's
/// memory whatever the flow tables say).
pub const QUEUE_BYTES_BUDGET: usize = 64 << 20;

/// One end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Switch { dpid: u64, port: u32 },
    Host(usize),
}

/// Where a message from a switch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipient {
    /// The controller connection that sent the request.
    Requester,
    /// Every controller connection of the switch.
    All,
}

/// A message a switch sends to its controller(s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToController {
    pub dpid: u64,
    pub to: Recipient,
    pub msg: Message,
}

/// A fault on a link, applied to frames in both directions (the fuzzer's
/// dataplane drop and delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    /// Every frame is lost.
    Drop,
    /// Every frame arrives this many milliseconds late.
    Delay(Millis),
}

/// Something notable the dataplane did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataplaneEvent {
    /// A frame crossed more than [`HOP_LIMIT`] switches: a forwarding loop.
    HopLimit { dpid: u64, in_port: u32, summary: String },
    /// A single injection caused more than [`STEP_BUDGET`] deliveries, or
    /// more than [`QUEUE_BYTES_BUDGET`] bytes of frames in flight: a storm.
    StepBudget { deliveries: usize },
    /// A switch dropped a frame whose actions exceeded
    /// [`crate::switch::WORK_BUDGET`] (not a loop: one frame's work).
    WorkBudget { dpid: u64 },
    /// A frame was lost to a [`LinkFault::Drop`] on the link at this switch port
    /// or host.
    FaultDrop { at: Endpoint },
}

/// Where a probed frame ended up (see [`Network::probe`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    pub delivered: BTreeSet<usize>,
    pub to_controllers: BTreeSet<u64>,
    pub looped: bool,
}

/// The mock network.
#[derive(Debug, Clone)]
pub struct Network {
    pub switches: BTreeMap<u64, Switch>,
    pub hosts: Vec<Host>,
    wiring: BTreeMap<Endpoint, Endpoint>,
    /// Links that are administratively failed (by endpoint pair, smaller first).
    failed: BTreeMap<(Endpoint, Endpoint), ()>,
    /// Hop counts (and when) of frames recently sent to controllers, by
    /// digest, so a PACKET_OUT of the same frame soon after continues its
    /// count (storms through the controller are loops too).
    recent_to_controller: HashMap<u64, (u32, Millis)>,
    /// The same for frames a switch buffered, by (switch, buffer id): a
    /// FLOW_MOD or PACKET_OUT naming the buffer continues the count.
    buffered_hops: HashMap<(u64, u32), (u32, Millis)>,
    /// Faults by link (endpoint pair, smaller first).
    faults: BTreeMap<(Endpoint, Endpoint), LinkFault>,
    /// Frames held back by a delay fault: (due time, order of arrival, frame).
    delayed: BinaryHeap<Reverse<(Millis, u64, InFlight)>>,
    delayed_seq: u64,
    pub events: Vec<DataplaneEvent>,
    pub frames_delivered: u64,
    /// Whether frames hosts send and receive are kept in `captured` (for
    /// the trace, and so for `sts pcap`); off by default.
    pub capture: bool,
    /// Frames captured since the last [`Network::take_captured`], up to
    /// [`CAPTURE_MAX`].
    pub captured: Vec<HostFrame>,
    /// Frames not captured because `captured` was full.
    pub capture_dropped: u64,
}

/// How many host frames [`Network::captured`] holds before it drops more
/// (a storm's copies are counted in `capture_dropped`, not kept).
pub const CAPTURE_MAX: usize = 4_096;

/// A frame a host sent or received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFrame {
    pub t_ms: Millis,
    /// The host's index in [`Network::hosts`].
    pub host: usize,
    /// Sent by the host (else received).
    pub sent: bool,
    pub frame: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Endpoint,
    frame: Vec<u8>,
    hops: u32,
}

fn digest(frame: &[u8]) -> u64 {
    frame.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

impl Network {
    /// Builds a network from a topology; every switch speaks `version`.
    pub fn new(topo: &Topology, version: u8) -> Network {
        let degrees = topo.degrees();
        let mut switches: BTreeMap<u64, Switch> =
            topo.switches.iter().map(|&d| (d, Switch::new(d, version, degrees[&d]))).collect();
        let mut next_port: BTreeMap<u64, u32> = topo.switches.iter().map(|&d| (d, 1)).collect();
        let mut take = |d: u64| {
            let p = next_port.get_mut(&d).expect("link to an unknown switch");
            *p += 1;
            *p - 1
        };
        let mut wiring = BTreeMap::new();
        let mut hosts = Vec::new();
        for (i, h) in topo.hosts.iter().enumerate() {
            let port = take(h.switch);
            let sw = Endpoint::Switch { dpid: h.switch, port };
            wiring.insert(sw, Endpoint::Host(i));
            wiring.insert(Endpoint::Host(i), sw);
            hosts.push(Host::new(h.name.clone(), h.mac, h.ip));
        }
        for &(a, b) in &topo.links {
            let pa = Endpoint::Switch { dpid: a, port: take(a) };
            let pb = Endpoint::Switch { dpid: b, port: take(b) };
            wiring.insert(pa, pb);
            wiring.insert(pb, pa);
        }
        for e in wiring.keys() {
            if let Endpoint::Switch { dpid, port } = e {
                if let Some(p) = switches.get_mut(dpid).and_then(|s| s.ports.get_mut(port)) {
                    p.link_up = true;
                }
            }
        }
        Network {
            switches,
            hosts,
            wiring,
            failed: BTreeMap::new(),
            recent_to_controller: HashMap::new(),
            buffered_hops: HashMap::new(),
            faults: BTreeMap::new(),
            delayed: BinaryHeap::new(),
            delayed_seq: 0,
            events: Vec::new(),
            frames_delivered: 0,
            capture: false,
            captured: Vec::new(),
            capture_dropped: 0,
        }
    }

    /// The endpoint wired to `e`, if any.
    pub fn peer(&self, e: Endpoint) -> Option<Endpoint> {
        self.wiring.get(&e).copied()
    }

    /// The switch port host `i` is attached to.
    pub fn host_port(&self, i: usize) -> Option<(u64, u32)> {
        match self.peer(Endpoint::Host(i))? {
            Endpoint::Switch { dpid, port } => Some((dpid, port)),
            Endpoint::Host(_) => None,
        }
    }

    /// All switch-to-switch links, each once.
    pub fn switch_links(&self) -> Vec<((u64, u32), (u64, u32))> {
        self.wiring
            .iter()
            .filter_map(|(a, b)| match (a, b) {
                (Endpoint::Switch { dpid: d1, port: p1 }, Endpoint::Switch { dpid: d2, port: p2 })
                    if (d1, p1) < (d2, p2) =>
                {
                    Some(((*d1, *p1), (*d2, *p2)))
                }
                _ => None,
            })
            .collect()
    }

    fn key(a: Endpoint, b: Endpoint) -> (Endpoint, Endpoint) {
        if a <= b {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// Fails or recovers the link at endpoint `a`: both ends change state and
    /// each switch end reports PORT_STATUS.
    pub fn set_link(&mut self, a: Endpoint, up: bool) -> Vec<ToController> {
        let Some(b) = self.peer(a) else { return vec![] };
        if up {
            self.failed.remove(&Self::key(a, b));
        } else {
            self.failed.insert(Self::key(a, b), ());
        }
        let mut out = Vec::new();
        for e in [a, b] {
            if let Endpoint::Switch { dpid, port } = e {
                if let Some(msg) = self.switches.get_mut(&dpid).and_then(|s| s.set_link(port, up)) {
                    out.push(ToController { dpid, to: Recipient::All, msg });
                }
            }
        }
        out
    }

    /// A crashed switch: flow tables, groups and configuration are lost; its
    /// ports and their link states stay as they are.
    pub fn reset_switch(&mut self, dpid: u64) {
        if let Some(sw) = self.switches.get_mut(&dpid) {
            let mut fresh = Switch::new(dpid, sw.version, 0);
            fresh.ports = std::mem::take(&mut sw.ports);
            fresh.table_capacity = sw.table_capacity;
            fresh.buffers = PacketBuffers::new(sw.buffers.capacity);
            *sw = fresh;
        }
    }

    /// Moves host `i` to switch `to`: its old link goes down (PORT_STATUS on
    /// the old switch) and it is plugged into a free port of `to` (an unwired
    /// one if there is, else a new port: PORT_STATUS ADD). Returns the
    /// messages for the controllers, or nothing if `to` is unknown.
    pub fn migrate_host(&mut self, i: usize, to: u64) -> Vec<ToController> {
        let mut out = Vec::new();
        if i >= self.hosts.len() || !self.switches.contains_key(&to) {
            return out;
        }
        let host = Endpoint::Host(i);
        if let Some(old) = self.wiring.remove(&host) {
            self.wiring.remove(&old);
            self.failed.remove(&Self::key(host, old));
            self.faults.remove(&Self::key(host, old));
            if let Endpoint::Switch { dpid, port } = old {
                if let Some(msg) = self.switches.get_mut(&dpid).and_then(|s| s.set_link(port, false)) {
                    out.push(ToController { dpid, to: Recipient::All, msg });
                }
            }
        }
        let sw = self.switches.get_mut(&to).expect("checked");
        let free =
            sw.ports.keys().copied().find(|&p| !self.wiring.contains_key(&Endpoint::Switch { dpid: to, port: p }));
        let (port, msg) = match free {
            Some(p) => (p, sw.set_link(p, true)),
            None => {
                let (p, m) = sw.add_port();
                (p, Some(m))
            }
        };
        if let Some(msg) = msg {
            out.push(ToController { dpid: to, to: Recipient::All, msg });
        }
        let at = Endpoint::Switch { dpid: to, port };
        self.wiring.insert(host, at);
        self.wiring.insert(at, host);
        out
    }

    /// Sets (or with `None` clears) the fault on the link at endpoint `a`.
    pub fn set_link_fault(&mut self, a: Endpoint, fault: Option<LinkFault>) {
        let Some(b) = self.peer(a) else { return };
        match fault {
            Some(f) => self.faults.insert(Self::key(a, b), f),
            None => self.faults.remove(&Self::key(a, b)),
        };
    }

    /// When the next delayed frame is due, if any.
    pub fn next_due(&self) -> Option<Millis> {
        self.delayed.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Delivers the delayed frames that are due at `now`.
    pub fn deliver_due(&mut self, now: Millis) -> Vec<ToController> {
        let mut queue = VecDeque::new();
        while self.next_due().is_some_and(|d| d <= now) {
            let Reverse((_, _, f)) = self.delayed.pop().expect("peeked");
            queue.push_back(f);
        }
        let mut out = Vec::new();
        if !queue.is_empty() {
            self.run_queue(&mut queue, now, &mut out);
        }
        out
    }

    /// Puts a frame leaving `from` on the wire: to its live peer, unless the
    /// link's fault drops or delays it.
    fn transmit(&mut self, from: Endpoint, frame: Vec<u8>, hops: u32, now: Millis, queue: &mut VecDeque<InFlight>) {
        let Some(to) = self.live_peer(from) else { return };
        match self.faults.get(&Self::key(from, to)) {
            None => queue.push_back(InFlight { at: to, frame, hops }),
            Some(LinkFault::Drop) => self.events.push(DataplaneEvent::FaultDrop { at: from }),
            Some(LinkFault::Delay(ms)) => {
                self.delayed_seq += 1;
                self.delayed.push(Reverse((now + ms, self.delayed_seq, InFlight { at: to, frame, hops })));
            }
        }
    }

    /// Handles a message a controller sent to switch `dpid`.
    pub fn handle_controller(&mut self, dpid: u64, raw: &[u8], msg: &Message, now: Millis) -> Vec<ToController> {
        self.handle_controller_from(dpid, 0, raw, msg, now)
    }

    /// Whether controller connection `conn` of switch `dpid` gets `msg` (a
    /// slave gets no PACKET_IN, async configs filter reasons; see
    /// [`Switch::wants`]).
    pub fn wants(&self, dpid: u64, conn: usize, msg: &Message) -> bool {
        self.switches.get(&dpid).is_none_or(|s| s.wants(conn, msg))
    }

    /// Handles a message that controller connection `conn` sent to switch
    /// `dpid` (roles are per connection).
    pub fn handle_controller_from(
        &mut self,
        dpid: u64,
        conn: usize,
        raw: &[u8],
        msg: &Message,
        now: Millis,
    ) -> Vec<ToController> {
        let start_hops = match &msg.body {
            Body::V10(v10::Msg::PacketOut(p)) if p.buffer_id != v10::NO_BUFFER => {
                self.hops_through_buffer(dpid, p.buffer_id, now)
            }
            Body::V13(v13::Msg::PacketOut(p)) if p.buffer_id != v13::NO_BUFFER => {
                self.hops_through_buffer(dpid, p.buffer_id, now)
            }
            Body::V10(v10::Msg::PacketOut(p)) => self.hops_through_controller(&p.data, now),
            Body::V13(v13::Msg::PacketOut(p)) => self.hops_through_controller(&p.data, now),
            Body::V10(v10::Msg::FlowMod(f)) if f.buffer_id != v10::NO_BUFFER => {
                self.hops_through_buffer(dpid, f.buffer_id, now)
            }
            Body::V13(v13::Msg::FlowMod(f)) if f.buffer_id != v13::NO_BUFFER => {
                self.hops_through_buffer(dpid, f.buffer_id, now)
            }
            _ => 0,
        };
        let Some(sw) = self.switches.get_mut(&dpid) else { return vec![] };
        let outputs = if start_hops >= HOP_LIMIT {
            // The frame went round through the controller too often (a
            // PACKET_IN answered by a PACKET_OUT or a buffer-releasing FLOW_MOD
            // that sends it back up): report the loop and drop the frame; a
            // FLOW_MOD still takes effect.
            let (frame, rest) = sw.without_frame(msg);
            let summary = frame
                .and_then(|f| sts_proxy::wire::packet::PacketSummary::of(&f))
                .map(|s| format!("{} -> {} type {:#06x}", s.eth_src, s.eth_dst, s.eth_type))
                .unwrap_or_default();
            self.events.push(DataplaneEvent::HopLimit { dpid, in_port: v13::port::CONTROLLER, summary });
            match rest {
                Some(m) => sw.handle_from(conn, raw, &m, now),
                None => return vec![],
            }
        } else {
            sw.handle_from(conn, raw, msg, now)
        };
        // A PACKET_OUT that sends the frame straight back up (output to
        // CONTROLLER) is the controller talking to itself, not the frame
        // going round the network: its PACKET_INs count no hop, so a
        // controller repeating one frame to itself is not called a loop.
        let to_itself = match &msg.body {
            Body::V10(v10::Msg::PacketOut(p)) => p
                .actions
                .iter()
                .any(|a| matches!(a, v10::Action::Output { port, .. } if *port == v10::port::CONTROLLER)),
            Body::V13(v13::Msg::PacketOut(p)) => p
                .actions
                .iter()
                .any(|a| matches!(a, v13::Action::Output { port, .. } if *port == v13::port::CONTROLLER)),
            _ => false,
        };
        let hops = if to_itself { start_hops.saturating_sub(1) } else { start_hops };
        let mut out = Vec::new();
        let mut queue = VecDeque::new();
        self.route(dpid, outputs, hops, now, &mut queue, &mut out);
        self.run_queue(&mut queue, now, &mut out);
        out
    }

    /// Keeps a copy of a frame host `i` sent or received, when capturing.
    fn capture_frame(&mut self, now: Millis, host: usize, sent: bool, frame: &[u8]) {
        if !self.capture {
            return;
        }
        if self.captured.len() >= CAPTURE_MAX {
            self.capture_dropped += 1;
            return;
        }
        self.captured.push(HostFrame { t_ms: now, host, sent, frame: frame.to_vec() });
    }

    /// The frames captured since the last call.
    pub fn take_captured(&mut self) -> Vec<HostFrame> {
        std::mem::take(&mut self.captured)
    }

    /// Host `i` sends `frames`.
    pub fn host_send(&mut self, i: usize, frames: Vec<Vec<u8>>, now: Millis) -> Vec<ToController> {
        let mut queue = VecDeque::new();
        let mut out = Vec::new();
        for frame in frames {
            self.capture_frame(now, i, true, &frame);
            self.transmit(Endpoint::Host(i), frame, 0, now, &mut queue);
        }
        self.run_queue(&mut queue, now, &mut out);
        out
    }

    /// Where one frame sent by host `i` ends up: which hosts receive a copy,
    /// which switches send one to their controllers, whether a copy exceeded
    /// the hop limit. Hosts do not answer (no ARP or echo replies), so the
    /// answer is about this frame alone; flow counters still count it. Meant
    /// for analysis and tests, on a clone when the network must stay as it was.
    /// More than `budget` deliveries count as a loop (a storm).
    pub fn probe(&mut self, i: usize, frame: Vec<u8>, now: Millis, budget: usize) -> Probe {
        let mut queue = VecDeque::new();
        let mut out = Vec::new();
        let mut probe = Probe::default();
        self.transmit(Endpoint::Host(i), frame, 0, now, &mut queue);
        self.run(&mut queue, now, &mut out, Some(&mut probe), budget);
        for m in &out {
            if matches!(m.msg.body, Body::V10(v10::Msg::PacketIn(_)) | Body::V13(v13::Msg::PacketIn(_))) {
                probe.to_controllers.insert(m.dpid);
            }
        }
        probe
    }

    /// When the first flow entry of any switch expires, if none is used
    /// before: until then [`Network::tick`] does nothing.
    pub fn next_expiry(&self) -> Option<Millis> {
        self.switches.values().filter_map(Switch::next_expiry).min()
    }

    /// Expires flow entries on every switch.
    pub fn tick(&mut self, now: Millis) -> Vec<ToController> {
        let mut out = Vec::new();
        for (dpid, sw) in self.switches.iter_mut() {
            for o in sw.expire(now) {
                if let Output::ToControllers(msg) = o {
                    out.push(ToController { dpid: *dpid, to: Recipient::All, msg });
                }
            }
        }
        out
    }

    /// The fault on the link at endpoint `e`, if any.
    pub fn link_fault(&self, e: Endpoint) -> Option<LinkFault> {
        let p = self.peer(e)?;
        self.faults.get(&Self::key(e, p)).copied()
    }

    /// The endpoint wired to `e`, if the link between them is up.
    pub fn live_peer(&self, e: Endpoint) -> Option<Endpoint> {
        let p = self.peer(e)?;
        (!self.failed.contains_key(&Self::key(e, p))).then_some(p)
    }

    fn route(
        &mut self,
        dpid: u64,
        outputs: Vec<Output>,
        hops: u32,
        now: Millis,
        queue: &mut VecDeque<InFlight>,
        out: &mut Vec<ToController>,
    ) {
        for o in outputs {
            match o {
                Output::Reply(msg) => out.push(ToController { dpid, to: Recipient::Requester, msg }),
                Output::ToControllers(msg) => {
                    if let Body::V10(v10::Msg::PacketIn(p)) = &msg.body {
                        self.remember(dpid, p.buffer_id, &p.data, hops, now);
                    }
                    if let Body::V13(v13::Msg::PacketIn(p)) = &msg.body {
                        self.remember(dpid, p.buffer_id, &p.data, hops, now);
                    }
                    out.push(ToController { dpid, to: Recipient::All, msg });
                }
                Output::Emit { port, frame } => self.transmit(Endpoint::Switch { dpid, port }, frame, hops, now, queue),
                Output::OverBudget => self.events.push(DataplaneEvent::WorkBudget { dpid }),
            }
        }
    }

    fn remember(&mut self, dpid: u64, buffer_id: u32, frame: &[u8], hops: u32, now: Millis) {
        if buffer_id != v13::NO_BUFFER {
            if self.buffered_hops.len() > 50_000 {
                self.buffered_hops.retain(|_, &mut (_, at)| now.saturating_sub(at) <= CONTROLLER_ROUND_TRIP_MS);
            }
            self.buffered_hops.insert((dpid, buffer_id), (hops, now));
            return;
        }
        if self.recent_to_controller.len() > 50_000 {
            self.recent_to_controller.retain(|_, &mut (_, at)| now.saturating_sub(at) <= CONTROLLER_ROUND_TRIP_MS);
            if self.recent_to_controller.len() > 50_000 {
                self.recent_to_controller.clear();
            }
        }
        self.recent_to_controller.insert(digest(frame), (hops, now));
    }

    /// The hop count a PACKET_OUT of `frame` starts with: one more than the
    /// copy a switch sent to the controller within the last round trip, else 0.
    /// The window matters: protocols resend identical frames periodically (an
    /// STP root's hello BPDU every 2 s, a host's ARP retry), and counting
    /// across those resends would report a loop that is not there.
    fn hops_through_buffer(&mut self, dpid: u64, buffer_id: u32, now: Millis) -> u32 {
        match self.buffered_hops.remove(&(dpid, buffer_id)) {
            Some((hops, at)) if now.saturating_sub(at) <= CONTROLLER_ROUND_TRIP_MS => hops + 1,
            _ => 0,
        }
    }

    fn hops_through_controller(&self, frame: &[u8], now: Millis) -> u32 {
        match self.recent_to_controller.get(&digest(frame)) {
            Some(&(hops, at)) if now.saturating_sub(at) <= CONTROLLER_ROUND_TRIP_MS => hops + 1,
            _ => 0,
        }
    }

    fn run_queue(&mut self, queue: &mut VecDeque<InFlight>, now: Millis, out: &mut Vec<ToController>) {
        self.run(queue, now, out, None, STEP_BUDGET)
    }

    fn run(
        &mut self,
        queue: &mut VecDeque<InFlight>,
        now: Millis,
        out: &mut Vec<ToController>,
        mut probe: Option<&mut Probe>,
        budget: usize,
    ) {
        let mut steps = 0usize;
        let mut bytes: usize = queue.iter().map(|f| f.frame.len()).sum();
        while let Some(f) = queue.pop_front() {
            steps += 1;
            bytes = bytes.saturating_sub(f.frame.len());
            if steps > budget || bytes > QUEUE_BYTES_BUDGET {
                self.events.push(DataplaneEvent::StepBudget { deliveries: steps });
                if let Some(p) = probe.as_deref_mut() {
                    p.looped = true;
                }
                queue.clear();
                return;
            }
            self.frames_delivered += 1;
            let queued = queue.len();
            self.deliver(f, now, queue, out, probe.as_deref_mut());
            bytes += queue.range(queued..).map(|f| f.frame.len()).sum::<usize>();
        }
    }

    /// One frame arrives where it was going: a host answers it, a switch runs
    /// it through its pipeline (or the hop limit ends it).
    fn deliver(
        &mut self,
        f: InFlight,
        now: Millis,
        queue: &mut VecDeque<InFlight>,
        out: &mut Vec<ToController>,
        probe: Option<&mut Probe>,
    ) {
        match (f.at, probe) {
            (Endpoint::Host(i), Some(probe)) => {
                probe.delivered.insert(i);
            }
            (Endpoint::Host(i), None) => {
                self.capture_frame(now, i, false, &f.frame);
                for frame in self.hosts[i].receive(&f.frame) {
                    self.capture_frame(now, i, true, &frame);
                    self.transmit(Endpoint::Host(i), frame, 0, now, queue);
                }
            }
            (Endpoint::Switch { dpid, port }, probe) => {
                if f.hops >= HOP_LIMIT {
                    if let Some(p) = probe {
                        p.looped = true;
                    }
                    let summary = sts_proxy::wire::packet::PacketSummary::of(&f.frame)
                        .map(|s| format!("{} -> {} type {:#06x}", s.eth_src, s.eth_dst, s.eth_type))
                        .unwrap_or_default();
                    self.events.push(DataplaneEvent::HopLimit { dpid, in_port: port, summary });
                    return;
                }
                let Some(sw) = self.switches.get_mut(&dpid) else { return };
                let outputs = sw.receive(port, f.frame, now);
                self.route(dpid, outputs, f.hops + 1, now, queue, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sts_proxy::wire::{v13, Message, OFP13};

    /// One switch flooding everything, two hosts.
    fn flooding_pair() -> Network {
        let mut t = Topology::linear(1);
        t.place_hosts(&[1, 1]);
        let mut net = Network::new(&t, OFP13);
        let flood = Message::new(
            1,
            Body::V13(v13::Msg::FlowMod(v13::FlowMod::add(
                0,
                0,
                v13::Match::default(),
                vec![v13::Instruction::ApplyActions(vec![v13::Action::Output { port: v13::port::FLOOD, max_len: 0 }])],
            ))),
        );
        let raw = flood.emit().unwrap();
        assert!(net.handle_controller(1, &raw, &flood, 0).is_empty());
        net
    }

    /// A controller that bounces one frame from s1 to s2 and back through
    /// PACKET_OUTs spaced `gap_ms` apart: does the dataplane call it a loop?
    fn controller_relay_reports_loop(gap_ms: Millis) -> bool {
        let mut t = Topology::linear(2);
        t.place_hosts(&[]);
        let mut net = Network::new(&t, OFP13);
        let to_controller = vec![v13::Instruction::ApplyActions(vec![v13::Action::Output {
            port: v13::port::CONTROLLER,
            max_len: 0xffff,
        }])];
        for dpid in [1, 2] {
            let miss = Message::new(
                1,
                Body::V13(v13::Msg::FlowMod(v13::FlowMod::add(0, 0, v13::Match::default(), to_controller.clone()))),
            );
            net.handle_controller(dpid, &miss.emit().unwrap(), &miss, 0);
        }
        // An STP-like frame the controller keeps sending unchanged.
        let frame = Bytes::from(vec![0x01, 0x80, 0xc2, 0, 0, 0, 0x0a, 0, 0, 0, 1, 1, 0, 0x26, 0x42, 0x42, 3]);
        for round in 0..2 * HOP_LIMIT as u64 {
            let out = Message::new(
                2,
                Body::V13(v13::Msg::PacketOut(v13::PacketOut {
                    buffer_id: v13::NO_BUFFER,
                    in_port: v13::port::CONTROLLER,
                    actions: vec![v13::Action::Output { port: v13::port::FLOOD, max_len: 0 }],
                    data: frame.clone(),
                })),
            );
            net.handle_controller(1 + round % 2, &out.emit().unwrap(), &out, round * gap_ms);
        }
        net.events.iter().any(|e| matches!(e, DataplaneEvent::HopLimit { .. }))
    }

    #[test]
    fn a_frame_bounced_by_the_controller_at_once_is_a_loop() {
        assert!(controller_relay_reports_loop(1));
    }

    #[test]
    fn a_frame_the_controller_resends_periodically_is_not_a_loop() {
        // os-ken's STP root sends the same hello BPDU every 2 s.
        assert!(!controller_relay_reports_loop(2_000));
    }

    /// A controller sending one frame to itself over and over (PACKET_OUT
    /// to CONTROLLER, reading nothing) makes no loop in the network; sts
    /// used to call it one after 32 rounds.
    #[test]
    fn a_controller_sending_a_frame_to_itself_is_not_a_loop() {
        let mut t = Topology::linear(1);
        t.place_hosts(&[]);
        let mut net = Network::new(&t, OFP13);
        let frame = Bytes::from(
            vec![0xffu8; 6].into_iter().chain([0, 0, 0, 0, 0, 1, 0x88, 0xb5]).chain([0; 46]).collect::<Vec<u8>>(),
        );
        for round in 0..100 {
            let out = Message::new(
                round as u32,
                Body::V13(v13::Msg::PacketOut(v13::PacketOut {
                    buffer_id: v13::NO_BUFFER,
                    in_port: v13::port::CONTROLLER,
                    actions: vec![v13::Action::Output { port: v13::port::CONTROLLER, max_len: 0xffff }],
                    data: frame.clone(),
                })),
            );
            let up = net.handle_controller(1, &out.emit().unwrap(), &out, round);
            assert_eq!(up.len(), 1, "each comes back as a PACKET_IN");
        }
        assert!(net.events.is_empty(), "{:?}", net.events);
    }

    fn ping(net: &mut Network, now: Millis) -> (std::net::Ipv4Addr, u16) {
        let dst = net.hosts[1].ip;
        let (seq, frames) = net.hosts[0].ping(dst);
        net.host_send(0, frames, now);
        (dst, seq)
    }

    #[test]
    fn a_migrated_host_is_reached_at_its_new_port() {
        let mut t = Topology::linear(2);
        t.place_hosts(&[1, 1]);
        let mut net = Network::new(&t, OFP13);
        let before = net.host_port(1).unwrap();
        let msgs = net.migrate_host(1, 2);
        let after = net.host_port(1).unwrap();
        assert_eq!(before.0, 1);
        assert_eq!(after.0, 2);
        assert!(!net.switches[&1].ports[&before.1].link_up, "the old port went down");
        assert!(net.switches[&2].ports[&after.1].link_up);
        let reasons: Vec<(u64, u8)> = msgs
            .iter()
            .map(|m| match &m.msg.body {
                Body::V13(v13::Msg::PortStatus(p)) => (m.dpid, p.reason),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(reasons, vec![(1, v13::port_reason::MODIFY), (2, v13::port_reason::ADD)]);
        // Back again: the old, now unwired, port is reused.
        net.migrate_host(1, 1);
        assert_eq!(net.host_port(1), Some(before));
    }

    #[test]
    fn captured_host_frames_are_what_the_hosts_sent_and_received() {
        let mut net = flooding_pair();
        ping(&mut net, 0);
        assert!(net.captured.is_empty(), "capture is off by default");
        net.capture = true;
        ping(&mut net, 5);
        let seen: Vec<(usize, bool)> = net.take_captured().iter().map(|f| (f.host, f.sent)).collect();
        // h0's echo request (its ARP entry is learned), h1 receives it and
        // answers, h0 receives the answer.
        assert_eq!(seen, vec![(0, true), (1, false), (1, true), (0, false)]);
        assert!(net.captured.is_empty(), "taken");
    }

    #[test]
    fn frames_cross_a_healthy_link_at_once() {
        let mut net = flooding_pair();
        let reply = ping(&mut net, 0);
        assert!(net.hosts[0].echo_replies.contains(&reply));
    }

    #[test]
    fn a_dropping_link_loses_frames_and_says_so() {
        let mut net = flooding_pair();
        net.set_link_fault(Endpoint::Host(1), Some(LinkFault::Drop));
        let reply = ping(&mut net, 0);
        assert!(!net.hosts[0].echo_replies.contains(&reply));
        assert!(net.events.iter().any(|e| matches!(e, DataplaneEvent::FaultDrop { .. })));
        net.set_link_fault(Endpoint::Host(1), None);
        let reply = ping(&mut net, 10);
        assert!(net.hosts[0].echo_replies.contains(&reply));
    }

    #[test]
    fn a_delaying_link_delivers_when_due() {
        let mut net = flooding_pair();
        net.set_link_fault(Endpoint::Host(1), Some(LinkFault::Delay(100)));
        let reply = ping(&mut net, 0);
        assert!(!net.hosts[0].echo_replies.contains(&reply));
        // The ARP request reaches h2 at 100; its reply comes back at 200; then the echo.
        let mut now = 0;
        while !net.hosts[0].echo_replies.contains(&reply) {
            now = net.next_due().expect("frames still in flight");
            net.deliver_due(now);
        }
        assert_eq!(now, 400, "four crossings of the delayed link, 100 ms each");
    }
}
