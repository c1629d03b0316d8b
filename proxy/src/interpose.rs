//! The interposition channel: every OpenFlow message between a switch and a
//! controller passes through an [`Interposer`], which records it as an internal
//! event and decides when it is delivered.
//!
//! The interposer does no I/O and reads no clock (time is passed in). Per
//! message it applies the first matching [`Rule`]: pass, hold until released,
//! delay, or drop. Whitelisted types (keepalives by default) always pass:
//! controllers declare switches dead when echoes are held.
//!
//! Order within one connection and direction is kept: once a message is held or
//! delayed, every later message on that connection and direction queues behind
//! it, so a release delivers them in their original order. Only
//! [`Interposer::reorder`] changes that order, and only on request.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use serde::Serialize;

use crate::wire::{Fingerprint, Frame};

/// A control connection: a switch and one of its controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub struct ChannelId {
    pub dpid: u64,
    pub controller: usize,
}

/// Which way a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    SwitchToController,
    ControllerToSwitch,
}

/// What to do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Pass,
    /// Keep until [`Interposer::release`].
    Hold,
    /// Deliver after this many milliseconds.
    Delay(u64),
    /// Deliver after this many milliseconds, letting later messages of the
    /// connection overtake it: a reordering.
    Reorder(u64),
    Drop,
    /// Send through a pipe of this many bytes per second (Toxiproxy's
    /// bandwidth): each connection and direction has its own, a message
    /// takes its length over the rate to cross it and waits for the ones
    /// before it; delivered when it has crossed, in order.
    Bandwidth(u64),
}

/// A policy rule: which messages it selects, and what happens to them.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub dir: Option<Direction>,
    /// The channel's `dpid` (in sts's mock network the switch's datapath
    /// id; in a standalone proxy the connection's number).
    pub dpid: Option<u64>,
    /// A message type name as [`crate::wire::Message::type_name`] gives it.
    pub msg_type: Option<String>,
    pub action: Action,
    /// Only the switch whose FEATURES_REPLY gave this datapath id (learned
    /// by the interposer as the reply passes; messages before it on that
    /// connection are not selected).
    pub datapath: Option<u64>,
    /// The rule applies to each message it selects with this probability
    /// (0 to 1; `None`: always), drawn from the interposer's seeded
    /// generator; a message it passes over goes on to the next rule.
    pub chance: Option<f64>,
    /// For a delay: up to this many milliseconds more or less, uniformly.
    pub jitter_ms: u64,
}

impl Default for Rule {
    /// Selects every message and passes it.
    fn default() -> Rule {
        Rule { dir: None, dpid: None, msg_type: None, action: Action::Pass, datapath: None, chance: None, jitter_ms: 0 }
    }
}

impl Rule {
    fn selects(&self, ch: ChannelId, dir: Direction, msg_type: &str, datapath: Option<u64>) -> bool {
        self.dir.is_none_or(|d| d == dir)
            && self.dpid.is_none_or(|d| d == ch.dpid)
            && self.msg_type.as_deref().is_none_or(|t| t == msg_type)
            && self.datapath.is_none_or(|d| Some(d) == datapath)
    }
}

/// What happened to a recorded message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Delivered at once.
    Passed,
    /// Queued (held, delayed, or behind a queued message).
    Queued,
    Dropped,
}

/// One message, as recorded: an internal event. Recording is cheap (the bytes
/// are shared, the type comes from the header); the fingerprint, which costs a
/// decode and a canonical rendering, is computed on demand.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub seq: u64,
    pub time_ms: u64,
    pub channel: ChannelId,
    pub dir: Direction,
    pub msg_type: &'static str,
    pub xid: u32,
    /// The message's bytes, hex in serialized form.
    #[serde(with = "crate::wire::hex_bytes")]
    pub raw: Bytes,
    pub disposition: Disposition,
}

impl Recorded {
    /// The message's fingerprint (`undecodable ...` for bytes the codec rejects).
    pub fn fingerprint(&self) -> Fingerprint {
        match crate::wire::Message::parse(self.raw.clone()) {
            Ok(m) => Fingerprint::of(&m),
            Err(e) => Fingerprint(format!("undecodable {e}")),
        }
    }
}

/// One particular message of a run: the `occurrence`-th (from 0) with this
/// fingerprint on this channel and direction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub struct MessageId {
    pub channel: ChannelId,
    pub dir: Direction,
    pub fp: String,
    pub occurrence: u32,
}

/// A message waiting in a queue.
#[derive(Debug, Clone)]
struct Queued {
    seq: u64,
    frame: Frame,
    /// Delivery time for delayed messages; `None` while held.
    due: Option<u64>,
}

/// A queued message, as [`Interposer::waiting`] lists it.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// Its place in the order of messages seen (its id for the console).
    pub seq: u64,
    pub channel: ChannelId,
    pub dir: Direction,
    pub msg_type: &'static str,
    pub xid: u32,
    /// When it goes (`None`: held until released or acted on).
    pub due: Option<u64>,
    pub frame: Frame,
}

/// A message to deliver now.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub channel: ChannelId,
    pub dir: Direction,
    pub frame: Frame,
}

/// Types that pass through every rule by default (keepalives).
pub const DEFAULT_WHITELIST: &[&str] = &["echo_request", "echo_reply"];

/// The interposition state of all channels.
#[derive(Debug, Clone)]
pub struct Interposer {
    /// Standing rules, consulted in order ([`Interposer::rules`],
    /// [`Interposer::set_rules`], the verbs [`Interposer::hold`],
    /// [`Interposer::delay`] ...).
    rules: Vec<Rule>,
    /// One-shot rules, consulted before `rules`: each applies to the first
    /// message it selects and is then gone (a fuzzer's "drop the next
    /// FLOW_MOD to s2"; [`Interposer::arm_once`]).
    once: Vec<Rule>,
    /// Particular messages to drop, by identity: the `n`-th (from 0)
    /// message with this fingerprint on this channel and direction
    /// (message-level minimization; [`Interposer::drop_messages`]). Costs a
    /// decode per message while set.
    drop_ids: BTreeSet<MessageId>,
    /// Messages set aside by [`Action::Reorder`]: due at their time, out of
    /// their connection's order.
    aside: Vec<(ChannelId, Direction, Queued)>,
    /// Messages seen so far per (channel, direction, fingerprint), for
    /// `drop_ids`.
    occurrences: std::collections::HashMap<(ChannelId, Direction, String), u32>,
    /// Message types no rule touches ([`Interposer::set_whitelist`]).
    whitelist: BTreeSet<String>,
    /// Each channel's datapath id, from its FEATURES_REPLY.
    datapaths: BTreeMap<ChannelId, u64>,
    /// Draws for rules with a `chance` and delays with jitter.
    rng: rand_chacha::ChaCha8Rng,
    queues: BTreeMap<(ChannelId, Direction), VecDeque<Queued>>,
    log: Vec<Recorded>,
    /// Queued messages delivered since the last [`Interposer::take_delivered`]:
    /// their sequence numbers and when they went.
    delivered: Vec<Delivered>,
    /// When each connection direction's bandwidth pipe is free again (µs).
    pipes: BTreeMap<(ChannelId, Direction), u64>,
    /// A replay keeping its next input's place: for each (channel,
    /// direction, message type) the original saw after that input, how many
    /// messages of it still pass (those it saw before); later ones that
    /// would pass are held, their sequence numbers in `place_held`, until
    /// the input is in ([`Interposer::keep_place`]).
    place_hold: BTreeMap<(ChannelId, Direction, &'static str), u32>,
    /// Messages `place_hold` held, oldest first.
    place_held: Vec<u64>,
    next_seq: u64,
}

/// A queued message that was delivered: its sequence number (its
/// [`Recorded::seq`]), the time it went, and how many messages had come by
/// then (its place among the arrivals: what came after it may be its
/// consequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub seq: u64,
    pub time_ms: u64,
    pub arrivals: u64,
}

impl Default for Interposer {
    fn default() -> Self {
        Interposer {
            rules: Vec::new(),
            once: Vec::new(),
            drop_ids: BTreeSet::new(),
            aside: Vec::new(),
            occurrences: std::collections::HashMap::new(),
            whitelist: DEFAULT_WHITELIST.iter().map(|s| s.to_string()).collect(),
            datapaths: BTreeMap::new(),
            rng: rand::SeedableRng::seed_from_u64(0),
            queues: BTreeMap::new(),
            log: Vec::new(),
            delivered: Vec::new(),
            pipes: BTreeMap::new(),
            place_hold: BTreeMap::new(),
            place_held: Vec::new(),
            next_seq: 0,
        }
    }
}

impl Interposer {
    /// Seeds the generator rules with a `chance` and delays with jitter
    /// draw from (the same seed, the same draws for the same messages).
    pub fn seed(&mut self, seed: u64) {
        self.rng = rand::SeedableRng::seed_from_u64(seed);
    }

    /// The datapath id each channel's switch gave in its FEATURES_REPLY.
    pub fn datapaths(&self) -> &BTreeMap<ChannelId, u64> {
        &self.datapaths
    }

    /// The standing rules, in the order they are consulted.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Replaces the standing rules (a standalone proxy's policy).
    pub fn set_rules(&mut self, rules: Vec<Rule>) {
        self.rules = rules;
    }

    /// Adds a standing rule, consulted after the others.
    pub fn add_rule(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// Holds the messages of `msg_type` on switch `dpid` (every switch:
    /// `None`), both ways, until [`Interposer::stop_holding`].
    pub fn hold(&mut self, dpid: Option<u64>, msg_type: &str) {
        self.rules.push(Rule { dpid, msg_type: Some(msg_type.to_string()), action: Action::Hold, ..Rule::default() });
    }

    /// Stops holding on switch `dpid` (every switch: `None`). What was held
    /// stays queued until [`Interposer::release`].
    pub fn stop_holding(&mut self, dpid: Option<u64>) {
        self.rules.retain(|r| !(r.action == Action::Hold && (dpid.is_none() || r.dpid == dpid)));
    }

    /// Delays every controller-to-switch message of switch `dpid` by `ms`,
    /// in place of an earlier delay of that switch.
    pub fn delay(&mut self, dpid: u64, ms: u64) {
        self.end_delay(dpid);
        self.rules.push(Rule {
            dir: Some(Direction::ControllerToSwitch),
            dpid: Some(dpid),
            action: Action::Delay(ms),
            ..Rule::default()
        });
    }

    /// Ends [`Interposer::delay`] on switch `dpid`.
    pub fn end_delay(&mut self, dpid: u64) {
        self.rules.retain(|r| !(r.dpid == Some(dpid) && matches!(r.action, Action::Delay(_))));
    }

    /// Arms a one-shot rule: the next message of `msg_type` on switch
    /// `dpid`, either way, gets `action` (dropped, delayed, overtaken), and
    /// the rule is gone.
    pub fn arm_once(&mut self, dpid: u64, msg_type: &str, action: Action) {
        self.arm(Rule { dpid: Some(dpid), msg_type: Some(msg_type.to_string()), action, ..Rule::default() });
    }

    /// Arms a one-shot `rule`: the next message it selects gets its action,
    /// and the rule is gone.
    pub fn arm(&mut self, rule: Rule) {
        self.once.push(rule);
    }

    /// Drops these particular messages ([`MessageId`]: the `n`-th with a
    /// fingerprint on a channel and direction), in place of earlier ones.
    pub fn drop_messages(&mut self, ids: BTreeSet<MessageId>) {
        self.drop_ids = ids;
    }

    /// The message types no rule touches (always passed), in place of
    /// [`DEFAULT_WHITELIST`].
    pub fn set_whitelist(&mut self, types: impl IntoIterator<Item = String>) {
        self.whitelist = types.into_iter().collect();
    }

    /// Keeps a replay input's place: of each (channel, direction, message
    /// type) given, that many more messages pass; later ones that would
    /// pass are held until [`Interposer::end_place`]. Replaces the quotas
    /// of an earlier call, keeping what it held.
    pub fn keep_place(&mut self, quotas: impl IntoIterator<Item = ((ChannelId, Direction, &'static str), u32)>) {
        self.place_hold = quotas.into_iter().collect();
    }

    /// Ends [`Interposer::keep_place`]: nothing more is held for a place;
    /// returns the sequence numbers of what was, oldest first (to deliver
    /// now, in their connection's order).
    pub fn end_place(&mut self) -> Vec<u64> {
        self.place_hold.clear();
        std::mem::take(&mut self.place_held)
    }

    /// The first rule of `rules` that selects the message and, for a rule
    /// with a `chance`, wins its draw: its index and its action (a delay
    /// with its jitter drawn).
    fn pick(
        rules: &[Rule],
        rng: &mut rand_chacha::ChaCha8Rng,
        (channel, dir, msg_type, datapath): (ChannelId, Direction, &str, Option<u64>),
    ) -> Option<(usize, Action)> {
        use rand::Rng;
        for (i, r) in rules.iter().enumerate() {
            if !r.selects(channel, dir, msg_type, datapath) {
                continue;
            }
            if let Some(p) = r.chance {
                if !rng.gen_bool(p.clamp(0.0, 1.0)) {
                    continue;
                }
            }
            let action = match r.action {
                Action::Delay(ms) if r.jitter_ms > 0 => {
                    let j = r.jitter_ms.min(i64::MAX as u64) as i64;
                    Action::Delay((ms as i64 + rng.gen_range(-j..=j)).max(0) as u64)
                }
                a => a,
            };
            return Some((i, action));
        }
        None
    }

    /// Every message seen so far, in arrival order.
    pub fn log(&self) -> &[Recorded] {
        &self.log
    }

    /// Takes the recorded events, leaving the log empty.
    pub fn take_log(&mut self) -> Vec<Recorded> {
        std::mem::take(&mut self.log)
    }

    /// Takes the list of queued messages delivered since the last call
    /// (a message that passed at once is not in it).
    pub fn take_delivered(&mut self) -> Vec<Delivered> {
        std::mem::take(&mut self.delivered)
    }

    /// Messages seen so far (the next sequence number).
    pub fn seen(&self) -> u64 {
        self.next_seq
    }

    /// Messages currently queued (held or delayed), over all channels.
    pub fn queued(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum::<usize>() + self.aside.len()
    }

    /// Records a message and returns what to deliver now (the message itself,
    /// or nothing if it was queued or dropped).
    pub fn on_message(&mut self, channel: ChannelId, dir: Direction, frame: Frame, now: u64) -> Vec<Delivery> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let header = frame.header();
        let msg_type = crate::wire::type_name(header.version, header.msg_type);
        let xid = header.xid;
        let whitelisted = self.whitelist.contains(msg_type);
        if dir == Direction::SwitchToController && msg_type == "features_reply" {
            // The datapath id follows the header in every version's reply.
            if let Some(id) = frame.bytes().get(8..16) {
                self.datapaths.insert(channel, u64::from_be_bytes(id.try_into().expect("8 bytes")));
            }
        }
        let datapath = self.datapaths.get(&channel).copied();
        let what = (channel, dir, msg_type, datapath);
        let dropped_by_id = !self.drop_ids.is_empty() && !whitelisted && {
            let fp = match frame.decode() {
                Ok(m) => Fingerprint::of(&m).0,
                Err(e) => format!("undecodable {e}"),
            };
            let n = self.occurrences.entry((channel, dir, fp.clone())).or_default();
            let id = MessageId { channel, dir, fp, occurrence: *n };
            *n += 1;
            self.drop_ids.contains(&id)
        };
        let action = if whitelisted {
            Action::Pass
        } else if dropped_by_id {
            Action::Drop
        } else if let Some((i, action)) = Interposer::pick(&self.once, &mut self.rng, what) {
            self.once.remove(i);
            action
        } else {
            Interposer::pick(&self.rules, &mut self.rng, what).map_or(Action::Pass, |(_, a)| a)
        };
        let action = match action {
            // The pipe is busy until the messages before it have crossed.
            Action::Bandwidth(bytes_per_s) => {
                let free = self.pipes.entry((channel, dir)).or_default();
                let start = (*free).max(now.saturating_mul(1000));
                let crossing = (frame.bytes().len() as u64).saturating_mul(1_000_000) / bytes_per_s.max(1);
                *free = start.saturating_add(crossing);
                match free.div_ceil(1000).saturating_sub(now) {
                    // Crossed within this millisecond: on at once (the queue
                    // rule below keeps it behind anything waiting).
                    0 => Action::Pass,
                    ms => Action::Delay(ms),
                }
            }
            a => a,
        };
        // A message of a kind that came after the replay's next input, past
        // those that came before it: it waits for the input.
        let action = match self.place_hold.get_mut(&(channel, dir, msg_type)) {
            Some(n) if action == Action::Pass && !whitelisted => {
                if *n > 0 {
                    *n -= 1;
                    Action::Pass
                } else {
                    self.place_held.push(seq);
                    Action::Hold
                }
            }
            _ => action,
        };
        let queue = self.queues.entry((channel, dir)).or_default();
        // Keep connection order: behind a queued message, a passing one queues too.
        let action = match action {
            Action::Pass if !queue.is_empty() && !whitelisted => Action::Delay(0),
            a => a,
        };
        let (disposition, out) = match action {
            Action::Pass => (Disposition::Passed, vec![Delivery { channel, dir, frame: frame.clone() }]),
            Action::Drop => (Disposition::Dropped, vec![]),
            Action::Hold => {
                queue.push_back(Queued { seq, frame: frame.clone(), due: None });
                (Disposition::Queued, vec![])
            }
            Action::Delay(ms) => {
                queue.push_back(Queued { seq, frame: frame.clone(), due: Some(now + ms) });
                (Disposition::Queued, vec![])
            }
            Action::Bandwidth(_) => unreachable!("a bandwidth rule became a delay above"),
            Action::Reorder(ms) => {
                self.aside.push((channel, dir, Queued { seq, frame: frame.clone(), due: Some(now + ms) }));
                (Disposition::Queued, vec![])
            }
        };
        self.log.push(Recorded {
            seq,
            time_ms: now,
            channel,
            dir,
            msg_type,
            xid,
            raw: frame.bytes().clone(),
            disposition,
        });
        let mut out = out;
        out.extend(self.due(now));
        out
    }

    /// Delivers queued messages whose time has come, in order: a queue drains
    /// from its head while the head is due (a held head blocks what follows).
    pub fn due(&mut self, now: u64) -> Vec<Delivery> {
        let mut out = Vec::new();
        for (&(channel, dir), q) in self.queues.iter_mut() {
            while q.front().is_some_and(|m| m.due.is_some_and(|d| d <= now)) {
                let m = q.pop_front().expect("front exists");
                self.delivered.push(Delivered { seq: m.seq, time_ms: now, arrivals: self.next_seq });
                out.push(Delivery { channel, dir, frame: m.frame });
            }
        }
        if self.aside.iter().any(|(_, _, m)| m.due.is_some_and(|d| d <= now)) {
            let (mut ready, rest): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.aside).into_iter().partition(|(_, _, m)| m.due.is_some_and(|d| d <= now));
            self.aside = rest;
            ready.sort_by_key(|(_, _, m)| (m.due, m.seq));
            self.delivered.extend(ready.iter().map(|(_, _, m)| Delivered {
                seq: m.seq,
                time_ms: now,
                arrivals: self.next_seq,
            }));
            out.extend(ready.into_iter().map(|(channel, dir, m)| Delivery { channel, dir, frame: m.frame }));
        }
        out
    }

    /// When the earliest queued message becomes due (`None` if nothing
    /// queued is due at a known time: held, or nothing queued).
    pub fn next_due(&self) -> Option<u64> {
        let queued = self.queues.values().filter_map(|q| q.front().and_then(|m| m.due));
        queued.chain(self.aside.iter().filter_map(|(_, _, m)| m.due)).min()
    }

    /// Releases held messages on the selected channels: they become due at
    /// once and are delivered in order (with whatever followed them).
    pub fn release(&mut self, dpid: Option<u64>, dir: Option<Direction>, now: u64) -> Vec<Delivery> {
        for ((ch, d), q) in self.queues.iter_mut() {
            if dpid.is_none_or(|x| x == ch.dpid) && dir.is_none_or(|x| x == *d) {
                for m in q.iter_mut() {
                    m.due = Some(m.due.map_or(now, |t| t.min(now)));
                }
            }
        }
        self.due(now)
    }

    /// Reorders the queue of one channel and direction: `order` lists the
    /// sequence numbers of its queued messages in the new order (those not
    /// listed keep their relative order after them).
    pub fn reorder(&mut self, channel: ChannelId, dir: Direction, order: &[u64]) {
        let Some(q) = self.queues.get_mut(&(channel, dir)) else { return };
        let mut rest: VecDeque<Queued> = std::mem::take(q);
        let mut front = VecDeque::new();
        for seq in order {
            if let Some(i) = rest.iter().position(|m| m.seq == *seq) {
                front.push_back(rest.remove(i).expect("index valid"));
            }
        }
        front.extend(rest);
        *q = front;
    }

    /// Every queued message, by channel and direction, oldest first within
    /// each queue.
    pub fn waiting(&self) -> Vec<Waiting> {
        let mut out = Vec::new();
        let aside = self.aside.iter().map(|(c, d, m)| (*c, *d, m));
        let queued = self.queues.iter().flat_map(|(&(c, d), q)| q.iter().map(move |m| (c, d, m)));
        for (channel, dir, m) in queued.chain(aside) {
            let h = m.frame.header();
            out.push(Waiting {
                seq: m.seq,
                channel,
                dir,
                msg_type: crate::wire::type_name(h.version, h.msg_type),
                xid: h.xid,
                due: m.due,
                frame: m.frame.clone(),
            });
        }
        out
    }

    /// Takes the queued message `seq` out of its queue, out of turn: the
    /// caller delivers it now or drops it. What queued behind it stays in
    /// order (and, if it was the head, goes once due).
    pub fn take(&mut self, seq: u64) -> Option<Delivery> {
        for (&(channel, dir), q) in self.queues.iter_mut() {
            if let Some(i) = q.iter().position(|m| m.seq == seq) {
                let m = q.remove(i).expect("index valid");
                return Some(Delivery { channel, dir, frame: m.frame });
            }
        }
        let i = self.aside.iter().position(|(_, _, m)| m.seq == seq)?;
        let (channel, dir, m) = self.aside.remove(i);
        Some(Delivery { channel, dir, frame: m.frame })
    }

    /// [`Interposer::take`] for a message the caller delivers now: noted
    /// as delivered at `now`.
    pub fn take_to_deliver(&mut self, seq: u64, now: u64) -> Option<Delivery> {
        let d = self.take(seq)?;
        self.delivered.push(Delivered { seq, time_ms: now, arrivals: self.next_seq });
        Some(d)
    }

    /// Makes the queued message `seq` due at `due` (a held message becomes
    /// a delayed one); false if no such message is queued.
    pub fn set_due(&mut self, seq: u64, due: u64) -> bool {
        let aside = self.aside.iter_mut().map(|(_, _, m)| m);
        let m = self.queues.values_mut().flat_map(|q| q.iter_mut()).chain(aside).find(|m| m.seq == seq);
        m.map(|m| m.due = Some(due)).is_some()
    }

    /// Sequence numbers of the messages queued on a channel and direction.
    pub fn queued_seqs(&self, channel: ChannelId, dir: Direction) -> Vec<u64> {
        self.queues.get(&(channel, dir)).map_or(vec![], |q| q.iter().map(|m| m.seq).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{v13, Body, Message};

    fn frame(m: v13::Msg, xid: u32) -> Frame {
        Frame::from_message(&Message::new(xid, Body::V13(m))).unwrap()
    }

    const CH: ChannelId = ChannelId { dpid: 1, controller: 0 };
    const DOWN: Direction = Direction::ControllerToSwitch;

    fn xids(d: &[Delivery]) -> Vec<u32> {
        d.iter().map(|x| x.frame.header().xid).collect()
    }

    /// The verbs the engine drives the interposer with: a hold on one
    /// switch until it stops and is released; one delay per switch; a
    /// one-shot rule that fires once; a place kept with a quota.
    #[test]
    fn the_verbs_hold_delay_arm_once_and_keep_a_place() {
        let mut ip = Interposer::default();
        ip.hold(Some(1), "barrier_request");
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 1), 0).is_empty());
        ip.stop_holding(None);
        assert!(ip.rules().is_empty());
        assert_eq!(ip.queued(), 1, "stopping does not release");
        assert_eq!(xids(&ip.release(Some(1), None, 1)), vec![1]);

        ip.delay(1, 50);
        ip.delay(1, 20);
        assert_eq!(ip.rules().len(), 1, "a second delay replaces the first");
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 2), 10).is_empty());
        assert_eq!(xids(&ip.due(30)), vec![2]);
        ip.end_delay(1);
        assert!(ip.rules().is_empty());

        ip.arm_once(1, "get_config_request", Action::Drop);
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 3), 40).is_empty());
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 4), 41)), vec![4]);

        // One more passes; the next waits for the place; an echo never does.
        ip.keep_place([((CH, DOWN, "get_config_request"), 1)]);
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 5), 50)), vec![5]);
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 6), 51).is_empty());
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::EchoRequest(Bytes::new()), 7), 52)), vec![7]);
        let held = ip.end_place();
        assert_eq!(held.len(), 1);
        assert!(ip.set_due(held[0], 53));
        assert_eq!(xids(&ip.due(53)), vec![6]);
    }

    #[test]
    fn held_messages_block_what_follows_until_released_in_order() {
        let mut ip = Interposer::default();
        ip.rules.push(Rule {
            dir: Some(DOWN),
            dpid: Some(1),
            msg_type: Some("barrier_request".into()),
            action: Action::Hold,
            ..Default::default()
        });
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 1), 0)), Vec::<u32>::new());
        // A passing message queues behind the held one; an echo overtakes (whitelisted).
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 2), 1).is_empty());
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::EchoRequest(Bytes::new()), 3), 2)), vec![3]);
        // Another channel is unaffected.
        let other = ChannelId { dpid: 2, controller: 0 };
        assert_eq!(xids(&ip.on_message(other, DOWN, frame(v13::Msg::GetConfigRequest, 4), 3)), vec![4]);
        assert_eq!(ip.queued(), 2);
        assert_eq!(xids(&ip.release(Some(1), None, 10)), vec![1, 2]);
        assert_eq!(ip.queued(), 0);
        let log: Vec<_> = ip.log().iter().map(|r| (r.xid, r.disposition)).collect();
        assert_eq!(
            log,
            vec![
                (1, Disposition::Queued),
                (2, Disposition::Queued),
                (3, Disposition::Passed),
                (4, Disposition::Passed)
            ]
        );
        // The two queued ones are noted as delivered at the release, by their sequence numbers.
        let seqs: Vec<u64> = ip.log().iter().filter(|r| r.disposition == Disposition::Queued).map(|r| r.seq).collect();
        let went: Vec<(u64, u64)> = ip.take_delivered().iter().map(|d| (d.seq, d.time_ms)).collect();
        assert_eq!(went, vec![(seqs[0], 10), (seqs[1], 10)]);
        assert!(ip.take_delivered().is_empty());
    }

    #[test]
    fn delay_drop_and_reorder() {
        let mut ip = Interposer::default();
        ip.rules.push(Rule {
            dir: None,
            dpid: None,
            msg_type: Some("barrier_request".into()),
            action: Action::Delay(50),
            ..Default::default()
        });
        ip.rules.push(Rule {
            dir: None,
            dpid: None,
            msg_type: Some("get_config_request".into()),
            action: Action::Drop,
            ..Default::default()
        });
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 1), 0).is_empty());
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 2), 0).is_empty());
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 3), 10).is_empty());
        assert!(ip.due(49).is_empty());
        assert_eq!(xids(&ip.due(50)), vec![1]);
        // Reorder what is left (only xid 3 remains queued) and a held pair.
        ip.rules.insert(
            0,
            Rule {
                dir: None,
                dpid: None,
                msg_type: Some("features_request".into()),
                action: Action::Hold,
                ..Default::default()
            },
        );
        ip.on_message(CH, DOWN, frame(v13::Msg::FeaturesRequest, 4), 20);
        let seqs = ip.queued_seqs(CH, DOWN);
        ip.reorder(CH, DOWN, &[seqs[1], seqs[0]]);
        assert_eq!(xids(&ip.release(None, None, 100)), vec![4, 3]);
        assert_eq!(ip.log()[1].disposition, Disposition::Dropped);
    }

    #[test]
    fn a_one_shot_rule_takes_the_first_message_it_selects_only() {
        let mut ip = Interposer::default();
        ip.once.push(Rule {
            dir: Some(DOWN),
            dpid: Some(1),
            msg_type: Some("barrier_request".into()),
            action: Action::Drop,
            ..Default::default()
        });
        // Another switch's, and an echo, are not its.
        let other = ChannelId { dpid: 2, controller: 0 };
        assert_eq!(xids(&ip.on_message(other, DOWN, frame(v13::Msg::BarrierRequest, 1), 0)), vec![1]);
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::EchoRequest(Bytes::new()), 2), 0)), vec![2]);
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 3), 0).is_empty(), "dropped");
        assert!(ip.once.is_empty(), "used up");
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 4), 0)), vec![4]);
    }

    #[test]
    fn a_reordered_message_lets_later_ones_overtake_it() {
        let mut ip = Interposer::default();
        ip.once.push(Rule {
            dir: None,
            dpid: None,
            msg_type: Some("barrier_request".into()),
            action: Action::Reorder(20),
            ..Default::default()
        });
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 1), 0).is_empty());
        // The next message on the same connection does not wait behind it.
        assert_eq!(xids(&ip.on_message(CH, DOWN, frame(v13::Msg::GetConfigRequest, 2), 1)), vec![2]);
        assert_eq!(ip.next_due(), Some(20));
        assert!(ip.due(19).is_empty());
        assert_eq!(xids(&ip.due(20)), vec![1]);
        assert_eq!(ip.queued(), 0);
    }

    #[test]
    fn one_waiting_message_can_be_taken_or_retimed_out_of_turn() {
        let mut ip = Interposer::default();
        ip.rules.push(Rule {
            dir: None,
            dpid: None,
            msg_type: Some("barrier_request".into()),
            action: Action::Hold,
            ..Default::default()
        });
        for xid in 1..=3 {
            ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, xid), 0);
        }
        let waiting = ip.waiting();
        assert_eq!(
            waiting.iter().map(|w| (w.xid, w.msg_type, w.due)).collect::<Vec<_>>(),
            vec![(1, "barrier_request", None), (2, "barrier_request", None), (3, "barrier_request", None)]
        );
        // The middle one goes now; the head stays held and blocks the third.
        assert_eq!(ip.take_to_deliver(waiting[1].seq, 5).map(|d| d.frame.header().xid), Some(2));
        assert!(ip.take(waiting[1].seq).is_none());
        assert!(ip.set_due(waiting[0].seq, 30));
        assert!(ip.due(29).is_empty());
        assert_eq!(xids(&ip.due(30)), vec![1]);
        assert_eq!(ip.queued(), 1);
        assert!(!ip.set_due(999, 0));
        // A message taken to be dropped is not delivered; one taken to deliver is, when taken.
        assert!(ip.take(waiting[2].seq).is_some());
        let went: Vec<(u64, u64)> = ip.take_delivered().iter().map(|d| (d.seq, d.time_ms)).collect();
        assert_eq!(went, vec![(waiting[1].seq, 5), (waiting[0].seq, 30)]);
    }

    fn features_reply(datapath_id: u64) -> Frame {
        let reply = v13::FeaturesReply {
            datapath_id,
            n_buffers: 0,
            n_tables: 1,
            auxiliary_id: 0,
            capabilities: 0,
            reserved: 0,
        };
        frame(v13::Msg::FeaturesReply(reply), 9)
    }

    #[test]
    fn a_rule_can_select_a_switch_by_the_datapath_id_its_features_reply_gave() {
        let mut ip = Interposer::default();
        ip.rules.push(Rule { action: Action::Drop, datapath: Some(0x2a), ..Default::default() });
        let (a, b) = (ChannelId { dpid: 0, controller: 0 }, ChannelId { dpid: 1, controller: 0 });
        let up = Direction::SwitchToController;
        // Before its FEATURES_REPLY nobody knows which switch a connection is.
        assert_eq!(xids(&ip.on_message(a, DOWN, frame(v13::Msg::BarrierRequest, 1), 0)), vec![1]);
        assert_eq!(ip.on_message(a, up, features_reply(0x2a), 1).len(), 0, "the reply itself is the switch's");
        assert_eq!(ip.on_message(b, up, features_reply(0x2b), 2).len(), 1);
        assert!(ip.on_message(a, DOWN, frame(v13::Msg::BarrierRequest, 3), 3).is_empty(), "0x2a's: dropped");
        assert_eq!(xids(&ip.on_message(b, DOWN, frame(v13::Msg::BarrierRequest, 4), 4)), vec![4], "0x2b's pass");
        assert_eq!(ip.datapaths().values().copied().collect::<Vec<_>>(), vec![0x2a, 0x2b]);
    }

    /// Which of 1,000 barriers a rule with a `chance` drops.
    fn dropped_with(seed: u64, chance: f64) -> Vec<u32> {
        let mut ip = Interposer::default();
        ip.seed(seed);
        ip.rules.push(Rule { action: Action::Drop, chance: Some(chance), ..Default::default() });
        (0..1_000).filter(|&x| ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, x), 0).is_empty()).collect()
    }

    #[test]
    fn a_rule_with_a_chance_applies_that_often_and_the_seed_decides_which() {
        let half = dropped_with(7, 0.5);
        assert!((430..=570).contains(&half.len()), "about half: {}", half.len());
        assert_eq!(dropped_with(7, 0.5), half, "the same seed, the same messages");
        assert_ne!(dropped_with(8, 0.5), half, "another seed, others");
        assert!(dropped_with(7, 0.0).is_empty());
        assert_eq!(dropped_with(7, 1.0).len(), 1_000);
        // A message the rule passes over goes on to the next rule.
        let mut ip = Interposer::default();
        ip.rules.push(Rule { action: Action::Drop, chance: Some(0.0), ..Default::default() });
        ip.rules.push(Rule { action: Action::Hold, ..Default::default() });
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 1), 0).is_empty());
        assert_eq!(ip.queued(), 1, "held by the second rule");
    }

    #[test]
    fn a_delay_with_jitter_spreads_around_its_time() {
        let mut ip = Interposer::default();
        ip.rules.push(Rule { action: Action::Delay(100), jitter_ms: 30, ..Default::default() });
        // One channel per message: each queue holds one, due at its own time.
        for d in 0..200 {
            ip.on_message(ChannelId { dpid: d, controller: 0 }, DOWN, frame(v13::Msg::BarrierRequest, 1), 1_000);
        }
        let dues: std::collections::BTreeSet<u64> = ip.waiting().iter().filter_map(|w| w.due).collect();
        assert!(dues.iter().all(|d| (1_070..=1_130).contains(d)), "{dues:?}");
        assert!(dues.len() > 30, "spread, not one time: {dues:?}");
    }

    /// A bandwidth rule is a pipe per connection direction: 8-byte barriers
    /// at 1,000 bytes/s take 8 ms each to cross and queue for the pipe; the
    /// other direction and other connections have pipes of their own; an
    /// idle pipe starts from now.
    #[test]
    fn a_bandwidth_rule_spaces_messages_by_their_length() {
        let mut ip = Interposer::default();
        ip.rules.push(Rule { action: Action::Bandwidth(1_000), ..Default::default() });
        for xid in 1..=3 {
            assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, xid), 100).is_empty());
        }
        let other = ChannelId { dpid: 2, controller: 0 };
        assert!(ip.on_message(other, DOWN, frame(v13::Msg::BarrierRequest, 4), 100).is_empty());
        let dues: Vec<(u32, Option<u64>)> = ip.waiting().iter().map(|w| (w.xid, w.due)).collect();
        assert_eq!(dues, vec![(1, Some(108)), (2, Some(116)), (3, Some(124)), (4, Some(108))]);
        assert_eq!(xids(&ip.due(116)), vec![1, 2, 4]);
        assert_eq!(xids(&ip.due(124)), vec![3]);
        // Long idle: the next one starts crossing when it comes.
        assert!(ip.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 5), 1_000).is_empty());
        assert_eq!(ip.waiting().iter().map(|w| w.due).collect::<Vec<_>>(), vec![Some(1_008)]);
        // A fast pipe lets a message through at once.
        let mut fast = Interposer::default();
        fast.rules.push(Rule { action: Action::Bandwidth(1_000_000_000), ..Default::default() });
        assert_eq!(xids(&fast.on_message(CH, DOWN, frame(v13::Msg::BarrierRequest, 6), 5)), vec![6]);
    }
}
