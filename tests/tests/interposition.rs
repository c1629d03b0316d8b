//! The interposition proxy with a real controller: everything recorded with
//! fingerprints, reproducibly; held messages change what the network does.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sts_engine::clock::Clock;
use sts_engine::config::Config;
use sts_engine::controller::Controller;
use sts_engine::netrun::NetRunner;
use sts_mocknet::{Network, Topology};
use sts_proxy::interpose::{Action, ChannelId, Direction, Rule};
use sts_proxy::wire::OFP13;

const OSKEN13_LINEAR: &str = "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]\n";

type Sequences = BTreeMap<(ChannelId, Direction), Vec<String>>;

fn recorded_pingall(name: &str) -> Sequences {
    let config = Config::from_toml(OSKEN13_LINEAR, Path::new(name)).unwrap();
    let dir = std::env::temp_dir().join(format!("sts-e2e-record-{}-{name}", std::process::id()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(sts_engine::pingall::run(sts_e2e::engine(), &config, &dir)).unwrap_or_else(|e| panic!("{e}"));
    assert!(run.matrix.all_reached(), "{}", sts_report::matrix(&run.matrix));
    let mut seqs = Sequences::new();
    for r in run.runner.interposer.log() {
        if !matches!(r.msg_type, "echo_request" | "echo_reply") {
            seqs.entry((r.channel, r.dir)).or_default().push(r.fingerprint().0);
        }
    }
    seqs
}

#[test]
fn a_pingall_recording_holds_the_handshake_and_repeats_exactly() {
    let a = recorded_pingall("first");
    let b = recorded_pingall("second");
    let types: std::collections::BTreeSet<&str> =
        a.values().flatten().map(|f| f.split([' ', '/']).nth(1).unwrap()).collect();
    for t in [
        "hello",
        "features_request",
        "features_reply",
        "multipart_request",
        "multipart_reply",
        "flow_mod",
        "packet_in",
        "packet_out",
    ] {
        assert!(types.contains(t), "no {t} recorded; saw {types:?}");
    }
    assert_eq!(a.len(), 6, "three switches, two directions each");
    for (key, seq) in &a {
        assert_eq!(Some(seq), b.get(key), "fingerprint sequences differ on {key:?}");
    }
}

#[test]
fn holding_flow_mods_to_one_switch_breaks_paths_through_it_until_released() {
    let dir = std::env::temp_dir().join(format!("sts-e2e-hold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ctl = Controller::start_on_free_port(
        &sts_engine::presets::os_ken(&["os_ken.app.simple_switch_13"]),
        &dir.join("controller.log"),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let net = Network::new(&Topology::linear(3), OFP13);
        let mut runner = NetRunner::connect(net, &[ctl.addr()], Clock::start()).await.unwrap();
        runner.interposer.add_rule(Rule {
            dir: Some(Direction::ControllerToSwitch),
            dpid: Some(2),
            msg_type: Some("flow_mod".into()),
            action: Action::Hold,
            ..Default::default()
        });
        assert!(runner.settle(1000, 20_000).await, "handshakes did not finish");
        assert!(runner.interposer.queued() > 0, "nothing was held");
        // h1 -> h3 crosses s2, which has no flows (not even its table-miss entry).
        assert!(!runner.ping(0, 2, 1500).await, "ping crossed a switch whose FLOW_MODs are held");
        runner.interposer.set_rules(Vec::new());
        runner.release(Some(2));
        assert_eq!(runner.interposer.queued(), 0);
        runner.run_for(Duration::from_millis(300)).await;
        let reached = runner.ping(0, 2, 2000).await || runner.ping(0, 2, 2000).await;
        assert!(reached, "ping failed after the held FLOW_MODs were released");
    });
}

#[test]
fn the_standalone_proxy_relays_and_records_a_real_session() {
    let dir = std::env::temp_dir().join(format!("sts-e2e-standalone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ctl = Controller::start_on_free_port(
        &sts_engine::presets::os_ken(&["os_ken.app.simple_switch_13"]),
        &dir.join("controller.log"),
    )
    .unwrap();
    let recording = dir.join("recording.jsonl");
    let (rec, recorder) = sts_proxy::standalone::record_to(&recording).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ctl_addr = ctl.addr();
        let proxy = tokio::spawn(async move {
            sts_proxy::standalone::run(
                "127.0.0.1:0".parse().unwrap(),
                ctl_addr,
                Some(rec),
                Vec::new(),
                64,
                sts_engine::clock::Clock::start().now_fn(),
                Some(tx),
            )
            .await
        });
        let proxy_addr = rx.await.unwrap();
        // The mock switches stand in for real ones: they only see the proxy's address.
        let net = Network::new(&Topology::linear(2), OFP13);
        let mut runner = NetRunner::connect(net, &[proxy_addr], Clock::start()).await.unwrap();
        assert!(runner.settle(1000, 20_000).await);
        assert!(
            runner.ping(0, 1, 2000).await || runner.ping(0, 1, 2000).await,
            "ping through the standalone proxy failed"
        );
        proxy.abort();
    });
    drop(rt);
    let written = recorder.finish().unwrap();
    let text = std::fs::read_to_string(&recording).unwrap();
    assert_eq!(text.lines().count() as u64, written + 1, "header plus every event");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(sts_proxy::standalone::RECORDING_HEADER));
    let events: Vec<serde_json::Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    let types: std::collections::BTreeSet<&str> = events.iter().map(|e| e["msg_type"].as_str().unwrap()).collect();
    for t in ["hello", "features_request", "features_reply", "flow_mod", "packet_in", "packet_out"] {
        assert!(types.contains(t), "recording lacks {t}: {types:?}");
    }
    // Each line carries the message's bytes, from which its fingerprint is
    // made where needed (not on the recording path): every one decodes.
    for e in &events {
        let raw = sts_proxy::wire::hex_bytes::parse(e["raw"].as_str().expect("raw bytes")).unwrap();
        let msg = sts_proxy::wire::Message::parse(raw).expect("recorded bytes decode");
        assert!(!sts_proxy::wire::Fingerprint::of(&msg).0.is_empty());
        assert!(e.get("fingerprint").is_none(), "fingerprints are not recorded: {e}");
    }
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sequence numbers must increase");
}
