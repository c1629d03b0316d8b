//! Harness for end-to-end tests against real controllers.
//!
//! - [`ScriptedSwitch`]: one mock switch (`sts-mocknet`) on a plain blocking
//!   socket, with PACKET_INs injected by hand instead of a dataplane; it records
//!   every message in both directions, exactly as it crossed the wire.
//! - [`pcap`]: writes a recorded session as a pcap of one TCP connection, so an
//!   independent dissector (tshark) can read exactly the bytes that crossed it.
//! - [`c_fixture`]: a C stand-in controller of `fixtures/`, compiled once.

pub mod pcap;
pub mod tshark;

/// The engine the tests of one test binary share: its zygotes are parked
/// once and forked by every test, as one sts process would.
pub fn engine() -> &'static sts_engine::Engine {
    static ENGINE: std::sync::OnceLock<sts_engine::Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(sts_engine::Engine::silent)
}

/// `fixtures/NAME.c`, built once per test process with the system's C
/// compiler (the one Rust links with); the program's path.
pub fn c_fixture(name: &str) -> std::path::PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, std::path::PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, out)) = built.iter().find(|(n, _)| n == name) {
        return out.clone();
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/{name}.c"));
    let out = std::env::temp_dir().join(format!("sts-e2e-{name}-{}", std::process::id()));
    let made = std::process::Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .expect("running cc");
    assert!(made.status.success(), "cc {}: {}", src.display(), String::from_utf8_lossy(&made.stderr));
    built.push((name.to_string(), out.clone()));
    out
}

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sts_mocknet::switch::{Output, Switch};
use sts_proxy::wire::{v10, v13, Body, Message, OFP10, OFP13};

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

/// A scripted switch: a mock switch answers the controller, the test injects
/// PACKET_INs, and everything is recorded.
pub struct ScriptedSwitch {
    stream: TcpStream,
    switch: Switch,
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
        let mut switch = Switch::new(dpid, version, ports);
        switch.ports.values_mut().for_each(|p| p.link_up = true);
        let hello = switch.hello();
        let mut s =
            ScriptedSwitch { stream, switch, packet_in_cookie: 0, packet_in_reason: 0, log: Vec::new(), next_xid: 1 };
        s.send(hello)?;
        Ok(s)
    }

    /// The same switch (its flow tables, its session state) on another
    /// connection that already carries the session: no HELLO is sent. For a
    /// controller resumed from a checkpoint.
    pub fn reconnected(&self, stream: TcpStream) -> std::io::Result<ScriptedSwitch> {
        stream.set_nodelay(true)?;
        Ok(ScriptedSwitch {
            stream,
            switch: self.switch.clone(),
            packet_in_cookie: self.packet_in_cookie,
            packet_in_reason: self.packet_in_reason,
            log: Vec::new(),
            next_xid: self.next_xid,
        })
    }

    /// This end's local address (the controller sees it as its peer).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The output ports of every PACKET_OUT (1.3) recorded from index `from`
    /// of the log on.
    pub fn packet_out_ports(&self, from: usize) -> Vec<u32> {
        let mut ports = Vec::new();
        for r in self.log.iter().skip(from).filter(|r| r.dir == Dir::ControllerToSwitch) {
            if let Ok(Message { body: Body::V13(v13::Msg::PacketOut(p)), .. }) = Message::parse(r.bytes.clone()) {
                ports.extend(p.actions.iter().filter_map(|a| match a {
                    v13::Action::Output { port, .. } => Some(*port),
                    _ => None,
                }));
            }
        }
        ports
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
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Ok(None)
            }
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

    /// Answers the controller until it has been quiet for `quiet`, or `max`
    /// passed. Only the switch's replies are sent: there is no dataplane, so
    /// frames it would emit and PACKET_INs they would cause are left out.
    pub fn serve(&mut self, quiet: Duration, max: Duration) -> std::io::Result<()> {
        let end = Instant::now() + max;
        while Instant::now() < end {
            let Some(bytes) = self.recv(quiet)? else { return Ok(()) };
            let msg = Message::parse(bytes.clone()).map_err(std::io::Error::other)?;
            for out in self.switch.handle(&bytes, &msg, 0) {
                if let Output::Reply(reply) = out {
                    self.send(reply)?;
                }
            }
        }
        Ok(())
    }

    /// Sends a PACKET_IN for `inj` (unbuffered, whole frame).
    pub fn packet_in(&mut self, inj: &Injection) -> std::io::Result<()> {
        let xid = self.xid();
        let data = Bytes::from(inj.frame.clone());
        let body = if self.switch.version == OFP10 {
            Body::V10(v10::Msg::PacketIn(v10::PacketIn {
                buffer_id: v10::NO_BUFFER,
                total_len: data.len() as u16,
                in_port: inj.in_port as u16,
                reason: self.packet_in_reason,
                data,
            }))
        } else {
            debug_assert_eq!(self.switch.version, OFP13);
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

/// The Ethernet frames the tests inject: host `n` has MAC 00:00:00:00:00:nn and
/// IP 10.0.0.n (built with the mock network's own builders).
pub mod frames {
    use std::net::Ipv4Addr;

    pub use sts_mocknet::packet::checksum;
    use sts_mocknet::packet::{build, push_vlan, set_field, ETH_VLAN};
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
