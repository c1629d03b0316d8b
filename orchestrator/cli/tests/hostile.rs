//! Hostile controllers (`tests/fixtures/hostile_controller.py`): whatever a
//! controller installs or refuses, sts ends in bounded time and memory, with
//! the documented exit code and a message that says what happened.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};

/// Peak RSS sts may reach under any hostile mode (docs/reliability.md).
const RSS_BOUND_KIB: i64 = 1 << 20;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hostile_controller.py")
}

/// Runs `sts pingall` against the hostile controller in `mode`; returns the
/// exit code, stderr, the time it took and the largest RSS of any child this
/// test process has waited for so far (sts is the largest: the controller is
/// a small Python program).
fn pingall_against(mode: &str) -> (i32, String, Duration, i64) {
    let dir = std::env::temp_dir().join(format!("sts-hostile-{}-{mode}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"command\"\ncommand = [\"python3\", {:?}, \"{{port}}\", \"{mode}\"]\n\n[pingall]\nattempts = 1\nping_timeout_ms = 500\n",
            fixture().to_str().unwrap()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["pingall", "--config", config.to_str().unwrap()])
        .output()
        .expect("run sts");
    let took = started.elapsed();
    let peak = getrusage(UsageWho::RUSAGE_CHILDREN).map(|u| u.max_rss()).unwrap_or(0);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), took, peak)
}

/// A group of 64 buckets that flood and re-enter the group, and one
/// PACKET_OUT into it: sts used to spin at 100% CPU with no output.
#[test]
fn a_group_fanning_out_to_itself_is_cut_at_the_work_budget() {
    let (code, err, took, peak) = pingall_against("group-fanout");
    assert!(took < Duration::from_secs(120), "took {took:?}");
    assert!(matches!(code, 0 | 1), "exit {code}: {err}");
    assert!(err.contains("exceeded the work budget"), "{err}");
    assert!(peak < RSS_BOUND_KIB, "peak RSS {peak} KiB");
}

/// One FLOW_MOD with 4,000 FLOOD outputs on every switch: sts reached 18 GB
/// in 45 s before the budgets.
#[test]
fn thousands_of_flood_outputs_stay_within_the_memory_bound() {
    let (code, err, took, peak) = pingall_against("flood-rule");
    assert!(took < Duration::from_secs(120), "took {took:?}");
    assert!(matches!(code, 0 | 1), "exit {code}: {err}");
    assert!(err.contains("exceeded the work budget"), "{err}");
    assert!(peak < RSS_BOUND_KIB, "peak RSS {peak} KiB");
}

/// A controller that listens but never accepts: the kernel retries the
/// switches' SYNs for minutes; sts gives up after its connect timeout and
/// says why, with exit 3 (the environment: the controller).
#[test]
fn a_controller_that_never_accepts_times_out_with_exit_3() {
    let (code, err, took, _) = pingall_against("no-accept");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("does not accept connections"), "{err}");
    assert!(took < Duration::from_secs(60), "took {took:?} (the SYN retries take over 2 minutes)");
}
