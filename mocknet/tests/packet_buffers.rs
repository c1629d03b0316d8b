//! Packet buffering: a PACKET_IN cut to `max_len` (or 1.0's miss_send_len)
//! buffers the frame, and a PACKET_OUT or FLOW_MOD naming the buffer id
//! sends the whole frame on, once.

use std::net::Ipv4Addr;

use sts_mocknet::packet::build;
use sts_mocknet::switch::{Output, PacketBuffers, Switch};
use sts_mocknet::{DataplaneEvent, Network, Topology};
use sts_proxy::wire::v13::{self, Action, Instruction};
use sts_proxy::wire::{v10, Body, Mac, Message, OFP10, OFP13};

fn send(sw: &mut Switch, body: Body) -> Vec<Output> {
    let m = Message::new(1, body);
    let raw = m.emit().expect("encodes");
    sw.handle(&raw, &m, 0)
}

/// A ping of `len` bytes on the wire from h1 to h2.
fn ping(len: usize) -> Vec<u8> {
    let f = build::icmp_echo(
        8,
        Mac([0, 0, 0, 0, 0, 1]),
        Mac([0, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        1,
        1,
        b"",
    );
    let mut payload = vec![0xab; len - f.len()];
    payload[0] = 1;
    build::icmp_echo(
        8,
        Mac([0, 0, 0, 0, 0, 1]),
        Mac([0, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        1,
        1,
        &payload,
    )
}

const N_BUFFERS: usize = 256;

fn switch(version: u8) -> Switch {
    let mut sw = Switch::new(1, version, 2);
    sw.buffers = PacketBuffers::new(N_BUFFERS);
    sw.set_link(1, true);
    sw.set_link(2, true);
    sw
}

/// (buffer_id, data length, total_len) of the PACKET_INs in `out`.
fn packet_ins(out: &[Output]) -> Vec<(u32, usize, u16)> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToControllers(Message { body: Body::V10(v10::Msg::PacketIn(p)), .. }) => {
                Some((p.buffer_id, p.data.len(), p.total_len))
            }
            Output::ToControllers(Message { body: Body::V13(v13::Msg::PacketIn(p)), .. }) => {
                Some((p.buffer_id, p.data.len(), p.total_len))
            }
            _ => None,
        })
        .collect()
}

fn emitted(out: &[Output]) -> Vec<(u32, usize)> {
    out.iter()
        .filter_map(|o| if let Output::Emit { port, frame } = o { Some((*port, frame.len())) } else { None })
        .collect()
}

fn is_buffer_unknown(out: &[Output]) -> bool {
    out.iter().any(|o| match o {
        Output::Reply(Message { body: Body::V10(v10::Msg::Error(e)), .. }) => {
            format!("{e:?}").contains("err_type: 1, code: 8")
        }
        Output::Reply(Message { body: Body::V13(v13::Msg::Error(e)), .. }) => {
            format!("{e:?}").contains("err_type: 1, code: 8")
        }
        _ => false,
    })
}

fn packet_out10(buffer_id: u32, port: u16) -> Body {
    Body::V10(v10::Msg::PacketOut(v10::PacketOut {
        buffer_id,
        in_port: 1,
        actions: vec![v10::Action::Output { port, max_len: 0 }],
        data: Default::default(),
    }))
}

#[test]
fn openflow10_table_miss_cuts_to_miss_send_len_and_packet_out_releases_the_whole_frame_once() {
    let mut sw = switch(OFP10);
    // Short frames go up whole, unbuffered (ARP and default pings fit in 128 bytes).
    assert_eq!(packet_ins(&sw.receive(1, ping(98), 0)), vec![(v10::NO_BUFFER, 98, 98)]);
    let ins = packet_ins(&sw.receive(1, ping(300), 0));
    assert_eq!(ins.len(), 1);
    let (id, len, total) = ins[0];
    assert_ne!(id, v10::NO_BUFFER);
    assert_eq!((len, total), (128, 300));
    assert_eq!(emitted(&send(&mut sw, packet_out10(id, 2))), vec![(2, 300)], "the whole buffered frame leaves");
    assert!(is_buffer_unknown(&send(&mut sw, packet_out10(id, 2))), "a buffer is used once");
    // SET_CONFIG changes the cut.
    send(&mut sw, Body::V10(v10::Msg::SetConfig(v10::SwitchConfig { flags: 0, miss_send_len: 64 })));
    assert_eq!(packet_ins(&sw.receive(1, ping(98), 0))[0].1, 64);
}

#[test]
fn openflow10_flow_mod_naming_a_buffer_forwards_the_frame_through_the_new_entry() {
    let mut sw = switch(OFP10);
    let (id, _, _) = packet_ins(&sw.receive(1, ping(500), 0))[0];
    let fm = v10::FlowMod {
        r#match: v10::Match::default(),
        cookie: 0,
        command: v10::flow_mod_command::ADD,
        idle_timeout: 0,
        hard_timeout: 0,
        priority: 10,
        buffer_id: id,
        out_port: v10::port::NONE,
        flags: 0,
        actions: vec![v10::Action::Output { port: 2, max_len: 0 }],
    };
    assert_eq!(emitted(&send(&mut sw, Body::V10(v10::Msg::FlowMod(fm.clone())))), vec![(2, 500)]);
    // The entry is installed either way; a stale id is reported.
    let out = send(&mut sw, Body::V10(v10::Msg::FlowMod(fm)));
    assert!(is_buffer_unknown(&out), "{out:?}");
}

#[test]
fn openflow13_max_len_buffers_and_no_buffer_sends_whole_frames() {
    let mut sw = switch(OFP13);
    let to_controller = |max_len| {
        v13::Msg::FlowMod(v13::FlowMod::add(
            0,
            0,
            v13::Match::default(),
            vec![Instruction::ApplyActions(vec![Action::Output { port: v13::port::CONTROLLER, max_len }])],
        ))
    };
    send(&mut sw, Body::V13(to_controller(v13::CML_NO_BUFFER)));
    assert_eq!(packet_ins(&sw.receive(1, ping(1500), 0)), vec![(v13::NO_BUFFER, 1500, 1500)]);
    send(&mut sw, Body::V13(to_controller(64)));
    let (id, len, total) = packet_ins(&sw.receive(1, ping(200), 0))[0];
    assert_eq!((len, total), (64, 200));
    // A FLOW_MOD naming the buffer runs the frame through the pipeline from table 0.
    let forward = v13::FlowMod {
        buffer_id: id,
        ..v13::FlowMod::add(
            0,
            10,
            v13::Match::default(),
            vec![Instruction::ApplyActions(vec![Action::Output { port: 2, max_len: 0 }])],
        )
    };
    assert_eq!(emitted(&send(&mut sw, Body::V13(v13::Msg::FlowMod(forward)))), vec![(2, 200)]);
}

#[test]
fn the_oldest_buffer_is_reused_when_all_are_taken() {
    let mut sw = switch(OFP10);
    let first = packet_ins(&sw.receive(1, ping(300), 0))[0].0;
    for _ in 0..N_BUFFERS {
        sw.receive(1, ping(300), 0);
    }
    assert_eq!(sw.buffers.len(), N_BUFFERS);
    assert!(is_buffer_unknown(&send(&mut sw, packet_out10(first, 2))));
}

#[test]
fn without_buffers_every_packet_in_carries_the_whole_frame() {
    let mut sw = Switch::new(1, OFP10, 2);
    sw.set_link(1, true);
    assert_eq!(packet_ins(&sw.receive(1, ping(1000), 0)), vec![(v10::NO_BUFFER, 1000, 1000)]);
}

/// A controller that answers every buffered PACKET_IN with a FLOW_MOD
/// releasing the buffer into an entry the frame does not match (what
/// ovs-testcontroller does with a frame cut inside its IP packet): the frame
/// comes straight back up, forever. The dataplane must call it a loop and
/// stop, with the flow entries still installed.
#[test]
fn a_frame_bounced_between_a_buffer_and_the_controller_is_a_loop() {
    let mut t = Topology::linear(1);
    t.place_hosts(&[1, 1]);
    let mut net = Network::new(&t, OFP10);
    net.switches.values_mut().for_each(|s| s.buffers = PacketBuffers::new(N_BUFFERS));
    let frame = ping(600);
    let mut pending = net.host_send(0, vec![frame], 0);
    let mut rounds = 0;
    while let Some(m) = pending.pop() {
        let Body::V10(v10::Msg::PacketIn(p)) = &m.msg.body else { continue };
        rounds += 1;
        assert!(rounds < 100, "the bounce never ended");
        let never_matches = v10::Match { wildcards: 0, ..v10::Match::default() };
        let fm = Message::new(
            rounds,
            Body::V10(v10::Msg::FlowMod(v10::FlowMod {
                r#match: never_matches,
                cookie: 0,
                command: v10::flow_mod_command::ADD,
                idle_timeout: 0,
                hard_timeout: 0,
                priority: 10,
                buffer_id: p.buffer_id,
                out_port: v10::port::NONE,
                flags: 0,
                actions: vec![v10::Action::Output { port: 2, max_len: 0 }],
            })),
        );
        pending.extend(net.handle_controller(1, &fm.emit().unwrap(), &fm, rounds as u64));
    }
    assert!(net.events.iter().any(|e| matches!(e, DataplaneEvent::HopLimit { .. })), "{:?}", net.events);
    assert_eq!(net.switches[&1].tables[0].len(), 1, "the FLOW_MOD still took effect");
    assert!(net.switches[&1].buffers.is_empty());
}
