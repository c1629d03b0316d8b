//! Controllers configured over REST (`setup` steps) and policy changes as
//! inputs (`[[policies]]`), on os-ken's own rest_firewall: unconfigured, the
//! app drops everything (its default) and sts rightly reports a blackhole;
//! with the config's setup steps it forwards, and a fuzz run with policy
//! changes among its inputs finds nothing wrong.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn firewall_example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/osken-firewall.toml")
}

fn sts(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts")
}

fn said(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-policy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn rest_firewall_with_setup_fuzzes_clean_and_without_it_is_a_blackhole() {
    let dir = scratch("fw");
    let out = dir.join("with-setup");
    let run = sts(&["fuzz", "--config", firewall_example().to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0), "no violation with the app configured: {}", said(&run));
    let log = std::fs::read_to_string(out.join("logs/controller-0-os-ken.log")).unwrap();
    assert!(log.contains("\"PUT /firewall/module/enable/all HTTP/1.1\" 200"), "setup ran: {log}");
    let trace = std::fs::read_to_string(out.join("trace.jsonl")).unwrap();
    let policies = trace.lines().filter(|l| l.contains(r#""type":"policy""#)).count();
    assert!(policies >= 2, "policy changes among the fuzzer's inputs ({policies})");
    assert!(log.matches("/firewall/log/").count() >= policies, "each applied: {log}");

    // The same app and inputs without the setup steps: default-deny.
    let example = std::fs::read_to_string(firewall_example()).unwrap();
    let start = example.find("setup = [").unwrap();
    let end = start + example[start..].find("]\n\n").unwrap() + 2;
    let bare = dir.join("no-setup.toml");
    std::fs::write(&bare, format!("{}{}", &example[..start], &example[end..])).unwrap();
    let out = dir.join("no-setup");
    let run = sts(&["fuzz", "--config", bare.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    // Exit 4: present before the first input (no input caused it).
    assert_eq!(run.status.code(), Some(4), "{}", said(&run));
    assert!(said(&run).contains("a match-all rule of priority 65535"), "the app's drop-all rule: {}", said(&run));
}

#[test]
fn a_failing_setup_step_names_itself_and_a_bad_one_is_a_config_error() {
    let dir = scratch("bad");
    let example = std::fs::read_to_string(firewall_example()).unwrap();
    let wrong = dir.join("wrong-path.toml");
    std::fs::write(&wrong, example.replace("PUT /firewall/module/enable/all", "PUT /firewall/nothing/here")).unwrap();
    let run = sts(&["fuzz", "--config", wrong.to_str().unwrap(), "--out", dir.join("a").to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    assert!(said(&run).contains("setup step 1 of c0") && said(&run).contains("HTTP 404"), "{}", said(&run));

    let malformed = dir.join("malformed.toml");
    std::fs::write(&malformed, example.replace("PUT /firewall/module/enable/all", "enable the firewall please"))
        .unwrap();
    let run = sts(&["fuzz", "--config", malformed.to_str().unwrap(), "--out", dir.join("b").to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    assert!(said(&run).contains("controllers[0].setup[0].http"), "{}", said(&run));

    let loop_ = dir.join("after-unknown.toml");
    std::fs::write(&loop_, example.replace(r#"after = ["log-off"]"#, r#"after = ["log-of"]"#)).unwrap();
    let run = sts(&["fuzz", "--config", loop_.to_str().unwrap(), "--out", dir.join("c").to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    assert!(said(&run).contains(r#"no policy named "log-of""#), "{}", said(&run));
}

#[test]
fn faucets_vlan_race_pinned_by_a_delayed_packet_in_reproduces_every_time() {
    // docs/bugs-found.md, bug 3: the MCS `sts minimize` found, as a trace.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces/faucet-slow-packet-in");
    let dir = scratch("faucet-race");
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let run = sts(&["replay", dir.to_str().unwrap(), "--repeat", "3", "--expect", "reproduce"]);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert!(said(&run).contains("reproduced 3/3"), "{}", said(&run));
    assert!(said(&run).contains("h2 reaches h1 despite the isolation policy"), "{}", said(&run));
}
