//! Independent oracle for the codec: real sessions between real controllers and
//! a scripted switch, decoded by sts and by tshark's OpenFlow dissector, must
//! agree on every message: type, length, xid, match fields, actions, ports.
//! Every real message must also re-encode byte for byte.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use sts_e2e::tshark::{self, KINDS};
use sts_e2e::{frames, pcap, Dir, Injection, ScriptedSwitch};
use sts_engine::controller::{free_local_addr, Controller, ControllerSpec};
use sts_proxy::wire::{Message, OFP10, OFP13};

struct Session {
    name: &'static str,
    spec: fn(&std::path::Path) -> ControllerSpec,
    version: u8,
    /// faucet: PACKET_INs tagged with VLAN 100, cookie 0x5adc15c0, reason ACTION.
    faucet_style: bool,
    /// Message types the controller must have sent for the session to count.
    must_send: &'static [&'static str],
}

/// Learning switches answer PACKET_INs with FLOW_MOD and PACKET_OUT.
const LEARNING: &[&str] = &["features_request", "flow_mod", "packet_out"];

fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-oracle-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(session: Session) {
    let dir = work_dir(session.name);
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/faucet.yaml"), dir.join("faucet.yaml")).unwrap();
    let addr = free_local_addr().unwrap();
    let spec = (session.spec)(&dir);
    let ctl = Controller::start(&spec, addr, &dir.join("controller.log")).unwrap_or_else(|e| panic!("{e}"));

    let mut sw = ScriptedSwitch::connect(addr, session.version, 1, 3).unwrap();
    let vlan = if session.faucet_style {
        sw.packet_in_cookie = 0x5adc15c0;
        sw.packet_in_reason = 1;
        Some(100)
    } else {
        None
    };
    let quiet = Duration::from_millis(700);
    sw.serve(quiet, Duration::from_secs(20)).unwrap();
    for (port, frame) in [
        (1, frames::arp(1, 1, 2, vlan)),
        (2, frames::arp(2, 2, 1, vlan)),
        (1, frames::ping(1, 2, vlan)),
        (2, frames::ping(2, 1, vlan)),
    ] {
        sw.packet_in(&Injection { in_port: port, frame }).unwrap();
        sw.serve(Duration::from_millis(300), Duration::from_secs(5)).unwrap();
    }
    drop(ctl);

    let pcap_path = dir.join("session.pcap");
    pcap::write(&pcap_path, &sw.log).unwrap();
    let theirs = tshark::dissect(&pcap_path, sts_report::pcap::CONTROLLER_PORT).unwrap();

    let mut ours = Vec::new();
    let mut from_controller = Vec::new();
    for rec in &sw.log {
        let msg = Message::parse(rec.bytes.clone())
            .unwrap_or_else(|e| panic!("{}: cannot decode {:02x?}: {e}", session.name, &rec.bytes[..]));
        assert_eq!(Bytes::from(msg.emit().unwrap()), rec.bytes, "{}: re-encoding differs for {msg:?}", session.name);
        if rec.dir == Dir::ControllerToSwitch {
            from_controller.push(msg.type_name());
        }
        ours.push(tshark::facts_of(&rec.bytes, &msg));
    }
    assert_eq!(ours.len(), theirs.len(), "{}: sts saw {} messages, tshark {}", session.name, ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        for kind in KINDS {
            assert_eq!(
                a.get(kind),
                b.get(kind),
                "{}: message {i} differs in {kind}\n sts:    {a:?}\n tshark: {b:?}",
                session.name
            );
        }
    }
    // The session must have exercised the codec: a handshake plus flow programming.
    for must in session.must_send {
        assert!(from_controller.contains(must), "{}: controller never sent {must}: {from_controller:?}", session.name);
    }
    eprintln!(
        "{}: {} messages agree with tshark ({} from the controller)",
        session.name,
        ours.len(),
        from_controller.len()
    );
}

#[test]
fn os_ken_simple_switch_13_agrees_with_tshark() {
    run(Session {
        name: "osken13",
        spec: |_| sts_engine::presets::os_ken(&["os_ken.app.simple_switch_13"]),
        version: OFP13,
        faucet_style: false,
        must_send: LEARNING,
    });
}

#[test]
fn os_ken_simple_switch_10_agrees_with_tshark() {
    run(Session {
        name: "osken10",
        spec: |_| sts_engine::presets::os_ken(&["os_ken.app.simple_switch"]),
        version: OFP10,
        faucet_style: false,
        must_send: LEARNING,
    });
}

#[test]
fn ovs_testcontroller_10_agrees_with_tshark() {
    run(Session {
        name: "ovs10",
        spec: |_| sts_engine::presets::ovs_testcontroller(&[]),
        version: OFP10,
        faucet_style: false,
        must_send: LEARNING,
    });
}

#[test]
fn ovs_testcontroller_13_agrees_with_tshark() {
    run(Session {
        name: "ovs13",
        spec: |_| sts_engine::presets::ovs_testcontroller(&["-O", "OpenFlow13"]),
        version: OFP13,
        faucet_style: false,
        must_send: LEARNING,
    });
}

#[test]
fn faucet_agrees_with_tshark() {
    run(Session {
        name: "faucet",
        spec: |d| sts_engine::presets::faucet(&d.join("faucet.yaml")),
        version: OFP13,
        faucet_style: true,
        // faucet floods through its own pipeline: it programs tables and groups, no PACKET_OUT.
        must_send: &["features_request", "multipart_request", "set_async", "flow_mod"],
    });
}
