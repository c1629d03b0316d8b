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
