//! Replies too big for one OpenFlow message (65,535 bytes) are cut into
//! parts flagged REPLY_MORE, as a real switch sends them: a 1.3 switch with
//! 1,500 ports describes them all, and 3,000 flows come back whole.

use sts_mocknet::switch::{Output, Switch};
use sts_proxy::wire::v13::oxm::{BasicOxm, Field};
use sts_proxy::wire::v13::{self, multipart::ReplyBody, multipart::RequestBody, Action, Instruction};
use sts_proxy::wire::{Body, Message, OFP13};

fn ask(sw: &mut Switch, body: RequestBody) -> Vec<(u16, ReplyBody)> {
    let m = Message::new(9, Body::V13(v13::Msg::MultipartRequest(v13::MultipartRequest { flags: 0, body })));
    sw.handle(&m.emit().unwrap(), &m, 0)
        .into_iter()
        .map(|o| match o {
            Output::Reply(reply) => {
                assert!(reply.emit().is_ok(), "every part fits in one message");
                match reply.body {
                    Body::V13(v13::Msg::MultipartReply(r)) => (r.flags, r.body),
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

/// A request for every flow of every table.
fn all_flows() -> v13::multipart::FlowStatsRequest {
    v13::multipart::FlowStatsRequest {
        table_id: v13::TABLE_ALL,
        out_port: v13::port::ANY,
        out_group: v13::GROUP_ANY,
        cookie: 0,
        cookie_mask: 0,
        r#match: v13::Match::default(),
    }
}

fn assert_flags(parts: &[(u16, ReplyBody)]) {
    let (last, rest) = parts.split_last().unwrap();
    assert!(rest.iter().all(|(f, _)| *f == 1), "REPLY_MORE on all but the last");
    assert_eq!(last.0, 0);
}

#[test]
fn many_ports_are_described_in_several_parts() {
    let mut sw = Switch::new(1, OFP13, 1500);
    let parts = ask(&mut sw, RequestBody::PortDesc);
    assert!(parts.len() > 1, "{} parts", parts.len());
    assert_flags(&parts);
    let ports: usize = parts.iter().map(|(_, b)| if let ReplyBody::PortDesc(p) = b { p.len() } else { 0 }).sum();
    assert_eq!(ports, 1500 + 1, "and the LOCAL port");
}

/// As Open vSwitch describes a bridge: its own interface, the LOCAL port,
/// named after the bridge and down, beside the others (os-ken's igmplib
/// reads its address and failed with a KeyError without it).
#[test]
fn the_local_port_is_described_and_down() {
    let mut sw = Switch::new(7, OFP13, 2);
    let parts = ask(&mut sw, RequestBody::PortDesc);
    let [(_, ReplyBody::PortDesc(ports))] = parts.as_slice() else { panic!("{parts:?}") };
    let numbers: Vec<u32> = ports.iter().map(|p| p.port_no).collect();
    assert_eq!(numbers, [1, 2, v13::port::LOCAL]);
    let local = &ports[2];
    assert_eq!(local.name.text(), "s7");
    assert_eq!((local.config, local.state), (v13::port_config::PORT_DOWN, v13::port_state::LINK_DOWN));
    assert!(!sw.ports.contains_key(&v13::port::LOCAL), "described, never forwarding");
}

#[test]
fn many_flows_come_back_in_several_parts() {
    let mut sw = Switch::new(1, OFP13, 2);
    for i in 0..3000u32 {
        let m = v13::Match::new([
            BasicOxm::exact(Field::EthType, 0x0800),
            BasicOxm::exact(Field::Ipv4Dst, 0x0a00_0000 + i as u128),
        ]);
        let fm =
            v13::FlowMod::add(0, 10, m, vec![Instruction::ApplyActions(vec![Action::Output { port: 2, max_len: 0 }])]);
        let msg = Message::new(1, Body::V13(v13::Msg::FlowMod(fm)));
        assert!(sw.handle(&msg.emit().unwrap(), &msg, 0).is_empty());
    }
    let parts = ask(&mut sw, RequestBody::Flow(all_flows()));
    assert!(parts.len() > 1, "{} parts", parts.len());
    assert_flags(&parts);
    let flows: usize = parts.iter().map(|(_, b)| if let ReplyBody::Flow(f) = b { f.len() } else { 0 }).sum();
    assert_eq!(flows, 3000);
}

/// A drop rule installed as an apply-actions instruction with no actions
/// comes back in flow statistics with no instruction at all, as Open vSwitch
/// reports it (checked against OVS 3.1 through `sts proxy --record`:
/// Cerberus's drop rules came back 56 bytes long, match and no instruction);
/// other instructions come back as they were sent.
#[test]
fn an_empty_apply_actions_instruction_is_reported_as_none() {
    let mut sw = Switch::new(1, OFP13, 2);
    let rules = [
        (0u16, vec![Instruction::ApplyActions(vec![])]),
        (10, vec![Instruction::ApplyActions(vec![Action::Output { port: 2, max_len: 0 }])]),
        (20, vec![Instruction::ApplyActions(vec![]), Instruction::GotoTable(1)]),
    ];
    for (priority, instructions) in rules.clone() {
        let m = v13::Match::new([BasicOxm::exact(Field::EthType, 0x0800 + priority as u128)]);
        let msg = Message::new(1, Body::V13(v13::Msg::FlowMod(v13::FlowMod::add(0, priority, m, instructions))));
        assert!(sw.handle(&msg.emit().unwrap(), &msg, 0).is_empty());
    }
    let parts = ask(&mut sw, RequestBody::Flow(all_flows()));
    let [(_, ReplyBody::Flow(flows))] = parts.as_slice() else { panic!("{parts:?}") };
    let by_priority = |p: u16| &flows.iter().find(|f| f.priority == p).expect("the rule").instructions;
    assert!(by_priority(0).is_empty(), "{:?}", by_priority(0));
    assert_eq!(by_priority(10), &rules[1].1);
    assert_eq!(by_priority(20), &vec![Instruction::GotoTable(1)]);
}
