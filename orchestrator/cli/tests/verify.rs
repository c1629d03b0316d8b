//! `sts verify` on a small hand-made network in the Stanford data set's
//! format: loops appear and go with the updates, an ACL stops one, and a
//! malformed data set gets exit 2 with its file and line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-verify-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn write(dir: &Path, topo: &str, updates: &str) {
    std::fs::write(dir.join("topo.txt"), topo).expect("topo");
    std::fs::write(dir.join("updates"), updates).expect("updates");
}

fn verify(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sts")).arg("verify").args(args).output().expect("run sts verify")
}

/// Routers a, b, c in a line; c's interface towards b filtered by an inbound ACL.
const TOPO: &str = "\
a_rtr te1 b_rtr te1
b_rtr te1 a_rtr te1
b_rtr te2 c_rtr_guard_te1_in inport
c_rtr_guard_te1_in permit c_rtr te1
c_rtr te1 b_rtr te2
";

const UPDATES: &str = "\
+ fwd a_rtr 167772160 8 te1 8
+ fwd b_rtr 167772160 8 te1 8
- fwd b_rtr 167772160 8 te1 8
+ acl c_rtr_guard access-list guard deny 0 255 any null null null 10.1.0.0 0.0.255.255 null null 65535
+ acl c_rtr_guard access-list guard permit 0 255 any null null null any null null null 65534
+ fwd b_rtr 167837696 16 te2 16
+ fwd c_rtr 167837696 16 te1 16
+ fwd b_rtr 167903232 16 te2 16
+ fwd c_rtr 167903232 16 te1 16
";

#[test]
fn loops_are_reported_with_the_update_that_made_them_and_acls_stop_them() {
    let dir = scratch("loops");
    write(&dir, TOPO, UPDATES);
    let out = verify(&[dir.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // b sends 10/8 back to a: a loop at update 2 (gone at 3).
    assert!(text.contains("update 2 (line 2) + b_rtr: 10.0.0.0/8 → te1"), "{text}");
    assert!(text.contains("loop through a_rtr, b_rtr"), "{text}");
    // c's ACL denies 10.1/16 from b: no loop at update 7; 10.2/16 passes: a loop at 9.
    assert!(!text.contains("update 7 "), "{text}");
    assert!(text.contains("update 9 (line 9) + c_rtr: 10.2.0.0/16 → te1"), "{text}");
    assert!(
        text.contains("b_rtr in te1 (from a_rtr te1)") || text.contains("c_rtr in te1"),
        "witness hops by name: {text}"
    );
    assert!(text.contains("2 violations appeared"), "{text}");
    // Both loops turn back: a and b each send 10/8 out of te1, where it
    // came from the other; b and c send 10.2/16 back where it came from.
    assert!(text.contains("turns back at a_rtr te1, b_rtr te1 (out of the interface it came in on)"), "{text}");
    assert!(text.contains("turns back at b_rtr te2, c_rtr te1 ("), "{text}");
    assert!(text.contains("2 of them turn back"), "{text}");
    let times = dir.join("times.csv");
    let json = verify(&[dir.to_str().expect("utf-8"), "--json", "--times", times.to_str().expect("utf-8")]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    let appeared = doc["appeared"].as_array().expect("appeared");
    assert_eq!(appeared.iter().map(|a| a["update"].as_u64().unwrap_or(0)).collect::<Vec<_>>(), vec![2, 9]);
    assert_eq!(appeared[1]["elements"], serde_json::json!(["b_rtr", "c_rtr", "c_rtr_guard_te1_in"]));
    assert_eq!(
        appeared[0]["turns_back"],
        serde_json::json!([{"router": "a_rtr", "interface": "te1"}, {"router": "b_rtr", "interface": "te1"}])
    );
    // One CSV row per update, its line and rule named, times as numbers.
    let csv = std::fs::read_to_string(&times).expect("--times wrote its file");
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "update,line,apply_us,check_us,rule");
    assert_eq!(rows.len(), 10, "{csv}");
    let second: Vec<&str> = rows[2].splitn(5, ',').collect();
    assert_eq!((second[0], second[1], second[4]), ("2", "2", "\"+ b_rtr: 10.0.0.0/8 → te1\""), "{csv}");
    assert!(second[2].parse::<f64>().is_ok() && second[3].parse::<f64>().is_ok(), "{csv}");
    // A path that cannot be written fails before the run, exit 3.
    let unwritable = verify(&[dir.to_str().expect("utf-8"), "--times", "/nonexistent/dir/t.csv"]);
    assert_eq!(unwritable.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&unwritable.stderr).contains("/nonexistent/dir/t.csv"));
    assert_eq!(doc["updates"], 9);
    assert!(doc["per_update"]["mean_us"].as_f64().is_some_and(|m| m > 0.0));
    // The first update alone makes no loop.
    let limited = verify(&[dir.to_str().expect("utf-8"), "--limit", "1"]);
    assert_eq!(limited.status.code(), Some(0), "{}", String::from_utf8_lossy(&limited.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_data_set_is_named_with_its_file_and_line() {
    let dir = scratch("bad");
    write(&dir, TOPO, "+ fwd a_rtr 167772160 8 te1 8\n+ fwd a_rtr ten 8 te1 8\n");
    let out = verify(&[dir.to_str().expect("utf-8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("updates:2: prefix 'ten' is not a u32"), "{err}");
    write(&dir, "a_rtr te1 b_rtr\n", "");
    let out = verify(&[dir.to_str().expect("utf-8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("topo.txt:1: a link is `DEVICE PORT DEVICE PORT`"), "{err}");
    let out = verify(&[dir.join("missing").to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fuzzed experiment (Open vSwitch's test controller, a host migration):
/// the network at the violation, its tables rebuilt from the trace's
/// messages, shows the run's own violation again.
#[test]
fn an_experiment_directory_is_checked_at_its_violation_and_agrees_with_the_run() {
    let dir = scratch("experiment");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs13-migration.toml");
    let fuzz = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["fuzz", "--config", config.to_str().expect("utf-8"), "--out"])
        .arg(dir.join("run"))
        .args(["--check", "0"])
        .output()
        .expect("run sts fuzz");
    assert_eq!(fuzz.status.code(), Some(1), "{}", String::from_utf8_lossy(&fuzz.stderr));
    let out = verify(&[dir.join("run").to_str().expect("utf-8"), "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(doc["run"]["invariant"], "blackhole", "{doc}");
    assert_eq!(doc["agrees"], true, "the run's blackhole is in the rebuilt tables: {doc}");
    assert!(doc["rules"].as_u64().is_some_and(|r| r > 0), "{doc}");
    let text = verify(&[dir.join("run").to_str().expect("utf-8")]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("found again in the tables"));
    let limited = verify(&[dir.join("run").to_str().expect("utf-8"), "--limit", "3"]);
    assert_eq!(limited.status.code(), Some(2), "--limit is for data sets");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory of `dump-flows` listings: read onto the config's network and
/// checked; a line it cannot read, or a bridge the network lacks, is named.
#[test]
fn dumped_tables_are_checked_on_the_configs_network_and_bad_lines_are_named() {
    let dir = scratch("dumps");
    std::fs::write(
        dir.join("config.toml"),
        "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]\n",
    )
    .expect("config");
    // s1 sends h2's traffic out of its host port back to h1: h1 -> h2 is
    // blackholed, with that rule as the culprit; h2 -> h1 works.
    std::fs::write(
        dir.join("s1.flows"),
        "NXST_FLOW reply (xid=0x4):\n cookie=0x0, duration=3.1s, table=0, n_packets=0, n_bytes=0, priority=10,ip,nw_dst=10.0.0.2 actions=output:1\n priority=0 actions=output:1,output:2\n",
    )
    .expect("s1");
    std::fs::write(dir.join("s2.flows"), " priority=0 actions=FLOOD\n").expect("s2");
    let out = verify(&[dir.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("the tables of 2 bridges (flows: s1 2, s2 1)"), "{text}");
    assert!(text.contains("blackhole: h1 -> h2"), "{text}");
    assert!(text.contains("culprit: s1 table 0: a rule of priority 10 on eth_type,ipv4_dst"), "{text}");
    assert!(!text.contains("h2 -> h1"), "{text}");
    let json = verify(&[dir.to_str().expect("utf-8"), "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    assert_eq!(doc["flows"], serde_json::json!({"s1": 2, "s2": 1}));

    std::fs::write(dir.join("s2.flows"), " priority=0 actions=FLOOD\n priority=5,in_port=eth1 actions=drop\n")
        .expect("s2");
    let out = verify(&[dir.to_str().expect("utf-8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("s2.flows:2: ") && err.contains("--no-names"), "{err}");
    std::fs::write(dir.join("s2.flows"), " priority=0 actions=FLOOD\n").expect("s2");
    std::fs::write(dir.join("s7.flows"), " priority=0 actions=FLOOD\n").expect("s7");
    let out = verify(&[dir.to_str().expect("utf-8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("s7.flows") && err.contains("has no switch s7"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
