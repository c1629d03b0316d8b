//! `check::loop_within` follows the hosts of a candidate loop's switches in
//! one walk, each host after the first skipping what the earlier ones
//! followed to every end. Held here to the way it was done before, one
//! fresh walk per host (the oracle), on random forwarding among four
//! meshed switches: the same loop found or none, with the same witness.

use proptest::prelude::*;
use sts_invariants::check::loop_within;
use sts_invariants::header::{Cube, Shape, L3, L4};
use sts_invariants::walk::{Model, Outcome, Walker};
use sts_mocknet::network::{Endpoint, Network};
use sts_mocknet::Topology;
use sts_proxy::wire::v13::oxm::{BasicOxm, Field, Match};
use sts_proxy::wire::v13::{self, Action, Instruction};
use sts_proxy::wire::{Body, Message, OFP13};

/// One rule: switch, priority, destination prefix (value of its first
/// `len` bits), output port.
type RuleSpec = (u64, u16, u32, u32, u32);

fn install(net: &mut Network, (dpid, priority, value, len, port): RuleSpec) {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    let fields = vec![
        BasicOxm::exact(Field::EthType, 0x0800),
        BasicOxm::masked(Field::Ipv4Dst, ((value << (32 - len.max(1))) & mask) as u128, mask as u128),
    ];
    let actions = vec![Instruction::ApplyActions(vec![Action::Output { port, max_len: 0 }])];
    let fm = v13::FlowMod::add(0, priority, Match::new(fields), actions);
    let m = Message::new(1, Body::V13(v13::Msg::FlowMod(fm)));
    let raw = m.emit().expect("encodes");
    net.handle_controller(dpid, &raw, &m, 0);
}

/// The oracle: each host of `switches` walked on its own, in host order;
/// the first awaited loop's switches and witness header.
fn one_walk_per_host(net: &Network, switches: &[u64], cube: &Cube) -> Option<(Vec<String>, String)> {
    let model = Model::new(net);
    let mut sorted = switches.to_vec();
    sorted.sort_unstable();
    for a in 0..net.hosts.len() {
        match net.live_peer(Endpoint::Host(a)) {
            Some(Endpoint::Switch { dpid, .. }) if sorted.binary_search(&dpid).is_ok() => {}
            _ => continue,
        }
        let mut w = Walker::until_loop(&model, sorted.clone(), true).pruned().confined();
        w.from_host(a, std::slice::from_ref(cube));
        let found = w.terminals.iter().find_map(|t| match &t.outcome {
            Outcome::Looped { cycle } if w.awaited(cycle) => Some((t, cycle.clone())),
            _ => None,
        });
        if let Some((t, cycle)) = found {
            let names = cycle.iter().map(|d| format!("s{d}")).collect();
            return Some((names, t.origin.witness().expect("a looping copy has headers").to_string()));
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn one_walk_for_all_hosts_finds_what_a_walk_per_host_finds(
        rules in prop::collection::vec((1u64..=4, 1u16..40, 0u32..8, 0u32..=3, 1u32..=4), 1..24),
        members in prop::sample::subsequence(vec![1u64, 2, 3, 4], 2..=4),
    ) {
        // mesh(4): port 1 is each switch's host, ports 2..4 its links.
        let mut net = Network::new(&Topology::mesh(4), OFP13);
        for r in rules {
            install(&mut net, r);
        }
        let cube = Cube::of_shape(Shape { tagged: false, l3: L3::Ipv4(L4::Udp) });
        let want = one_walk_per_host(&net, &members, &cube);
        let got = loop_within(&net, &members, &cube);
        match (&want, &got) {
            (None, None) => {}
            (Some((names, header)), Some(v)) => {
                prop_assert_eq!(&v.elements, names);
                prop_assert!(v.summary.ends_with(&format!("for {header}")), "{} against {}", v.summary, header);
            }
            _ => prop_assert!(false, "a walk per host: {:?}; one walk: {:?}", want, got.map(|v| v.summary)),
        }
    }
}
