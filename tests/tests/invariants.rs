//! The invariant checker on networks programmed by real controllers.
//!
//! - healthy: after `pingall` on a linear network, os-ken `simple_switch_13`
//!   and faucet leave no loop, blackhole or unreachable pair, and every
//!   controller is live;
//! - a learning switch on a triangle: the storm is reported as a loop;
//! - host migration under `simple_switch_13`: its flows (no timeouts) still
//!   send traffic for the moved host to its old port, which the checker
//!   reports as a persistent blackhole with a witness.

use std::path::Path;
use std::time::Duration;

use sts_engine::config::Config;
use sts_engine::monitor;
use sts_engine::pingall::{self, PingallRun};
use sts_invariants::check::{Checker, Invariant, Report};
use sts_invariants::Persistence;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn run(rt: &tokio::runtime::Runtime, name: &str, toml: &str) -> PingallRun {
    let config = Config::from_toml(toml, Path::new(name)).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("sts-e2e-invariants-{}-{name}", std::process::id()));
    rt.block_on(pingall::run(sts_e2e::engine(), &config, &dir)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn all_checks() -> Checker {
    Checker {
        enabled: [Invariant::Loop, Invariant::Blackhole, Invariant::Reachability, Invariant::Liveness]
            .into_iter()
            .collect(),
        ..Checker::default()
    }
}

fn check(r: &mut PingallRun, checker: &Checker) -> Report {
    let events = std::mem::take(&mut r.runner.net.events);
    let facts = monitor::facts_of(&r.runner, &mut r.controllers, &Default::default(), events, vec![]);
    checker.check(&r.runner.net, &facts)
}

fn healthy(name: &str, controller: &str) {
    let rt = rt();
    let mut r = run(
        &rt,
        name,
        &format!("[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n\n[[controllers]]\n{controller}\n"),
    );
    assert!(r.matrix.all_reached(), "{}", sts_report::matrix(&r.matrix));
    let report = check(&mut r, &all_checks());
    assert!(report.violations.is_empty(), "{name}: {:#?}", report.violations);
    assert!(
        report.rules > 0 && (report.terminals > 0 || report.classes > 0),
        "the check looked at something: {report:?}"
    );
}

#[test]
fn a_healthy_linear_network_under_simple_switch_13_reports_nothing() {
    healthy("healthy-osken13", "kind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]");
}

#[test]
fn a_healthy_linear_network_under_faucet_reports_nothing() {
    healthy("healthy-faucet", "kind = \"faucet\"");
}

#[test]
fn the_triangle_storm_is_a_loop() {
    let rt = rt();
    let mut r = run(
        &rt,
        "triangle",
        "[network]\ntopology = \"mesh\"\nsize = 3\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]\n\n[pingall]\nattempts = 1\nping_timeout_ms = 500\n",
    );
    let report = check(&mut r, &all_checks());
    let loops: Vec<_> = report.violations.iter().filter(|v| v.invariant == Invariant::Loop).collect();
    assert!(!loops.is_empty(), "no loop in {:#?}", report.violations);
    assert_eq!(loops[0].fingerprint(), "loop");
}

#[test]
fn host_migration_under_simple_switch_13_is_a_persistent_blackhole() {
    let rt = rt();
    let mut r = run(
        &rt,
        "migration",
        "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]\n",
    );
    assert!(r.matrix.all_reached(), "{}", sts_report::matrix(&r.matrix));
    let checker = all_checks();
    assert!(check(&mut r, &checker).violations.is_empty());

    // h3 moves from s3 to s1; the controller hears PORT_STATUS on both.
    r.runner.migrate_host(2, 1);
    let mut persistence = Persistence::new(1000, sts_invariants::Same::Culprit);
    let mut persistent = Vec::new();
    for _ in 0..4 {
        rt.block_on(r.runner.run_for(Duration::from_millis(500)));
        let now = r.runner.clock.now();
        let report = check(&mut r, &checker);
        persistent = persistence.observe(now, &report.violations);
    }
    let hole = persistent
        .iter()
        .find(|v| v.invariant == Invariant::Blackhole)
        .unwrap_or_else(|| panic!("no persistent blackhole: {persistent:#?}"));
    assert_eq!(hole.fingerprint(), "blackhole:h3");
    assert_eq!(hole.elements.last().map(String::as_str), Some("h3"));
    let w = hole.witness.as_ref().expect("a witness");
    assert!(w.header.contains("00:00:00:00:00:03"), "the witness is addressed to h3: {w:?}");
    assert!(w.end.contains("dropped at s3"), "dropped at h3's old switch: {w:?}");
    // The culprit: simple_switch_13's learned rule for h3 at s1 (priority 1,
    // matching in_port, eth_src and eth_dst), still sending h3's traffic
    // towards s2 though h3 is now on s1: the frame's first wrong turn (the
    // rule at s3 that outputs to the port h3 left is where it dies).
    assert_eq!(
        hole.culprit.as_deref(),
        Some("s1 table 0: a rule of priority 1 on eth_dst,eth_src,in_port"),
        "{hole:#?}"
    );
    assert!(w.path.iter().any(|h| h.starts_with("s3 ")), "{w:?}");
}
