//! Several controllers on one switch (OpenFlow 1.3 roles): one master at a
//! time, stale generation ids refused, slaves may not change state and get
//! no PACKET_IN, async configs are per connection.

use std::net::Ipv4Addr;

use sts_mocknet::packet::build;
use sts_mocknet::switch::{Output, Switch};
use sts_proxy::wire::v13::{self, role, Action, Instruction};
use sts_proxy::wire::{Body, Mac, Message, OFP13};

fn send(sw: &mut Switch, conn: usize, msg: v13::Msg) -> Vec<Output> {
    let m = Message::new(7, Body::V13(msg));
    sw.handle_from(conn, &m.emit().unwrap(), &m, 0)
}

fn request(sw: &mut Switch, conn: usize, r: u32, generation_id: u64) -> Result<u32, (u16, u16)> {
    match send(sw, conn, v13::Msg::RoleRequest(v13::Role { role: r, generation_id })).as_slice() {
        [Output::Reply(Message { body: Body::V13(v13::Msg::RoleReply(reply)), .. })] => Ok(reply.role),
        [Output::Reply(Message { body: Body::V13(v13::Msg::Error(e)), .. })] => Err(error_codes(e)),
        other => panic!("unexpected answer {other:?}"),
    }
}

fn error_codes(e: &v13::Error) -> (u16, u16) {
    match e {
        v13::Error::Standard { err_type, code, .. } => (*err_type, *code),
        other => panic!("{other:?}"),
    }
}

fn to_controller_on_miss() -> v13::Msg {
    v13::Msg::FlowMod(v13::FlowMod::add(
        0,
        0,
        v13::Match::default(),
        vec![Instruction::ApplyActions(vec![Action::Output {
            port: v13::port::CONTROLLER,
            max_len: v13::CML_NO_BUFFER,
        }])],
    ))
}

fn packet_in_wanted_by(sw: &mut Switch) -> Vec<usize> {
    sw.set_link(1, true);
    let frame =
        build::arp(1, Mac([0, 0, 0, 0, 0, 1]), Ipv4Addr::new(10, 0, 0, 1), Mac::default(), Ipv4Addr::new(10, 0, 0, 2));
    let out = sw.receive(1, frame, 0);
    let Some(Output::ToControllers(pin)) = out.iter().find(|o| matches!(o, Output::ToControllers(_))) else {
        panic!("no PACKET_IN: {out:?}")
    };
    (0..3).filter(|&c| sw.wants(c, pin)).collect()
}

#[test]
fn one_master_at_a_time_and_stale_generations_are_refused() {
    let mut sw = Switch::new(1, OFP13, 2);
    assert_eq!(request(&mut sw, 0, role::MASTER, 10), Ok(role::MASTER));
    assert_eq!(request(&mut sw, 1, role::MASTER, 11), Ok(role::MASTER));
    assert_eq!(sw.conn(0).role, role::SLAVE, "the old master steps down");
    // Generation 9 is older than 11: ROLE_REQUEST_FAILED / STALE.
    assert_eq!(request(&mut sw, 0, role::MASTER, 9), Err((11, 0)));
    assert_eq!(sw.conn(1).role, role::MASTER);
    // Generations compare by wrapping distance: 2^62 ahead is newer.
    assert_eq!(request(&mut sw, 2, role::SLAVE, 11 + (1 << 62)), Ok(role::SLAVE));
    assert_eq!(request(&mut sw, 2, role::NOCHANGE, 0), Ok(role::SLAVE), "NOCHANGE reports, ignores the generation");
    assert_eq!(request(&mut sw, 2, 9, 0), Err((11, 2)), "BAD_ROLE");
}

#[test]
fn a_slave_cannot_change_the_switch_and_gets_no_packet_in() {
    let mut sw = Switch::new(1, OFP13, 2);
    assert!(send(&mut sw, 0, to_controller_on_miss()).is_empty());
    assert_eq!(packet_in_wanted_by(&mut sw), vec![0, 1, 2], "all equal: everyone");
    request(&mut sw, 0, role::MASTER, 1).unwrap();
    request(&mut sw, 1, role::SLAVE, 1).unwrap();
    let refused = send(&mut sw, 1, to_controller_on_miss());
    assert!(
        matches!(refused.as_slice(), [Output::Reply(Message { body: Body::V13(v13::Msg::Error(e)), .. })] if error_codes(e) == (1, 10)),
        "IS_SLAVE: {refused:?}"
    );
    assert_eq!(packet_in_wanted_by(&mut sw), vec![0, 2], "the slave gets none; master and equal do");
    // A slave that asks for PACKET_INs through its async config gets them.
    let mut async_config = sw.conn(1).async_config;
    async_config.packet_in_mask[1] = 1 << v13::packet_in_reason::NO_MATCH;
    assert!(send(&mut sw, 1, v13::Msg::SetAsync(async_config)).is_empty());
    assert_eq!(packet_in_wanted_by(&mut sw), vec![0, 1, 2]);
    assert_eq!(sw.conn(0).async_config.packet_in_mask[1], 0, "async configs are per connection");
    // A closed connection is forgotten: a new one starts equal.
    sw.forget_connection(1);
    assert_eq!(sw.conn(1).role, role::EQUAL);
}
