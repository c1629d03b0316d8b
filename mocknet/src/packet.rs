//! Dataplane frames: header fields as OpenFlow sees them, header rewriting, and
//! builders for the frames hosts send.
//!
//! Match fields use the OXM vocabulary of OpenFlow 1.3 ([`Field`]) for both
//! versions: a 1.0 match is translated into it (see [`crate::flow`]).

use pnet_packet::arp::ArpPacket;
use pnet_packet::ethernet::EthernetPacket;
use pnet_packet::icmp::IcmpPacket;
use pnet_packet::ipv4::Ipv4Packet;
use pnet_packet::tcp::TcpPacket;
use pnet_packet::udp::UdpPacket;
use pnet_packet::Packet as _;
use sts_proxy::wire::v13::oxm::VID_PRESENT;
use sts_proxy::wire::v13::Field;
use sts_proxy::wire::Mac;

pub const ETH_IPV4: u16 = 0x0800;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_VLAN: u16 = 0x8100;
pub const ETH_LLDP: u16 = 0x88cc;

const N_FIELDS: usize = 40;

/// The values of every match field a frame has, keyed by [`Field`]. A field the
/// frame lacks (an IPv4 address of an ARP frame) is `None`, and no match on it
/// can succeed: that is how OpenFlow's prerequisites behave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    values: [Option<u128>; N_FIELDS],
}

impl Fields {
    /// The value of `f`, if the frame has it.
    pub fn get(&self, f: Field) -> Option<u128> {
        self.values[f as usize]
    }

    fn set(&mut self, f: Field, v: u128) {
        self.values[f as usize] = Some(v);
    }

    /// Extracts the fields of an Ethernet frame arriving on `in_port` with `metadata`.
    pub fn extract(frame: &[u8], in_port: u32, metadata: u64) -> Fields {
        let mut out = Fields { values: [None; N_FIELDS] };
        out.set(Field::InPort, in_port as u128);
        out.set(Field::InPhyPort, in_port as u128);
        out.set(Field::Metadata, metadata as u128);
        let Some(eth) = EthernetPacket::new(frame) else { return out };
        out.set(Field::EthDst, mac_int(&eth.get_destination().octets()));
        out.set(Field::EthSrc, mac_int(&eth.get_source().octets()));
        let mut eth_type = eth.get_ethertype().0;
        let mut payload = eth.payload();
        if eth_type == ETH_VLAN && payload.len() >= 4 {
            let tci = u16::from_be_bytes([payload[0], payload[1]]);
            out.set(Field::VlanVid, (VID_PRESENT | (tci & 0x0fff)) as u128);
            out.set(Field::VlanPcp, (tci >> 13) as u128);
            eth_type = u16::from_be_bytes([payload[2], payload[3]]);
            payload = &payload[4..];
        } else {
            out.set(Field::VlanVid, 0); // OFPVID_NONE: untagged
        }
        out.set(Field::EthType, eth_type as u128);
        match eth_type {
            ETH_ARP => {
                if let Some(arp) = ArpPacket::new(payload) {
                    out.set(Field::ArpOp, arp.get_operation().0 as u128);
                    out.set(Field::ArpSpa, u32::from(arp.get_sender_proto_addr()) as u128);
                    out.set(Field::ArpTpa, u32::from(arp.get_target_proto_addr()) as u128);
                    out.set(Field::ArpSha, mac_int(&arp.get_sender_hw_addr().octets()));
                    out.set(Field::ArpTha, mac_int(&arp.get_target_hw_addr().octets()));
                }
            }
            ETH_IPV4 => {
                if let Some(ip) = Ipv4Packet::new(payload) {
                    let hl = ip.get_header_length() as usize * 4;
                    out.set(Field::IpDscp, (ip.get_dscp()) as u128);
                    out.set(Field::IpEcn, ip.get_ecn() as u128);
                    let proto = ip.get_next_level_protocol().0;
                    out.set(Field::IpProto, proto as u128);
                    out.set(Field::Ipv4Src, u32::from(ip.get_source()) as u128);
                    out.set(Field::Ipv4Dst, u32::from(ip.get_destination()) as u128);
                    let l4 = payload.get(hl.max(20)..).unwrap_or(&[]);
                    match proto {
                        6 => {
                            if let Some(t) = TcpPacket::new(l4) {
                                out.set(Field::TcpSrc, t.get_source() as u128);
                                out.set(Field::TcpDst, t.get_destination() as u128);
                            }
                        }
                        17 => {
                            if let Some(u) = UdpPacket::new(l4) {
                                out.set(Field::UdpSrc, u.get_source() as u128);
                                out.set(Field::UdpDst, u.get_destination() as u128);
                            }
                        }
                        1 => {
                            if let Some(i) = IcmpPacket::new(l4) {
                                out.set(Field::Icmpv4Type, i.get_icmp_type().0 as u128);
                                out.set(Field::Icmpv4Code, i.get_icmp_code().0 as u128);
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        out
    }
}

/// A MAC address as an integer.
pub fn mac_int(m: &[u8; 6]) -> u128 {
    m.iter().fold(0u128, |a, &b| a << 8 | b as u128)
}

/// The integer `v` as a MAC address.
pub fn int_mac(v: u128) -> [u8; 6] {
    let b = (v as u64).to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// Offset of the ethertype field that follows any VLAN tag, and whether tagged.
fn l2(frame: &[u8]) -> Option<(usize, bool)> {
    if frame.len() < 14 {
        return None;
    }
    let tagged = u16::from_be_bytes([frame[12], frame[13]]) == ETH_VLAN && frame.len() >= 18;
    Some((if tagged { 16 } else { 12 }, tagged))
}

/// Pushes an 802.1Q tag (VID 0, or the existing tag's VID and PCP, as the spec says).
pub fn push_vlan(frame: &mut Vec<u8>, tpid: u16) {
    let Some((_, tagged)) = l2(frame) else { return };
    let tci = if tagged { [frame[14], frame[15]] } else { [0, 0] };
    let mut tag = tpid.to_be_bytes().to_vec();
    tag.extend_from_slice(&tci);
    frame.splice(12..12, tag);
}

/// Removes the outermost 802.1Q tag, if any.
pub fn pop_vlan(frame: &mut Vec<u8>) {
    if let Some((_, true)) = l2(frame) {
        frame.drain(12..16);
    }
}

fn ipv4_offset(frame: &[u8]) -> Option<usize> {
    let (et, _) = l2(frame)?;
    (u16::from_be_bytes([frame[et], frame[et + 1]]) == ETH_IPV4 && frame.len() >= et + 2 + 20).then_some(et + 2)
}

fn fix_ipv4_checksum(frame: &mut [u8], ip: usize) {
    let hl = ((frame[ip] & 0x0f) as usize * 4).max(20);
    if frame.len() < ip + hl {
        return;
    }
    frame[ip + 10] = 0;
    frame[ip + 11] = 0;
    let c = checksum(&frame[ip..ip + hl]);
    frame[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
}

/// Rewrites header field `f` to `v`. Returns false if the frame has no such
/// field (the action is then a no-op, as a switch would do).
pub fn set_field(frame: &mut [u8], f: Field, v: u128) -> bool {
    let Some((et, tagged)) = l2(frame) else { return false };
    match f {
        Field::EthDst => frame[0..6].copy_from_slice(&int_mac(v)),
        Field::EthSrc => frame[6..12].copy_from_slice(&int_mac(v)),
        Field::EthType => frame[et..et + 2].copy_from_slice(&(v as u16).to_be_bytes()),
        Field::VlanVid if tagged => {
            let tci = u16::from_be_bytes([frame[14], frame[15]]) & 0xf000 | (v as u16 & 0x0fff);
            frame[14..16].copy_from_slice(&tci.to_be_bytes());
        }
        Field::VlanPcp if tagged => {
            let tci = u16::from_be_bytes([frame[14], frame[15]]) & 0x1fff | ((v as u16 & 7) << 13);
            frame[14..16].copy_from_slice(&tci.to_be_bytes());
        }
        Field::Ipv4Src | Field::Ipv4Dst | Field::IpDscp => {
            let Some(ip) = ipv4_offset(frame) else { return false };
            match f {
                Field::Ipv4Src => frame[ip + 12..ip + 16].copy_from_slice(&(v as u32).to_be_bytes()),
                Field::Ipv4Dst => frame[ip + 16..ip + 20].copy_from_slice(&(v as u32).to_be_bytes()),
                _ => frame[ip + 1] = (frame[ip + 1] & 0x03) | ((v as u8) << 2),
            }
            fix_ipv4_checksum(frame, ip);
        }
        Field::TcpSrc | Field::TcpDst | Field::UdpSrc | Field::UdpDst => {
            let Some(ip) = ipv4_offset(frame) else { return false };
            // The port fields exist only for their own protocol (a TCP port
            // rewrite must not touch a UDP or ICMP header).
            let want = if matches!(f, Field::TcpSrc | Field::TcpDst) { 6 } else { 17 };
            if frame[ip + 9] != want {
                return false;
            }
            let l4 = ip + ((frame[ip] & 0x0f) as usize * 4).max(20);
            let at = l4 + if matches!(f, Field::TcpSrc | Field::UdpSrc) { 0 } else { 2 };
            if frame.len() < at + 2 {
                return false;
            }
            frame[at..at + 2].copy_from_slice(&(v as u16).to_be_bytes());
        }
        _ => return false,
    }
    true
}

/// The Internet checksum of `b`.
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Builders of the frames hosts send and answer.
pub mod build {
    use super::*;
    use std::net::Ipv4Addr;

    fn ethernet(dst: Mac, src: Mac, ethertype: u16) -> Vec<u8> {
        let mut f = Vec::with_capacity(64);
        f.extend_from_slice(&dst.0);
        f.extend_from_slice(&src.0);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    /// An ARP request (`op` 1) or reply (`op` 2).
    pub fn arp(op: u16, sha: Mac, spa: Ipv4Addr, tha: Mac, tpa: Ipv4Addr) -> Vec<u8> {
        let dst = if op == 1 { Mac::BROADCAST } else { tha };
        let mut f = ethernet(dst, sha, ETH_ARP);
        f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4]);
        f.extend_from_slice(&op.to_be_bytes());
        f.extend_from_slice(&sha.0);
        f.extend_from_slice(&spa.octets());
        f.extend_from_slice(&tha.0);
        f.extend_from_slice(&tpa.octets());
        f
    }

    /// An ICMP echo request (`icmp_type` 8) or reply (0).
    #[allow(clippy::too_many_arguments)]
    pub fn icmp_echo(
        icmp_type: u8,
        src: Mac,
        dst: Mac,
        sip: Ipv4Addr,
        dip: Ipv4Addr,
        id: u16,
        seq: u16,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut f = ethernet(dst, src, ETH_IPV4);
        let mut icmp = vec![icmp_type, 0, 0, 0];
        icmp.extend_from_slice(&id.to_be_bytes());
        icmp.extend_from_slice(&seq.to_be_bytes());
        icmp.extend_from_slice(payload);
        let c = checksum(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let total = (20 + icmp.len()) as u16;
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&seq.to_be_bytes()); // identification
        ip.extend_from_slice(&[0x40, 0, 64, 1, 0, 0]);
        ip.extend_from_slice(&sip.octets());
        ip.extend_from_slice(&dip.octets());
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&icmp);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn fields_of_a_ping_and_rewrites() {
        let a = Mac([0, 0, 0, 0, 0, 1]);
        let b = Mac([0, 0, 0, 0, 0, 2]);
        let mut f = build::icmp_echo(8, a, b, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 1, 1, b"x");
        let x = Fields::extract(&f, 3, 0);
        assert_eq!(x.get(Field::InPort), Some(3));
        assert_eq!(x.get(Field::EthType), Some(0x0800));
        assert_eq!(x.get(Field::VlanVid), Some(0));
        assert_eq!(x.get(Field::Icmpv4Type), Some(8));
        assert_eq!(x.get(Field::Ipv4Dst), Some(0x0a000002));
        assert_eq!(x.get(Field::ArpOp), None);

        push_vlan(&mut f, ETH_VLAN);
        assert!(set_field(&mut f, Field::VlanVid, 0x1000 | 100));
        let x = Fields::extract(&f, 3, 0);
        assert_eq!(x.get(Field::VlanVid), Some(0x1000 | 100));
        assert_eq!(x.get(Field::Ipv4Dst), Some(0x0a000002), "L3 still parsed behind the tag");
        assert!(set_field(&mut f, Field::Ipv4Dst, 0x0a000009));
        assert!(!set_field(&mut f, Field::TcpSrc, 80), "an ICMP frame has no TCP port");
        assert!(!set_field(&mut f, Field::UdpDst, 53), "nor a UDP one");
        pop_vlan(&mut f);
        let x = Fields::extract(&f, 3, 0);
        assert_eq!((x.get(Field::VlanVid), x.get(Field::Ipv4Dst)), (Some(0), Some(0x0a000009)));
        let ip = ipv4_offset(&f).unwrap();
        assert_eq!(checksum(&f[ip..ip + 20]), 0, "checksum fixed after rewrite");
    }
}
