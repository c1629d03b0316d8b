//! A summary of a dataplane frame carried in PACKET_IN or PACKET_OUT: the
//! addresses and the payload, without the fields that vary between runs of the
//! same behaviour (IP identification, checksums, TTL).

use pnet_packet::arp::ArpPacket;
use pnet_packet::ethernet::{EtherTypes, EthernetPacket};
use pnet_packet::icmp::IcmpPacket;
use pnet_packet::ip::IpNextHeaderProtocols;
use pnet_packet::ipv4::Ipv4Packet;
use pnet_packet::ipv6::Ipv6Packet;
use pnet_packet::tcp::TcpPacket;
use pnet_packet::udp::UdpPacket;
use pnet_packet::Packet;
use serde::Serialize;

use super::Mac;

/// What a frame is, as far as equivalence across runs goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PacketSummary {
    pub eth_src: Mac,
    pub eth_dst: Mac,
    /// VLAN id of an 802.1Q tag, if tagged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    pub eth_type: u16,
    pub l3: L3Summary,
}

/// Network-layer part of [`PacketSummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum L3Summary {
    Arp {
        op: u16,
        sha: Mac,
        spa: std::net::Ipv4Addr,
        tha: Mac,
        tpa: std::net::Ipv4Addr,
    },
    Ipv4 {
        src: std::net::Ipv4Addr,
        dst: std::net::Ipv4Addr,
        proto: u8,
        l4: L4Summary,
    },
    Ipv6 {
        src: std::net::Ipv6Addr,
        dst: std::net::Ipv6Addr,
        next_header: u8,
        l4: L4Summary,
    },
    /// Anything else (LLDP, unknown ethertypes, truncated headers): a digest of the payload.
    Other {
        payload_digest: String,
    },
}

/// Transport-layer part of [`L3Summary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum L4Summary {
    Tcp {
        src: u16,
        dst: u16,
        payload_digest: String,
    },
    Udp {
        src: u16,
        dst: u16,
        payload_digest: String,
    },
    /// ICMP: type and code; identifier and sequence number are not kept.
    Icmp {
        icmp_type: u8,
        code: u8,
        payload_digest: String,
    },
    Other {
        payload_digest: String,
    },
}

/// A short, stable digest of bytes (64-bit FNV-1a, hex).
pub fn digest(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl PacketSummary {
    /// Summarises an Ethernet frame; `None` if it is shorter than an Ethernet header.
    pub fn of(frame: &[u8]) -> Option<PacketSummary> {
        let eth = EthernetPacket::new(frame)?;
        let mut eth_type = eth.get_ethertype().0;
        let mut payload = eth.payload();
        let mut vlan = None;
        if eth_type == EtherTypes::Vlan.0 && payload.len() >= 4 {
            vlan = Some(u16::from_be_bytes([payload[0], payload[1]]) & 0x0fff);
            eth_type = u16::from_be_bytes([payload[2], payload[3]]);
            payload = &payload[4..];
        }
        let l3 = summarise_l3(eth_type, payload);
        Some(PacketSummary {
            eth_src: Mac(eth.get_source().octets()),
            eth_dst: Mac(eth.get_destination().octets()),
            vlan,
            eth_type,
            l3,
        })
    }
}

fn summarise_l3(eth_type: u16, payload: &[u8]) -> L3Summary {
    let other = || L3Summary::Other { payload_digest: digest(payload) };
    if eth_type == EtherTypes::Arp.0 {
        let Some(arp) = ArpPacket::new(payload) else { return other() };
        return L3Summary::Arp {
            op: arp.get_operation().0,
            sha: Mac(arp.get_sender_hw_addr().octets()),
            spa: arp.get_sender_proto_addr(),
            tha: Mac(arp.get_target_hw_addr().octets()),
            tpa: arp.get_target_proto_addr(),
        };
    }
    if eth_type == EtherTypes::Ipv4.0 {
        let Some(ip) = Ipv4Packet::new(payload) else { return other() };
        let hl = ip.get_header_length() as usize * 4;
        if hl < 20 || hl > payload.len() {
            return other();
        }
        let proto = ip.get_next_level_protocol();
        let total = (ip.get_total_length() as usize).clamp(hl, payload.len());
        return L3Summary::Ipv4 {
            src: ip.get_source(),
            dst: ip.get_destination(),
            proto: proto.0,
            l4: summarise_l4(proto.0, &payload[hl..total]),
        };
    }
    if eth_type == EtherTypes::Ipv6.0 {
        let Some(ip) = Ipv6Packet::new(payload) else { return other() };
        let nh = ip.get_next_header().0;
        return L3Summary::Ipv6 {
            src: ip.get_source(),
            dst: ip.get_destination(),
            next_header: nh,
            l4: summarise_l4(nh, ip.payload()),
        };
    }
    other()
}

fn summarise_l4(proto: u8, b: &[u8]) -> L4Summary {
    let other = || L4Summary::Other { payload_digest: digest(b) };
    match proto {
        p if p == IpNextHeaderProtocols::Tcp.0 => match TcpPacket::new(b) {
            Some(t) => {
                L4Summary::Tcp { src: t.get_source(), dst: t.get_destination(), payload_digest: digest(t.payload()) }
            }
            None => other(),
        },
        p if p == IpNextHeaderProtocols::Udp.0 => match UdpPacket::new(b) {
            Some(u) => {
                L4Summary::Udp { src: u.get_source(), dst: u.get_destination(), payload_digest: digest(u.payload()) }
            }
            None => other(),
        },
        p if p == IpNextHeaderProtocols::Icmp.0 || p == IpNextHeaderProtocols::Icmpv6.0 => match IcmpPacket::new(b) {
            // Skip the 4 bytes of identifier and sequence of echo messages.
            Some(i) if b.len() >= 8 => L4Summary::Icmp {
                icmp_type: i.get_icmp_type().0,
                code: i.get_icmp_code().0,
                payload_digest: digest(&b[8..]),
            },
            _ => other(),
        },
        _ => other(),
    }
}
