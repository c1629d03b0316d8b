//! Rules a buggy or hostile controller may install must not hang or crash the
//! mock switch: a flow entry that outputs to TABLE, and a group that reaches
//! itself, both end (dropping the frame) instead of recursing forever.

use std::net::Ipv4Addr;

use sts_mocknet::packet::build;
use sts_mocknet::switch::{Output, Switch};
use sts_proxy::wire::v13::{self, Action, Instruction};
use sts_proxy::wire::{Body, Mac, Message, OFP13};

fn send(sw: &mut Switch, msg: v13::Msg) -> Vec<Output> {
    let m = Message::new(1, Body::V13(msg));
    let raw = m.emit().expect("encodes");
    sw.handle(&raw, &m, 0)
}

fn flow(actions: Vec<Action>) -> v13::Msg {
    v13::Msg::FlowMod(v13::FlowMod::add(0, 10, v13::Match::default(), vec![Instruction::ApplyActions(actions)]))
}

fn ping() -> Vec<u8> {
    build::icmp_echo(
        8,
        Mac([0, 0, 0, 0, 0, 1]),
        Mac([0, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        1,
        1,
        b"",
    )
}

#[test]
fn a_flow_entry_outputting_to_table_does_not_resubmit_forever() {
    let mut sw = Switch::new(1, OFP13, 2);
    sw.set_link(1, true);
    sw.set_link(2, true);
    let errors = send(
        &mut sw,
        flow(vec![Action::Output { port: v13::port::TABLE, max_len: 0 }, Action::Output { port: 2, max_len: 0 }]),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let out = sw.receive(1, ping(), 0);
    let emitted: Vec<u32> =
        out.iter().filter_map(|o| if let Output::Emit { port, .. } = o { Some(*port) } else { None }).collect();
    assert_eq!(emitted, vec![2], "the TABLE output is ignored, the next action still runs");
}

#[test]
fn a_group_that_reaches_itself_drops_instead_of_recursing() {
    let mut sw = Switch::new(1, OFP13, 2);
    sw.set_link(1, true);
    sw.set_link(2, true);
    let group = v13::Msg::GroupMod(v13::GroupMod {
        command: 0, // OFPGC_ADD
        group_type: v13::group_type::ALL,
        group_id: 7,
        buckets: vec![v13::Bucket {
            weight: 0,
            watch_port: v13::port::ANY,
            watch_group: v13::GROUP_ANY,
            actions: vec![Action::Output { port: 2, max_len: 0 }, Action::Group(7)],
        }],
    });
    assert!(send(&mut sw, group).is_empty());
    assert!(send(&mut sw, flow(vec![Action::Group(7)])).is_empty());
    let out = sw.receive(1, ping(), 0);
    let copies = out.iter().filter(|o| matches!(o, Output::Emit { port: 2, .. })).count();
    assert!((1..=8).contains(&copies), "bounded copies, got {copies}");
}
