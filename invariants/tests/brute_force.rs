//! The symbolic checker against brute force through the mock dataplane.
//!
//! Each case builds a random network (1-4 switches, random links including
//! cycles, 2-3 hosts, OpenFlow 1.3 with up to three tables, goto, write and
//! apply actions, metadata, groups ALL / INDIRECT / FAST-FAILOVER, VLAN push and
//! pop, rewrites; or OpenFlow 1.0), installs random rules through real
//! FLOW_MOD and GROUP_MOD messages, fails some links, and then:
//!
//! - brute force: every header of a small universe (which covers every value
//!   the rules mention plus an "other" value per field) is sent from every
//!   host with `Network::probe`, which runs the real switch pipeline;
//! - symbolic: the walk's terminals whose origin cube holds that header.
//!
//! For every (host, header) the two must agree on which hosts receive a copy,
//! whether a controller gets one, and whether it loops. The checker's loop,
//! blackhole and reachability verdicts must also match the ones derived from
//! brute force.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sts_invariants::check::{Checker, Engine, Facts, Invariant};
use sts_invariants::header::{s, Cube, Header, Shape, N, PRESENT};
use sts_invariants::walk::{Model, Outcome, Walker};
use sts_mocknet::network::{Endpoint, Network};
use sts_mocknet::packet::Fields;
use sts_mocknet::Topology;
use sts_proxy::wire::v13::{self, oxm::VID_PRESENT, Action, BasicOxm, Field, Instruction};
use sts_proxy::wire::{v10, Body, Mac, Message, OFP10, OFP13};

const CASES: u64 = 2500;

/// Deliveries after which a probe counts as a storm: far more than a
/// loop-free flood of these small networks can cause.
const PROBE_BUDGET: usize = 5_000;

fn host_mac(i: usize) -> u128 {
    // Topology::add_host numbers MACs from 1.
    i as u128 + 1
}

const OTHER_MAC: u128 = 0x0000_0000_00ee;
const BCAST: u128 = 0xffff_ffff_ffff;

struct Case {
    net: Network,
    n_hosts: usize,
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, xs: &[T]) -> T {
    *xs.choose(rng).expect("non-empty")
}

fn send(net: &mut Network, dpid: u64, body: Body) {
    let msg = Message::new(1, body);
    let raw = msg.emit().expect("encodes");
    net.handle_controller(dpid, &raw, &msg, 0);
}

fn random_action13(rng: &mut ChaCha8Rng, nports: u32, groups: &[u32], rewrites: bool) -> Action {
    let macs = [host_mac(0), host_mac(1), host_mac(2), OTHER_MAC];
    let pick_kind = rng.gen_range(0..12);
    let kind = if !rewrites && (7..=10).contains(&pick_kind) { pick_kind - 7 } else { pick_kind };
    match kind {
        0..=3 => Action::Output { port: rng.gen_range(1..=nports + 1), max_len: 0 },
        4 => Action::Output { port: pick(rng, &[v13::port::FLOOD, v13::port::ALL]), max_len: 0 },
        5 => Action::Output { port: v13::port::CONTROLLER, max_len: 0xffff },
        6 => Action::Output { port: v13::port::IN_PORT, max_len: 0 },
        7 => Action::SetField(sts_proxy::wire::v13::Oxm::Basic(BasicOxm::exact(Field::EthDst, pick(rng, &macs)))),
        8 => Action::SetField(sts_proxy::wire::v13::Oxm::Basic(BasicOxm::exact(
            Field::VlanVid,
            (VID_PRESENT | 10) as u128,
        ))),
        9 => {
            if rng.gen_bool(0.5) {
                Action::PushVlan(0x8100)
            } else {
                Action::PopVlan
            }
        }
        10 => Action::SetField(sts_proxy::wire::v13::Oxm::Basic(BasicOxm::exact(Field::TcpDst, 22))),
        _ => match groups.choose(rng) {
            Some(g) => Action::Group(*g),
            None => Action::Output { port: 1, max_len: 0 },
        },
    }
}

fn random_match13(rng: &mut ChaCha8Rng, nports: u32) -> v13::Match {
    let mut f = Vec::new();
    if rng.gen_bool(0.4) {
        f.push(BasicOxm::exact(Field::InPort, rng.gen_range(1..=nports) as u128));
    }
    if rng.gen_bool(0.5) {
        f.push(BasicOxm::exact(Field::EthDst, pick(rng, &[host_mac(0), host_mac(1), host_mac(2), BCAST])));
    }
    if rng.gen_bool(0.2) {
        f.push(BasicOxm::exact(Field::EthSrc, pick(rng, &[host_mac(0), host_mac(1), host_mac(2)])));
    }
    if rng.gen_bool(0.15) {
        // Multicast bit: half of all destinations.
        f.push(BasicOxm::masked(Field::EthDst, 0x0100_0000_0000, 0x0100_0000_0000));
    }
    if rng.gen_bool(0.2) {
        f.push(BasicOxm::exact(Field::VlanVid, pick(rng, &[0, (VID_PRESENT | 10) as u128])));
    }
    match rng.gen_range(0..6) {
        0 => f.push(BasicOxm::exact(Field::EthType, 0x0806)),
        1 => {
            f.push(BasicOxm::exact(Field::EthType, 0x0800));
            f.push(BasicOxm::exact(Field::IpProto, 6));
            if rng.gen_bool(0.5) {
                f.push(BasicOxm::exact(Field::TcpDst, pick(rng, &[80, 22])));
            }
        }
        2 => {
            f.push(BasicOxm::exact(Field::EthType, 0x0800));
            if rng.gen_bool(0.5) {
                f.push(BasicOxm::masked(Field::Ipv4Dst, 0x0a00_0000, 0xff00_0000));
            }
        }
        _ => {}
    }
    if rng.gen_bool(0.1) {
        f.push(BasicOxm::masked(Field::Metadata, 1, 1));
    }
    v13::Match::new(f)
}

fn flow13(table: u8, priority: u16, m: v13::Match, instructions: Vec<Instruction>) -> Body {
    Body::V13(v13::Msg::FlowMod(v13::FlowMod::add(table, priority, m, instructions)))
}

/// A random network; without `rewrites`, no action changes a header (the
/// networks the class engine handles).
fn random_case(seed: u64, rewrites: bool) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n_sw = rng.gen_range(1..=4u64);
    let mut links = Vec::new();
    for a in 1..=n_sw {
        for b in a + 1..=n_sw {
            if rng.gen_bool(0.7) {
                links.push((a, b));
            }
        }
    }
    if n_sw == 2 && rng.gen_bool(0.3) {
        links.push((1, 2)); // parallel links make two-switch cycles
    }
    let mut topo = Topology::custom(n_sw, &links);
    let n_hosts = rng.gen_range(2..=3);
    let at: Vec<u64> = (0..n_hosts).map(|_| rng.gen_range(1..=n_sw)).collect();
    topo.place_hosts(&at);
    let version = if rng.gen_bool(0.2) { OFP10 } else { OFP13 };
    let mut net = Network::new(&topo, version);
    let dpids: Vec<u64> = net.switches.keys().copied().collect();
    for &d in &dpids {
        let nports = net.switches[&d].ports.len() as u32;
        if nports == 0 {
            continue;
        }
        if version == OFP13 {
            let mut groups = Vec::new();
            for g in 0..rng.gen_range(0..=2u32) {
                let group_type =
                    pick(&mut rng, &[v13::group_type::ALL, v13::group_type::INDIRECT, v13::group_type::FF]);
                let buckets = (0..rng.gen_range(1..=2))
                    .map(|_| v13::Bucket {
                        weight: 0,
                        watch_port: if group_type == v13::group_type::FF {
                            rng.gen_range(1..=nports)
                        } else {
                            v13::port::ANY
                        },
                        watch_group: v13::GROUP_ANY,
                        actions: (0..rng.gen_range(1..=2))
                            .map(|_| random_action13(&mut rng, nports, &[], rewrites))
                            .collect(),
                    })
                    .collect();
                send(
                    &mut net,
                    d,
                    Body::V13(v13::Msg::GroupMod(v13::GroupMod { command: 0, group_type, group_id: g + 1, buckets })),
                );
                groups.push(g + 1);
            }
            for _ in 0..rng.gen_range(0..=6) {
                let table = rng.gen_range(0..3u8);
                let mut ins = Vec::new();
                if rng.gen_bool(0.8) {
                    ins.push(Instruction::ApplyActions(
                        (0..rng.gen_range(0..=3))
                            .map(|_| random_action13(&mut rng, nports, &groups, rewrites))
                            .collect(),
                    ));
                }
                if rng.gen_bool(0.15) {
                    ins.push(Instruction::ClearActions);
                }
                if rng.gen_bool(0.25) {
                    ins.push(Instruction::WriteActions(
                        (0..rng.gen_range(1..=2))
                            .map(|_| random_action13(&mut rng, nports, &groups, rewrites))
                            .collect(),
                    ));
                }
                if rng.gen_bool(0.15) {
                    ins.push(Instruction::WriteMetadata { metadata: 1, mask: 1 });
                }
                if table < 2 && rng.gen_bool(0.35) {
                    ins.push(Instruction::GotoTable(rng.gen_range(table + 1..3)));
                }
                let m = random_match13(&mut rng, nports);
                send(&mut net, d, flow13(table, rng.gen_range(0..4), m, ins));
            }
            if rng.gen_bool(0.6) {
                // Flood broadcasts, as learning switches do (loops on cycles).
                let flood =
                    vec![Instruction::ApplyActions(vec![Action::Output { port: v13::port::FLOOD, max_len: 0 }])];
                let bcast = v13::Match::new([BasicOxm::exact(Field::EthDst, BCAST)]);
                send(&mut net, d, flow13(0, rng.gen_range(0..4), bcast, flood));
            }
            if rng.gen_bool(0.5) {
                // A table-miss entry to the controller, as most apps install.
                let to_ctl = vec![Instruction::ApplyActions(vec![Action::Output {
                    port: v13::port::CONTROLLER,
                    max_len: 0xffff,
                }])];
                send(&mut net, d, flow13(0, 0, v13::Match::default(), to_ctl));
            }
        } else {
            for _ in 0..rng.gen_range(0..=5) {
                let mut m = v10::Match::default();
                use v10::wildcards as w;
                if rng.gen_bool(0.4) {
                    m.wildcards &= !w::IN_PORT;
                    m.in_port = rng.gen_range(1..=nports) as u16;
                }
                if rng.gen_bool(0.5) {
                    m.wildcards &= !w::DL_DST;
                    m.dl_dst = Mac(sts_mocknet::packet::int_mac(pick(&mut rng, &[host_mac(0), host_mac(1), BCAST])));
                }
                if rng.gen_bool(0.3) {
                    m.wildcards &= !w::DL_TYPE;
                    m.dl_type = pick(&mut rng, &[0x0800, 0x0806]);
                }
                let actions = (0..rng.gen_range(0..=2))
                    .map(|_| match rng.gen_range(0..if rewrites { 6 } else { 5 }) {
                        0..=2 => v10::Action::Output { port: rng.gen_range(1..=nports as u16 + 1), max_len: 0 },
                        3 => v10::Action::Output {
                            port: pick(&mut rng, &[v10::port::FLOOD, v10::port::ALL, v10::port::IN_PORT]),
                            max_len: 0,
                        },
                        4 => v10::Action::Output { port: v10::port::CONTROLLER, max_len: 0xffff },
                        _ => v10::Action::SetDlDst(Mac(sts_mocknet::packet::int_mac(pick(
                            &mut rng,
                            &[host_mac(0), host_mac(1), OTHER_MAC],
                        )))),
                    })
                    .collect();
                let fm = v10::FlowMod {
                    r#match: m,
                    cookie: 0,
                    command: 0,
                    idle_timeout: 0,
                    hard_timeout: 0,
                    priority: rng.gen_range(0..4),
                    buffer_id: v10::NO_BUFFER,
                    out_port: v10::port::NONE,
                    flags: 0,
                    actions,
                };
                send(&mut net, d, Body::V10(v10::Msg::FlowMod(fm)));
            }
        }
    }
    // Fail some links (switch-switch or host).
    let mut ends: Vec<Endpoint> =
        net.switch_links().iter().map(|(a, _)| Endpoint::Switch { dpid: a.0, port: a.1 }).collect();
    ends.extend((0..n_hosts).map(Endpoint::Host));
    for _ in 0..rng.gen_range(0..=1) {
        if let Some(e) = ends.choose(&mut rng) {
            net.set_link(*e, false);
        }
    }
    Case { net, n_hosts }
}

/// Host `i`'s IPv4 address as `Topology::add_host` assigns it.
fn host_ip(i: usize) -> u64 {
    0x0a00_0001 + i as u64
}

/// The header universe: every value the rules can tell apart, plus "other".
/// IPv4 and ARP addresses either belong to the hosts of the MAC addresses
/// (the traffic hosts really send) or not.
fn universe() -> Vec<Header> {
    let mut out = Vec::new();
    let macs_src = [host_mac(0), host_mac(1), host_mac(2), OTHER_MAC];
    let macs_dst = [host_mac(0), host_mac(1), host_mac(2), OTHER_MAC, BCAST, 0x0100_0000_0001];
    let ip_of = |mac: u128, other: u64| if (1..=3).contains(&mac) { host_ip(mac as usize - 1) } else { other };
    for &src in &macs_src {
        for &dst in &macs_dst {
            for vlan in [None, Some(10u64)] {
                for own_ips in [true, false] {
                    let (sip, dip) = if own_ips {
                        (ip_of(src, 0x0a00_0063), ip_of(dst, 0x0a00_0062))
                    } else {
                        (0x0a00_0063, 0xc0a8_0001)
                    };
                    for l3 in 0..8 {
                        let mut v = [0u64; N];
                        v[s::ETH_SRC] = PRESENT | src as u64;
                        v[s::ETH_DST] = PRESENT | dst as u64;
                        match vlan {
                            None => v[s::VLAN_VID] = PRESENT,
                            Some(id) => {
                                v[s::VLAN_VID] = PRESENT | VID_PRESENT as u64 | id;
                                v[s::VLAN_PCP] = PRESENT;
                            }
                        }
                        let ip = |v: &mut [u64; N], proto: u64| {
                            v[s::ETH_TYPE] = PRESENT | 0x0800;
                            v[s::IP_DSCP] = PRESENT;
                            v[s::IP_ECN] = PRESENT;
                            v[s::IP_PROTO] = PRESENT | proto;
                            v[s::IPV4_SRC] = PRESENT | sip;
                            v[s::IPV4_DST] = PRESENT | dip;
                        };
                        match l3 {
                            0 => {
                                v[s::ETH_TYPE] = PRESENT | 0x0806;
                                for f in [s::ARP_OP, s::ARP_SHA, s::ARP_THA] {
                                    v[f] = PRESENT | 1;
                                }
                                v[s::ARP_SPA] = PRESENT | sip;
                                v[s::ARP_TPA] = PRESENT | dip;
                            }
                            1..=3 => {
                                ip(&mut v, 6);
                                v[s::TCP_SRC] = PRESENT | 1000;
                                v[s::TCP_DST] = PRESENT | [80, 22, 1234][l3 - 1];
                            }
                            4 => {
                                ip(&mut v, 17);
                                v[s::UDP_SRC] = PRESENT | 1;
                                v[s::UDP_DST] = PRESENT | 2;
                            }
                            5 => {
                                ip(&mut v, 1);
                                v[s::ICMP_TYPE] = PRESENT | 8;
                                v[s::ICMP_CODE] = PRESENT;
                            }
                            6 => ip(&mut v, 89),
                            _ => {
                                if !own_ips {
                                    continue; // no addresses to vary
                                }
                                v[s::ETH_TYPE] = PRESENT | 0x88cc
                            }
                        }
                        out.push(Header { values: v });
                    }
                }
            }
        }
    }
    out
}

#[derive(Debug, PartialEq, Eq, Default)]
struct Fate {
    delivered: BTreeSet<usize>,
    punted: bool,
    looped: bool,
}

#[test]
fn symbolic_walk_agrees_with_the_dataplane_on_every_header() {
    let universe = universe();
    // The universe's frames parse back to their headers (else the comparison is moot).
    for h in &universe {
        let f = Fields::extract(&h.to_frame(), 1, 0);
        for (slot, field) in sts_invariants::header::SLOTS.iter().enumerate() {
            assert_eq!(f.get(*field).map(|v| v as u64), h.get(slot), "{h} {}", field.name());
        }
    }
    let shapes: Vec<Cube> = Shape::all().into_iter().map(Cube::of_shape).collect();
    let (mut compared, mut loops, mut holes, mut unmodelled, mut partial, mut by_class, mut looping_by_class) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for seed in 0..CASES {
        let case = random_case(seed, seed.is_multiple_of(2));
        let mut brute = case.net.clone();
        let model = Model::new(&case.net);
        // As the checker does: fields no rule reads or writes are left free.
        let shapes: Vec<Cube> = shapes.iter().map(|c| c.relax(!model.used_slots())).collect();
        let mut brute_loop = false;
        let mut brute_holes: BTreeSet<(usize, usize)> = BTreeSet::new();
        for a in 0..case.n_hosts {
            let mut w = Walker::new(&model);
            w.from_host(a, &shapes);
            assert!(!w.truncated, "seed {seed}: walk truncated");
            for h in &universe {
                let mut sym = Fate::default();
                let mut skip = false;
                for t in w.terminals.iter().filter(|t| t.origin.contains(h)) {
                    match &t.outcome {
                        Outcome::Delivered { host } => {
                            sym.delivered.insert(*host);
                        }
                        Outcome::Punted { .. } => sym.punted = true,
                        Outcome::Looped { .. } => sym.looped = true,
                        Outcome::Dropped { .. } => {}
                        Outcome::Unmodelled { .. } => skip = true,
                    }
                }
                if skip {
                    unmodelled += 1;
                    continue;
                }
                let p = brute.probe(a, h.to_frame(), 0, PROBE_BUDGET);
                let real = Fate { delivered: p.delivered, punted: !p.to_controllers.is_empty(), looped: p.looped };
                if real.looped {
                    brute_loop = true;
                }
                // The same fate, except that a looping frame's other copies
                // may be cut short differently by the dataplane's budget.
                if real.looped || sym.looped {
                    assert_eq!(
                        real.looped, sym.looped,
                        "seed {seed}: host {a} header {h}: loop verdicts differ ({real:?} vs {sym:?})"
                    );
                } else {
                    assert_eq!(real, sym, "seed {seed}: host {a} header {h}");
                }
                compared += 1;
                // Blackhole per the definition: untagged ARP/IPv4 from a to b,
                // a and b connected, no copy to b or a controller, no loop.
                let untagged = h.values[s::VLAN_VID] == PRESENT;
                let (sip, dip) = match h.get(s::ETH_TYPE) {
                    Some(0x0800) => (h.get(s::IPV4_SRC), h.get(s::IPV4_DST)),
                    Some(0x0806) => (h.get(s::ARP_SPA), h.get(s::ARP_TPA)),
                    _ => (None, None),
                };
                if let Some(b) = (0..case.n_hosts).find(|&b| b != a && h.get(s::ETH_DST) == Some(host_mac(b) as u64)) {
                    let from_a_to_b = h.get(s::ETH_SRC) == Some(host_mac(a) as u64)
                        && sip == Some(host_ip(a))
                        && dip == Some(host_ip(b));
                    if untagged && from_a_to_b && !real.looped && !real.punted && !real.delivered.contains(&b) {
                        brute_holes.insert((a, b));
                    }
                }
            }
        }
        // The checker's verdicts, by either engine.
        let connected = |a: usize, b: usize| connected(&case, a, b);
        let expect_holes: BTreeSet<(usize, usize)> =
            brute_holes.into_iter().filter(|&(a, b)| connected(a, b)).collect();
        let mut reports = Vec::new();
        for engine in [Engine::PerSource, Engine::Auto] {
            let checker = Checker {
                enabled: [Invariant::Loop, Invariant::Blackhole].into_iter().collect(),
                engine,
                ..Checker::default()
            };
            let report = checker.check(&case.net, &Facts::default());
            assert!(!report.notes.iter().any(|n| n.starts_with("internal")), "seed {seed}: {:?}", report.notes);
            if report.classes > 0 {
                by_class += 1;
            }
            reports.push(report);
        }
        let report = reports.pop().expect("two reports");
        let per_source = reports.pop().expect("two reports");
        let sym_loop = per_source.violations.iter().any(|v| v.invariant == Invariant::Loop);
        let holes_of = |r: &sts_invariants::check::Report| -> BTreeSet<(usize, usize)> {
            r.violations
                .iter()
                .filter(|v| v.invariant == Invariant::Blackhole)
                .map(|v| (host_index(&v.elements[0]), host_index(&v.elements[1])))
                .collect()
        };
        let sym_holes = holes_of(&per_source);
        if !per_source.notes.is_empty() {
            partial += 1;
        } else {
            assert_eq!(sym_loop, brute_loop, "seed {seed}: loop verdict");
            assert_eq!(sym_holes, expect_holes, "seed {seed}: blackholed pairs");
        }
        if report.classes > 0 && report.notes.is_empty() && per_source.notes.is_empty() {
            // The class engine ran: the same verdicts as brute force, and the
            // same report as the per-source walk (a loop may be shown by
            // another header).
            let class_loop = report.violations.iter().any(|v| v.invariant == Invariant::Loop);
            assert_eq!(class_loop, brute_loop, "seed {seed}: loop verdict by class");
            looping_by_class += class_loop as u64;
            assert_eq!(holes_of(&report), expect_holes, "seed {seed}: blackholed pairs by class");
            assert_eq!(comparable(&report), comparable(&per_source), "seed {seed}: the two engines report differently");
        }
        // Every witness is real: its frame, sent again, does what the report says.
        for v in per_source.violations.iter().chain(&report.violations) {
            let w = v.witness.as_ref().expect("static violations carry witnesses");
            let frame: Vec<u8> =
                (0..w.frame.len()).step_by(2).map(|i| u8::from_str_radix(&w.frame[i..i + 2], 16).unwrap()).collect();
            let from = host_index(&w.from);
            let p = brute.probe(from, frame, 0, PROBE_BUDGET);
            match v.invariant {
                Invariant::Loop => assert!(p.looped, "seed {seed}: loop witness {} does not loop", w.header),
                Invariant::Blackhole => {
                    let b = host_index(&v.elements[1]);
                    assert!(
                        !p.looped && p.to_controllers.is_empty() && !p.delivered.contains(&b),
                        "seed {seed}: blackhole witness {} reaches",
                        w.header
                    );
                }
                _ => {}
            }
        }
        loops += sym_loop as u64;
        holes += sym_holes.len() as u64;
    }
    eprintln!("{CASES} networks ({partial} partially analysed, {by_class} checked by header class too, {looping_by_class} of them with loops), {compared} (host, header) fates compared, {unmodelled} unmodelled, {loops} with loops, {holes} blackholed pairs");
    assert!(by_class > CASES / 5, "the class engine must run on many networks");
    assert!(looping_by_class > CASES / 50, "the class engine must meet loops");
    assert!(loops > CASES / 20, "the generator must make loops");
    assert!(holes > CASES / 10, "the generator must make blackholes");
}

/// A report's violations, loops without their witness: two engines may show
/// the same cycle with different headers.
fn comparable(r: &sts_invariants::check::Report) -> Vec<sts_invariants::Violation> {
    // A loop may be shown by another header, and its culprit (the rules that
    // send that header round) with it.
    let forget = |v: &sts_invariants::Violation| sts_invariants::Violation {
        summary: String::new(),
        witness: None,
        culprit: None,
        ..v.clone()
    };
    r.violations.iter().map(|v| if v.invariant == Invariant::Loop { forget(v) } else { v.clone() }).collect()
}

fn host_index(name: &str) -> usize {
    name.trim_start_matches('h').parse::<usize>().expect("host names are h<N>") - 1
}

/// Physical connectivity, computed independently of the checker: BFS over
/// live links with the network's own peer function.
fn connected(case: &Case, a: usize, b: usize) -> bool {
    let (Some(Endpoint::Switch { dpid: sa, .. }), Some(Endpoint::Switch { dpid: sb, .. })) =
        (case.net.live_peer(Endpoint::Host(a)), case.net.live_peer(Endpoint::Host(b)))
    else {
        return false;
    };
    let mut seen = BTreeSet::from([sa]);
    let mut todo = vec![sa];
    while let Some(d) = todo.pop() {
        for (&p, port) in &case.net.switches[&d].ports {
            if !port.is_live() {
                continue;
            }
            if let Some(Endpoint::Switch { dpid, port: q }) = case.net.live_peer(Endpoint::Switch { dpid: d, port: p })
            {
                let up = case.net.switches[&dpid].ports.get(&q).is_some_and(|x| x.is_live());
                if up && seen.insert(dpid) {
                    todo.push(dpid);
                }
            }
        }
    }
    seen.contains(&sb)
}
