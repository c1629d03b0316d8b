//! Hand-built vectors, laid out from the OpenFlow 1.0.0 and 1.3.x
//! specifications' structure definitions: each is decoded, checked field by
//! field, and re-encoded byte for byte.

use bytes::Bytes;
use sts_proxy::wire::v13::{self, multipart::ReplyBody, Field};
use sts_proxy::wire::{v10, Body, Message};

/// Bytes from hex, ignoring whitespace and `|` separators.
fn hex(s: &str) -> Bytes {
    let digits: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    Bytes::from(
        (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap()).collect::<Vec<_>>(),
    )
}

/// Parses, checks the re-encoding, and returns the message.
fn round_trip(s: &str) -> Message {
    let b = hex(s);
    let m = Message::parse(b.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.emit().unwrap(), b.to_vec(), "re-encoding differs for {m:#?}");
    m
}

#[test]
fn of10_features_reply_with_one_port() {
    let m = round_trip(
        "01 06 0050 00000001 | 000000000000002a | 00000100 | 01 000000 | 000000c7 | 00000fff
         0001 0a0000000001 65746831000000000000000000000000 00000000 00000000 000000a0 00000000 00000000 00000000",
    );
    let Body::V10(v10::Msg::FeaturesReply(f)) = m.body else { panic!() };
    assert_eq!((f.datapath_id, f.n_buffers, f.n_tables, f.capabilities, f.actions), (42, 256, 1, 0xc7, 0xfff));
    assert_eq!(f.ports.len(), 1);
    assert_eq!((f.ports[0].port_no, f.ports[0].name.text(), f.ports[0].curr), (1, "eth1".to_string(), 0xa0));
    assert_eq!(f.ports[0].hw_addr.to_string(), "0a:00:00:00:00:01");
}

#[test]
fn of10_flow_mod_exact_in_port_and_dl_dst() {
    let m = round_trip(
        "01 0e 0050 00000007
         003ffff6 0001 000000000000 000000000002 0000 00 00 0000 00 00 0000 00000000 00000000 0000 0000
         0000000000000000 0000 000a 0000 8000 ffffffff ffff 0001
         0000 0008 0002 0000",
    );
    let Body::V10(v10::Msg::FlowMod(f)) = m.body else { panic!() };
    assert!(f.r#match.is_exact(v10::wildcards::IN_PORT) && f.r#match.is_exact(v10::wildcards::DL_DST));
    assert!(!f.r#match.is_exact(v10::wildcards::DL_SRC));
    assert_eq!(f.r#match.nw_src_prefix(), 0, "nw_src fully wildcarded");
    assert_eq!((f.r#match.in_port, f.r#match.dl_dst.0[5]), (1, 2));
    assert_eq!(
        (f.command, f.idle_timeout, f.priority, f.buffer_id, f.out_port, f.flags),
        (0, 10, 0x8000, v10::NO_BUFFER, v10::port::NONE, 1)
    );
    assert_eq!(f.actions, vec![v10::Action::Output { port: 2, max_len: 0 }]);
}

#[test]
fn of10_packet_in_and_packet_out() {
    let m = round_trip("01 0a 0016 00000000 | ffffffff 003c 0001 00 00 | deadbeef");
    let Body::V10(v10::Msg::PacketIn(p)) = m.body else { panic!() };
    assert_eq!(
        (p.buffer_id, p.total_len, p.in_port, p.reason, &p.data[..]),
        (v10::NO_BUFFER, 60, 1, 0, &[0xde, 0xad, 0xbe, 0xef][..])
    );

    let m = round_trip(
        "01 0d 002a 00000002 | ffffffff fff8 0018 | 0000 0008 fffb 0000 | 0005 0010 ffffffffffff 000000000000 | cafe",
    );
    let Body::V10(v10::Msg::PacketOut(p)) = m.body else { panic!() };
    assert_eq!(p.in_port, v10::port::IN_PORT);
    assert_eq!(
        p.actions,
        vec![
            v10::Action::Output { port: v10::port::FLOOD, max_len: 0 },
            v10::Action::SetDlDst(sts_proxy::wire::Mac::BROADCAST)
        ]
    );
    assert_eq!(&p.data[..], &[0xca, 0xfe]);
}

#[test]
fn of10_flow_stats_reply() {
    let m = round_trip(
        "01 11 006c 00000009 | 0001 0000
         0060 00 00
         003fffff 0000 000000000000 000000000000 0000 00 00 0000 00 00 0000 00000000 00000000 0000 0000
         00000005 00000000 0064 003c 0000 000000000000 0000000000000000 000000000000000a 00000000000003e8
         0000 0008 0003 0000",
    );
    let Body::V10(v10::Msg::StatsReply(r)) = m.body else { panic!() };
    let v10::stats::StatsReplyBody::Flow(flows) = r.body else { panic!() };
    assert_eq!(flows.len(), 1);
    assert_eq!(
        (flows[0].duration_sec, flows[0].priority, flows[0].idle_timeout, flows[0].packet_count, flows[0].byte_count),
        (5, 100, 60, 10, 1000)
    );
    assert_eq!(flows[0].actions, vec![v10::Action::Output { port: 3, max_len: 0 }]);
}

#[test]
fn of13_hello_with_version_bitmap() {
    let m = round_trip("04 00 0010 00000001 | 0001 0008 00000012");
    let Body::Hello { version, hello } = m.body else { panic!() };
    assert_eq!(hello.versions(version), vec![1, 4]);
}

#[test]
fn of13_table_miss_flow_mod() {
    // What os-ken's simple_switch_13 sends first: match all, send to controller.
    let m = round_trip(
        "04 0e 0050 00000003
         0000000000000000 0000000000000000 00 00 0000 0000 0000 ffffffff 00000000 00000000 0000 0000
         0001 0004 00000000
         0004 0018 00000000 | 0000 0010 fffffffd ffff 000000000000",
    );
    let Body::V13(v13::Msg::FlowMod(f)) = m.body else { panic!() };
    assert!(f.r#match.fields.is_empty());
    assert_eq!(
        f.instructions,
        vec![v13::Instruction::ApplyActions(vec![v13::Action::Output {
            port: v13::port::CONTROLLER,
            max_len: 0xffff
        }])]
    );
}

#[test]
fn of13_flow_mod_with_masks_goto_metadata_and_set_field() {
    let m = round_trip(
        "04 0e 00a8 00000004
         00000000000000ab ffffffffffffffff 01 00 000a 0000 0064 ffffffff ffffffff ffffffff 0001 0000
         0001 0024 | 80000004 00000003 | 80000a02 0800 | 80001908 0a000100 ffffff00 | 80000c02 1064 | 00000000
         0002 0018 00000000 0000000000000001 00000000000000ff
         0004 0030 00000000 | 0011 0008 8100 0000 | 0019 0010 80000c02 1065 000000000000 | 0000 0010 00000002 0000 000000000000
         0001 0008 02 000000",
    );
    let Body::V13(v13::Msg::FlowMod(f)) = m.body else { panic!() };
    assert_eq!((f.cookie, f.table_id, f.command, f.idle_timeout, f.priority, f.flags), (0xab, 1, 0, 10, 100, 1));
    assert_eq!(f.r#match.in_port(), Some(3));
    assert_eq!(f.r#match.get(Field::EthType).unwrap().value.to_u64(), 0x0800);
    let dst = f.r#match.get(Field::Ipv4Dst).unwrap();
    assert_eq!((dst.value.to_u64(), dst.mask.unwrap().to_u64()), (0x0a00_0100, 0xffff_ff00));
    assert_eq!(f.r#match.get(Field::VlanVid).unwrap().value.to_u64(), (v13::oxm::VID_PRESENT | 100) as u64);
    assert_eq!(f.instructions.len(), 3);
    assert_eq!(f.instructions[0], v13::Instruction::WriteMetadata { metadata: 1, mask: 0xff });
    let v13::Instruction::ApplyActions(actions) = &f.instructions[1] else { panic!() };
    assert_eq!(actions[0], v13::Action::PushVlan(0x8100));
    assert_eq!(actions[1], v13::Action::SetField(v13::Oxm::Basic(v13::BasicOxm::exact(Field::VlanVid, 0x1065))));
    assert_eq!(f.instructions[2], v13::Instruction::GotoTable(2));
}

#[test]
fn of13_packet_in_with_in_port() {
    let m = round_trip(
        "04 0a 002e 00000000 | ffffffff 002a 00 00 0000000000000000 | 0001 000c 80000004 00000001 00000000 | 0000 | 01020304",
    );
    let Body::V13(v13::Msg::PacketIn(p)) = m.body else { panic!() };
    assert_eq!((p.r#match.in_port(), p.total_len, p.reason, &p.data[..]), (Some(1), 42, 0, &[1, 2, 3, 4][..]));
}

#[test]
fn of13_port_desc_reply() {
    let m = round_trip(
        "04 13 0050 00000005 | 000d 0000 00000000
         00000001 00000000 0a0000000001 0000 73312d657468310000000000000000 00 00000000 00000004 00000820 00000000 00000000 00000000 00989680 00989680",
    );
    let Body::V13(v13::Msg::MultipartReply(r)) = m.body else { panic!() };
    let ReplyBody::PortDesc(ports) = r.body else { panic!() };
    assert_eq!(
        (ports[0].port_no, ports[0].name.text(), ports[0].state, ports[0].curr_speed),
        (1, "s1-eth1".to_string(), v13::port_state::LIVE, 10_000_000)
    );
}

#[test]
fn of13_select_group_with_two_buckets() {
    let m = round_trip(
        "04 0f 0050 00000006 | 0000 01 00 00000007
         0020 0032 ffffffff ffffffff 00000000 | 0000 0010 00000001 0000 000000000000
         0020 0064 00000002 ffffffff 00000000 | 0000 0010 00000002 0000 000000000000",
    );
    let Body::V13(v13::Msg::GroupMod(g)) = m.body else { panic!() };
    assert_eq!((g.command, g.group_type, g.group_id), (0, v13::group_type::SELECT, 7));
    assert_eq!(
        g.buckets.iter().map(|b| (b.weight, b.watch_port)).collect::<Vec<_>>(),
        vec![(50, 0xffff_ffff), (100, 2)]
    );
}

#[test]
fn of13_meter_mod_with_drop_band_and_role_request() {
    let m = round_trip("04 1d 0020 00000008 | 0000 0001 00000001 | 0001 0010 000003e8 00000000 00000000");
    let Body::V13(v13::Msg::MeterMod(mm)) = m.body else { panic!() };
    assert_eq!(mm.bands, vec![v13::MeterBand::Drop { rate: 1000, burst_size: 0 }]);

    let m = round_trip("04 18 0018 00000009 | 00000002 00000000 0000000000000005");
    assert_eq!(m.body, Body::V13(v13::Msg::RoleRequest(v13::Role { role: v13::role::MASTER, generation_id: 5 })));
}

#[test]
fn of13_experimenter_error_and_unknown_oxm_class_are_kept() {
    let m = round_trip("04 01 0014 0000000a | ffff 0003 00002320 | 01020304");
    assert!(matches!(
        m.body,
        Body::V13(v13::Msg::Error(v13::Error::Experimenter { exp_type: 3, experimenter: 0x2320, .. }))
    ));
    // An NXM_1 field (class 0x0001) in a PACKET_IN match passes through raw.
    let m = round_trip(
        "04 0a 002a 00000000 | ffffffff 0000 00 00 0000000000000000 | 0001 000c 00010404 0a0b0c0d 00000000 | 0000",
    );
    let Body::V13(v13::Msg::PacketIn(p)) = m.body else { panic!() };
    assert!(
        matches!(&p.r#match.fields[0], v13::Oxm::Other { class: 1, field: 2, has_mask: false, payload } if payload.len() == 4)
    );
}
