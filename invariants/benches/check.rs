//! Time of a full invariant check on fat-trees with realistic routing.
//!
//! `cargo bench -p sts-invariants --bench check [-- K...]`
//!
//! Each fat-tree (k = 4, 8, 16, 32 by default) gets two-level routing
//! ([`sts_invariants::testnet::routed_fat_tree`]), installed through FLOW_MOD
//! messages as a controller would. The "+host routes" variant adds a /32 per
//! host of the pod at every aggregation switch, to reach 100,000 rules.
//!
//! Reported: the median of several full checks (loops, blackholes over every
//! host pair, reachability, liveness), each including compiling the model.

use std::time::Instant;

use sts_invariants::check::{Checker, Facts, Invariant};
use sts_invariants::testnet::routed_fat_tree;

fn main() {
    let ks: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let ks = if ks.is_empty() { vec![4, 8, 16, 32] } else { ks };
    let checker = Checker {
        enabled: [Invariant::Loop, Invariant::Blackhole, Invariant::Reachability, Invariant::Liveness].into_iter().collect(),
        ..Checker::default()
    };
    println!("| fat-tree | switches | hosts | rules | header classes | violations | full check (median) | runs |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut variants: Vec<(u64, bool)> = ks.iter().map(|&k| (k, false)).collect();
    if ks.contains(&32) {
        variants.push((32, true));
    }
    for (k, host_routes) in variants {
        let net = routed_fat_tree(k, host_routes);
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
        let name = if host_routes { format!("k = {k} + host routes") } else { format!("k = {k}") };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {:.1} ms | {runs} |",
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
}
