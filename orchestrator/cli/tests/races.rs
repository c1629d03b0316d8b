//! `sts races` on runs of real controllers: faucet's VLAN-move race (a
//! PACKET_IN held across a policy change) names the policy and the held
//! PACKET_IN as the harmful pair; two bugs that are not races (os-ken's
//! forgotten migration, a suite app's stale routes) and a clean pingall have
//! none; a trace of inputs only reads its replay, or says how to get one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn sts() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sts"))
}

fn text(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A fresh copy of `examples/traces/NAME` (a hand-written trace: inputs only).
fn example(name: &str, tmp: &Path) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(workspace().join("examples/traces").join(name).join(f), dir.join(f)).unwrap();
    }
    dir
}

fn races_json(dir: &Path) -> (Option<i32>, serde_json::Value, String) {
    let out = sts().arg("races").arg(dir).arg("--json").output().unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    (out.status.code(), doc, text(&out))
}

fn replay(dir: &Path) {
    let out = sts().arg("replay").arg(dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "the bug reproduces: {}", text(&out));
}

#[test]
fn the_vlan_move_race_is_named_by_its_two_events() {
    let tmp = std::env::temp_dir().join(format!("sts-races-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = example("faucet-slow-packet-in", &tmp);

    // Inputs only and no replay yet: nothing to analyse, and the way to get it.
    let out = sts().arg("races").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("records inputs only") && text(&out).contains("sts replay"), "{}", text(&out));

    replay(&dir);
    let (code, doc, said) = races_json(&dir);
    assert_eq!(code, Some(1), "a harmful race: exit 1\n{said}");
    assert!(said.contains("reading its replay"), "{said}");
    assert!(doc["judged_by"].as_str().unwrap().contains("dl_dst=00:00:00:00:00:01"), "{doc:#}");
    // First: the policy change, and h1's PACKET_IN from s1 port 1 that the
    // proxy held across it (the fuzzer's 1 s delay), which faucet handled
    // after the change and learned h1 in its old VLAN from.
    let first = &doc["races"][0];
    assert_eq!(first["at"], "c0", "{first:#}");
    assert_eq!(first["first"]["what"], "policy split", "{first:#}");
    let held = first["second"]["what"].as_str().unwrap();
    assert!(held.starts_with("packet_in s1 → c0 (in_port=1: "), "{first:#}");
    assert!(first["second"]["delivered"]["t_ms"].as_u64().unwrap() > first["first"]["t_ms"].as_u64().unwrap());
    assert!(first["harm"].as_str().unwrap().contains("culprit rule's FLOW_MOD"), "{first:#}");
    // Every harmful race involves a PACKET_IN the proxy held.
    let harmful: Vec<&serde_json::Value> =
        doc["races"].as_array().unwrap().iter().filter(|r| !r["harm"].is_null()).collect();
    assert_eq!(harmful.len() as u64, doc["harmful"].as_u64().unwrap());
    assert!(
        harmful.iter().all(|r| !r["first"]["delivered"].is_null() || !r["second"]["delivered"].is_null()),
        "{doc:#}"
    );

    // The text and the report's section say the same.
    let out = sts().arg("races").arg(&dir).output().unwrap();
    let said = text(&out);
    assert!(
        said.contains("harmful race 1 at c0") && said.contains("first:  seq") && said.contains("policy split"),
        "{said}"
    );
    let out = sts().arg("report").arg(dir.join("replays/1")).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let html = std::fs::read_to_string(dir.join("replays/1/report/index.html")).unwrap();
    assert!(html.contains(r#"<section id="races">"#) && html.contains("policy split"), "no races section");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn bugs_that_are_not_races_have_no_harmful_race() {
    let tmp = std::env::temp_dir().join(format!("sts-races-none-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    // os-ken forgets a migrated host: its old rule stays, whatever the order.
    let migration = example("migration", &tmp);
    replay(&migration);
    // A suite app routes over a failed link (its MCS alone).
    let stale = tmp.join("stale_routes");
    suite_case("stale_routes", "0", &stale);
    replay(&stale);
    for dir in [&migration, &stale] {
        let (code, doc, said) = races_json(dir);
        assert_eq!(code, Some(0), "{said}");
        assert_eq!(doc["harmful"], 0, "{doc:#}");
        assert!(doc["judged_by"].is_string(), "harm was judged (by the culprit rule): {doc:#}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A clean pingall (os-ken's simple_switch_13 on a line of three, every
/// host pinging every other): races there are, but no violation, and so no
/// harmful race.
#[test]
fn a_clean_pingall_has_no_harmful_race() {
    let tmp = std::env::temp_dir().join(format!("sts-races-pingall-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = tmp.join("pingall");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(workspace().join("examples/fuzz-osken13-lost-flowmod.toml"), dir.join("config.toml")).unwrap();
    let pings: Vec<String> = [(1, 2), (1, 3), (2, 1), (2, 3), (3, 1), (3, 2)]
        .iter()
        .map(|(a, b)| format!(r#"{{"type":"ping","src":"h{a}","dst":"h{b}"}}"#))
        .collect();
    inputs(&dir, &pings.iter().map(|p| (300, p.as_str())).collect::<Vec<_>>());
    let out = sts().arg("replay").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "clean: {}", text(&out));
    let (code, doc, said) = races_json(&dir);
    assert_eq!(code, Some(0), "{said}");
    assert!(doc["violation"].is_null() && doc["events"].as_u64().unwrap() > 50, "{doc:#}");
    assert_eq!(doc["harmful"], 0, "{doc:#}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// faucet's VLAN-move bug without the delay that pins it: the run is clean,
/// and `sts explore` finds the bug by holding h1's PACKET_IN past the
/// policy change: the first order it tries. The find is an experiment
/// directory whose trace ends in the bug's violation.
#[test]
fn explore_finds_the_vlan_move_race_from_a_clean_run_first() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = example("faucet-slow-packet-in", &tmp);
    // As recorded, the run already violates: nothing to explore.
    let out = sts().arg("explore").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("the run itself ends in a violation"), "{}", text(&out));
    // Without the fuzzer's delay the run is clean.
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    let kept: Vec<&str> = trace.lines().filter(|l| !l.contains("control_delay_next")).collect();
    std::fs::write(dir.join("trace.jsonl"), kept.join("\n") + "\n").unwrap();

    let out = sts().arg("explore").arg(&dir).arg("--list").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(listed.contains("   1. hold seq ") && listed.contains("past seq"), "{listed}");

    let out = sts().arg("explore").arg(&dir).arg("--json").env("RUST_LOG", "info").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a find: exit 1\n{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["base_violation"].is_null(), "{doc:#}");
    // The branches' controllers are forked from the base run's faucet
    // zygote: faucet starts once (its config file names the base's directory).
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.matches("zygote parked").count(), 1, "{said}");
    let find = &doc["finds"][0];
    assert_eq!(find["execution"], 1, "the first order tried: {doc:#}");
    assert_eq!(find["held"]["msg_type"], "packet_in", "{find:#}");
    assert_eq!(find["held"]["switch"], 1, "{find:#}");
    assert_eq!(find["past"]["what"], "policy split", "{find:#}");
    assert!(find["violation"].as_str().unwrap().contains("h2 reaches h1 despite the isolation policy"), "{find:#}");
    let found = PathBuf::from(find["dir"].as_str().unwrap());
    let recorded = std::fs::read_to_string(found.join("trace.jsonl")).unwrap();
    assert!(
        recorded.contains("\"control_delay_next\"") && recorded.contains("s1 table 2: a rule of priority 8192"),
        "{recorded}"
    );
    assert!(found.join("config.toml").is_file() && found.join("violation.json").is_file());
    // Replayed from a checkpoint of the base run taken where it leaves it.
    assert!(doc["branches"]["marks"].as_u64().unwrap() >= 1, "{doc:#}");
    // Only the find is left behind, and the base run.
    assert!(!dir.join("explore/runs").exists() && !dir.join("explore/branches").exists());
    // The find is an experiment a replay reproduces.
    replay(&found);

    // Two faults at a time: every base's branches fork from that one
    // zygote too (they write their files into the base run's directory).
    let deeper = tmp.join("deeper");
    let out = sts()
        .arg("explore")
        .arg(&dir)
        .args(["--depth", "2", "--all", "--budget", "12", "--out"])
        .arg(&deeper)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("two faults at a time"), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.matches("zygote parked").count(), 1, "{said}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `tests/suite/make_trace.py CASE EXTRA 1 DIR`.
fn suite_case(case: &str, extra: &str, dir: &Path) {
    let out = Command::new("python3")
        .arg(workspace().join("tests/suite/make_trace.py"))
        .args([case, extra, "1"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Drops `dir`'s violation and moves every input after its `switch_up`
/// `ms` later.
fn later_after_reconnection(dir: &Path, ms: u64) {
    let path = dir.join("trace.jsonl");
    let mut shift = 0;
    let mut lines = Vec::new();
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        if record.get("violation").is_some() {
            continue;
        }
        if let Some(t) = record["t_ms"].as_u64() {
            record["t_ms"] = (t + shift).into();
        }
        if record["external"]["type"] == "switch_up" {
            shift = ms;
        }
        lines.push(record.to_string());
    }
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

/// Replaces `dir`'s trace with these inputs, `gap_ms` apart.
fn inputs(dir: &Path, events: &[(u64, &str)]) {
    let mut t = 1000;
    let mut lines = vec![r#"{"format":"sts-trace","version":1,"seed":1}"#.to_string()];
    for (n, (gap, event)) in events.iter().enumerate() {
        t += gap;
        lines.push(format!(r#"{{"seq":{},"t_ms":{t},"external":{event}}}"#, n + 1));
    }
    std::fs::write(dir.join("trace.jsonl"), lines.join("\n") + "\n").unwrap();
}

/// `sts explore DIR ARGS --json`: exit 1 and its first find, at variant 1.
fn explore_first(dir: &Path, args: &[&str]) -> serde_json::Value {
    let find = explore_find(dir, args);
    assert_eq!(find["execution"], 1, "found by the first variant: {find:#}");
    find
}

/// `sts explore DIR ARGS --json` on a clean run: exit 1 and its first find.
fn explore_find(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = sts().arg("explore").arg(dir).args(args).arg("--json").output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(out.status.code(), Some(1), "{doc:#}\n{}", text(&out));
    assert!(doc["base_violation"].is_null(), "the run is clean: {doc:#}");
    doc["finds"][0].clone()
}

/// The suite's race apps and its handshake race, each from a clean run:
/// `sts explore` finds the bug at the first order it tries, and `sts races`
/// on the find names the pair whose order was flipped (a message the proxy
/// held, first among the harmful races).
#[test]
fn explore_finds_the_suite_races_first_and_races_names_the_flipped_pair() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let handshake = tmp.join("handshake_race");
    suite_case("handshake_race", "3", &handshake);
    // Traffic, s2 gone and back, and traffic a second later: clean.
    let ping = r#"{"type":"ping","src":"h1","dst":"h3"}"#;
    inputs(
        &handshake,
        &[
            (0, ping),
            (300, r#"{"type":"switch_down","switch":2}"#),
            (300, r#"{"type":"switch_up","switch":2}"#),
            (1000, ping),
        ],
    );
    // The suite's own case (ten pings around the reconnection), the ping
    // after it moved out of the app's half second: the controller fails on
    // a later copy of the held flood, not the held frame itself.
    let handshake_13 = tmp.join("handshake_race-13");
    suite_case("handshake_race", "10", &handshake_13);
    later_after_reconnection(&handshake_13, 550);
    for (case, dir, at, conflict, violation) in [
        ("unbarriered_path", tmp.join("unbarriered_path"), "s", "matches the packet", "is dropped at"),
        ("first_sighting", tmp.join("first_sighting"), "c0", "host h", ""),
        ("handshake_race", handshake, "s2", "s2's new connection", "HandshakeRace"),
        ("handshake_race-13", handshake_13, "s2", "s2's new connection", "HandshakeRace"),
    ] {
        if !case.starts_with("handshake_race") {
            suite_case(case, "10", &dir);
        }
        let find = explore_first(&dir, &[]);
        assert!(find["violation"].as_str().unwrap().contains(violation), "{case}: {find:#}");
        let (code, doc, said) = races_json(Path::new(find["dir"].as_str().unwrap()));
        assert_eq!(code, Some(1), "{case}: a harmful race\n{said}");
        let first = &doc["races"][0];
        assert!(!first["harm"].is_null(), "{case}: {doc:#}");
        assert!(first["at"].as_str().unwrap().starts_with(at), "{case}: {first:#}");
        assert!(first["conflict"].as_str().unwrap().contains(conflict), "{case}: {first:#}");
        // (The find's trace is numbered anew: the message is known by its words.)
        let held = |e: &serde_json::Value| {
            e["what"] == find["held"]["what"] && !e["delivered"].is_null() && e["delivered"]["behind"].is_null()
        };
        assert!(
            held(&first["first"]) || held(&first["second"]),
            "{case}: the held message is one of the two: {first:#}\n{find:#}"
        );
        if case == "handshake_race-13" {
            // The floods queued behind it on s1's connection say so, and
            // come after it.
            let held_seq = [&first["first"], &first["second"]].into_iter().find(|e| held(e)).unwrap()["seq"].clone();
            let behind = |r: &serde_json::Value| {
                [&r["first"], &r["second"]].into_iter().any(|e| e["delivered"]["behind"] == held_seq)
            };
            let races = doc["races"].as_array().unwrap();
            assert!(races[1..].iter().any(behind) && !behind(first), "{doc:#}");
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A PORT_STATUS and a PACKET_IN of two switches: the suite's spoof_guard
/// takes a moved host for a spoofer when its old switch's report of the
/// unplugged port comes after the host's first frame at the new one.
/// `sts explore` finds it from a clean run (holding the old switch's
/// connection past the move, its PORT_STATUS queued behind), the same
/// variant every time, and `sts races` on the find pairs the host's new
/// sighting with the held message first and with the late PORT_STATUS.
#[test]
fn explore_finds_a_move_taken_for_a_spoof_and_races_names_the_late_port_status() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-spoof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = tmp.join("spoof_guard");
    suite_case("spoof_guard", "10", &dir);
    let find = explore_find(&dir, &[]);
    assert_eq!(explore_find(&dir, &[])["execution"], find["execution"], "seeded: the same variant finds it again");
    assert!(find["execution"].as_u64().unwrap() <= 8, "{find:#}");
    // h3 moved from s3 to s1 (the case's seed 1) and was blocked there.
    let violation = find["violation"].as_str().unwrap();
    assert!(violation.starts_with("h3 -> ") && violation.contains("dropped at s1"), "{find:#}");
    assert!(find["held"]["what"].as_str().unwrap().starts_with("packet_in s3 "), "{find:#}");
    let (code, doc, said) = races_json(Path::new(find["dir"].as_str().unwrap()));
    assert_eq!(code, Some(1), "a harmful race\n{said}");
    let harmful: Vec<&serde_json::Value> =
        doc["races"].as_array().unwrap().iter().filter(|r| !r["harm"].is_null()).collect();
    let sighting = |e: &serde_json::Value| e["what"].as_str().unwrap().starts_with("packet_in s1 → c0 (in_port=3");
    let first = harmful[0];
    assert!(sighting(&first["first"]) && first["second"]["what"] == find["held"]["what"], "{doc:#}");
    assert!(
        harmful.iter().any(|r| sighting(&r["first"])
            && r["second"]["what"].as_str().unwrap().starts_with("port_status s3")
            && !r["second"]["delivered"]["behind"].is_null()),
        "the late PORT_STATUS, queued behind the held message: {doc:#}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Variants replayed from checkpoints where they leave the base run find
/// what fresh replays of the whole variant find: the same orders offered,
/// the first found by the first, and its directory reproduces the bug.
#[test]
fn explore_from_branches_finds_what_fresh_replays_find() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-branches-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = tmp.join("unbarriered_path");
    suite_case("unbarriered_path", "10", &dir);
    let run = |from: &str| {
        let out = sts().arg("explore").arg(&dir).args(["--all", "--json", "--from", from]).output().unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
        assert_eq!(out.status.code(), Some(1), "{from}: {doc:#}\n{}", text(&out));
        assert_eq!(doc["from"], from, "{doc:#}");
        doc
    };
    let fresh = run("fresh");
    assert!(fresh["branches"].is_null() && fresh["warm"].is_null(), "{fresh:#}");
    let branch = run("branch");
    // (Each explore replays the base anew: messages are known by their
    // words, not their numbers, and a hold may differ by a millisecond.)
    let orders = |doc: &serde_json::Value| -> Vec<String> {
        let flips = doc["flips"].as_array().unwrap().iter();
        let mut orders: Vec<String> =
            flips.map(|f| format!("{} {} past {}", f["at"], f["held"]["what"], f["past"]["what"])).collect();
        // (Equal ranks keep the order of their numbers, which may differ.)
        orders.sort();
        orders
    };
    assert_eq!(orders(&branch), orders(&fresh), "the same orders offered");
    assert_eq!(branch["executions"], fresh["executions"], "{branch:#}");
    let flips = branch["flips"].as_array().unwrap().len() as u64;
    assert!(flips >= 2, "{branch:#}");
    let marks = branch["branches"]["marks"].as_u64().unwrap();
    assert!(marks >= 1 && marks <= flips, "{branch:#}");
    assert_eq!(branch["branches"]["rewinds"].as_u64().unwrap(), flips - 1, "one rewind per later variant: {branch:#}");
    for doc in [&fresh, &branch] {
        assert_eq!(doc["finds"][0]["execution"], 1, "{doc:#}");
    }
    replay(Path::new(branch["finds"][0]["dir"].as_str().unwrap()));
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A fresh `dir` with os-ken's simple_switch_13 (the lost table-miss
/// config) and a clean run of traffic around s2's reconnection, then `more`.
fn lost_flowmod_run(dir: &Path, more: &[(u64, &str)]) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(workspace().join("examples/fuzz-osken13-lost-flowmod.toml"), dir.join("config.toml")).unwrap();
    let mut events = vec![
        (0, r#"{"type":"ping","src":"h1","dst":"h3"}"#),
        (300, r#"{"type":"switch_down","switch":2}"#),
        (300, r#"{"type":"switch_up","switch":2}"#),
        (300, r#"{"type":"ping","src":"h3","dst":"h1"}"#),
    ];
    events.extend_from_slice(more);
    inputs(dir, &events);
}

/// os-ken's simple_switch_13 loses a reconnecting switch's table-miss
/// FLOW_MOD for good: `sts explore --drops` loses that one first (a rule to
/// the controller) and finds the blackhole; `sts races` says a lost message
/// is not a race.
#[test]
fn explore_drops_finds_the_lost_table_miss_first() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-drops-{}", std::process::id()));
    lost_flowmod_run(&tmp, &[]);
    let find = explore_first(&tmp, &["--drops"]);
    assert_eq!(find["dropped"], true, "{find:#}");
    assert_eq!(find["held"]["switch"], 2, "{find:#}");
    assert!(find["held"]["what"].as_str().unwrap().contains("actions=CONTROLLER"), "{find:#}");
    let (code, doc, said) = races_json(Path::new(find["dir"].as_str().unwrap()));
    assert_eq!(code, Some(0), "{said}");
    assert!(doc["unjudged"].as_str().unwrap().contains("a lost message is not a race"), "{doc:#}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// An exploration stopped by its budget goes on where it stopped with
/// `--resume`: the same base run and candidates, the untried ones next,
/// finds numbered on; resuming where nothing was explored, or with other
/// candidates, is refused (exit 2).
#[test]
fn an_exploration_resumes_where_its_budget_stopped_it() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = tmp.join("unbarriered_path");
    suite_case("unbarriered_path", "10", &dir);
    let out = sts().arg("explore").arg(&dir).arg("--resume").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("nothing to resume"), "{}", text(&out));

    // One variant, then the budget is spent: the output says how to go on.
    let out = sts().arg("explore").arg(&dir).args(["--all", "--budget", "1"]).output().unwrap();
    let said = text(&out);
    assert!(said.contains("left untried") && said.contains("--resume --all"), "{said}");
    let frontier = |dir: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("explore/frontier.json")).unwrap()).unwrap()
    };
    let first = frontier(&dir);
    assert_eq!(first["tried"], 1, "{first:#}");
    let total = first["flips"].as_array().unwrap().len();
    assert!(total >= 2, "{first:#}");

    // Another kind of candidates is refused.
    let out = sts().arg("explore").arg(&dir).args(["--resume", "--random", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("resume with the options it started with"), "{}", text(&out));

    let out = sts().arg("explore").arg(&dir).args(["--resume", "--all", "--json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(doc["resumed"], 1, "{doc:#}");
    assert_eq!(doc["executions"].as_u64().unwrap() as usize, total - 1, "{doc:#}");
    assert_eq!(doc["left"], 0, "{doc:#}");
    // The same candidates, the untried ones.
    let second = frontier(&dir);
    assert_eq!(second["flips"], first["flips"], "the candidates are the first run's");
    assert_eq!(
        doc["flips"].as_array().unwrap()[..],
        first["flips"].as_array().unwrap()[1..]
            .iter()
            .map(|f| {
                serde_json::json!({"held": {"seq": f["message"], "what": f["first"]["what"], "switch": f["dpid"],
            "msg_type": f["msg_type"], "ms": f["delay_ms"]}, "dropped": f["drop"],
            "past": {"seq": f["past"], "what": f["second"]["what"]}, "at": f["at"], "conflict": f["conflict"]})
            })
            .collect::<Vec<_>>()[..]
    );
    // Finds of both sittings, numbered on, each an experiment directory.
    let finds = doc["finds"].as_array().unwrap();
    assert!(!finds.is_empty(), "{doc:#}");
    for (n, f) in finds.iter().enumerate() {
        assert!(f["dir"].as_str().unwrap().ends_with(&format!("finds/{}", n + 1)), "{f:#}");
        assert!(Path::new(f["dir"].as_str().unwrap()).join("trace.jsonl").is_file(), "{f:#}");
    }
    let executions: Vec<u64> = finds.iter().map(|f| f["execution"].as_u64().unwrap()).collect();
    assert!(executions.windows(2).all(|w| w[0] < w[1]), "{executions:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--depth 2`: once every one-fault variant of a clean run is tried
/// without a find, each one's own run is explored in turn (its flips armed
/// after its fault), within the same budget, and an exploration stopped in
/// the two-fault level resumes there; only with the depth it started with.
#[test]
fn explore_two_faults_at_a_time_after_the_one_fault_variants() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-depth-{}", std::process::id()));
    lost_flowmod_run(
        &tmp,
        &[(300, r#"{"type":"ping","src":"h2","dst":"h1"}"#), (300, r#"{"type":"ping","src":"h1","dst":"h2"}"#)],
    );
    let explore = |args: &[&str]| -> serde_json::Value {
        let out = sts().arg("explore").arg(&tmp).args(args).arg("--json").output().unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
        assert_eq!(out.status.code(), Some(0), "no find: {doc:#}\n{}", text(&out));
        doc
    };
    let first = explore(&["--depth", "2", "--budget", "4"]);
    let one = first["flips"].as_array().unwrap().len();
    assert!((1..4).contains(&one), "a few one-fault variants: {first:#}");
    assert_eq!(first["executions"], 4, "{first:#}");
    let level = &first["two_faults"];
    let offered = level["offered"].as_u64().unwrap() as usize;
    assert!(offered > 4 - one, "{first:#}");
    assert_eq!(level["tried"].as_u64().unwrap() as usize, 4 - one, "{first:#}");
    assert_eq!(level["left"].as_u64().unwrap() as usize, offered - (4 - one), "{first:#}");
    assert!(level["bases"].as_u64().unwrap() >= 1, "{first:#}");
    assert_eq!(first["left"], level["left"], "{first:#}");
    // Each one-fault variant's run was kept, and every two-fault candidate
    // extends one of them after its fault.
    let frontier: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.join("explore/frontier.json")).unwrap()).unwrap();
    for k in 1..=one {
        assert!(tmp.join(format!("explore/variants/{k}.jsonl")).is_file());
    }
    for d in frontier["deeper"].as_array().unwrap() {
        let parent = d["parent"].as_u64().unwrap() as usize;
        assert!(parent < one, "{d:#}");
        let run = std::fs::read_to_string(tmp.join(format!("explore/variants/{}.jsonl", parent + 1))).unwrap();
        let fault_seq = run
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|r| r["external"]["type"] == "control_delay_next")
            .map(|r| r["seq"].as_u64().unwrap())
            .expect("the variant's fault is in its run");
        assert!(d["flip"]["message"].as_u64().unwrap() > fault_seq, "{d:#}");
    }
    // Resumed with another depth: refused; with the same, the rest.
    let out = sts().arg("explore").arg(&tmp).arg("--resume").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let rest = explore(&["--resume", "--depth", "2"]);
    assert_eq!(rest["resumed"].as_u64().unwrap() as usize, one, "{rest:#}");
    assert_eq!(rest["executions"].as_u64().unwrap() as usize, offered - (4 - one), "{rest:#}");
    assert_eq!(rest["two_faults"]["left"], 0, "{rest:#}");
    assert_eq!(rest["left"], 0, "{rest:#}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `sts explore --config FILE --out OUT`: an input sequence fuzzed from the
/// config into OUT (traffic only: a clean run of the suite's unbarriered
/// path app), then the orders around it explored into OUT/explore, where
/// the race is found; without --out, a usage error.
#[test]
fn explore_from_a_config_fuzzes_the_inputs_first() {
    let tmp = std::env::temp_dir().join(format!("sts-explore-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let case = tmp.join("case");
    suite_case("unbarriered_path", "1", &case);
    let config = tmp.join("config.toml");
    let with_fuzz = std::fs::read_to_string(case.join("config.toml")).unwrap()
        + "\n[fuzz]\nsteps = 12\nstep_ms = 150\nseed = 4\n\n[fuzz.rates]\ntraffic = 1.0\nlink_failure = 0.0\nhost_migration = 0.0\n";
    std::fs::write(&config, with_fuzz).unwrap();
    let out = sts().arg("explore").arg("--config").arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--out is required: {}", text(&out));

    let dir = tmp.join("out");
    let out = sts().arg("explore").arg("--config").arg(&config).arg("--out").arg(&dir).arg("--json").output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(out.status.code(), Some(1), "{doc:#}\n{}", text(&out));
    assert!(doc["base_violation"].is_null(), "{doc:#}");
    // The fuzzed sequence is an experiment directory of its own.
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    assert!(trace.lines().filter(|l| l.contains(r#""external""#)).count() >= 2, "{trace}");
    assert_eq!(doc["finds"][0]["execution"], 1, "{doc:#}");
    let find = doc["finds"][0]["dir"].as_str().unwrap();
    assert!(Path::new(find).starts_with(dir.join("explore/finds")), "{find}");
    replay(Path::new(find));
    let _ = std::fs::remove_dir_all(&tmp);
}
