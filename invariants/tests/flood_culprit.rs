//! When a frame floods (FLOOD, or NORMAL, which the checker judges as the
//! flood it is for an unknown destination), its copies reach other hosts as
//! a matter of course; a blackhole's culprit is the rule that dropped the copy
//! that should have arrived, not the flood that reached someone else. And a
//! pair that must not communicate (isolation) is not a blackhole when dropped.

use sts_invariants::check::{Checker, Facts, Invariant, IsolationRule};
use sts_mocknet::network::Network;
use sts_mocknet::Topology;
use sts_proxy::wire::v13::{self, port, Action, Instruction};
use sts_proxy::wire::{Body, Message, OFP13};

fn install(net: &mut Network, dpid: u64, priority: u16, actions: Vec<Action>) {
    let fm = v13::FlowMod::add(0, priority, v13::Match::default(), vec![Instruction::ApplyActions(actions)]);
    let m = Message::new(1, Body::V13(v13::Msg::FlowMod(fm)));
    let raw = m.emit().expect("encodes");
    net.handle_controller(dpid, &raw, &m, 0);
}

/// h1 - s1 - s2 - s3 - h3, h2 on s2: s1 and s2 forward with NORMAL and
/// FLOOD, s3 drops everything.
fn flooding_line() -> Network {
    let mut net = Network::new(&Topology::linear(3), OFP13);
    install(&mut net, 1, 1, vec![Action::Output { port: port::NORMAL, max_len: 0 }]);
    install(&mut net, 2, 1, vec![Action::Output { port: port::FLOOD, max_len: 0 }]);
    install(&mut net, 3, 100, vec![]);
    net
}

#[test]
fn a_blackholes_culprit_is_the_drop_not_the_flood() {
    let net = flooding_line();
    let checker = Checker { enabled: [Invariant::Blackhole].into_iter().collect(), ..Checker::default() };
    let report = checker.check(&net, &Facts::default());
    let h1_h3 = report
        .violations
        .iter()
        .find(|v| v.elements == ["h1", "h3"])
        .unwrap_or_else(|| panic!("h1 -> h3 is blackholed at s3: {:?}", report.violations));
    assert_eq!(h1_h3.culprit.as_deref(), Some("s3 table 0: a match-all rule of priority 100"), "{h1_h3:?}");
}

#[test]
fn an_isolated_pair_is_not_a_blackhole() {
    let net = flooding_line();
    let checker = Checker {
        enabled: [Invariant::Blackhole, Invariant::Isolation].into_iter().collect(),
        isolation: vec![IsolationRule { from: "h1".into(), to: "h3".into() }],
        ..Checker::default()
    };
    let report = checker.check(&net, &Facts::default());
    assert!(!report.violations.iter().any(|v| v.elements == ["h1", "h3"]), "{:?}", report.violations);
    // Other pairs are still judged: h2 -> h3 is dropped at s3 too.
    assert!(report.violations.iter().any(|v| v.elements == ["h2", "h3"]), "{:?}", report.violations);
}
