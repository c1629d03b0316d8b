//! The class engine against the per-source walk on routed fat-trees.
//!
//! `brute_force.rs` holds both engines to the dataplane on small random
//! networks; here the networks are larger and structured like the benchmark's
//! (fat-trees with two-level routing, k = 4 and 6), then damaged at random:
//! more specific routes to wrong ports, drop rules, failed links. Both engines
//! must report exactly the same violations, witnesses included.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sts_invariants::check::{Checker, Engine, Facts, Incremental, Invariant, Report, Violation};
use sts_invariants::testnet::{flow, ipv4_dst, routed_fat_tree, routing_loop};
use sts_mocknet::network::{Endpoint, Network};
use sts_proxy::wire::v13::{self, Instruction};
use sts_proxy::wire::{Body, Message};

const CASES: u64 = 60;

/// A rule that drops IPv4 traffic to `addr/prefix`.
fn drop_rule(net: &mut Network, dpid: u64, addr: u32, prefix: u32) {
    let fm = v13::FlowMod::add(0, 500, v13::Match::new(ipv4_dst(addr, prefix)), Vec::<Instruction>::new());
    let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
    net.handle_controller(dpid, &msg.emit().expect("encodes"), &msg, 0);
}

fn damaged_fat_tree(seed: u64) -> Network {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let k = if seed.is_multiple_of(3) { 6 } else { 4 };
    let mut net = routed_fat_tree(k, seed.is_multiple_of(2));
    let dpids: Vec<u64> = net.switches.keys().copied().collect();
    let ips: Vec<u32> = net.hosts.iter().map(|h| u32::from(h.ip)).collect();
    for _ in 0..rng.gen_range(0..=3) {
        let d = *dpids.choose(&mut rng).expect("switches");
        let ip = *ips.choose(&mut rng).expect("hosts");
        let prefix = *[32, 24].choose(&mut rng).expect("prefixes");
        match rng.gen_range(0..3) {
            0 => drop_rule(&mut net, d, ip, prefix),
            _ => {
                let ports: Vec<u32> = net.switches[&d].ports.keys().copied().collect();
                let port = *ports.choose(&mut rng).expect("ports");
                flow(&mut net, d, 450, ipv4_dst(ip, prefix), port);
            }
        }
    }
    if seed % 5 == 1 {
        let half = k / 2;
        routing_loop(&mut net, k, rng.gen_range(0..(half * half) as usize), 1 + rng.gen_range(0..k - 1));
    }
    if rng.gen_bool(0.3) {
        let links = net.switch_links();
        let ((a, pa), _) = *links.choose(&mut rng).expect("links");
        net.set_link(Endpoint::Switch { dpid: a, port: pa }, false);
    }
    net
}

/// A report's violations, loops without their witness: two engines may show
/// the same cycle with different headers.
fn comparable(r: &Report) -> Vec<Violation> {
    r.violations
        .iter()
        .map(|v| {
            if v.invariant == Invariant::Loop {
                Violation { summary: String::new(), witness: None, ..v.clone() }
            } else {
                v.clone()
            }
        })
        .collect()
}

#[test]
fn class_engine_and_per_source_walk_report_the_same_on_damaged_fat_trees() {
    let enabled = [Invariant::Loop, Invariant::Blackhole, Invariant::Reachability, Invariant::Liveness];
    let (mut by_class, mut with_holes, mut with_loops) = (0, 0, 0);
    for seed in 0..CASES {
        let net = damaged_fat_tree(seed);
        let check = |engine| {
            Checker { enabled: enabled.into_iter().collect(), engine, ..Checker::default() }
                .check(&net, &Facts::default())
        };
        let exact = check(Engine::PerSource);
        let auto = check(Engine::Auto);
        assert_eq!(comparable(&auto), comparable(&exact), "seed {seed}");
        assert_eq!(auto.notes, exact.notes, "seed {seed}");
        assert!(
            auto.classes > 0,
            "seed {seed}: without rewrites the class engine runs, loops or not: {:?}",
            auto.per_source_because
        );
        by_class += 1;
        with_holes += exact.violations.iter().any(|v| v.invariant == Invariant::Blackhole) as u32;
        with_loops += exact.violations.iter().any(|v| v.invariant == Invariant::Loop) as u32;
    }
    eprintln!("{CASES} fat-trees by class: {with_holes} with blackholes, {with_loops} with loops");
    assert!(by_class == CASES as u32);
    assert!(with_loops >= CASES as u32 / 10, "the damage must make loops");
    assert!(with_holes > CASES as u32 / 5, "the damage must make blackholes");
}

/// The output port of the first table-0 rule of `dpid` that matches IPv4
/// to `ip` with a single output action, if any.
fn port_used_for(net: &Network, dpid: u64, ip: u32) -> Option<u32> {
    let entry = net.switches[&dpid].tables[0].entries().iter().find(|e| {
        let covers = e.r#match.fields.iter().all(|f| match f.field {
            v13::Field::EthType => f.value == 0x0800,
            v13::Field::Ipv4Dst => (ip as u128 ^ f.value) & f.mask == 0,
            _ => false,
        });
        covers && !e.r#match.fields.is_empty()
    })?;
    match entry.instructions.apply.as_slice() {
        [sts_mocknet::flow::Action::Output { port, .. }] => Some(*port),
        _ => None,
    }
}

/// One random rule change at a random switch: a host or edge route added
/// (to a random port, or dropping; or to the port the switch already sends
/// that host's traffic to, which changes no forwarding), or a rule deleted.
/// Returns the switch, and whether the change was an agreeing route.
fn random_rule_change(net: &mut Network, rng: &mut ChaCha8Rng) -> (u64, bool) {
    let dpids: Vec<u64> = net.switches.keys().copied().collect();
    let ips: Vec<u32> = net.hosts.iter().map(|h| u32::from(h.ip)).collect();
    let d = *dpids.choose(rng).expect("switches");
    let ip = *ips.choose(rng).expect("hosts");
    let prefix = *[32, 24].choose(rng).expect("prefixes");
    if rng.gen_bool(0.3) {
        if let Some(port) = port_used_for(net, d, ip) {
            flow(net, d, 460, ipv4_dst(ip, 32), port);
            return (d, true);
        }
    }
    match rng.gen_range(0..6) {
        0 => drop_rule(net, d, ip, prefix),
        4 => {
            // Modify some rule's actions in place (strictly: match and priority).
            let entries = net.switches[&d].tables[0].entries().to_vec();
            let ports: Vec<u32> = net.switches[&d].ports.keys().copied().collect();
            if let (Some(e), Some(&port)) = (entries.choose(rng), ports.choose(rng)) {
                let sts_mocknet::flow::WireForm::V13 { r#match, .. } = &e.wire else { return (d, false) };
                let out = vec![Instruction::ApplyActions(vec![v13::Action::Output { port, max_len: 0xffff }])];
                let fm = v13::FlowMod {
                    command: v13::flow_mod_command::MODIFY_STRICT,
                    ..v13::FlowMod::add(0, e.priority, r#match.clone(), out)
                };
                let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
                net.handle_controller(d, &msg.emit().expect("encodes"), &msg, 0);
            }
        }
        5 => {
            // A route for traffic from one port only (the table becomes conditional).
            let ports: Vec<u32> = net.switches[&d].ports.keys().copied().collect();
            let (from, to) = (*ports.choose(rng).expect("ports"), *ports.choose(rng).expect("ports"));
            let mut fields = ipv4_dst(ip, prefix);
            fields.push(v13::BasicOxm::exact(v13::Field::InPort, u128::from(from)));
            flow(net, d, 470, fields, to);
        }
        1 => {
            // Delete some rule of the switch (strictly: match and priority).
            let entries = net.switches[&d].tables[0].entries().to_vec();
            if let Some(e) = entries.choose(rng) {
                let sts_mocknet::flow::WireForm::V13 { r#match, .. } = &e.wire else { return (d, false) };
                let fm = v13::FlowMod {
                    command: v13::flow_mod_command::DELETE_STRICT,
                    ..v13::FlowMod::add(0, e.priority, r#match.clone(), Vec::new())
                };
                let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
                net.handle_controller(d, &msg.emit().expect("encodes"), &msg, 0);
            }
        }
        _ => {
            let ports: Vec<u32> = net.switches[&d].ports.keys().copied().collect();
            let port = *ports.choose(rng).expect("ports");
            flow(net, d, 450, ipv4_dst(ip, prefix), port);
        }
    };
    (d, false)
}

#[test]
fn a_recheck_after_rule_changes_reports_what_a_full_check_does() {
    let checker = Checker {
        enabled: [Invariant::Loop, Invariant::Blackhole, Invariant::Reachability].into_iter().collect(),
        ..Checker::default()
    };
    let (mut rechecks, mut by_class, mut changed_verdicts, mut agreeing) = (0, 0, 0, 0);
    for seed in 0..20u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(1000 + seed);
        let mut net = damaged_fat_tree(seed);
        let mut inc = Incremental::new(checker.clone());
        let mut last = inc.check(&net, &Facts::default());
        // The same re-checks without copying what the engine keeps.
        let mut lean = Incremental::new(checker.clone());
        lean.check(&net, &Facts::default());
        for step in 0..8 {
            let (d, same) = random_rule_change(&mut net, &mut rng);
            agreeing += same as u32;
            let mut changed = vec![d];
            if rng.gen_bool(0.3) {
                let (d, same) = random_rule_change(&mut net, &mut rng);
                agreeing += same as u32;
                changed.push(d);
            }
            let fresh = checker.check(&net, &Facts::default());
            let re = inc.recheck(&net, &Facts::default(), &changed);
            let lean_report = lean.recheck_lean(&net, &Facts::default(), &changed);
            let lean_all: Vec<Violation> = lean.standing().cloned().chain(lean_report.violations).collect();
            assert_eq!(lean_all, re.violations, "seed {seed} step {step}: lean re-check");
            if comparable(&re) != comparable(&fresh) {
                let names = |r: &Report| {
                    r.violations.iter().map(|v| v.summary.clone()).collect::<std::collections::BTreeSet<_>>()
                };
                let (a, b) = (names(&re), names(&fresh));
                panic!("seed {seed} step {step} (changed {changed:?}): only in the recheck {:?}; only in the full check {:?}", a.difference(&b).take(3).collect::<Vec<_>>(), b.difference(&a).take(3).collect::<Vec<_>>());
            }
            assert_eq!(re.classes > 0, fresh.classes > 0, "seed {seed} step {step}");
            rechecks += 1;
            by_class += (re.classes > 0) as u32;
            changed_verdicts += (re.violations != last.violations) as u32;
            last = re;
        }
    }
    eprintln!(
        "{rechecks} rechecks, {by_class} by class, {changed_verdicts} changed the report, {agreeing} agreeing routes"
    );
    assert!(by_class > rechecks / 2 && changed_verdicts > rechecks / 4);
    // Routes that change no forwarding (the engine skips following them) were among the changes.
    assert!(agreeing > rechecks / 8, "{agreeing} agreeing routes in {rechecks} rechecks");
}

#[test]
fn degenerate_networks_check_without_trouble() {
    use sts_mocknet::Topology;
    use sts_proxy::wire::{OFP10, OFP13};
    let checker = Checker {
        enabled: [Invariant::Loop, Invariant::Blackhole, Invariant::Reachability].into_iter().collect(),
        ..Checker::default()
    };
    let mut bare = Topology::custom(2, &[(1, 2)]);
    bare.place_hosts(&[]);
    let mut one = Topology::custom(1, &[]);
    one.place_hosts(&[1, 1]);
    for topo in [Topology::custom(0, &[]), bare, one] {
        for version in [OFP10, OFP13] {
            let net = Network::new(&topo, version);
            let auto = checker.check(&net, &Facts::default());
            let exact = Checker { engine: Engine::PerSource, ..checker.clone() }.check(&net, &Facts::default());
            assert_eq!(comparable(&auto), comparable(&exact));
            let mut inc = Incremental::new(checker.clone());
            inc.check(&net, &Facts::default());
            let dpids: Vec<u64> = net.switches.keys().copied().collect();
            assert_eq!(comparable(&inc.recheck(&net, &Facts::default(), &dpids)), comparable(&exact));
        }
    }
}

/// Removing a table's first rule for some headers hands them to the very
/// next rule: a re-check must find that rule (here it drops them), not one
/// further down (which would flood them on).
#[test]
fn a_removed_rule_hands_its_headers_to_the_rule_right_after_it() {
    use sts_mocknet::Topology;
    let mut topo = Topology::custom(2, &[(1, 2)]);
    topo.place_hosts(&[1, 2]);
    let mut net = Network::new(&topo, sts_proxy::wire::OFP13);
    let h2 = u32::from(net.hosts[1].ip);
    let flood = v13::port::FLOOD;
    for d in [1, 2] {
        flow(&mut net, d, 1, Vec::new(), flood);
    }
    flow(&mut net, 1, 20, ipv4_dst(h2, 32), flood);
    drop_rule(&mut net, 1, h2, 32);
    // The drop rule (priority 500) comes first: a blackhole; then it goes
    // and priority 20 floods; then that goes too, and a priority-10 drop
    // added before it is next in line.
    let checker = Checker { enabled: [Invariant::Blackhole].into_iter().collect(), ..Checker::default() };
    let mut inc = Incremental::new(checker.clone());
    assert!(!inc.check(&net, &Facts::default()).violations.is_empty());
    let delete = |net: &mut Network, priority: u16| {
        let fm = v13::FlowMod {
            command: v13::flow_mod_command::DELETE_STRICT,
            ..v13::FlowMod::add(0, priority, v13::Match::new(ipv4_dst(h2, 32)), Vec::new())
        };
        let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
        net.handle_controller(1, &msg.emit().expect("encodes"), &msg, 0);
    };
    delete(&mut net, 500);
    assert!(inc.recheck(&net, &Facts::default(), &[1]).violations.is_empty());
    let fm = v13::FlowMod::add(0, 10, v13::Match::new(ipv4_dst(h2, 32)), Vec::new());
    let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
    net.handle_controller(1, &msg.emit().expect("encodes"), &msg, 0);
    assert!(inc.recheck(&net, &Facts::default(), &[1]).violations.is_empty());
    delete(&mut net, 20);
    let again = inc.recheck(&net, &Facts::default(), &[1]);
    assert_eq!(comparable(&again), comparable(&checker.check(&net, &Facts::default())));
    assert!(!again.violations.is_empty(), "the priority-10 drop is first now");
}

/// Prefixes the router test draws from: a default route, prefixes holding
/// several hosts (10.0.0.1-4 on s1-s4), single hosts, and prefixes no host
/// is in.
const ROUTER_PREFIXES: [(u32, u32); 9] = [
    (0, 0),
    (0x0a00_0000, 8),
    (0x0a00_0000, 29),
    (0x0a00_0000, 30),
    (0x0a00_0004, 30),
    (0x0a00_0001, 32),
    (0x0a00_0003, 32),
    (0x0a00_0100, 24),
    (0xac10_0000, 12),
];

/// A route to `prefix` at `dpid`, its priority the prefix length (as a
/// router's longest-prefix match), to `port` (none: a drop); `delete`
/// removes the route of that prefix instead.
fn route(net: &mut Network, dpid: u64, (addr, len): (u32, u32), port: Option<u32>, delete: bool) {
    let actions = port
        .map(|p| vec![Instruction::ApplyActions(vec![v13::Action::Output { port: p, max_len: 0xffff }])])
        .unwrap_or_default();
    let mut fm = v13::FlowMod::add(0, 100 + len as u16, v13::Match::new(ipv4_dst(addr, len)), actions);
    if delete {
        fm.command = v13::flow_mod_command::DELETE_STRICT;
    }
    let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
    net.handle_controller(dpid, &msg.emit().expect("encodes"), &msg, 0);
}

#[test]
fn a_recheck_on_routers_with_default_routes_reports_what_a_full_check_does() {
    // Many classes go the same way at every router (default routes, wide
    // prefixes): a re-check follows one of each such set and gives its
    // fate to the others, which must change no verdict (loops, blackholes).
    use sts_invariants::header::{s, Ternary};
    let checker = Checker {
        enabled: [Invariant::Loop, Invariant::Blackhole, Invariant::Reachability].into_iter().collect(),
        ..Checker::default()
    };
    let values: Vec<(usize, Ternary)> = ROUTER_PREFIXES
        .iter()
        .map(|&(a, l)| {
            let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
            (s::IPV4_DST, Ternary::present((a & mask) as u64, mask as u64))
        })
        .collect();
    let (mut rechecks, mut looping, mut blackholing, mut followed, mut shared) = (0, 0, 0, 0, 0);
    for seed in 0..30u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(4400 + seed);
        let mut net = Network::new(&sts_mocknet::Topology::mesh(4), sts_proxy::wire::OFP13);
        let dpids: Vec<u64> = net.switches.keys().copied().collect();
        let random_route = |net: &mut Network, rng: &mut ChaCha8Rng| {
            let d = *dpids.choose(rng).expect("switches");
            let prefix = *ROUTER_PREFIXES.choose(rng).expect("prefixes");
            let ports: Vec<u32> = net.switches[&d].ports.keys().copied().collect();
            let port = if rng.gen_bool(0.1) { None } else { ports.choose(rng).copied() };
            route(net, d, prefix, port, rng.gen_bool(0.2));
            d
        };
        // Few routes (classes share more) or many (more loops).
        for _ in 0..if seed % 2 == 0 { 10 } else { 24 } {
            random_route(&mut net, &mut rng);
        }
        let mut inc = Incremental::new(checker.clone());
        inc.cut_for(values.clone());
        inc.check(&net, &Facts::default());
        // The same re-checks without copying what the engine keeps.
        let mut lean = Incremental::new(checker.clone());
        lean.cut_for(values.clone());
        lean.check(&net, &Facts::default());
        for step in 0..10 {
            let mut changed = vec![random_route(&mut net, &mut rng)];
            if rng.gen_bool(0.3) {
                changed.push(random_route(&mut net, &mut rng));
            }
            if step == 9 {
                // A prefix no class was cut for: a full check instead.
                route(&mut net, changed[0], (0x0a00_0002, 31), Some(1), false);
            }
            let fresh = checker.check(&net, &Facts::default());
            let before = inc.followed;
            let re = inc.recheck(&net, &Facts::default(), &changed);
            let lean_report = lean.recheck_lean(&net, &Facts::default(), &changed);
            let lean_all: Vec<Violation> = lean.standing().cloned().chain(lean_report.violations).collect();
            assert_eq!(lean_all, re.violations, "seed {seed} step {step}: lean re-check");
            assert_eq!(comparable(&re), comparable(&fresh), "seed {seed} step {step} (changed {changed:?})");
            assert!(re.classes > 0, "seed {seed} step {step}: checked by class");
            rechecks += 1;
            looping += re.violations.iter().any(|v| v.invariant == Invariant::Loop) as u32;
            blackholing += re.violations.iter().any(|v| v.invariant == Invariant::Blackhole) as u32;
            followed += inc.followed.0 - before.0;
            shared += inc.followed.1 - before.1;
        }
        // Only the last step's new prefix made a re-check a full check.
        assert_eq!(inc.fallbacks.values().sum::<usize>(), 1, "seed {seed}: {:?}", inc.fallbacks);
    }
    eprintln!("{rechecks} rechecks, {looping} with loops, {blackholing} with blackholes; {shared} of {followed} classes took another's walk");
    assert!(looping > rechecks / 8 && blackholing > rechecks / 4, "{looping} and {blackholing} of {rechecks}");
    assert!(shared > followed / 10, "{shared} of {followed} classes took another's walk");
}
