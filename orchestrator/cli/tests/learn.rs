//! `sts learn`: a controller that writes a random nonce into every rule
//! (`tests/fixtures/nonce_controller.py`: a random hard timeout, a field the
//! hand-written fingerprint masks keep) makes replays miss its FLOW_MODs;
//! after learning from two replays, the nonce is masked and a replay matches
//! every event of the original.

use std::path::Path;
use std::process::Command;

fn sts(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The divergence of the latest replay in `replays/summary.json`.
fn latest_divergence(exp: &Path) -> serde_json::Value {
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(exp.join("replays/summary.json")).unwrap()).unwrap();
    s["runs"].as_array().unwrap().last().unwrap()["divergence"].clone()
}

#[test]
fn a_nonce_in_a_rule_is_learned_and_replays_match_again() {
    let dir = std::env::temp_dir().join(format!("sts-learn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/nonce_controller.py");
    let config = dir.join("config.toml");
    // Real time (a `command` controller): inputs 200 ms apart, so that the
    // recorded run never sends the next ping before the controller has
    // answered the last PACKET_IN (50 ms apart, a loaded machine recorded
    // that race and no replay, learned masks or not, could match it).
    std::fs::write(
        &config,
        format!(
            "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"command\"\n\
             command = [\"python3\", {:?}, \"{{port}}\"]\n\n[fuzz]\nseed = 1\nsteps = 20\nstep_ms = 200\n\n\
             [fuzz.rates]\ntraffic = 0.5\nlink_failure = 0.0\nlink_recovery = 0.0\nhost_migration = 0.0\n\n\
             [interpose]\nepsilon_ms = 300\n\n[invariants]\npersist_ms = 500\n",
            fixture.to_str().unwrap()
        ),
    )
    .unwrap();
    let exp = dir.join("exp");
    let (code, out, err) = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", exp.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let trace = std::fs::read_to_string(exp.join("trace.jsonl")).unwrap();
    assert!(trace.contains(r#"\"hard_timeout\":"#), "FLOW_MODs recorded (fingerprints quote their JSON)");

    // Without learning: the FLOW_MODs' nonces differ, the replay misses them.
    let (_, out, err) = sts(&["replay", exp.to_str().unwrap()]);
    let before = latest_divergence(&exp);
    assert!(before["missing"].as_u64().unwrap() > 0, "{before}\n{out}\n{err}");
    assert!(before["first_missing"].to_string().contains("flow_mod"), "{before}");

    let (code, out, err) = sts(&["learn", exp.to_str().unwrap(), "--runs", "2"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("flow_mod: hard_timeout"), "{out}");
    let masks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(exp.join("masks.json")).unwrap()).unwrap();
    assert_eq!(masks["by_type"]["flow_mod"], serde_json::json!(["hard_timeout"]), "only the nonce: {masks}");
    // Each learning replay: missed events before, none with the masks.
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| 1 |") || l.starts_with("| 2 |")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert!(cells[2].parse::<u32>().unwrap() > 0 && cells[4] == "0", "{row}");
    }

    // `sts minimize --learn` learns first (here: the same masks again).
    let (_, out, err) = sts(&["minimize", exp.to_str().unwrap(), "--learn", "1", "--final-replays", "1"]);
    assert!(out.contains("flow_mod: hard_timeout"), "{out}\n{err}");

    // With the masks: the replay matches every event of the original.
    let (_, out, err) = sts(&["replay", exp.to_str().unwrap()]);
    let after = latest_divergence(&exp);
    assert_eq!(after["missing"], 0, "{after}\n{out}\n{err}");
    assert!(after["first_missing"].is_null(), "{after}");
}
