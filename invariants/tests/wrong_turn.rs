//! A blackhole's culprit is the rule at the frame's first wrong turn (the
//! first switch that sends it where no path can still bring it to the
//! destination's switch without going back), not whatever rule it met last;
//! a detour that can still arrive is not a wrong turn; a loop's culprit is
//! the set of rules that send the frame round.

use sts_invariants::check::{Checker, Facts, Invariant};
use sts_mocknet::network::Network;
use sts_mocknet::Topology;
use sts_proxy::wire::v13::oxm::{BasicOxm, Field, Match};
use sts_proxy::wire::v13::{self, Action, Instruction};
use sts_proxy::wire::{Body, Message, OFP13};

fn install(net: &mut Network, dpid: u64, priority: u16, fields: Vec<BasicOxm>, out: Option<u32>) {
    let actions = out.map(|port| vec![Action::Output { port, max_len: 0 }]).unwrap_or_default();
    let fm = v13::FlowMod::add(0, priority, Match::new(fields), vec![Instruction::ApplyActions(actions)]);
    let m = Message::new(1, Body::V13(v13::Msg::FlowMod(fm)));
    let raw = m.emit().expect("encodes");
    net.handle_controller(dpid, &raw, &m, 0);
}

fn to(host: u128) -> BasicOxm {
    BasicOxm::exact(Field::EthDst, host)
}

fn blackhole<'r>(report: &'r sts_invariants::check::Report, pair: [&str; 2]) -> &'r sts_invariants::Violation {
    report
        .violations
        .iter()
        .find(|v| v.invariant == Invariant::Blackhole && v.elements == pair)
        .unwrap_or_else(|| panic!("{pair:?} is blackholed: {:?}", report.violations))
}

fn check(net: &Network, invariant: Invariant) -> sts_invariants::check::Report {
    Checker { enabled: [invariant].into_iter().collect(), ..Checker::default() }.check(net, &Facts::default())
}

/// h1 - s1 - s2 - s3 - h3, h2 on s2 (ports: hosts 1; s1 2 to s2; s2 2 to s1,
/// 3 to s3; s3 2 to s2). h2's frames for h1: s2's pinned rule (priority
/// 100) sends them to s3, the wrong way; s3's stale rule for what comes
/// from s2 drops them. Two bugs on one path: the culprit is the pinned
/// rule, not the drop that came after it.
#[test]
fn the_first_wrong_turn_decides_not_the_last_rule() {
    let mut net = Network::new(&Topology::linear(3), OFP13);
    install(&mut net, 2, 100, vec![to(1)], Some(3));
    install(&mut net, 2, 1, vec![], Some(2));
    install(&mut net, 3, 1, vec![BasicOxm::exact(Field::InPort, 2)], None);
    install(&mut net, 1, 1, vec![], Some(1));
    let report = check(&net, Invariant::Blackhole);
    let v = blackhole(&report, ["h2", "h1"]);
    assert_eq!(v.culprit.as_deref(), Some("s2 table 0: a rule of priority 100 on eth_dst"), "{v:?}");
    assert!(v.summary.contains("is dropped at s3"), "the frame still ends at s3: {v:?}");
}

/// mesh(3): s1-s2 (s1 port 2, s2 port 2), s1-s3 (s1 3, s3 2), s2-s3 (s2 3,
/// s3 3). h2's frames for h1 go the long way, s2 → s3 → s1, and s1 drops
/// them: the detour could still arrive (s3 reaches s1), so the culprit is
/// s1's drop.
#[test]
fn a_detour_that_can_still_arrive_is_not_a_wrong_turn() {
    let mut net = Network::new(&Topology::mesh(3), OFP13);
    install(&mut net, 2, 1, vec![to(1)], Some(3));
    install(&mut net, 3, 1, vec![to(1)], Some(2));
    install(&mut net, 1, 5, vec![to(1)], None);
    let report = check(&net, Invariant::Blackhole);
    let v = blackhole(&report, ["h2", "h1"]);
    assert_eq!(v.culprit.as_deref(), Some("s1 table 0: a rule of priority 5 on eth_dst"), "{v:?}");
}

/// linear(3): h3's frame for h2 reaches s2, h2's switch, and s2 sends it on
/// to s1, which drops it: leaving the destination's switch is the wrong turn.
#[test]
fn leaving_the_destinations_switch_is_the_wrong_turn() {
    let mut net = Network::new(&Topology::linear(3), OFP13);
    install(&mut net, 3, 1, vec![to(2)], Some(2));
    install(&mut net, 2, 7, vec![to(2)], Some(2));
    install(&mut net, 1, 1, vec![], None);
    let report = check(&net, Invariant::Blackhole);
    let v = blackhole(&report, ["h3", "h2"]);
    assert_eq!(v.culprit.as_deref(), Some("s2 table 0: a rule of priority 7 on eth_dst"), "{v:?}");
}

/// mesh(3) (s1 2 to s2, s2 3 to s3, s3 2 to s1): each switch sends
/// everything on round the triangle. The loop's culprit is the set of rules
/// that do it, without the switches (the same rules loop the same way
/// elsewhere).
#[test]
fn a_loops_culprit_is_the_rules_round_its_cycle() {
    let mut net = Network::new(&Topology::mesh(3), OFP13);
    install(&mut net, 1, 3, vec![], Some(2));
    install(&mut net, 2, 4, vec![], Some(3));
    install(&mut net, 3, 5, vec![], Some(2));
    let report = check(&net, Invariant::Loop);
    let v = report.violations.iter().find(|v| v.invariant == Invariant::Loop).expect("a loop");
    assert_eq!(
        v.culprit.as_deref(),
        Some(
            "loop of table 0: a match-all rule of priority 3; table 0: a match-all rule of priority 4; \
             table 0: a match-all rule of priority 5"
        ),
        "{v:?}"
    );
}
