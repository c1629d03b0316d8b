//! Generated networks with realistic routing, for benchmarks and tests.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use sts_mocknet::network::{Endpoint, Network};
use sts_mocknet::Topology;
use sts_proxy::wire::v13::{self, Action, BasicOxm, Field, Instruction};
use sts_proxy::wire::{Body, Message, OFP13};

/// Installs one rule through a FLOW_MOD, as a controller would: `fields` to
/// `out_port` at `priority`. Panics if the switch refuses it.
pub fn flow(net: &mut Network, dpid: u64, priority: u16, fields: Vec<BasicOxm>, out_port: u32) {
    let actions = vec![Instruction::ApplyActions(vec![Action::Output { port: out_port, max_len: 0xffff }])];
    let fm = v13::FlowMod::add(0, priority, v13::Match::new(fields), actions);
    let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
    let raw = msg.emit().expect("encodes");
    let replies = net.handle_controller(dpid, &raw, &msg, 0);
    assert!(replies.is_empty(), "rule refused: {replies:?}");
}

/// IPv4 to a destination prefix.
pub fn ipv4_dst(addr: u32, prefix: u32) -> Vec<BasicOxm> {
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
    vec![BasicOxm::exact(Field::EthType, 0x0800), BasicOxm::masked(Field::Ipv4Dst, (addr & mask) as u128, mask as u128)]
}

fn suffix(value: u32, bits: u32) -> Vec<BasicOxm> {
    let mask = (1u32 << bits) - 1;
    vec![BasicOxm::exact(Field::EthType, 0x0800), BasicOxm::masked(Field::Ipv4Dst, value as u128, mask as u128)]
}

/// A k-ary fat-tree with two-level routing in the style of Al-Fares et al.:
/// hosts are addressed 10.pod.edge.(h+2); edge switches hold a /32 per local
/// host and spread the rest over their uplinks by the destination's low bits;
/// aggregation switches hold a /24 per edge of their pod and spread the rest
/// over the cores; cores hold a /16 per pod; ARP goes to the controller. With
/// `host_routes`, every aggregation switch also holds a /32 per host of its
/// pod. Every host reaches every other; nothing loops.
pub fn routed_fat_tree(k: u64, host_routes: bool) -> Network {
    let half = k / 2;
    let n_core = half * half;
    let agg = |pod: u64, i: u64| n_core + pod * k + i + 1;
    let edge = |pod: u64, i: u64| n_core + pod * k + half + i + 1;
    let mut topo = Topology::fat_tree(k);
    // Hosts in order: pod, edge, host.
    for (n, h) in topo.hosts.iter_mut().enumerate() {
        let n = n as u64;
        let (pod, e, i) = (n / (half * half), (n / half) % half, n % half);
        h.ip = Ipv4Addr::new(10, pod as u8, e as u8, i as u8 + 2);
    }
    let ips: Vec<u32> = topo.hosts.iter().map(|h| u32::from(h.ip)).collect();
    let mut net = Network::new(&topo, OFP13);
    let mut port_to: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for ((a, pa), (b, pb)) in net.switch_links() {
        port_to.insert((a, b), pa);
        port_to.insert((b, a), pb);
    }
    let bits = half.trailing_zeros();
    let arp = vec![BasicOxm::exact(Field::EthType, 0x0806)];
    for pod in 0..k {
        for e in 0..half {
            let d = edge(pod, e);
            flow(&mut net, d, 300, arp.clone(), v13::port::CONTROLLER);
            for u in 0..half {
                flow(&mut net, d, 100, suffix(u as u32, bits), port_to[&(d, agg(pod, u))]);
            }
        }
        for a in 0..half {
            let d = agg(pod, a);
            for e in 0..half {
                let net_addr = u32::from(Ipv4Addr::new(10, pod as u8, e as u8, 0));
                flow(&mut net, d, 200, ipv4_dst(net_addr, 24), port_to[&(d, edge(pod, e))]);
            }
            for u in 0..half {
                flow(&mut net, d, 100, suffix(u as u32, bits), port_to[&(d, a * half + u + 1)]);
            }
        }
    }
    for (i, ip) in ips.iter().enumerate() {
        let Some(Endpoint::Switch { dpid, port }) = net.peer(Endpoint::Host(i)) else { unreachable!() };
        flow(&mut net, dpid, 200, ipv4_dst(*ip, 32), port);
        if host_routes {
            let pod = (i as u64) / (half * half);
            let e = (i as u64 / half) % half;
            for a in 0..half {
                let d = agg(pod, a);
                flow(&mut net, d, 250, ipv4_dst(*ip, 32), port_to[&(d, edge(pod, e))]);
            }
        }
    }
    for c in 0..n_core {
        let d = c + 1;
        let a = c / half;
        for pod in 0..k {
            let net_addr = u32::from(Ipv4Addr::new(10, pod as u8, 0, 0));
            flow(&mut net, d, 200, ipv4_dst(net_addr, 16), port_to[&(d, agg(pod, a))]);
        }
    }
    net
}

/// Adds host routes to a [`routed_fat_tree`] that send host `host`'s traffic
/// (a host of pod 0) around a loop: aggregation switch (0, a) → core c1 →
/// aggregation switch (`other_pod`, a) → core c2, whose pod route leads back
/// to (0, a). `a` is the aggregation switch the host's address picks, so
/// traffic from other pods enters the loop.
pub fn routing_loop(net: &mut Network, k: u64, host: usize, other_pod: u64) {
    let (half, n_core) = (k / 2, (k / 2) * (k / 2));
    let ip = u32::from(net.hosts[host].ip);
    let a = if half.is_power_of_two() { ip as u64 % half } else { 0 };
    let agg = |pod: u64| n_core + pod * k + a + 1;
    let (c1, c2) = (a * half + 1, a * half + 2);
    let links = net.switch_links();
    let port = |from: u64, to: u64| {
        links
            .iter()
            .find_map(|&((x, px), (y, py))| {
                if (x, y) == (from, to) {
                    Some(px)
                } else if (y, x) == (from, to) {
                    Some(py)
                } else {
                    None
                }
            })
            .expect("linked")
    };
    flow(net, agg(0), 450, ipv4_dst(ip, 32), port(agg(0), c1));
    flow(net, c1, 450, ipv4_dst(ip, 32), port(c1, agg(other_pod)));
    flow(net, agg(other_pod), 450, ipv4_dst(ip, 32), port(agg(other_pod), c2));
}
