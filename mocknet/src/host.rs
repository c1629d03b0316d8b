//! Hosts: a MAC and an IPv4 address, ARP, ICMP echo, and a record of what
//! they received.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use pnet_packet::arp::ArpPacket;
use pnet_packet::ethernet::EthernetPacket;
use pnet_packet::icmp::IcmpPacket;
use pnet_packet::ipv4::Ipv4Packet;
use pnet_packet::Packet as _;
use sts_proxy::wire::Mac;

use crate::packet::{build, ETH_ARP, ETH_IPV4};

/// A simulated end host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub mac: Mac,
    pub ip: Ipv4Addr,
    arp: BTreeMap<Ipv4Addr, Mac>,
    /// Echo requests waiting for an ARP reply: (destination, sequence number).
    pending: Vec<(Ipv4Addr, u16)>,
    /// Echo replies received: (from, sequence number).
    pub echo_replies: BTreeSet<(Ipv4Addr, u16)>,
    /// Frames received in total (including ones not for this host).
    pub frames_received: u64,
    /// ICMP echo payload size of this host's pings, in bytes (like `ping -s`).
    pub ping_payload: usize,
    next_seq: u16,
}

/// The default echo payload size: "sts ping".
pub const DEFAULT_PING_PAYLOAD: usize = 8;

const ECHO_ID: u16 = 0x5354; // "ST"

impl Host {
    pub fn new(name: impl Into<String>, mac: Mac, ip: Ipv4Addr) -> Host {
        Host {
            name: name.into(),
            mac,
            ip,
            arp: BTreeMap::new(),
            pending: Vec::new(),
            echo_replies: BTreeSet::new(),
            frames_received: 0,
            ping_payload: DEFAULT_PING_PAYLOAD,
            next_seq: 1,
        }
    }

    /// Starts a ping to `dst`: returns its sequence number and the frames to
    /// send (an ARP request first if `dst`'s MAC is unknown).
    pub fn ping(&mut self, dst: Ipv4Addr) -> (u16, Vec<Vec<u8>>) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        match self.arp.get(&dst) {
            Some(mac) => (seq, vec![self.echo_request(*mac, dst, seq)]),
            None => {
                self.pending.push((dst, seq));
                (seq, vec![build::arp(1, self.mac, self.ip, Mac::default(), dst)])
            }
        }
    }

    /// Forgets learned addresses (as after a migration or a long pause).
    pub fn clear_arp(&mut self) {
        self.arp.clear();
    }

    /// Takes a frame from the wire and returns the frames sent in response.
    pub fn receive(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
        self.frames_received += 1;
        let Some(eth) = EthernetPacket::new(frame) else { return vec![] };
        let dst = Mac(eth.get_destination().octets());
        if dst != self.mac && !dst.is_multicast() {
            return vec![];
        }
        match eth.get_ethertype().0 {
            ETH_ARP => self.receive_arp(eth.payload()),
            ETH_IPV4 => self.receive_ipv4(Mac(eth.get_source().octets()), eth.payload()),
            _ => vec![],
        }
    }

    fn receive_arp(&mut self, payload: &[u8]) -> Vec<Vec<u8>> {
        let Some(arp) = ArpPacket::new(payload) else { return vec![] };
        let sha = Mac(arp.get_sender_hw_addr().octets());
        let spa = arp.get_sender_proto_addr();
        let tpa = arp.get_target_proto_addr();
        let mut out = Vec::new();
        if tpa == self.ip || self.pending.iter().any(|(d, _)| *d == spa) {
            self.arp.insert(spa, sha);
        }
        if arp.get_operation().0 == 1 && tpa == self.ip {
            out.push(build::arp(2, self.mac, self.ip, sha, spa));
        }
        // Release echo requests that were waiting for this address.
        let (ready, waiting): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|(d, _)| self.arp.contains_key(d));
        self.pending = waiting;
        for (d, seq) in ready {
            out.push(self.echo_request(self.arp[&d], d, seq));
        }
        out
    }

    /// An echo request with `ping_payload` bytes of "sts ping" repeated.
    fn echo_request(&self, dst_mac: Mac, dst: Ipv4Addr, seq: u16) -> Vec<u8> {
        let payload: Vec<u8> = b"sts ping".iter().copied().cycle().take(self.ping_payload).collect();
        build::icmp_echo(8, self.mac, dst_mac, self.ip, dst, ECHO_ID, seq, &payload)
    }

    fn receive_ipv4(&mut self, src_mac: Mac, payload: &[u8]) -> Vec<Vec<u8>> {
        let Some(ip) = Ipv4Packet::new(payload) else { return vec![] };
        if ip.get_destination() != self.ip || ip.get_next_level_protocol().0 != 1 {
            return vec![];
        }
        let Some(icmp) = IcmpPacket::new(ip.payload()) else { return vec![] };
        let body = icmp.payload();
        if body.len() < 4 {
            return vec![];
        }
        let id = u16::from_be_bytes([body[0], body[1]]);
        let seq = u16::from_be_bytes([body[2], body[3]]);
        match icmp.get_icmp_type().0 {
            8 => vec![build::icmp_echo(0, self.mac, src_mac, self.ip, ip.get_source(), id, seq, &body[4..])],
            0 => {
                self.echo_replies.insert((ip.get_source(), seq));
                vec![]
            }
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_hosts_on_a_wire_ping_each_other() {
        let mut a = Host::new("h1", Mac([0, 0, 0, 0, 0, 1]), Ipv4Addr::new(10, 0, 0, 1));
        let mut b = Host::new("h2", Mac([0, 0, 0, 0, 0, 2]), Ipv4Addr::new(10, 0, 0, 2));
        let (seq, mut to_b) = a.ping(b.ip);
        // Shuttle frames until both sides are quiet.
        for _ in 0..4 {
            let to_a: Vec<_> = to_b.iter().flat_map(|f| b.receive(f)).collect();
            to_b = to_a.iter().flat_map(|f| a.receive(f)).collect();
        }
        assert!(a.echo_replies.contains(&(b.ip, seq)));
    }
}
