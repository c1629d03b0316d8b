//! Two cases of the bug suite, minimized end to end (the whole suite runs in
//! `scripts/evaluate`; see docs/evaluation.md): each buggy os-ken app's trace
//! hides its known minimal causal sequence among extraneous inputs, and
//! `sts minimize` must find a sequence of exactly the optimal size.

use std::path::{Path, PathBuf};
use std::process::Command;

use sts::minimize::{self, Options, PeekMode};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

/// Writes the case's experiment with `extra` extraneous inputs; returns its
/// directory and the optimal MCS size.
fn make_case(case: &str, extra: u32, tag: &str) -> (PathBuf, usize) {
    // Tests run in parallel: each gets a directory of its own.
    let dir = std::env::temp_dir().join(format!("sts-e2e-suite-{}-{case}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new("python3")
        .arg(workspace().join("tests/suite/make_trace.py"))
        .args([case, &extra.to_string(), "1", dir.to_str().unwrap()])
        .output()
        .expect("python3 runs make_trace.py");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("make_trace.py prints its case as JSON");
    (dir, info["optimal"].as_u64().expect("optimal size") as usize)
}

fn minimizes_to_optimal(case: &str, peek: PeekMode) {
    let (dir, optimal) = make_case(case, 8, &format!("{peek:?}"));
    let r = minimize::run(&dir, &Options { replays: 1, jobs: 2, peek, budget_s: None, final_replays: 1 }).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert!(r.original_inputs > optimal, "{case}: the trace holds extraneous inputs");
    assert_eq!(r.mcs_inputs, optimal, "{case}: MCS {:?}", r.mcs);
    assert_eq!(r.final_reproduced, 1, "{case}: the MCS replays");
}

#[test]
fn stale_routes_minimizes_to_the_link_failure_with_peek() {
    minimizes_to_optimal("stale_routes", PeekMode::Dry);
}

/// PEEK with checkpoints finds the same MCS, and checkpoints were really
/// used (no fallback to prefix replay).
#[test]
fn stale_routes_minimizes_to_the_link_failure_with_peek_by_checkpoints() {
    minimizes_to_optimal("stale_routes", PeekMode::Checkpoints);
    let (checkpointed, refused) = sts::peek::counts();
    assert!(checkpointed > 0 && refused == 0, "{checkpointed} candidates peeked with checkpoints, {refused} refused");
}

#[test]
fn link_state_corruption_minimizes_to_the_flap() {
    minimizes_to_optimal("link_state_corruption", PeekMode::Off);
}
