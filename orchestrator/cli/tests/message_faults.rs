//! Message-level fuzz inputs (`[fuzz.rates] message_drop`): on os-ken's
//! simple_switch_13 they find a bug external inputs alone cannot cause. A
//! lost table-miss FLOW_MOD at a switch's handshake is never sent again, so
//! the switch drops everything it has no rule for; the minimal causal
//! sequence is the armed drop, the switch failing, and it coming back.

use std::path::Path;
use std::process::Command;

#[test]
fn a_lost_table_miss_flow_mod_is_found_and_minimized_to_three_inputs() {
    let dir = std::env::temp_dir().join(format!("sts-lost-flowmod-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-osken13-lost-flowmod.toml");
    let sts = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts");
    let fuzz = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&fuzz.stdout);
    assert_eq!(fuzz.status.code(), Some(1), "{said}\n{}", String::from_utf8_lossy(&fuzz.stderr));
    assert!(said.contains("table 0: no rule matches"), "a switch without its table-miss entry: {said}");
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    assert!(trace.contains(r#""type":"control_drop""#), "the fuzzer dropped messages");

    let min = sts(&["minimize", dir.to_str().unwrap(), "--final-replays", "5"]);
    let said = String::from_utf8_lossy(&min.stdout);
    assert!(min.status.success(), "{said}\n{}", String::from_utf8_lossy(&min.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mcs/report.json")).unwrap()).unwrap();
    assert_eq!(report["mcs_inputs"], 3, "{said}");
    let mcs = std::fs::read_to_string(dir.join("mcs/trace.jsonl")).unwrap();
    let kinds: Vec<&str> = ["control_drop", "switch_down", "switch_up"]
        .into_iter()
        .filter(|k| mcs.contains(&format!(r#""type":"{k}""#)))
        .collect();
    assert_eq!(kinds, ["control_drop", "switch_down", "switch_up"], "{said}");
    assert!(said.contains("reproduces 5/5"), "{said}");
}

/// `sts minimize --internal` on os-ken's migration bug: after the two
/// inputs, fewer messages than the minimal sequence's replay delivers are
/// kept, among them the FLOW_MOD that points s3's rule for h3 at the port h3
/// leaves (the culprit); with every other droppable message dropped the same
/// bug reproduces in every final replay.
#[test]
fn internal_minimization_keeps_the_culprit_rule_and_fewer_messages() {
    let dir = std::env::temp_dir().join(format!("sts-internal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces/migration");
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["minimize", dir.to_str().unwrap(), "--internal", "--final-replays", "5"])
        .output()
        .expect("run sts");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mcs/internal.json")).unwrap()).unwrap();
    let (droppable, kept) = (r["droppable"].as_u64().unwrap(), r["kept"].as_array().unwrap().len() as u64);
    assert!(kept > 0 && kept < droppable, "{said}");
    assert!(r["delivered_internal"].as_u64() < r["delivered_external"].as_u64(), "{said}");
    assert_eq!(r["final_reproduced"], 5, "{said}");
    assert!(
        said.contains("c0 -> s3 flow_mod: add priority=1,in_port=2,dl_src=")
            && said.contains(",dl_dst=00:00:00:00:00:03 actions=output:1"),
        "the culprit rule is kept: {said}"
    );
    let md = std::fs::read_to_string(dir.join("mcs/report.md")).unwrap();
    assert!(md.contains("## Messages that matter") && md.contains("| original |"), "{md}");
}
