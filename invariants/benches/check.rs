//! Time of a full invariant check on fat-trees with realistic routing.
//!
//! `cargo bench -p sts-invariants --bench check [-- K...]`
//!
//! Each fat-tree (k = 4, 8, 16, 32 by default) gets two-level routing
//! ([`sts_invariants::testnet::routed_fat_tree`]), installed through FLOW_MOD
//! messages as a controller would. The "+host routes" variant adds a /32 per
//! host of the pod at every aggregation switch, to reach 100,000 rules; the
//! "+ a routing loop" variant adds three host routes that send one host's
//! traffic around a loop ([`sts_invariants::testnet::routing_loop`]).
//!
//! Reported: the median of several full checks (loops, blackholes over every
//! host pair, reachability, liveness), each including compiling the model;
//! then, on the same networks, the median time of an incremental re-check
//! ([`sts_invariants::Incremental::recheck`]) after one rule change:
//!
//! - *agreeing route*: a core gets a /32 for one host, to the port its pod
//!   route already uses (nothing changes but the rule set);
//! - *route removed*: that rule deleted again;
//! - *host cut off*: an edge switch drops one local host's traffic (every
//!   other host now has a blackhole towards it, each explained with a
//!   witness), then *mended* by deleting the drop rule.

use std::time::Instant;

use sts_invariants::check::{Checker, Engine, Facts, Incremental, Invariant};
use sts_invariants::testnet::{ipv4_dst, routed_fat_tree, routing_loop};
use sts_mocknet::network::{Endpoint, Network};
use sts_proxy::wire::v13::{self, Instruction};
use sts_proxy::wire::{Body, Message};

/// Sends a 1.3 FLOW_MOD add or strict delete of `ipv4_dst(ip, 32)` at `priority`.
fn flow_mod(net: &mut Network, dpid: u64, command: u8, priority: u16, ip: u32, actions: Vec<Instruction>) {
    let fm = v13::FlowMod { command, ..v13::FlowMod::add(0, priority, v13::Match::new(ipv4_dst(ip, 32)), actions) };
    let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
    net.handle_controller(dpid, &msg.emit().expect("encodes"), &msg, 0);
}

fn median_ms(mut times: Vec<std::time::Duration>) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e3
}

/// Re-check times after single-rule changes, printed as table rows.
fn rechecks(name: &str, k: u64, host_routes: bool, checker: &Checker) {
    let mut net = routed_fat_tree(k, host_routes);
    let mut inc = Incremental::new(checker.clone());
    let first = inc.check(&net, &Facts::default());
    assert!(first.classes > 0 && first.violations.is_empty(), "a healthy network checked by class");
    let ips: Vec<u32> = net.hosts.iter().map(|h| u32::from(h.ip)).collect();
    let half = k / 2;
    let (mut agree, mut removed, mut cut, mut mended, mut cold) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut cut_violations = 0;
    let rounds = 7;
    // The rule changes that leave forwarding as it was, round after round
    // (a re-check's steady state while a controller installs rules one by
    // one) ...
    let core = 1;
    // Core 1's route for pod 0 (towards aggregation switch 0 of pod 0).
    let pod_port = |net: &Network| {
        net.switches[&core].tables[0]
            .entries()
            .iter()
            .find(|e| e.priority == 200)
            .and_then(|e| {
                e.instructions.apply.iter().find_map(|a| match a {
                    sts_mocknet::flow::Action::Output { port, .. } => Some(*port),
                    _ => None,
                })
            })
            .expect("pod route")
    };
    let to = |port| vec![Instruction::ApplyActions(vec![v13::Action::Output { port, max_len: 0xffff }])];
    for r in 0..rounds {
        // A host in pod 0, a /32 for it at core 1 to the port its pod route uses.
        let h = (r * 3 % (half * half)) as usize;
        let route = to(pod_port(&net));
        flow_mod(&mut net, core, v13::flow_mod_command::ADD, 300, ips[h], route);
        let t = Instant::now();
        let rep = inc.recheck(&net, &Facts::default(), &[core]);
        agree.push(t.elapsed());
        assert!(rep.classes > 0 && rep.violations.is_empty());
        flow_mod(&mut net, core, v13::flow_mod_command::DELETE_STRICT, 300, ips[h], Vec::new());
        let t = Instant::now();
        inc.recheck(&net, &Facts::default(), &[core]);
        removed.push(t.elapsed());
    }
    // ... then the ones that cut a host off and mend it ...
    for r in 0..rounds {
        let h = (r * 3 % (half * half)) as usize;
        let Some(Endpoint::Switch { dpid: edge, .. }) = net.peer(Endpoint::Host(h)) else { unreachable!() };
        flow_mod(&mut net, edge, v13::flow_mod_command::ADD, 500, ips[h], Vec::new());
        let t = Instant::now();
        let rep = inc.recheck(&net, &Facts::default(), &[edge]);
        cut.push(t.elapsed());
        cut_violations = rep.violations.len();
        flow_mod(&mut net, edge, v13::flow_mod_command::DELETE_STRICT, 500, ips[h], Vec::new());
        let t = Instant::now();
        let rep = inc.recheck(&net, &Facts::default(), &[edge]);
        mended.push(t.elapsed());
        assert!(rep.violations.is_empty(), "mended");
        // ... each followed by an agreeing route on caches the explanations
        // have just filled with other data.
        let route = to(pod_port(&net));
        flow_mod(&mut net, core, v13::flow_mod_command::ADD, 300, ips[h], route);
        let t = Instant::now();
        inc.recheck(&net, &Facts::default(), &[core]);
        cold.push(t.elapsed());
        flow_mod(&mut net, core, v13::flow_mod_command::DELETE_STRICT, 300, ips[h], Vec::new());
        inc.recheck(&net, &Facts::default(), &[core]);
    }
    println!(
        "| {name} | {:.3} ms | {:.3} ms | {:.1} ms ({cut_violations} violations) | {:.3} ms | {:.3} ms | {rounds} |",
        median_ms(agree),
        median_ms(removed),
        median_ms(cut),
        median_ms(mended),
        median_ms(cold)
    );
}

fn main() {
    let ks: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let ks = if ks.is_empty() { vec![4, 8, 16, 32] } else { ks };
    let checker = Checker {
        enabled: [Invariant::Loop, Invariant::Blackhole, Invariant::Reachability, Invariant::Liveness]
            .into_iter()
            .collect(),
        ..Checker::default()
    };
    println!("| fat-tree | switches | hosts | rules | header classes | violations | full check (median) | runs | per-source walks (before) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    // (k, host routes, a routing loop)
    let mut variants: Vec<(u64, bool, bool)> = ks.iter().map(|&k| (k, false, false)).collect();
    if ks.contains(&32) {
        variants.push((32, true, false));
        variants.push((32, false, true));
    }
    for (k, host_routes, looping) in variants {
        let mut net = routed_fat_tree(k, host_routes);
        if looping {
            routing_loop(&mut net, k, 0, 1);
        }
        let runs = if k >= 32 { 3 } else { 7 };
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..runs {
            let t = Instant::now();
            let report = checker.check(&net, &Facts::default());
            times.push(t.elapsed());
            last = Some(report);
        }
        times.sort();
        let r = last.expect("ran");
        // The per-source walk, for comparison (minutes beyond k = 16).
        let before = if k <= 16 {
            let per_source = Checker { engine: Engine::PerSource, ..checker.clone() };
            let times: Vec<_> = (0..if k <= 8 { 7 } else { 3 })
                .map(|_| {
                    let t = Instant::now();
                    let rep = per_source.check(&net, &Facts::default());
                    assert_eq!(rep.violations, r.violations, "both engines agree");
                    t.elapsed()
                })
                .collect();
            format!("{:.1} ms", median_ms(times))
        } else {
            "not run".to_string()
        };
        let name = match (host_routes, looping) {
            (true, _) => format!("k = {k} + host routes"),
            (_, true) => format!("k = {k} + a routing loop"),
            _ => format!("k = {k}"),
        };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {:.1} ms | {runs} | {before} |",
            net.switches.len(),
            net.hosts.len(),
            r.rules,
            r.classes,
            r.violations.len(),
            times[runs / 2].as_secs_f64() * 1e3
        );
        if let Some(why) = &r.per_source_because {
            eprintln!("  per-source walks: {why}");
        }
        if let Some(v) = r.violations.first() {
            eprintln!("  first violation: {}", v.summary);
        }
    }
    println!();
    println!(
        "| fat-tree | agreeing route | route removed | host cut off | mended | agreeing route after a mend | rounds |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &k in &ks {
        rechecks(&format!("k = {k}"), k, false, &checker);
    }
    if ks.contains(&32) {
        rechecks("k = 32 + host routes", 32, true, &checker);
    }
}
