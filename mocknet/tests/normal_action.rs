//! The NORMAL output action behaves as Open vSwitch's L2 learning switch
//! (rest_firewall and rest_router forward with it): unknown destinations
//! flood, learned ones go to their port, a port going down forgets what was
//! learned on it.

use std::collections::BTreeSet;

use sts_mocknet::packet::build;
use sts_mocknet::switch::{Output, Switch};
use sts_proxy::wire::v13::{self, Action, Instruction};
use sts_proxy::wire::{Body, Mac, Message, OFP13};

fn normal_switch() -> Switch {
    let mut sw = Switch::new(1, OFP13, 3);
    for p in 1..=3 {
        sw.set_link(p, true);
    }
    let all_normal = v13::FlowMod::add(
        0,
        10,
        v13::Match::default(),
        vec![Instruction::ApplyActions(vec![Action::Output { port: v13::port::NORMAL, max_len: 0 }])],
    );
    let m = Message::new(1, Body::V13(v13::Msg::FlowMod(all_normal)));
    let raw = m.emit().expect("encodes");
    sw.handle(&raw, &m, 0);
    sw
}

fn frame(src: u8, dst: u8) -> Vec<u8> {
    let ip = |n: u8| std::net::Ipv4Addr::new(10, 0, 0, n);
    build::icmp_echo(8, Mac([0, 0, 0, 0, 0, src]), Mac([0, 0, 0, 0, 0, dst]), ip(src), ip(dst), 1, 1, b"")
}

fn sent_to(sw: &mut Switch, in_port: u32, f: Vec<u8>) -> BTreeSet<u32> {
    sw.receive(in_port, f, 0)
        .into_iter()
        .filter_map(|o| match o {
            Output::Emit { port, .. } => Some(port),
            _ => None,
        })
        .collect()
}

#[test]
fn normal_floods_the_unknown_and_unicasts_the_learned() {
    let mut sw = normal_switch();
    assert_eq!(sent_to(&mut sw, 1, frame(1, 2)), BTreeSet::from([2, 3]), "h2 unknown: flood");
    assert_eq!(sent_to(&mut sw, 2, frame(2, 1)), BTreeSet::from([1]), "h1 learned on port 1");
    assert_eq!(sent_to(&mut sw, 1, frame(1, 2)), BTreeSet::from([2]), "h2 learned on port 2");
    assert_eq!(sent_to(&mut sw, 3, frame(3, 3)), BTreeSet::new(), "learned on the ingress port: nowhere");
    assert_eq!(sw.normal_lookup(&[0, 0, 0, 0, 0, 2], 3), vec![2]);
}

#[test]
fn a_port_going_down_forgets_its_addresses() {
    let mut sw = normal_switch();
    sent_to(&mut sw, 2, frame(2, 1));
    assert_eq!(sw.mac_table.get(&[0, 0, 0, 0, 0, 2]), Some(&2));
    sw.set_link(2, false);
    assert!(sw.mac_table.is_empty());
    assert_eq!(sent_to(&mut sw, 1, frame(1, 2)), BTreeSet::from([3]), "floods again, over the live ports");
}
