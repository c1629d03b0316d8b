//! Flow tables a hostile controller may build must not hang the checker: a
//! group fanning out to itself and entries with thousands of FLOOD outputs
//! are checked within seconds (the walk's step budget and group depth limit
//! bound the work; the report says when a walk was cut short).

use std::time::{Duration, Instant};

use sts_invariants::check::{Checker, Facts, Invariant};
use sts_mocknet::network::Network;
use sts_mocknet::Topology;
use sts_proxy::wire::v13::{self, Action, Instruction};
use sts_proxy::wire::{Body, Message, OFP13};

fn install(net: &mut Network, dpid: u64, msg: v13::Msg) {
    let m = Message::new(1, Body::V13(msg));
    let raw = m.emit().expect("encodes");
    net.handle_controller(dpid, &raw, &m, 0);
}

fn all_on() -> Checker {
    Checker { enabled: Invariant::ALL.into_iter().collect(), ..Checker::default() }
}

/// Checks `net` on another thread and fails if it takes more than `secs`.
fn check_within(net: Network, secs: u64) -> sts_invariants::check::Report {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let report = all_on().check(&net, &Facts::default());
        let _ = tx.send((report, started.elapsed()));
    });
    let (report, took) = rx.recv_timeout(Duration::from_secs(secs)).expect("the check ends");
    eprintln!("checked in {took:?}");
    report
}

fn flow(actions: Vec<Action>) -> v13::Msg {
    v13::Msg::FlowMod(v13::FlowMod::add(0, 10, v13::Match::default(), vec![Instruction::ApplyActions(actions)]))
}

#[test]
fn a_group_fanning_out_to_itself_is_checked_in_bounded_time() {
    let mut topo = Topology::linear(3);
    topo.place_hosts(&[1, 2, 3]);
    let mut net = Network::new(&topo, OFP13);
    let bucket = v13::Bucket {
        weight: 0,
        watch_port: v13::port::ANY,
        watch_group: v13::GROUP_ANY,
        actions: vec![Action::Output { port: v13::port::FLOOD, max_len: 0 }, Action::Group(7)],
    };
    for dpid in 1..=3 {
        install(
            &mut net,
            dpid,
            v13::Msg::GroupMod(v13::GroupMod {
                command: 0,
                group_type: v13::group_type::ALL,
                group_id: 7,
                buckets: vec![bucket.clone(); 64],
            }),
        );
        install(&mut net, dpid, flow(vec![Action::Group(7)]));
    }
    let report = check_within(net, 30);
    // The switch floods before it re-enters the group: every host is reached.
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[test]
fn thousands_of_flood_outputs_are_checked_in_bounded_time() {
    let mut topo = Topology::linear(3);
    topo.place_hosts(&[1, 2, 3]);
    let mut net = Network::new(&topo, OFP13);
    for dpid in 1..=3 {
        install(&mut net, dpid, flow(vec![Action::Output { port: v13::port::FLOOD, max_len: 0 }; 4000]));
    }
    let report = check_within(net, 30);
    // A line has no cycle: every frame reaches every host.
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// On a mesh the floods cycle: 4,000 FLOOD outputs per entry made the walk
/// follow 4,000 identical copies per hop (2.9 GB and 25 s in `sts fuzz`);
/// identical copies are followed once, and the loop is found at once.
#[test]
fn thousands_of_flood_outputs_in_a_mesh_are_one_loop() {
    let mut topo = Topology::mesh(3);
    topo.place_hosts(&[1, 2, 3]);
    let mut net = Network::new(&topo, OFP13);
    for dpid in 1..=3 {
        install(&mut net, dpid, flow(vec![Action::Output { port: v13::port::FLOOD, max_len: 0 }; 4000]));
    }
    let started = Instant::now();
    let report = check_within(net, 30);
    assert!(report.violations.iter().any(|v| v.invariant == Invariant::Loop), "{:?}", report.violations);
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}
