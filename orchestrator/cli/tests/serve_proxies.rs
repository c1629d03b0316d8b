//! Standalone proxies managed over `sts serve`'s API, in front of a real
//! ovs-testcontroller: a switch connecting through a proxy gets the
//! controller's handshake; a policy changed at run time drops or holds the
//! next switch's FEATURES_REQUEST, and a release lets it through; the
//! recording holds every message; populate is idempotent; deleting a proxy
//! ends its connections and keeps its recording.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sts_client::{Client, Error, PolicyRule, ProxyRequest, RuleAction};

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(data: &Path) -> (KillOnDrop, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut said = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&said).contains("Ctrl-C") {
        assert_eq!(stderr.read(&mut byte).unwrap(), 1, "sts serve ended: {}", String::from_utf8_lossy(&said));
        said.push(byte[0]);
    }
    let said = String::from_utf8_lossy(&said).to_string();
    let addr = said.split("listening on http://").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (KillOnDrop(child), format!("http://{addr}"))
}

/// The OpenFlow message types that arrive on `s` within `limit`.
fn types_within(s: &mut TcpStream, limit: Duration) -> Vec<&'static str> {
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut got = Vec::new();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return got;
        }
        s.set_read_timeout(Some(left)).unwrap();
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return got,
        }
        while buf.len() >= 8 && buf.len() >= u16::from_be_bytes([buf[2], buf[3]]) as usize {
            let len = u16::from_be_bytes([buf[2], buf[3]]) as usize;
            got.push(sts_proxy::wire::type_name(buf[0], buf[1]));
            buf.drain(..len);
        }
    }
}

/// Connects as an OpenFlow 1.0 switch and says HELLO.
fn switch_via(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&[1, 0, 0, 8, 0, 0, 0, 1]).unwrap();
    s
}

fn status(r: Result<impl std::fmt::Debug, Error>) -> u16 {
    match r {
        Err(Error::Api(e)) => e.status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// What a test of proxies runs on: a scratch directory, a real
/// ovs-testcontroller and its address, `sts serve` and a client of it.
struct Bench {
    scratch: std::path::PathBuf,
    ctl_addr: std::net::SocketAddr,
    controller: sts_engine::controller::Controller,
    _server: KillOnDrop,
    client: Client,
}

fn bench(tag: &str) -> Bench {
    let scratch = std::env::temp_dir().join(format!("sts-serve-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let ctl_addr = sts_engine::controller::free_local_addr().unwrap();
    let controller = sts_engine::controller::Controller::start(
        &sts_engine::presets::ovs_testcontroller(&[]),
        ctl_addr,
        &scratch.join("ovs-testcontroller.log"),
    )
    .expect("ovs-testcontroller starts (scripts/setup installs it)");
    let (server, url) = start_server(&scratch.join("data"));
    let client = Client::new(url).with_token_file(scratch.join("data/token")).unwrap();
    Bench { scratch, ctl_addr, controller, _server: server, client }
}

#[test]
fn proxies_change_policy_while_they_run() {
    let Bench { scratch, ctl_addr, controller, _server, client: c } = bench("proxies");

    let req = ProxyRequest {
        name: "s1".into(),
        listen: "127.0.0.1:0".into(),
        controller: ctl_addr.to_string(),
        rules: vec![],
        seed: None,
    };
    let p = c.create_proxy(&req).unwrap();
    assert_ne!(p.listen, "127.0.0.1:0", "the bound port is given");
    assert_eq!(status(c.create_proxy(&req)), 409, "one proxy per name");

    // No policy: the controller's handshake comes through.
    let mut first = switch_via(&p.listen);
    let got = types_within(&mut first, Duration::from_secs(3));
    assert!(got.contains(&"hello") && got.contains(&"features_request"), "{got:?}");

    // Dropping FEATURES_REQUEST from now on: the next switch never gets one.
    c.set_policy("s1", vec![PolicyRule::on_type(RuleAction::Drop, "features_request")]).unwrap();
    let mut second = switch_via(&p.listen);
    let got = types_within(&mut second, Duration::from_millis(1500));
    assert!(got.contains(&"hello") && !got.contains(&"features_request"), "{got:?}");

    // Holding it: it waits until released.
    c.set_policy("s1", vec![PolicyRule::on_type(RuleAction::Hold, "features_request")]).unwrap();
    let mut third = switch_via(&p.listen);
    let got = types_within(&mut third, Duration::from_millis(1500));
    assert!(!got.contains(&"features_request"), "{got:?}");
    let info = c.proxy("s1").unwrap();
    // What the controller sent after it waits behind it (the connection's order).
    assert!(info.switches == 3 && info.queued >= 1, "{info:?}");
    assert_eq!(c.release("s1").unwrap(), info.queued as u64);
    let got = types_within(&mut third, Duration::from_secs(2));
    assert!(got.contains(&"features_request"), "released: {got:?}");

    // Bad policies and names are refused; the proxy goes on.
    let bad_type = vec![PolicyRule::on_type(RuleAction::Drop, "flow_modd")];
    assert_eq!(status(c.set_policy("s1", bad_type)), 400);
    let no_ms = vec![PolicyRule::on_type(RuleAction::Delay, "flow_mod")];
    assert_eq!(status(c.set_policy("s1", no_ms)), 400);
    let no_rate = vec![PolicyRule { rate: None, ..PolicyRule::bandwidth(1) }];
    assert_eq!(status(c.set_policy("s1", no_rate)), 400);
    let rate_on_a_drop = vec![PolicyRule { rate: Some(5), ..PolicyRule::on_type(RuleAction::Drop, "flow_mod") }];
    assert_eq!(status(c.set_policy("s1", rate_on_a_drop)), 400);
    assert_eq!(status(c.set_policy("s1", vec![PolicyRule::bandwidth(0)])), 400);
    assert_eq!(status(c.set_policy("nobody", vec![])), 404);
    let bad_name = ProxyRequest { name: "../x".into(), ..req.clone() };
    assert_eq!(status(c.create_proxy(&bad_name)), 400);
    let taken = ProxyRequest { name: "s2".into(), listen: p.listen.clone(), ..req.clone() };
    assert_eq!(status(c.create_proxy(&taken)), 409, "its port is taken");

    // Populate twice: the second call changes nothing.
    let wanted = vec![ProxyRequest { rules: vec![], ..req.clone() }, ProxyRequest { name: "s2".into(), ..req.clone() }];
    let once = c.populate_proxies(&wanted).unwrap();
    let twice = c.populate_proxies(&wanted).unwrap();
    assert_eq!(once.iter().map(|p| &p.listen).collect::<Vec<_>>(), twice.iter().map(|p| &p.listen).collect::<Vec<_>>());
    assert_eq!(once[0].listen, p.listen, "an unchanged proxy keeps running (its port)");
    assert_eq!(c.proxies().unwrap().len(), 2);

    // The recording holds every message, as `sts proxy --record` writes them.
    let recording = c.recording("s1").unwrap();
    let mut lines = recording.lines();
    assert_eq!(lines.next(), Some(sts_proxy::standalone::RECORDING_HEADER));
    let types: Vec<String> = lines
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["msg_type"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(types.iter().filter(|t| *t == "features_request").count() >= 3, "{types:?}");

    // Deleting ends its connections; the recording stays.
    c.delete_proxy("s1").unwrap();
    assert_eq!(types_within(&mut first, Duration::from_secs(2)), Vec::<&str>::new());
    let mut byte = [0u8; 1];
    first.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert!(matches!(first.read(&mut byte), Ok(0) | Err(_)), "the connection is closed");
    assert_eq!(status(c.proxy("s1")), 404);
    assert!(c.recording("s1").unwrap().lines().count() > types.len(), "kept, finished");
    c.reset().unwrap();
    assert!(c.proxies().unwrap().is_empty());
    drop(controller);
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Connects as an OpenFlow 1.0 switch with datapath id `dpid`: HELLO, and a
/// FEATURES_REPLY to the controller's FEATURES_REQUEST.
fn switch_with_datapath(addr: &str, dpid: u64) -> TcpStream {
    let mut s = switch_via(addr);
    let start = Instant::now();
    let mut buf = Vec::new();
    let xid = loop {
        assert!(start.elapsed() < Duration::from_secs(5), "no FEATURES_REQUEST came");
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut chunk = [0u8; 4096];
        if let Ok(n) = s.read(&mut chunk) {
            buf.extend_from_slice(&chunk[..n]);
        }
        let mut at = 0;
        let mut found = None;
        while buf.len() >= at + 8 {
            let len = u16::from_be_bytes([buf[at + 2], buf[at + 3]]) as usize;
            if buf[at + 1] == 5 {
                found = Some(u32::from_be_bytes([buf[at + 4], buf[at + 5], buf[at + 6], buf[at + 7]]));
            }
            at += len.max(8);
        }
        if let Some(x) = found {
            break x;
        }
    };
    let mut reply = vec![1, 6, 0, 32];
    reply.extend_from_slice(&xid.to_be_bytes());
    reply.extend_from_slice(&dpid.to_be_bytes());
    reply.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    s.write_all(&reply).unwrap();
    s
}

/// A PACKET_IN of a broadcast ARP frame from port 1 (ovs-testcontroller
/// answers with a PACKET_OUT that floods it).
fn packet_in(s: &mut TcpStream) {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0x08, 0x06]);
    frame.extend_from_slice(&[0; 28]);
    let mut m = vec![1, 10];
    m.extend_from_slice(&((18 + frame.len()) as u16).to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff]);
    m.extend_from_slice(&(frame.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 0]);
    m.extend_from_slice(&frame);
    s.write_all(&m).unwrap();
}

/// Toxiproxy's ways with toxics, on OpenFlow: a rule added on its own by
/// name selects one switch by its datapath id, is read back, switched off
/// and on, replaced and removed; a rule with a probability applies to about
/// that share of the messages, the draws fixed by the proxy's seed.
#[test]
fn named_rules_select_a_switch_by_datapath_id_and_come_and_go_one_by_one() {
    let Bench { scratch, ctl_addr, controller, _server, client: c } = bench("rules");
    let req = ProxyRequest {
        name: "dp".into(),
        listen: "127.0.0.1:0".into(),
        controller: ctl_addr.to_string(),
        rules: vec![],
        seed: Some(1),
    };
    let p = c.create_proxy(&req).unwrap();
    assert_eq!(p.seed, 1);

    let quiet =
        PolicyRule { datapath_id: Some(0x2a), ..PolicyRule::on_type(RuleAction::Drop, "packet_in") }.named("quiet");
    c.add_rule("dp", &quiet).unwrap();
    assert_eq!(status(c.add_rule("dp", &quiet)), 409, "one rule per name");
    assert_eq!(status(c.add_rule("dp", &PolicyRule::on_type(RuleAction::Drop, "hello"))), 400, "unnamed");
    let too_likely = PolicyRule { probability: Some(2.0), ..quiet.clone() }.named("x");
    assert_eq!(status(c.add_rule("dp", &too_likely)), 400, "a probability is 0 to 1");
    let jitter_on_drop = PolicyRule { jitter_ms: Some(5), ..quiet.clone() }.named("y");
    assert_eq!(status(c.add_rule("dp", &jitter_on_drop)), 400, "jitter belongs to delays");
    assert_eq!(status(c.add_rule("nobody", &quiet)), 404);
    assert_eq!(c.rule("dp", "quiet").unwrap(), quiet, "read back as sent");

    // The rule names 0x2a: that switch's PACKET_IN never reaches the
    // controller; 0x2b's does, and the controller floods it.
    let mut a = switch_with_datapath(&p.listen, 0x2a);
    let mut b = switch_with_datapath(&p.listen, 0x2b);
    packet_in(&mut a);
    packet_in(&mut b);
    assert!(types_within(&mut b, Duration::from_secs(2)).contains(&"packet_out"), "0x2b's answered");
    assert!(!types_within(&mut a, Duration::from_millis(500)).contains(&"packet_out"), "0x2a's dropped");
    let info = c.proxy("dp").unwrap();
    let ids: Vec<u64> = info.datapath_ids.values().copied().collect();
    assert_eq!(ids, [0x2a, 0x2b], "{info:?}");

    // Switched off, it stays in the policy and selects nothing.
    let off = PolicyRule { enabled: Some(false), ..quiet.clone() };
    c.replace_rule("dp", "quiet", &off).unwrap();
    assert_eq!(c.proxy("dp").unwrap().rules, [off]);
    packet_in(&mut a);
    assert!(types_within(&mut a, Duration::from_secs(2)).contains(&"packet_out"), "0x2a's answered now");
    // Removed: gone, and a second removal is a 404.
    c.delete_rule("dp", "quiet").unwrap();
    assert!(c.proxy("dp").unwrap().rules.is_empty());
    assert_eq!(status(c.rule("dp", "quiet")), 404);
    assert_eq!(status(c.delete_rule("dp", "quiet")), 404);

    // A rule with a probability: about half of 0x2b's next 60 PACKET_INs
    // are dropped (the recording says which).
    let half =
        PolicyRule { probability: Some(0.5), ..PolicyRule::on_type(RuleAction::Drop, "packet_in") }.named("half");
    c.add_rule("dp", &half).unwrap();
    let before = c.recording("dp").unwrap().lines().count();
    for _ in 0..60 {
        packet_in(&mut b);
    }
    let until = Instant::now() + Duration::from_secs(5);
    let fates = loop {
        let recording = c.recording("dp").unwrap();
        let fates: Vec<String> = recording
            .lines()
            .skip(before)
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["msg_type"] == "packet_in")
            .map(|v| v["disposition"].as_str().unwrap_or("").to_string())
            .collect();
        if fates.len() >= 60 || Instant::now() > until {
            break fates;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(fates.len(), 60, "every PACKET_IN recorded");
    let dropped = fates.iter().filter(|f| *f == "dropped").count();
    assert!((15..=45).contains(&dropped), "about half dropped: {dropped} of 60");
    drop(controller);
    let _ = std::fs::remove_dir_all(&scratch);
}
