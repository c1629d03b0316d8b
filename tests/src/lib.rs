//! Harness for end-to-end tests against real controllers.
//!
//! - [`ScriptedSwitch`]: a minimal OpenFlow switch session, just enough of the
//!   handshake to make a controller talk, plus injected PACKET_INs; it records
//!   every message in both directions. (The full switch is `sts-mocknet`.)
//! - [`pcap`]: writes a recorded session as a pcap of one TCP connection, so an
//!   independent dissector (tshark) can read exactly the bytes that crossed it.

pub mod pcap;
pub mod tshark;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sts_proxy::wire::{v10, v13, Body, FixedStr, Hello, Mac, Message, OFP10, OFP13};

/// Which side sent a recorded message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    SwitchToController,
    ControllerToSwitch,
}

/// One message as it crossed the connection.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub dir: Dir,
    pub bytes: Bytes,
}

/// A frame to inject as a PACKET_IN: ingress port and Ethernet frame.
#[derive(Debug, Clone)]
pub struct Injection {
    pub in_port: u32,
    pub frame: Vec<u8>,
}

/// A scripted switch: answers the handshake, injects PACKET_INs, records.
pub struct ScriptedSwitch {
    stream: TcpStream,
    version: u8,
    dpid: u64,
    ports: u32,
    /// PACKET_INs carry this cookie, reason and table (faucet wants 0x5adc15c0, ACTION).
    pub packet_in_cookie: u64,
    pub packet_in_reason: u8,
    pub log: Vec<Recorded>,
    next_xid: u32,
}

impl ScriptedSwitch {
    /// Connects to a controller and says HELLO offering exactly `version`.
    pub fn connect(addr: SocketAddr, version: u8, dpid: u64, ports: u32) -> std::io::Result<ScriptedSwitch> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let mut s = ScriptedSwitch {
            stream,
            version,
            dpid,
            ports,
            packet_in_cookie: 0,
            packet_in_reason: 0,
            log: Vec::new(),
            next_xid: 1,
        };
        s.send(Message::new(0, Body::Hello { version, hello: Hello::with_versions(&[version]) }))?;
        Ok(s)
    }

    fn xid(&mut self) -> u32 {
        self.next_xid += 1;
        self.next_xid
    }

    /// Sends a message and records it.
    pub fn send(&mut self, msg: Message) -> std::io::Result<()> {
        let bytes = msg.emit().map_err(std::io::Error::other)?;
        self.stream.write_all(&bytes)?;
        self.log.push(Recorded { dir: Dir::SwitchToController, bytes: Bytes::from(bytes) });
        Ok(())
    }

    /// Reads one frame, waiting at most `timeout`; `None` on timeout.
    fn recv(&mut self, timeout: Duration) -> std::io::Result<Option<Bytes>> {
        self.stream.set_read_timeout(Some(timeout))?;
        let mut header = [0u8; 8];
        match self.stream.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u16::from_be_bytes([header[2], header[3]]) as usize;
        if len < 8 {
            return Err(std::io::Error::other(format!("controller sent length {len}")));
        }
        let mut frame = header.to_vec();
        frame.resize(len, 0);
        self.stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        self.stream.read_exact(&mut frame[8..])?;
        let bytes = Bytes::from(frame);
        self.log.push(Recorded { dir: Dir::ControllerToSwitch, bytes: bytes.clone() });
        Ok(Some(bytes))
    }

    /// Answers the controller until it has been quiet for `quiet`, or `max` passed.
    pub fn serve(&mut self, quiet: Duration, max: Duration) -> std::io::Result<()> {
        let end = Instant::now() + max;
        while Instant::now() < end {
            let Some(bytes) = self.recv(quiet)? else { return Ok(()) };
            let msg = Message::parse(bytes).map_err(std::io::Error::other)?;
            if let Some(reply) = self.reply_to(&msg) {
                self.send(reply)?;
            }
        }
        Ok(())
    }

    fn port_name(n: u32) -> FixedStr<16> {
        FixedStr::new(&format!("s1-eth{n}"))
    }

    fn reply_to(&mut self, msg: &Message) -> Option<Message> {
        let xid = msg.xid;
        let body = match &msg.body {
            Body::V10(m) => Body::V10(match m {
                v10::Msg::EchoRequest(d) => v10::Msg::EchoReply(d.clone()),
                v10::Msg::FeaturesRequest => v10::Msg::FeaturesReply(v10::FeaturesReply {
                    datapath_id: self.dpid,
                    n_buffers: 0,
                    n_tables: 1,
                    capabilities: 0xc7,
                    actions: 0xfff,
                    ports: (1..=self.ports)
                        .map(|n| v10::PhyPort {
                            port_no: n as u16,
                            hw_addr: Mac([0x0a, 0, 0, 0, 1, n as u8]),
                            name: Self::port_name(n),
                            config: 0,
                            state: 0,
                            curr: 0x40 | 0x800,
                            advertised: 0,
                            supported: 0,
                            peer: 0,
                        })
                        .collect(),
                }),
                v10::Msg::GetConfigRequest => v10::Msg::GetConfigReply(v10::SwitchConfig { flags: 0, miss_send_len: 128 }),
                v10::Msg::BarrierRequest => v10::Msg::BarrierReply,
                v10::Msg::StatsRequest(req) => v10::Msg::StatsReply(v10::StatsReply {
                    flags: 0,
                    body: match &req.body {
                        v10::stats::StatsRequestBody::Desc => v10::stats::StatsReplyBody::Desc(Box::new(desc10())),
                        v10::stats::StatsRequestBody::Flow(_) => v10::stats::StatsReplyBody::Flow(vec![]),
                        _ => return None,
                    },
                }),
                _ => return None,
            }),
            Body::V13(m) => Body::V13(match m {
                v13::Msg::EchoRequest(d) => v13::Msg::EchoReply(d.clone()),
                v13::Msg::FeaturesRequest => v13::Msg::FeaturesReply(v13::FeaturesReply {
                    datapath_id: self.dpid,
                    n_buffers: 0,
                    n_tables: 254,
                    auxiliary_id: 0,
                    capabilities: 0x4f,
                    reserved: 0,
                }),
                v13::Msg::GetConfigRequest => v13::Msg::GetConfigReply(v13::SwitchConfig { flags: 0, miss_send_len: 128 }),
                v13::Msg::BarrierRequest => v13::Msg::BarrierReply,
                v13::Msg::RoleRequest(r) => v13::Msg::RoleReply(*r),
                v13::Msg::GetAsyncRequest => v13::Msg::GetAsyncReply(v13::AsyncConfig {
                    packet_in_mask: [3, 0],
                    port_status_mask: [7, 7],
                    flow_removed_mask: [15, 0],
                }),
                v13::Msg::MultipartRequest(req) => {
                    use v13::multipart::{ReplyBody, RequestBody};
                    let body = match &req.body {
                        RequestBody::PortDesc => ReplyBody::PortDesc(
                            (1..=self.ports)
                                .map(|n| v13::Port {
                                    port_no: n,
                                    hw_addr: Mac([0x0a, 0, 0, 0, 1, n as u8]),
                                    name: Self::port_name(n),
                                    config: 0,
                                    state: v13::port_state::LIVE,
                                    curr: 0x800 | 0x20,
                                    advertised: 0,
                                    supported: 0,
                                    peer: 0,
                                    curr_speed: 10_000_000,
                                    max_speed: 10_000_000,
                                })
                                .collect(),
                        ),
                        RequestBody::Desc => ReplyBody::Desc(Box::new(desc10())),
                        RequestBody::Flow(_) => ReplyBody::Flow(vec![]),
                        RequestBody::Table => ReplyBody::Table(vec![]),
                        RequestBody::PortStats { .. } => ReplyBody::PortStats(vec![]),
                        RequestBody::GroupDesc => ReplyBody::GroupDesc(vec![]),
                        RequestBody::MeterConfig { .. } => ReplyBody::MeterConfig(vec![]),
                        RequestBody::TableFeatures(_) => ReplyBody::TableFeatures(Bytes::new()),
                        _ => return None,
                    };
                    v13::Msg::MultipartReply(v13::MultipartReply { flags: 0, body })
                }
                _ => return None,
            }),
            _ => return None,
        };
        Some(Message::new(xid, body))
    }

    /// Sends a PACKET_IN for `inj` (unbuffered, whole frame).
    pub fn packet_in(&mut self, inj: &Injection) -> std::io::Result<()> {
        let xid = self.xid();
        let data = Bytes::from(inj.frame.clone());
        let body = if self.version == OFP10 {
            Body::V10(v10::Msg::PacketIn(v10::PacketIn {
                buffer_id: v10::NO_BUFFER,
                total_len: data.len() as u16,
                in_port: inj.in_port as u16,
                reason: self.packet_in_reason,
                data,
            }))
        } else {
            debug_assert_eq!(self.version, OFP13);
            Body::V13(v13::Msg::PacketIn(v13::PacketIn {
                buffer_id: v13::NO_BUFFER,
                total_len: data.len() as u16,
                reason: self.packet_in_reason,
                table_id: 0,
                cookie: self.packet_in_cookie,
                r#match: v13::Match::new([v13::BasicOxm::exact(v13::Field::InPort, inj.in_port as u128)]),
                data,
            }))
        };
        self.send(Message::new(xid, body))
    }
}

fn desc10() -> v10::stats::DescStats {
    v10::stats::DescStats {
        mfr_desc: FixedStr::new("sts"),
        hw_desc: FixedStr::new("scripted switch"),
        sw_desc: FixedStr::new(env!("CARGO_PKG_VERSION")),
        serial_num: FixedStr::new("0"),
        dp_desc: FixedStr::new("test"),
    }
}

/// The Ethernet frames the tests inject: host `n` has MAC 00:00:00:00:00:nn and
/// IP 10.0.0.n (built with the mock network's own builders).
pub mod frames {
    use std::net::Ipv4Addr;

    use sts_mocknet::packet::{build, push_vlan, set_field, ETH_VLAN};
    pub use sts_mocknet::packet::checksum;
    use sts_proxy::wire::v13::Field;
    use sts_proxy::wire::Mac;

    fn mac(n: u8) -> Mac {
        Mac([0, 0, 0, 0, 0, n])
    }

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, n)
    }

    fn tag(mut f: Vec<u8>, vlan: Option<u16>) -> Vec<u8> {
        if let Some(v) = vlan {
            push_vlan(&mut f, ETH_VLAN);
            set_field(&mut f, Field::VlanVid, v as u128);
        }
        f
    }

    /// An ARP request (op 1, broadcast) or reply (op 2) from host `from` about host `to`.
    pub fn arp(op: u16, from: u8, to: u8, vlan: Option<u16>) -> Vec<u8> {
        let tha = if op == 1 { Mac::default() } else { mac(to) };
        tag(build::arp(op, mac(from), ip(from), tha, ip(to)), vlan)
    }

    /// An ICMP echo request from host `from` to host `to`.
    pub fn ping(from: u8, to: u8, vlan: Option<u16>) -> Vec<u8> {
        tag(build::icmp_echo(8, mac(from), mac(to), ip(from), ip(to), 1, 1, b"sts"), vlan)
    }
}
