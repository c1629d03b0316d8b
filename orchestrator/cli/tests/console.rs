//! `sts console` with os-ken on the hand-written migration trace: scripted
//! (every command, a bad one included, on the real controller), and at the
//! real interactive prompt in a terminal (tmux: completion, history, Ctrl-C,
//! Ctrl-D), leaving no controller behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn migration_copy(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-console-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces/migration");
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    dir
}

/// The section of `out` printed after the prompt line `sts> cmd` (up to the next prompt).
fn reply<'a>(out: &'a str, cmd: &str, nth: usize) -> &'a str {
    let prompt = format!("sts> {cmd}\n");
    let start =
        out.match_indices(&prompt).nth(nth).unwrap_or_else(|| panic!("no {prompt:?} in:\n{out}")).0 + prompt.len();
    let rest = &out[start..];
    &rest[..rest.find("sts> ").unwrap_or(rest.len())]
}

/// Runs `sts console DIR --script` with `commands`; checks it exits 0 and
/// returns what it printed.
fn scripted(dir: &Path, commands: &str) -> String {
    let script = dir.join("commands.txt");
    std::fs::write(&script, commands).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["console", dir.to_str().unwrap(), "--script", script.to_str().unwrap()])
        .output()
        .expect("run sts");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn a_scripted_session_steps_to_the_blackhole() {
    let dir = migration_copy("script");
    let text = scripted(
        &dir,
        "where\nflows s3\nnext 2\nnext\nflows s3\nlinks\npath h1 h3\npath h1 h9\nbogus\nnext x\ncheck\ncontinue\nwhere\nhelp flows\n\
         quit\n",
    );

    assert!(reply(&text, "where", 0).contains("next: ping h1 -> h3"), "{text}");
    let before = reply(&text, "flows s3", 0);
    assert_eq!(before.lines().count(), 1, "only the table-miss entry before any traffic: {before}");
    assert!(before.contains("priority=0 actions=CONTROLLER:65535"), "{before}");
    assert!(reply(&text, "next", 0).contains("migrate h3 s3 -> s1"), "{text}");
    let after = reply(&text, "flows s3", 1);
    assert!(after.contains("dl_dst=00:00:00:00:00:03") && after.contains("actions=output:1"), "learned: {after}");
    assert!(reply(&text, "links", 0).contains("h3 - s1:"), "h3 moved: {text}");
    // The ping's walk: the stale rules of s1, s2 and s3 (each shown), then the dead port.
    let path = reply(&text, "path h1 h3", 0);
    assert!(
        path.starts_with("from h1: ") && path.contains("  s1 in 1: table 0") && path.contains("  s3 in 2: table 0"),
        "{path}"
    );
    assert_eq!(path.matches("actions=output:").count(), 3, "each hop's rule: {path}");
    assert!(path.contains("then it is dropped at s3: output port 1 is down"), "{path}");
    assert!(reply(&text, "path h1 h9", 0).contains("hosts are h1 h2 h3"), "{text}");
    assert!(reply(&text, "bogus", 0).contains("unknown command"), "{text}");
    assert!(reply(&text, "next x", 0).contains("a number of inputs"), "{text}");
    let check = reply(&text, "check", 0);
    // h3 is on s1 now: s1's learned rule sending its traffic towards s2 is
    // the first wrong turn (s2 and s3 cannot bring it back without s1).
    assert!(check.contains("victim: blackhole:h3") && check.contains("culprit: s1 table 0"), "{check}");
    assert!(reply(&text, "continue", 0).contains("the violation showed up"), "continue waits for it: {text}");
    assert!(text.contains("session ended after 4 inputs; the violation reproduced"), "{text}");
    assert!(dir.join("console/1/trace.jsonl").exists(), "the session's replay is kept");
}

#[test]
fn breakpoints_stop_continue_and_run_to_goes_where_asked() {
    let dir = migration_copy("breaks");
    let text = scripted(
        &dir,
        "break seq 3\nbreak event ping\nbreak bogus\nbreaks\ndelete 2\nbreaks\ncontinue\nwhere\nrun-to 9\n\
         run-to 2\ndelete 1\nbreak invariant blackhole\nrun-to 4\nnext\nrun-to violation\nquit\n",
    );
    assert!(reply(&text, "break seq 3", 0).contains("breakpoint 1: before input seq 3"), "{text}");
    assert!(reply(&text, "break event ping", 0).contains("breakpoint 2: before the next ping input"), "{text}");
    assert!(reply(&text, "break bogus", 0).contains("break seq N"), "usage: {text}");
    assert_eq!(reply(&text, "breaks", 0).lines().count(), 2, "{text}");
    assert_eq!(reply(&text, "breaks", 1).lines().count(), 1, "{text}");
    let stop = reply(&text, "continue", 0);
    assert!(stop.contains("stopped at breakpoint 1: before input seq 3"), "{stop}");
    assert!(stop.contains("next: migrate h3 s3 -> s1 (seq 3)"), "{stop}");
    assert!(reply(&text, "where", 0).contains("input 2 of 4 injected"), "{text}");
    assert!(reply(&text, "run-to 9", 0).contains("no input with seq 9"), "{text}");
    assert!(reply(&text, "run-to 2", 0).contains("injected already"), "{text}");
    assert!(reply(&text, "run-to 4", 0).contains("next: ping h2 -> h3 (seq 4)"), "{text}");
    assert!(reply(&text, "run-to violation", 0).contains("the violation showed up"), "{text}");
    assert!(text.contains("the violation reproduced"), "{text}");

    // An invariant breakpoint stops once a check finds the blackhole.
    let text = scripted(&dir, "break invariant blackhole\ncontinue\nwhere\nquit\n");
    assert!(
        reply(&text, "continue", 0).contains("stopped at breakpoint 1: when a check finds a blackhole violation"),
        "{text}"
    );
    assert!(reply(&text, "where", 0).contains("violated at the last check: blackhole:h3"), "{text}");
}

/// `run-to TIME` injects the trace's inputs that come due on the way (the
/// first at the run's start, the second 500 ms later) and stops at the time.
#[test]
fn run_to_a_time_injects_what_comes_due_on_the_way() {
    let dir = migration_copy("runto");
    let text = scripted(&dir, "run-to 1.9s\nwhere\nrun-to 1s\nquit\n");
    assert!(reply(&text, "run-to 1.9s", 0).contains("2 inputs injected on the way; at 19"), "{text}");
    assert!(reply(&text, "where", 0).contains("input 2 of 4 injected"), "{text}");
    assert!(reply(&text, "run-to 1s", 0).contains("the run is at 19"), "{text}");
}

/// The acceptance walk of issue 20 with os-ken on the migration trace:
/// FLOW_MODs to s3 held and dropped (the blackhole does not come); a rewind
/// to before the hold, where s3 learns h3's port and keeps the rule after
/// the migration (flows before and after), and the blackhole with its
/// witness; a rewind to before the migration, a different input, and a
/// saved session whose replay sees what the session saw.
#[test]
fn a_session_holds_drops_rewinds_and_saves_what_it_saw() {
    let dir = migration_copy("timetravel");
    let saved = dir.join("saved");
    let text = scripted(
        &dir,
        &format!(
            "checkpoint start\nflows s3\nhold flow_mod s3\nrun-to 3\npending\ndrop all\ndrop 99999\nnext\n\
             run-to violation\nrewind start\nrun-to 3\ncheckpoint before-migration\nflows s3\nnext\nflows s3\n\
             run-to violation\nrewind nowhere\nrewind before-migration\nwhere\nmigrate h3 s2\nping h2 h3\n\
             run-to +3s\ncheckpoints\nsave {}\nquit\n",
            saved.display()
        ),
    );
    let empty = reply(&text, "flows s3", 0);
    assert_eq!(empty.lines().count(), 1, "only the table-miss entry before any traffic: {empty}");
    let pending = reply(&text, "pending", 0);
    let held: Vec<&str> = pending.lines().filter(|l| l.contains("flow_mod") && l.contains("held")).collect();
    assert!(!held.is_empty(), "the controller's FLOW_MODs to s3 wait in the proxy: {pending}");
    assert!(held.iter().all(|l| l.contains("c0 -> s3")), "{pending}");
    let dropped = reply(&text, "drop all", 0);
    assert_eq!(dropped.matches("drop the held flow_mod of s3").count(), held.len(), "{dropped}");
    assert!(reply(&text, "drop 99999", 0).contains("no message 99999 is held"), "{text}");
    // Without its FLOW_MODs s3 never gets the rule that sends h3's traffic
    // to the port h3 leaves: no blackhole.
    let changed = reply(&text, "run-to violation", 0);
    assert!(changed.contains("the violation did not show up"), "the drop changed the outcome: {text}");
    assert!(reply(&text, "rewind start", 0).contains("from the controllers' checkpoints"), "{text}");
    // Back before the hold: s3 learns h3's port, and keeps the rule after the migration.
    let before = reply(&text, "flows s3", 1);
    assert!(before.contains("dl_dst=00:00:00:00:00:03") && before.contains("actions=output:1"), "{before}");
    assert!(reply(&text, "next", 1).contains("migrate h3 s3 -> s1"), "{text}");
    assert_eq!(reply(&text, "flows s3", 2), before, "the migration does not change s3's table");
    let original = reply(&text, "run-to violation", 1);
    assert!(original.contains("the violation showed up") && original.contains("witness from"), "{original}");
    assert!(original.contains("dropped at s3: output port 1 is down"), "{original}");
    assert!(reply(&text, "rewind nowhere", 0).contains("no checkpoint \"nowhere\""), "{text}");
    assert!(reply(&text, "where", 0).contains("next: migrate h3 s3 -> s1"), "{text}");
    // A different input: h3 moves to s2 instead; its traffic still dies.
    assert!(reply(&text, "migrate h3 s2", 0).contains("migrate h3 s3 -> s2"), "{text}");
    let marks = reply(&text, "checkpoints", 0);
    assert!(marks.contains("start: ") && marks.contains("before-migration: "), "{marks}");
    let save = reply(&text, &format!("save {}", saved.display()), 0);
    assert!(save.contains("> 10.0.0.3 icmp 8/0 is dropped at"), "{save}");

    // The saved session is an experiment whose replay sees the same thing.
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["replay", saved.to_str().unwrap()])
        .output()
        .expect("run sts replay");
    let replayed = String::from_utf8_lossy(&out.stdout);
    assert!(replayed.contains("reproduced 1/1"), "{replayed}\n{}", String::from_utf8_lossy(&out.stderr));
    let trace = std::fs::read_to_string(saved.join("trace.jsonl")).unwrap();
    assert!(trace.contains(r#""type":"host_migrate","host":"h3","from":3,"to":2"#), "{trace}");
    assert!(!trace.contains("held_message"), "the rewinds took the drops out of the session: {trace}");
}

/// A live session (`--config`, no trace) driven in JSON: a message
/// breakpoint, typed inputs, pingall, a checkpoint and a rewind that undoes
/// a link failure, bad commands answered with `ok: false`, and the session
/// left as an experiment that replays.
#[test]
fn a_live_session_answers_in_json_and_is_an_experiment() {
    let base = migration_copy("live");
    let dir = base.join("session");
    let script = base.join("live.txt");
    std::fs::write(
        &script,
        "break msg packet_in s1\nping h1 h3\nrun-to +1s\npending\ndeliver all\ndelete 1\npingall\ncheckpoint healthy\n\
         link down s1 s2\npingall\nrewind\npingall\nswitch down s9\nnext\nbogus\nwhere\nlog 2\nquit\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["console", "--config"])
        .arg(base.join("config.toml"))
        .arg(&dir)
        .args(["--script", script.to_str().unwrap(), "--json"])
        .output()
        .expect("run sts");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let replies: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect();
    let by = |cmd: &str, nth: usize| -> &serde_json::Value {
        replies.iter().filter(|r| r["command"] == cmd).nth(nth).unwrap_or_else(|| panic!("no reply to {cmd}: {text}"))
    };
    assert!(by("run-to +1s", 0)["output"][0].as_str().unwrap().contains("stopped at breakpoint 1"), "{text}");
    let pending = by("pending", 0)["pending"].as_array().cloned().unwrap_or_default();
    assert!(pending.iter().any(|m| m["type"] == "packet_in" && m["from"] == "s1" && m["held"] == true), "{text}");
    assert_eq!(by("pingall", 0)["answered"], 6, "{text}");
    assert!(by("checkpoint healthy", 0)["took_ms"].as_f64().is_some(), "{text}");
    assert!(by("pingall", 1)["answered"].as_u64().unwrap() < 6, "the link is down: {text}");
    assert_eq!(by("rewind", 0)["by_replay"], false, "{text}");
    assert_eq!(by("pingall", 2)["answered"], 6, "the rewind brought the link back: {text}");
    for bad in ["switch down s9", "next", "bogus"] {
        assert_eq!(by(bad, 0)["ok"], false, "{bad}: {text}");
        assert_eq!(by(bad, 0)["output"].as_array().map(Vec::len), Some(1), "one line: {text}");
    }
    assert_eq!(by("quit", 0)["ok"], true, "{text}");
    // The session is an experiment: its trace has what was typed, and replays.
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    assert!(trace.contains(r#""type":"control_hold","switch":1,"msg_type":"packet_in""#), "{trace}");
    assert!(trace.contains(r#""type":"held_message","switch":1,"msg_type":"packet_in","fate":"deliver""#), "{trace}");
    assert!(!trace.contains(r#""type":"link_down""#), "the rewind cut the link failure out of the trace");
    let out = Command::new(env!("CARGO_BIN_EXE_sts")).arg("replay").arg(&dir).output().expect("run sts replay");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

fn tmux(args: &[&str]) -> String {
    // tmux wants a terminal type even for detached sessions (CI has none).
    let out = Command::new("tmux")
        .env("TERM", "xterm-256color")
        .args(args)
        .output()
        .expect("tmux (scripts/setup installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kills a tmux session when dropped, a test's panic included.
struct KillSession(String);

impl Drop for KillSession {
    fn drop(&mut self) {
        let _ = tmux(&["kill-session", "-t", &self.0]);
    }
}

/// Waits until the pane shows `needle`; returns the pane.
fn wait_for(session: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pane = tmux(&["capture-pane", "-t", session, "-p"]);
        if pane.contains(needle) {
            return pane;
        }
        assert!(Instant::now() < deadline, "{needle:?} never showed:\n{pane}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the pane shows `needle` `n` times; returns the pane.
fn wait_for_count(session: &str, needle: &str, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pane = tmux(&["capture-pane", "-t", session, "-p"]);
        if pane.matches(needle).count() >= n {
            return pane;
        }
        assert!(Instant::now() < deadline, "{needle:?} never showed {n} times:\n{pane}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_interactive_prompt_completes_remembers_and_ends_cleanly() {
    let dir = migration_copy("tmux");
    // The migration comes 10,000 s (of virtual time) after the pings:
    // `continue` waits for it long enough to be interrupted.
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    let shifted: Vec<String> = trace
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["seq"].as_u64().is_some_and(|s| s >= 3) {
                v["t_ms"] = serde_json::json!(v["t_ms"].as_u64().unwrap() + 10_000_000);
            }
            v.to_string()
        })
        .collect();
    std::fs::write(dir.join("trace.jsonl"), shifted.join("\n") + "\n").unwrap();
    let session = format!("sts-console-{}", std::process::id());
    let _ = tmux(&["kill-session", "-t", &session]);
    let cmd = format!("{} console {}; echo console-exited-$?; sleep 30", env!("CARGO_BIN_EXE_sts"), dir.display());
    tmux(&["new-session", "-d", "-s", &session, "-x", "200", "-y", "50", &cmd]);
    // A failing assertion must not leave the session (and its controllers) running.
    let _ends = KillSession(session.clone());
    wait_for(&session, "`help` lists the commands");
    // The run stands still while the prompt waits: 4 s of thinking cost the
    // controllers no time (the first input comes at its recorded 1.2 s, not
    // 5 s into the run).
    std::thread::sleep(Duration::from_secs(4));
    // Completion: "ne" + Tab becomes "next".
    tmux(&["send-keys", "-t", &session, "ne", "Tab"]);
    wait_for(&session, "sts> next");
    tmux(&["send-keys", "-t", &session, " 2", "Enter"]);
    let pane = wait_for(&session, "input 2 of 4");
    let first: u64 = pane
        .lines()
        .find_map(|l| l.strip_prefix("input 1 of 4 (seq 1) at ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no first input in:\n{pane}"));
    assert!(first < 3000, "the pause at the prompt moved the run's clock: first input at {first} ms");
    // History: Up brings back "where".
    tmux(&["send-keys", "-t", &session, "where", "Enter"]);
    wait_for(&session, "next: migrate h3 s3 -> s1");
    tmux(&["send-keys", "-t", &session, "Up", "Enter"]);
    wait_for_count(&session, "next: migrate h3 s3 -> s1", 2);
    // Ctrl-C stops a running `continue` and the session goes on.
    tmux(&["send-keys", "-t", &session, "continue", "Enter"]);
    std::thread::sleep(Duration::from_secs(2));
    tmux(&["send-keys", "-t", &session, "C-c"]);
    wait_for(&session, "interrupted (Ctrl-C) at");
    tmux(&["send-keys", "-t", &session, "where", "Enter"]);
    wait_for_count(&session, "next: migrate h3 s3 -> s1", 3);
    // Ctrl-C at the prompt does not end the session; Ctrl-D does.
    tmux(&["send-keys", "-t", &session, "C-c"]);
    wait_for(&session, "Ctrl-C: type quit");
    tmux(&["send-keys", "-t", &session, "C-d"]);
    let pane = wait_for(&session, "console-exited-");
    let _ = tmux(&["kill-session", "-t", &session]);
    assert!(pane.contains("console-exited-0") && pane.contains("session ended after 2 inputs"), "{pane}");
    // No controller of this session is left.
    let marker = dir.display().to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&marker) && !c.contains("sleep 30") && !c.contains("console-exited"))
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[test]
fn checkpoints_stop_at_the_descriptor_budget_and_rewinds_still_work() {
    use std::os::unix::process::CommandExt;
    let dir = migration_copy("fds");
    let mut commands: String = (0..200).map(|_| "checkpoint\n").collect();
    commands.push_str("rewind c1\nrewind c40\n");
    // A 1 MB line is refused with a bounded quote.
    commands.push_str(&format!("{}\n", "x".repeat(1 << 20)));
    let script = dir.join("commands.txt");
    std::fs::write(&script, commands).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sts"));
    cmd.args(["console", dir.to_str().unwrap(), "--script", script.to_str().unwrap()]);
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 200, 200)
                .map_err(std::io::Error::from)
        });
    }
    let started = Instant::now();
    let out = cmd.output().expect("run sts");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(120), "no hang");
    assert!(text.contains("no checkpoint taken") && text.contains("file descriptors"), "{text}");
    assert!(reply(&text, "rewind c1", 0).contains("rewound to c1"), "{text}");
    assert!(reply(&text, "rewind c40", 0).contains("rewound to c40"), "{text}");
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4 * 1024, "the 1 MB line is quoted in {longest} bytes (echo included)");

    // A script that is not UTF-8 is bad input, not an empty script.
    std::fs::write(&script, b"checkpoint\n\xff\xfe\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["console", dir.to_str().unwrap(), "--script", script.to_str().unwrap()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("line 2") && said.contains("UTF-8"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What-if after a rewind: `instead` puts a typed input in place of the
/// trace's next one (which is never injected), `skip` passes over inputs,
/// and a trace input that goes in after a typed move says where the host
/// really was.
#[test]
fn a_what_if_replaces_the_trace_input_and_labels_follow_the_network() {
    let dir = migration_copy("what-if");
    let saved = dir.join("what-if");
    let text = scripted(
        &dir,
        &format!(
            "run-to 3\ncheckpoint before\nrewind before\ninstead migrate h3 s2\nrun-to +2s\nhosts\nsave {}\n\
             rewind before\nmigrate h3 s2\nwhere\nnext\nrewind before\nskip 2\nwhere\nskip\nquit\n",
            saved.display()
        ),
    );
    let instead = reply(&text, "instead migrate h3 s2", 0);
    assert!(instead.contains("skipped input 3 of 4 (seq 3): migrate h3 s3 -> s1"), "{instead}");
    assert!(instead.contains("injected at") && instead.contains("migrate h3 s3 -> s2"), "{instead}");
    // h3 stays where the what-if put it: the trace's own move never came.
    assert!(reply(&text, "hosts", 0).contains("h3: 10.0.0.3 00:00:00:00:00:03 at s2:"), "{text}");
    let trace = std::fs::read_to_string(saved.join("trace.jsonl")).unwrap();
    let moves: Vec<&str> = trace.lines().filter(|l| l.contains("host_migrate")).collect();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert!(moves[0].contains(r#""from":3,"to":2"#), "{moves:?}");
    // A typed move without `instead` goes in before the trace's; that one
    // then moves h3 from where it is (s2), and says so.
    assert!(reply(&text, "where", 0).contains("next: migrate h3 s2 -> s1"), "{text}");
    assert!(reply(&text, "next", 0).contains("migrate h3 s2 -> s1"), "{text}");
    let skipped = reply(&text, "skip 2", 0);
    assert!(skipped.contains("skipped input 3 of 4") && skipped.contains("skipped input 4 of 4"), "{skipped}");
    assert!(reply(&text, "where", 1).contains("next: nothing"), "{text}");
    assert!(reply(&text, "skip", 0).contains("no input left to skip"), "{text}");
}

/// A Mininet user's phrasing works as they type it, and a typo is answered
/// with the command meant.
#[test]
fn mininet_phrasing_and_typos_are_understood() {
    let dir = migration_copy("mininet");
    let text = scripted(
        &dir,
        "net\ndump\nh1 ping -c 1 h2\nrun-to +1s\nlink s1 s2 down\nlinks\nchekpoint\nlog 200\nhelp\nquit\n",
    );
    // The log says FLOW_MODs in dump-flows words, as `pending` does.
    assert!(reply(&text, "log 200", 0).contains("c0 -> s1 flow_mod add priority=0 actions=CONTROLLER:65535"), "{text}");
    let help = reply(&text, "help", 0);
    assert!(help.contains("aliases: n next") && help.contains("h1 ping h2"), "{help}");
    // Long arguments no longer run into their description.
    assert!(help.contains("invariant [KIND]\n"), "{help}");
    assert!(reply(&text, "net", 0).contains("s1:2 - s2:2 up"), "{text}");
    assert!(reply(&text, "dump", 0).contains("h1"), "{text}");
    assert!(reply(&text, "h1 ping -c 1 h2", 0).contains("ping h1 -> h2"), "{text}");
    assert!(reply(&text, "link s1 s2 down", 0).contains("link down"), "{text}");
    assert!(reply(&text, "links", 0).contains("s1:2 - s2:2 down"), "{text}");
    assert!(reply(&text, "chekpoint", 0).contains("did you mean `checkpoint`?"), "{text}");
}

/// The proxy's decisions are in the trace and drawn: a FLOW_MOD held and then
/// dropped is a dropped arrow in the report, and in the capture a packet
/// whose comment says it was never delivered.
#[test]
fn a_dropped_message_is_drawn_and_captured_as_dropped() {
    let dir = migration_copy("dropped");
    let saved = dir.join("s1");
    scripted(&dir, &format!("hold flow_mod s3\nrun-to 3\ndrop all\nrun-to +1s\nsave {}\nquit\n", saved.display()));
    let trace = std::fs::read_to_string(saved.join("trace.jsonl")).unwrap();
    assert!(trace.contains(r#""proxy":"queued""#), "the hold is recorded with the message");
    let sts = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().unwrap();
    assert!(sts(&["report", saved.to_str().unwrap()]).status.success());
    let page = std::fs::read_to_string(saved.join("report/index.html")).unwrap();
    assert!(page.contains("The proxy dropped 1 message(s)"), "the decisions are said");
    assert_eq!(page.matches("held by the proxy, then dropped").count(), 1, "one arrow drawn as dropped");
    let out = sts(&["pcap", saved.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("the proxy dropped 1 and held or delayed "), "{said}");
    let tshark = Command::new("tshark")
        .arg("-r")
        .arg(saved.join("trace.pcapng"))
        .args(["-Y", "frame.comment", "-T", "fields", "-e", "openflow_v4.type", "-e", "frame.comment"])
        .output()
        .unwrap();
    let comments = String::from_utf8_lossy(&tshark.stdout);
    let dropped: Vec<&str> = comments.lines().filter(|l| l.contains("dropped")).collect();
    assert_eq!(dropped.len(), 1, "one packet commented as dropped: {comments}");
    assert!(dropped[0].starts_with("14\tsts: held by the proxy, then dropped: s3 never received it"), "{comments}");
    // The ones held behind it went on once it was gone: each comment says when.
    assert!(comments.contains("sts: held or delayed by the proxy "), "the ones held behind it: {comments}");
    assert!(comments.contains(" received it at "), "{comments}");
}

/// A held message has two times, both shown: when it reached the proxy and
/// when the proxy delivered it (a `delivered` record pointing at it).
#[test]
fn a_held_message_shows_when_it_came_and_when_it_went() {
    let dir = migration_copy("held");
    let saved = dir.join("s1");
    scripted(
        &dir,
        &format!("hold flow_mod s3\nrun-to 3\nrun-to +500ms\nrelease\nrun-to +1s\nsave {}\nquit\n", saved.display()),
    );
    let trace = sts_trace::Trace::load(&saved.join("trace.jsonl")).unwrap();
    let at = |seq: u64| trace.records.iter().find(|r| r.seq == seq).unwrap();
    let delivered: Vec<_> = trace
        .records
        .iter()
        .filter_map(|r| match r.internal() {
            Some(sts_trace::Internal::Delivered { of }) => Some((r, at(*of))),
            _ => None,
        })
        .collect();
    assert!(!delivered.is_empty(), "the release delivered what was held");
    for (went, came) in &delivered {
        assert!(
            matches!(
                came.internal(),
                Some(sts_trace::Internal::Openflow { dpid: 3, proxy: Some(sts_trace::ProxyDecision::Queued), .. })
            ),
            "{came:?}"
        );
        assert!(went.t_ms >= came.t_ms + 400, "held across the 500 ms before the release: {went:?} {came:?}");
    }
    let sts = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().unwrap();
    assert!(sts(&["report", saved.to_str().unwrap()]).status.success());
    let page = std::fs::read_to_string(saved.join("report/index.html")).unwrap();
    // The arrival stops at the proxy, a dotted wait follows, and the delivery is its own arrow.
    assert_eq!(page.matches(r#"class="wait""#).count(), delivered.len(), "one wait per delivery");
    assert_eq!(page.matches(" delivered\" x1=").count(), delivered.len(), "one delivery arrow each");
    let (went, came) = delivered[0];
    let wait = went.t_ms - came.t_ms;
    assert!(
        page.contains(&format!(
            "(held or delayed by the proxy {wait} ms: delivered at {} ms, seq {})",
            went.t_ms, went.seq
        )),
        "the arrival's hover says when it went"
    );
    assert!(page.contains(&format!("delivered by the proxy {wait} ms after it came (seq {})", came.seq)));
}

/// A live session into a directory that holds an experiment already is
/// refused in the console's own words (it has no `--out`), with the command
/// that steps through what is there.
#[test]
fn a_live_session_into_an_experiment_says_how_to_step_through_it() {
    let dir = migration_copy("live-taken");
    let config = dir.join("config.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["console", "--config", config.to_str().unwrap(), dir.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("--out"), "{err}");
    assert!(err.contains(&format!("`sts console {}` (without --config)", dir.display())), "{err}");
}

/// `pingall` pings one pair at a time, each waited for, as Mininet's does:
/// a saved session holding it replays without a wait in vain (sent all at
/// once, the pings raced each other's ARP and learning, and the replay
/// waited for messages its own race never sent: "12 waits timed out").
#[test]
fn a_saved_session_with_pingall_replays_without_waiting_in_vain() {
    let dir = migration_copy("pingall-saved");
    let saved = dir.join("s1");
    let text = scripted(&dir, &format!("pingall\nnext 2\nsave {}\nquit\n", saved.display()));
    assert!(reply(&text, "pingall", 0).contains("6/6 pings answered"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_sts")).args(["replay", saved.to_str().unwrap()]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("(8 inputs, 0 waits timed out)"), "{said}{}", String::from_utf8_lossy(&out.stderr));
}

/// Two inputs in one instant (a ping, and the migration of the pinged
/// host's peer given at once, as a fuzz step can): in the original the
/// controller's PACKET_OUT for the ping's ARP came after the migration. A
/// replay keeps the migration's place: while it waits for the migration's
/// predecessors (the PACKET_IN), the PACKET_OUT that came after it in the
/// original waits in the proxy, so the replay takes the original's path,
/// message for message.
#[test]
fn a_replay_keeps_an_inputs_place_among_the_messages() {
    let base = std::env::temp_dir().join(format!("sts-console-place-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces/migration/config.toml");
    let saved = base.join("s");
    let script = base.join("script.txt");
    std::fs::write(
        &script,
        format!("ping h1 h3\nrun-to +1s\nping h2 h3\nmigrate h3 s1\nrun-to +3s\nsave {}\nquit\n", saved.display()),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["console", "--config", config.to_str().unwrap(), base.join("live").to_str().unwrap()])
        .args(["--script", script.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // After the second ping: its PACKET_IN from s2, the migration, then s2's PACKET_OUT.
    let order = |path: &Path| -> Vec<String> {
        let trace = sts_trace::Trace::load(path).unwrap();
        let from = trace
            .records
            .iter()
            .position(|r| matches!(r.external(), Some(sts_trace::External::Ping { src, .. }) if src == "h2"))
            .unwrap();
        // A message the proxy held is in its place when it was delivered.
        let s2 = |r: &sts_trace::Record, held: bool| match r.internal() {
            Some(sts_trace::Internal::Openflow { dpid: 2, msg, proxy, .. }) if proxy.is_some() == held => {
                Some(format!("s2 {}", msg.as_str()))
            }
            _ => None,
        };
        trace.records[from + 1..]
            .iter()
            .filter_map(|r| match (r.external(), r.internal()) {
                (Some(e), _) => Some(e.describe()),
                (_, Some(sts_trace::Internal::Delivered { of })) => {
                    trace.records.iter().find(|a| a.seq == *of).and_then(|a| s2(a, true))
                }
                _ => s2(r, false),
            })
            .take(3)
            .collect()
    };
    let original = order(&saved.join("trace.jsonl"));
    assert_eq!(original, ["s2 packet_in", "migrate h3 s3 -> s1", "s2 packet_out"], "the original's order");
    let replay = Command::new(env!("CARGO_BIN_EXE_sts")).arg("replay").arg(&saved).output().unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(1), "reproduced: {said}");
    assert!(!said.contains("first missing") && !said.contains("first unexpected"), "no divergence: {said}");
    assert_eq!(order(&saved.join("replays/1/trace.jsonl")), original, "the replay's order");
    let _ = std::fs::remove_dir_all(&base);
}
