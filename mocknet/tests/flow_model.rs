//! Flow-table semantics against a small reference model.
//!
//! Random sequences of FLOW_MODs (add, modify, modify-strict, delete,
//! delete-strict, with priorities, overlap checks, cookies, timeouts and
//! goto-table), traffic and the passage of time are applied to a real mock
//! [`Switch`] through OpenFlow 1.3 messages, and to a deliberately naive model.
//! After every step, every packet of a small header universe is forwarded by
//! both (the switch probed on a clone, so probing refreshes no idle timer) and
//! the output ports must agree.
//!
//! The model is independent where it matters: non-strict selection is decided
//! semantically, by brute force over the universe ("every packet this entry
//! matches is matched by the request"), not by comparing field lists.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use proptest::prelude::*;
use sts_mocknet::packet::build;
use sts_mocknet::switch::{Output, Switch};
use sts_proxy::wire::v13::{self, BasicOxm, Field};
use sts_proxy::wire::{Body, Mac, Message, OFP13};

const PORTS: u32 = 4;
const TABLES: u8 = 3;

/// A concrete packet of the universe: (in_port, eth_dst index, is_arp).
type Pkt = (u32, u8, bool);

fn universe() -> Vec<Pkt> {
    let mut u = Vec::new();
    for in_port in 1..=3 {
        for dst in 1..=2 {
            for arp in [false, true] {
                u.push((in_port, dst, arp));
            }
        }
    }
    u
}

fn frame(p: Pkt) -> Vec<u8> {
    let src = Mac([0, 0, 0, 0, 0, 9]);
    let dst = Mac([0, 0, 0, 0, 0, p.1]);
    if p.2 {
        let mut f = build::arp(2, src, Ipv4Addr::new(10, 0, 0, 9), dst, Ipv4Addr::new(10, 0, 0, p.1));
        f[0..6].copy_from_slice(&dst.0);
        f
    } else {
        build::icmp_echo(8, src, dst, Ipv4Addr::new(10, 0, 0, 9), Ipv4Addr::new(10, 0, 0, p.1), 1, 1, b"")
    }
}

/// A match over the universe's fields: each is either unconstrained or exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct M {
    in_port: Option<u32>,
    dst: Option<u8>,
    arp: Option<bool>,
}

impl M {
    fn accepts(&self, p: Pkt) -> bool {
        self.in_port.is_none_or(|v| v == p.0) && self.dst.is_none_or(|v| v == p.1) && self.arp.is_none_or(|v| v == p.2)
    }
    fn to_oxm(self) -> v13::Match {
        let mut f = Vec::new();
        if let Some(p) = self.in_port {
            f.push(BasicOxm::exact(Field::InPort, p as u128));
        }
        if let Some(d) = self.dst {
            f.push(BasicOxm::exact(Field::EthDst, d as u128));
        }
        if let Some(a) = self.arp {
            f.push(BasicOxm::exact(Field::EthType, if a { 0x0806 } else { 0x0800 }));
        }
        v13::Match::new(f)
    }
    /// Semantic containment over the universe.
    fn within(&self, general: &M) -> bool {
        universe().into_iter().filter(|&p| self.accepts(p)).all(|p| general.accepts(p))
    }
    fn overlaps(&self, other: &M) -> bool {
        universe().into_iter().any(|p| self.accepts(p) && other.accepts(p))
    }
}

#[derive(Debug, Clone)]
struct Rule {
    m: M,
    priority: u16,
    cookie: u64,
    out: u32,
    goto: Option<u8>,
    idle: u16,
    hard: u16,
    installed: u64,
    used: u64,
    seq: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Add { table: u8, m: M, priority: u16, cookie: u64, out: u32, goto: bool, idle: u16, hard: u16, check_overlap: bool },
    Modify { table: u8, m: M, priority: u16, strict: bool, out: u32 },
    Delete { table: u8, m: M, priority: u16, strict: bool, cookie: Option<u64> },
    Traffic(usize),
    Advance(u64),
}

fn arb_m() -> impl Strategy<Value = M> {
    (prop::option::of(1u32..=3), prop::option::of(1u8..=2), prop::option::of(any::<bool>()))
        .prop_map(|(in_port, dst, arp)| M { in_port, dst, arp })
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..TABLES, arb_m(), 0u16..3, 0u64..3, 1..=PORTS, any::<bool>(), prop_oneof![Just(0u16), 1u16..4], prop_oneof![Just(0u16), 1u16..4], any::<bool>())
            .prop_map(|(table, m, priority, cookie, out, goto, idle, hard, check_overlap)| Op::Add { table, m, priority, cookie, out, goto, idle, hard, check_overlap }),
        1 => (0..TABLES, arb_m(), 0u16..3, any::<bool>(), 1..=PORTS).prop_map(|(table, m, priority, strict, out)| Op::Modify { table, m, priority, strict, out }),
        1 => (0..TABLES, arb_m(), 0u16..3, any::<bool>(), prop::option::of(0u64..3)).prop_map(|(table, m, priority, strict, cookie)| Op::Delete { table, m, priority, strict, cookie }),
        2 => (0..12usize).prop_map(Op::Traffic),
        1 => (0u64..2500).prop_map(Op::Advance),
    ]
}

/// The reference model: tables of rules, searched naively.
#[derive(Default)]
struct Model {
    tables: Vec<Vec<Rule>>,
    seq: u64,
}

impl Model {
    fn new() -> Model {
        Model { tables: vec![Vec::new(); TABLES as usize], seq: 0 }
    }

    /// Highest priority, then earliest installed among equals.
    fn hit(&self, t: usize, p: Pkt) -> Option<usize> {
        let rules = &self.tables[t];
        (0..rules.len())
            .filter(|&i| rules[i].m.accepts(p))
            .max_by(|&a, &b| rules[a].priority.cmp(&rules[b].priority).then(rules[b].seq.cmp(&rules[a].seq)))
    }

    /// Output ports for `p`; marks hit rules used at `now` when `touch`.
    fn forward(&mut self, p: Pkt, now: u64, touch: bool) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        let mut t = 0usize;
        loop {
            let Some(i) = self.hit(t, p) else { return out };
            if touch {
                self.tables[t][i].used = now;
            }
            let r = &self.tables[t][i];
            // A frame never leaves through its ingress port.
            if r.out != p.0 {
                out.insert(r.out);
            }
            match r.goto {
                Some(n) if (n as usize) > t => t = n as usize,
                _ => return out,
            }
        }
    }

    fn expire(&mut self, now: u64) {
        for rules in &mut self.tables {
            rules.retain(|r| {
                !((r.hard > 0 && now >= r.installed + r.hard as u64 * 1000)
                    || (r.idle > 0 && now >= r.used + r.idle as u64 * 1000))
            });
        }
    }
}

#[allow(clippy::too_many_arguments)] // mirrors the FLOW_MOD fields one to one
fn flow_mod(
    table: u8,
    command: u8,
    m: M,
    priority: u16,
    cookie: u64,
    cookie_mask: u64,
    out: u32,
    goto: Option<u8>,
    idle: u16,
    hard: u16,
    flags: u16,
) -> Message {
    let mut instructions = vec![v13::Instruction::ApplyActions(vec![v13::Action::Output { port: out, max_len: 0 }])];
    if let Some(g) = goto {
        instructions.push(v13::Instruction::GotoTable(g));
    }
    Message::new(
        1,
        Body::V13(v13::Msg::FlowMod(v13::FlowMod {
            cookie,
            cookie_mask,
            table_id: table,
            command,
            idle_timeout: idle,
            hard_timeout: hard,
            priority,
            buffer_id: v13::NO_BUFFER,
            out_port: v13::port::ANY,
            out_group: v13::GROUP_ANY,
            flags,
            r#match: m.to_oxm(),
            instructions,
        })),
    )
}

fn switch_forward(sw: &Switch, p: Pkt, now: u64) -> BTreeSet<u32> {
    let mut probe = sw.clone();
    probe
        .receive(p.0, frame(p), now)
        .into_iter()
        .filter_map(|o| match o {
            Output::Emit { port, .. } => Some(port),
            _ => None,
        })
        .collect()
}

fn send(sw: &mut Switch, msg: &Message, now: u64) -> Vec<Output> {
    let raw = msg.emit().unwrap();
    sw.handle(&raw, msg, now)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn switch_agrees_with_reference_model(ops in prop::collection::vec(arb_op(), 1..40)) {
        let mut sw = Switch::new(1, OFP13, PORTS);
        for p in sw.ports.values_mut() {
            p.link_up = true;
        }
        let mut model = Model::new();
        let mut now = 0u64;
        for op in &ops {
            match op.clone() {
                Op::Add { table, m, priority, cookie, out, goto, idle, hard, check_overlap } => {
                    let goto = if goto && table + 1 < TABLES { Some(table + 1) } else { None };
                    let flags = if check_overlap { v13::flow_mod_flags::CHECK_OVERLAP } else { 0 };
                    let replies = send(&mut sw, &flow_mod(table, 0, m, priority, cookie, 0, out, goto, idle, hard, flags), now);
                    let rules = &mut model.tables[table as usize];
                    model.seq += 1;
                    let rule = Rule { m, priority, cookie, out, goto, idle, hard, installed: now, used: now, seq: model.seq };
                    if let Some(i) = rules.iter().position(|r| r.priority == priority && r.m == m) {
                        rules[i] = rule; // identical match and priority: replaced
                        prop_assert!(replies.is_empty());
                    } else if check_overlap && rules.iter().any(|r| r.priority == priority && r.m.overlaps(&m)) {
                        prop_assert!(matches!(replies.as_slice(), [Output::Reply(Message { body: Body::V13(v13::Msg::Error(_)), .. })]), "overlap must be refused");
                    } else {
                        rules.push(rule);
                        prop_assert!(replies.is_empty());
                    }
                }
                Op::Modify { table, m, priority, strict, out } => {
                    let cmd = if strict { 2 } else { 1 };
                    send(&mut sw, &flow_mod(table, cmd, m, priority, 0, 0, out, None, 0, 0, 0), now);
                    for r in model.tables[table as usize].iter_mut() {
                        let selected = if strict { r.priority == priority && r.m == m } else { r.m.within(&m) };
                        if selected {
                            r.out = out;
                            r.goto = None; // instructions are replaced whole
                        }
                    }
                }
                Op::Delete { table, m, priority, strict, cookie } => {
                    let cmd = if strict { 4 } else { 3 };
                    let (c, mask) = cookie.map_or((0, 0), |c| (c, u64::MAX));
                    send(&mut sw, &flow_mod(table, cmd, m, priority, c, mask, 1, None, 0, 0, 0), now);
                    model.tables[table as usize].retain(|r| {
                        let selected = if strict { r.priority == priority && r.m == m } else { r.m.within(&m) };
                        !(selected && cookie.is_none_or(|c| r.cookie == c))
                    });
                }
                Op::Traffic(i) => {
                    let p = universe()[i];
                    let got: BTreeSet<u32> = sw.receive(p.0, frame(p), now).into_iter().filter_map(|o| match o {
                        Output::Emit { port, .. } => Some(port),
                        _ => None,
                    }).collect();
                    let want = model.forward(p, now, true);
                    prop_assert_eq!(got, want, "traffic {:?}", p);
                }
                Op::Advance(ms) => {
                    now += ms;
                    sw.expire(now);
                    model.expire(now);
                }
            }
            for p in universe() {
                prop_assert_eq!(switch_forward(&sw, p, now), model.forward(p, now, false), "packet {:?} after {:?}", p, op);
            }
            let n: usize = model.tables.iter().map(Vec::len).sum();
            prop_assert_eq!(sw.flow_count(), n, "entry count after {:?}", op);
        }
    }
}

#[test]
fn modify_strict_and_non_strict_select_differently() {
    // A concrete case of the property above, kept readable.
    let mut sw = Switch::new(1, OFP13, PORTS);
    sw.ports.values_mut().for_each(|p| p.link_up = true);
    let general = M { in_port: None, dst: Some(2), arp: None };
    let specific = M { in_port: Some(1), dst: Some(2), arp: Some(false) };
    send(&mut sw, &flow_mod(0, 0, specific, 5, 0, 0, 3, None, 0, 0, 0), 0);
    // Strict modify with the general match touches nothing...
    send(&mut sw, &flow_mod(0, 2, general, 5, 0, 0, 4, None, 0, 0, 0), 0);
    assert_eq!(switch_forward(&sw, (1, 2, false), 0), BTreeSet::from([3]));
    // ...non-strict modify rewrites the more specific entry.
    send(&mut sw, &flow_mod(0, 1, general, 0, 0, 0, 4, None, 0, 0, 0), 0);
    assert_eq!(switch_forward(&sw, (1, 2, false), 0), BTreeSet::from([4]));
}
