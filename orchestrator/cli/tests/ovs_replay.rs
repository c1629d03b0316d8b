//! From the lab back to the testbed: a suite case's minimal causal sequence
//! replayed on real Open vSwitch bridges (`sts replay DIR --on ovs`), with
//! os-ken started for real behind a recording proxy (and, as a control, the
//! same trace without its failure, which shows nothing); and a replay killed
//! with SIGKILL mid-run leaves no bridge, namespace, veth, OVS daemon or
//! controller behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// `stale_routes`: the ring s1-s2-s3-s4 routed by a suite app on os-ken; the
/// link s1-s2 fails and the routes over it stay (its MCS alone: no noise).
fn stale_routes(dir: &Path) {
    let out = Command::new("python3")
        .arg(workspace().join("tests/suite/make_trace.py"))
        .args(["stale_routes", "0", "1"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn sts() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sts"))
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        // The parent is the second field after the command's closing parenthesis.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for our purposes (its parent, sts, is dead).
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// The testbed's interfaces and namespaces, by the tag `ovs-testbed` gives a
/// directory (the first four digits of its path's `cksum`).
fn leftovers(testbed: &Path) -> Vec<String> {
    let sum = Command::new("sh")
        .arg("-c")
        .arg("printf '%s' \"$1\" | cksum | cut -c1-4")
        .arg("sh")
        .arg(testbed)
        .output()
        .unwrap();
    let tag = format!("t{}", String::from_utf8_lossy(&sum.stdout).trim());
    let mut found = Vec::new();
    for args in [&["-o", "link"][..], &["netns", "list"][..]] {
        let out = Command::new("ip").args(args).output().unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.contains(&tag) {
                found.push(line.to_string());
            }
        }
    }
    for daemon in ["ovs-vswitchd", "ovsdb-server"] {
        let pidfile = testbed.join(format!("run/{daemon}.pid"));
        if let Some(pid) = std::fs::read_to_string(&pidfile).ok().and_then(|p| p.trim().parse::<u32>().ok()) {
            if alive(pid) {
                found.push(format!("{daemon} (pid {pid}) still running"));
            }
        }
    }
    found
}

#[test]
fn a_suite_mcs_reproduces_on_open_vswitch_and_a_killed_replay_leaves_nothing_behind() {
    let tmp = std::env::temp_dir().join(format!("sts-ovs-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = tmp.join("stale_routes");
    stale_routes(&dir);

    // The whole run: os-ken on OVS, the link fails, the tables read back.
    let junit = tmp.join("ovs.xml");
    let out =
        sts().arg("replay").arg(&dir).args(["--on", "ovs", "--repeat", "1", "--junit"]).arg(&junit).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("routes over the failed link s1-s2 (Open vSwitch run 1 of 1)"), "{xml}");
    assert!(xml.contains("the bug reproduces on Open vSwitch"), "{xml}");
    assert!(stdout.contains("Open vSwitch run 1: reproduced, the same culprit"), "{stdout}");
    assert!(stdout.contains("culprit: s2 table 0: a rule of priority 10 on eth_dst"), "{stdout}");
    assert!(stdout.contains("reproduces on Open vSwitch 1/1 (the same culprit in 1)"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ovs/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["reproduced"], 1);
    let run = &summary["runs"][0];
    assert!(run["violations"].as_array().unwrap().iter().any(|v| v["elements"] == serde_json::json!(["h1", "h2"])));
    // What the testbed did is on disk: each bridge's tables, the recording.
    for f in ["tables-2/s1.flows", "tables-2/s2.groups", "recording-c0.jsonl"] {
        assert!(dir.join("ovs/1").join(f).is_file(), "{f} missing");
    }
    assert!(run["recorded"].as_u64().unwrap() > 20, "{run}");
    assert!(leftovers(&dir.join("ovs/1/ovs")).is_empty(), "{:?}", leftovers(&dir.join("ovs/1/ovs")));

    // The control: the same trace without its link failure shows nothing on
    // Open vSwitch (the ring routes every pair), and the run says where its
    // tables differ from the lab's.
    let control = tmp.join("without_the_failure");
    std::fs::create_dir_all(&control).unwrap();
    std::fs::copy(dir.join("config.toml"), control.join("config.toml")).unwrap();
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    let kept: Vec<&str> = trace.lines().filter(|l| !l.contains("link_down")).collect();
    std::fs::write(control.join("trace.jsonl"), kept.join("\n") + "\n").unwrap();
    let out = sts().arg("replay").arg(&control).args(["--on", "ovs", "--repeat", "1"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("Open vSwitch run 1: not reproduced: no violation in the tables"), "{stdout}");
    assert!(stdout.contains("reproduces on Open vSwitch 0/1"), "{stdout}");

    // Killed once the bridges are up: the exit guard takes the testbed down.
    std::fs::remove_dir_all(dir.join("ovs")).unwrap();
    let mut child = sts()
        .arg("replay")
        .arg(&dir)
        .args(["--on", "ovs", "--repeat", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let testbed = dir.join("ovs/1/ovs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !testbed.join("controllers").exists() {
        assert!(Instant::now() < deadline, "the testbed did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = children(child.id());
    assert!(!before.is_empty());
    assert!(!leftovers(&testbed).is_empty(), "the testbed should be up");
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = leftovers(&testbed);
        let running: Vec<u32> = before.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() && running.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind after SIGKILL: {left:?}, processes {running:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
