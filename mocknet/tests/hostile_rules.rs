//! Rules a buggy or hostile controller may install must not hang or crash the
//! mock switch: a flow entry that outputs to TABLE, and a group that reaches
//! itself, both end (dropping the frame) instead of recursing forever; a
//! group that fans out to itself, or thousands of FLOOD outputs, end within
//! the work and queue budgets (time and memory bounded).

use std::net::Ipv4Addr;

use sts_mocknet::network::{DataplaneEvent, Network};
use sts_mocknet::packet::build;
use sts_mocknet::switch::{Output, Switch, WORK_BUDGET};
use sts_mocknet::topology::Topology;
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

/// Runs `f` on another thread; fails if it takes longer than `secs` (a hang
/// fails the test instead of stalling the suite).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs)).expect("finished in time (it hung before the work budget)")
}

/// A group of 64 buckets that each re-enter the group: 64^8 paths through
/// the depth limit, which bounded depth, not fan-out (sts spun at 100% CPU).
/// One PACKET_OUT to it now ends within the work budget and says so.
#[test]
fn a_group_fanning_out_to_itself_ends_within_the_work_budget() {
    let out = within(10, || {
        let mut sw = Switch::new(1, OFP13, 2);
        sw.set_link(1, true);
        sw.set_link(2, true);
        let bucket = v13::Bucket {
            weight: 0,
            watch_port: v13::port::ANY,
            watch_group: v13::GROUP_ANY,
            actions: vec![Action::Output { port: 2, max_len: 0 }, Action::Group(7)],
        };
        let group = v13::Msg::GroupMod(v13::GroupMod {
            command: 0,
            group_type: v13::group_type::ALL,
            group_id: 7,
            buckets: vec![bucket; 64],
        });
        assert!(send(&mut sw, group).is_empty());
        let po = v13::Msg::PacketOut(v13::PacketOut {
            buffer_id: v13::NO_BUFFER,
            in_port: v13::port::CONTROLLER,
            actions: vec![Action::Group(7)],
            data: ping().into(),
        });
        send(&mut sw, po)
    });
    let copies = out.iter().filter(|o| matches!(o, Output::Emit { .. })).count();
    assert!(copies > 0 && copies <= WORK_BUDGET, "{copies} copies");
    assert!(out.iter().any(|o| matches!(o, Output::OverBudget)), "the switch says it dropped the rest");
}

/// One entry with 4,000 FLOOD outputs (18 GB of frames in flight before):
/// a frame through it makes at most the budget's copies, and a network of
/// such switches ends the storm within its queue budget.
#[test]
fn thousands_of_flood_outputs_stay_within_the_budgets() {
    let floods = vec![Action::Output { port: v13::port::FLOOD, max_len: 0 }; 4000];
    let mut sw = Switch::new(1, OFP13, 3);
    for p in 1..=3 {
        sw.set_link(p, true);
    }
    assert!(send(&mut sw, flow(floods.clone())).is_empty());
    let out = sw.receive(1, ping(), 0);
    let copies = out.iter().filter(|o| matches!(o, Output::Emit { .. })).count();
    assert!(copies <= WORK_BUDGET, "{copies} copies");
    assert!(out.iter().any(|o| matches!(o, Output::OverBudget)));

    let events = within(60, move || {
        let mut topo = Topology::linear(3);
        topo.place_hosts(&[1, 2, 3]);
        let mut net = Network::new(&topo, OFP13);
        let m = Message::new(1, Body::V13(flow(floods)));
        let raw = m.emit().expect("encodes");
        for dpid in 1..=3 {
            net.handle_controller(dpid, &raw, &m, 0);
        }
        net.host_send(0, vec![ping()], 0);
        net.events
    });
    assert!(events.iter().any(|e| matches!(e, DataplaneEvent::StepBudget { .. })), "a storm: {events:?}");
    assert!(events.iter().any(|e| matches!(e, DataplaneEvent::WorkBudget { .. })), "{events:?}");
}
