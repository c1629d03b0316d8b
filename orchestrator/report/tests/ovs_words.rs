//! Flow tables and FLOW_MODs in Open vSwitch's own words: every line sts
//! writes for a rule (`flows`, the report's tables, hover texts) is given to
//! `ovs-ofctl parse-flow` (installed by scripts/setup with Open vSwitch),
//! which must accept it and print it back unchanged in its canonical form,
//! so that sts's tables diff cleanly against `ovs-ofctl dump-flows`.

use std::process::Command;

use sts_proxy::wire::v13::oxm::{BasicOxm, Field, Match, Oxm};
use sts_proxy::wire::v13::{self, port, Action, Instruction};
use sts_proxy::wire::{Body, Message};

fn exact(f: Field, v: u128) -> BasicOxm {
    BasicOxm::exact(f, v)
}

fn out(p: u32) -> Action {
    Action::Output { port: p, max_len: if p == port::CONTROLLER { 65535 } else { 0 } }
}

/// Rules of every kind the controllers sts runs install.
fn rules() -> Vec<(u16, Vec<BasicOxm>, Vec<Instruction>)> {
    let mac = |n: u128| n;
    let ip = |a: [u8; 4]| u32::from_be_bytes(a) as u128;
    let apply = |a: Vec<Action>| vec![Instruction::ApplyActions(a)];
    vec![
        (
            1,
            vec![exact(Field::InPort, 2), exact(Field::EthDst, mac(3)), exact(Field::EthSrc, mac(2))],
            apply(vec![out(1)]),
        ),
        (
            10,
            vec![
                exact(Field::EthType, 0x0800),
                exact(Field::IpProto, 6),
                BasicOxm::masked(Field::Ipv4Dst, ip([10, 0, 0, 0]), ip([255, 255, 255, 0])),
                exact(Field::TcpDst, 80),
                exact(Field::VlanVid, 0x1000 | 100),
                exact(Field::InPort, 4),
            ],
            apply(vec![Action::SetField(Oxm::Basic(exact(Field::EthDst, mac(9)))), out(3)]),
        ),
        (
            20,
            vec![
                exact(Field::EthType, 0x0806),
                exact(Field::ArpOp, 1),
                exact(Field::ArpTpa, ip([10, 0, 0, 1])),
                exact(Field::ArpSha, mac(1)),
            ],
            apply(vec![out(port::FLOOD), out(port::CONTROLLER)]),
        ),
        (
            30,
            vec![exact(Field::EthType, 0x0800), exact(Field::IpProto, 1), exact(Field::Icmpv4Type, 8)],
            apply(vec![out(port::LOCAL)]),
        ),
        (
            40,
            vec![
                exact(Field::EthType, 0x0800),
                exact(Field::IpProto, 89),
                exact(Field::IpDscp, 8),
                exact(Field::Metadata, 5),
            ],
            vec![Instruction::WriteMetadata { metadata: 1, mask: 0xff }, Instruction::GotoTable(2)],
        ),
        (0, vec![], apply(vec![out(port::CONTROLLER)])),
        (
            50,
            vec![
                exact(Field::EthType, 0x86dd),
                exact(Field::IpProto, 58),
                exact(Field::Icmpv6Type, 135),
                exact(Field::Ipv6NdTarget, 0x2001_0db8_0000_0000_0000_0000_0000_0001),
            ],
            vec![],
        ),
        (
            60,
            vec![
                exact(Field::EthType, 0x0800),
                exact(Field::IpProto, 17),
                exact(Field::UdpDst, 53),
                BasicOxm::masked(Field::Ipv4Src, ip([10, 0, 0, 0]), ip([255, 0, 255, 0])),
            ],
            apply(vec![
                Action::PushVlan(0x8100),
                Action::SetField(Oxm::Basic(exact(Field::VlanVid, 0x1000 | 5))),
                out(port::IN_PORT),
            ]),
        ),
        (70, vec![exact(Field::VlanVid, 0)], apply(vec![out(2)])),
        (80, vec![exact(Field::EthType, 0x88cc)], apply(vec![out(port::CONTROLLER)])),
        (
            90,
            vec![BasicOxm::masked(Field::EthDst, 1 << 40, 1 << 40)],
            vec![Instruction::ClearActions, Instruction::WriteActions(vec![out(2)]), Instruction::GotoTable(3)],
        ),
    ]
}

#[test]
fn every_rule_reads_as_ovs_ofctl_prints_it() {
    for (priority, fields, instructions) in rules() {
        let fm = v13::FlowMod::add(0, priority, Match::new(fields), instructions);
        let ours = sts_report::flows::message(&Message::new(1, Body::V13(v13::Msg::FlowMod(fm))))
            .expect("a FLOW_MOD in words");
        let ours = ours.strip_prefix("add ").expect("an add");
        let flow = ours.replacen(" actions=", ",actions=", 1);
        let parsed = Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow13", "parse-flow", &flow])
            .output()
            .expect("ovs-ofctl runs (scripts/setup installs Open vSwitch)");
        let said = String::from_utf8_lossy(&parsed.stdout);
        assert!(parsed.status.success(), "ovs-ofctl refuses {flow:?}: {}", String::from_utf8_lossy(&parsed.stderr));
        let theirs = said.lines().last().and_then(|l| l.split_once(": ADD ")).map(|(_, r)| r.to_string());
        assert_eq!(theirs.as_deref(), Some(ours), "ovs-ofctl prints {flow:?} otherwise");
    }
}

/// The other way: each rule in Open vSwitch's canonical words (as
/// `ovs-ofctl parse-flow` prints what sts writes, which the test above holds
/// equal) reads back (`dump_flows::read`) to the same match and
/// instructions, so a real bridge's `dump-flows` becomes the tables it holds.
#[test]
fn every_rule_in_ovs_words_reads_back_to_the_same_rule() {
    use sts_mocknet::flow::{FlowMatch, Instructions};
    for (priority, fields, instructions) in rules() {
        let fm = v13::FlowMod::add(0, priority, Match::new(fields), instructions);
        let words = sts_report::flows::message(&Message::new(1, Body::V13(v13::Msg::FlowMod(fm.clone()))))
            .expect("a FLOW_MOD in words");
        let line = format!(" {}", words.strip_prefix("add ").expect("an add"));
        let read = sts_report::dump_flows::read(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(read.len(), 1, "{line:?}");
        let back = &read[0].flow_mod;
        assert_eq!((back.table_id, back.priority), (0, priority), "{line:?}");
        assert_eq!(
            FlowMatch::from_v13(&back.r#match).expect("a match sts models"),
            FlowMatch::from_v13(&fm.r#match).expect("a match sts models"),
            "{line:?}"
        );
        assert_eq!(Instructions::from_v13(&back.instructions), Instructions::from_v13(&fm.instructions), "{line:?}");
    }
}
