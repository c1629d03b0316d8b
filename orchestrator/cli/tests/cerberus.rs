//! Cerberus 0.1.8 (a proactive layer-2 controller on Ryu, from PyPI) under
//! sts: the three bugs `docs/bugs-found.md` lists for it, found by fuzzing the
//! shipped example configs and minimized to the one input that causes each.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

fn sts(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts")
}

fn said(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-cerberus-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The external inputs of the minimized trace, as their JSON objects.
fn mcs_inputs(dir: &Path) -> Vec<serde_json::Value> {
    let trace = std::fs::read_to_string(dir.join("mcs/trace.jsonl")).expect("the MCS trace");
    trace
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| e.get("external").cloned())
        .collect()
}

/// Fuzzes `config` into `out` (a violation: exit 1) and minimizes it.
fn fuzz_and_minimize(config: &str, out: &Path) -> (String, Vec<serde_json::Value>) {
    let fuzz = sts(&["fuzz", "--config", example(config).to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(fuzz.status.code(), Some(1), "{config} finds its bug: {}", said(&fuzz));
    let min = sts(&["minimize", out.to_str().unwrap()]);
    assert_eq!(min.status.code(), Some(0), "{}", said(&min));
    (said(&fuzz), mcs_inputs(out))
}

#[test]
fn one_link_failure_on_a_ring_cuts_hosts_off_although_a_path_remains() {
    let out = scratch("ring");
    let (fuzzed, mcs) = fuzz_and_minimize("fuzz-cerberus-ring.toml", &out);
    assert!(fuzzed.contains("blackhole"), "{fuzzed}");
    // The fast-failover backup sends the frame to a neighbour whose own
    // group sends it straight back: out of its in-port, which a switch drops.
    assert!(fuzzed.contains("the matching entry outputs nothing"), "{fuzzed}");
    assert_eq!(mcs.len(), 1, "one input: {mcs:?}");
    assert_eq!(mcs[0]["type"], "link_down", "{mcs:?}");
}

#[test]
fn a_host_removed_from_the_config_keeps_its_connectivity() {
    let out = scratch("remove");
    let (fuzzed, mcs) = fuzz_and_minimize("fuzz-cerberus-remove-host.toml", &out);
    assert!(fuzzed.contains("despite the isolation policy"), "{fuzzed}");
    assert_eq!(mcs.len(), 1, "one input: {mcs:?}");
    assert_eq!(mcs[0]["type"], "policy", "{mcs:?}");
    assert_eq!(mcs[0]["name"], "remove-h3", "{mcs:?}");
    // The push reached Cerberus, and its clean-up went out: DELETE flow_mods
    // (command 3) that name output port 0, so they match no rule.
    let log = std::fs::read_to_string(out.join("logs/cerberus-0/cerberus.log")).unwrap();
    assert!(log.contains("A config update was sent in"), "{log}");
    let trace = std::fs::read_to_string(out.join("trace.jsonl")).unwrap();
    assert!(
        trace.lines().any(|l| l.contains(r#"\"command\":3"#) && l.contains(r#"\"out_port\":0,"#)),
        "Cerberus's DELETEs with out_port 0 are in the trace"
    );
}

#[test]
fn a_config_push_on_two_switches_crashes_the_group_check() {
    let out = scratch("two");
    let (fuzzed, mcs) = fuzz_and_minimize("fuzz-cerberus-two-switches.toml", &out);
    assert!(fuzzed.contains("TypeError at cerberus.py:1292 in compare_and_update_groups"), "{fuzzed}");
    assert_eq!(mcs.len(), 1, "one input: {mcs:?}");
    assert_eq!(mcs[0]["type"], "policy", "{mcs:?}");
}
