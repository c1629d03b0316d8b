//! `sts pcap`: a fuzz run's trace, written as a pcap, is read by tshark (an
//! independent dissector) as exactly the OpenFlow messages the trace
//! recorded, none malformed, for all three controllers (os-ken 1.3, faucet
//! 1.3, ovs-testcontroller 1.0); and its hosts' frames, written as a pcapng,
//! are read as the same frames, each on its host's interface in its
//! direction, none malformed.

use std::path::{Path, PathBuf};
use std::process::Command;

use sts_e2e::tshark;
use sts_engine::config::Config;
use sts_engine::fuzz;
use sts_proxy::wire::Message;
use sts_trace::{Internal, Trace};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Fuzzes `example` for at most `steps` steps; returns the experiment.
fn fuzzed(example: &str, steps: u32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-e2e-pcap-{}-{example}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = workspace().join("examples").join(example);
    let mut config = Config::load(&path).unwrap();
    config.fuzz.steps = steps;
    let text = std::fs::read_to_string(&path).unwrap();
    let exp = fuzz::create_experiment(&config, &text, &dir).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(fuzz::run(sts_e2e::engine(), &config, &exp)).unwrap();
    dir
}

fn check(example: &str, steps: u32) {
    let dir = fuzzed(example, steps);
    let trace = Trace::load(&dir.join("trace.jsonl")).unwrap();
    let pcap = dir.join("trace.pcapng");
    let (written, _) = sts_report::pcap::write_trace(&trace, std::fs::File::create(&pcap).unwrap()).unwrap();
    assert_eq!(written.without_bytes, 0, "{example}: trace v2 keeps every message's bytes");

    let mut ours: Vec<String> = Vec::new();
    for r in &trace.records {
        // Every message with its bytes (what the proxy dropped too: its
        // packet's comment says so).
        if let Some(Internal::Openflow { raw: Some(raw), .. }) = r.internal() {
            let msg = Message::parse(raw.clone()).unwrap();
            ours.push(tshark::facts_of(raw, &msg)["header"][0].clone());
        }
    }
    assert_eq!(ours.len(), written.messages);
    assert!(written.messages > 20, "{example}: a real session ({} messages)", written.messages);
    let mut theirs: Vec<String> = tshark::dissect(&pcap, sts_report::pcap::CONTROLLER_PORT)
        .unwrap()
        .into_iter()
        .map(|f| f["header"][0].clone())
        .collect();
    // Streams interleave: compare the messages, not their order across streams.
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "{example}: tshark reads the trace's messages");

    // Wireshark 4.0's OpenFlow 1.0 dissector throws on a FLOW_MOD whose
    // action list is empty (a drop rule, 72 bytes: ovs-testcontroller sends
    // them): it reads an action header past the message's end. Those, and
    // only those, are excused.
    let filter = "(_ws.malformed || _ws.expert.severity >= error) \
                  && !(openflow_1_0.type == 14 && openflow.length == 72)";
    let malformed = Command::new("tshark").arg("-r").arg(&pcap).args(["-Y", filter]).output().unwrap();
    assert!(malformed.status.success(), "{}", String::from_utf8_lossy(&malformed.stderr));
    let lines = String::from_utf8_lossy(&malformed.stdout);
    assert!(lines.trim().is_empty(), "{example}: malformed or erroneous packets:\n{lines}");

    // Who is who without a legend: every message from a switch comes from
    // its own address (127.1.x.y, its datapath id), every reply goes back to
    // it; and times never run backwards (a burst keeps the trace's order).
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "frame.time_epoch"])
        .output()
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut last = 0f64;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        // The outer header's (a PACKET_IN's frame has its own inside).
        let outer = |v: &str| v.split(',').next().unwrap_or("").to_string();
        seen.insert(outer(f[0]));
        seen.insert(outer(f[1]));
        let t: f64 = f[2].parse().unwrap();
        assert!(t >= last, "{example}: time runs backwards at {line}");
        last = t;
    }
    let dpids: std::collections::BTreeSet<u64> = trace
        .records
        .iter()
        .filter_map(|r| match r.internal() {
            Some(Internal::Openflow { dpid, .. }) => Some(*dpid),
            _ => None,
        })
        .collect();
    let mut want: std::collections::BTreeSet<String> =
        dpids.iter().map(|d| format!("127.1.{}.{}", d >> 8, d & 255)).collect();
    want.insert("127.0.0.1".into());
    assert_eq!(seen, want, "{example}: one address per switch, and the controller's");
    assert_eq!(written.legend.len(), dpids.len() + 1, "{example}: {}", written.legend_line());
    // With name resolution on, the file's own names: sN and c0.
    let named = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-N", "n", "-T", "fields", "-e", "ip.src_host", "-e", "ip.dst_host"])
        .output()
        .unwrap();
    let mut names = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&named.stdout).lines() {
        for f in line.split('\t') {
            names.insert(f.split(',').next().unwrap_or("").to_string());
        }
    }
    let mut want: std::collections::BTreeSet<String> = dpids.iter().map(|d| format!("s{d}")).collect();
    want.insert("c0".into());
    assert_eq!(names, want, "{example}: the capture names its addresses");
    eprintln!("{example}: {} messages in {} connections, tshark agrees", written.messages, written.connections);
    check_frames(example, &dir, &trace);
}

/// The hosts' frames: tshark sees each on the interface named after its host,
/// outbound when sent (`frame.p2p_dir` 0) and inbound when received (1), with
/// the trace's bytes.
fn check_frames(example: &str, dir: &Path, trace: &Trace) {
    let ours: Vec<String> = trace
        .records
        .iter()
        .filter_map(|r| match r.internal() {
            Some(Internal::Frame { host, sent, raw: Some(raw) }) => Some(format!(
                "{host} {} {}",
                if *sent { 0 } else { 1 },
                raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )),
            _ => None,
        })
        .collect();
    assert!(ours.len() > 4, "{example}: pings make host frames ({} recorded)", ours.len());
    let file = dir.join("dataplane.pcapng");
    let (written, _) = sts_report::pcap::write_frames(trace, std::fs::File::create(&file).unwrap()).unwrap();
    assert_eq!(written.frames, ours.len());
    let tshark = |args: &[&str]| {
        let out = Command::new("tshark").arg("-r").arg(&file).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let heads = tshark(&["-T", "fields", "-e", "frame.interface_name", "-e", "frame.p2p_dir", "-e", "frame.len"]);
    let heads: Vec<Vec<String>> = heads.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect();
    // The bytes, from tshark's hex dump: one block per frame, each line an
    // offset and up to 16 bytes (then their ASCII, not read: `len` says
    // how many bytes the line has).
    let dump = tshark(&["-x"]);
    let blocks: Vec<&str> = dump.split("\n\n").filter(|b| !b.trim().is_empty()).collect();
    assert_eq!(heads.len(), ours.len(), "{example}: tshark reads every frame");
    assert_eq!(blocks.len(), ours.len(), "{example}: a hex dump per frame");
    let theirs: Vec<String> = heads
        .iter()
        .zip(&blocks)
        .map(|(h, block)| {
            let mut left: usize = h[2].parse().unwrap();
            let mut hex = String::new();
            for line in block.lines() {
                let n = left.min(16);
                hex.extend(line.split_whitespace().skip(1).take(n).map(str::to_string));
                left -= n;
            }
            format!("{} {} {hex}", h[0], h[1])
        })
        .collect();
    assert_eq!(ours, theirs, "{example}: tshark reads the trace's frames, each on its host's interface and direction");
    let bad = tshark(&["-Y", "_ws.malformed || _ws.expert.severity >= error"]);
    assert!(bad.trim().is_empty(), "{example}: malformed frames:\n{bad}");
    eprintln!("{example}: {} host frames on {} interfaces, tshark agrees", written.frames, written.hosts);
}

#[test]
fn osken_13_sessions_read_back_in_tshark() {
    check("fuzz-osken13-migration.toml", 20);
}

#[test]
fn faucet_sessions_read_back_in_tshark() {
    check("fuzz-faucet-migration.toml", 20);
}

#[test]
fn ovs_testcontroller_10_sessions_read_back_in_tshark() {
    check("fuzz-ovs-mesh.toml", 20);
}
