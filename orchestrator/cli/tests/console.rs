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
        "where\nflows s3\nnext 2\nnext\nflows s3\nlinks\nbogus\nnext x\ncheck\ncontinue\nwhere\nhelp flows\nquit\n",
    );

    assert!(reply(&text, "where", 0).contains("next: ping h1 -> h3"), "{text}");
    let before = reply(&text, "flows s3", 0);
    assert_eq!(before.lines().count(), 1, "only the table-miss entry before any traffic: {before}");
    assert!(before.contains("priority=0 actions=CONTROLLER:65535"), "{before}");
    assert!(reply(&text, "next", 0).contains("migrate h3 s3 -> s1"), "{text}");
    let after = reply(&text, "flows s3", 1);
    assert!(after.contains("eth_dst=00:00:00:00:00:03") && after.contains("actions=output:1"), "learned: {after}");
    assert!(reply(&text, "links", 0).contains("h3 - s1:"), "h3 moved: {text}");
    assert!(reply(&text, "bogus", 0).contains("unknown command"), "{text}");
    assert!(reply(&text, "next x", 0).contains("a number of inputs"), "{text}");
    let check = reply(&text, "check", 0);
    assert!(check.contains("victim: blackhole:h3") && check.contains("culprit: s3 table 0"), "{check}");
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

fn tmux(args: &[&str]) -> String {
    // tmux wants a terminal type even for detached sessions (CI has none).
    let out = Command::new("tmux")
        .env("TERM", "xterm-256color")
        .args(args)
        .output()
        .expect("tmux (scripts/setup installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
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

#[test]
fn the_interactive_prompt_completes_remembers_and_ends_cleanly() {
    let dir = migration_copy("tmux");
    let session = format!("sts-console-{}", std::process::id());
    let _ = tmux(&["kill-session", "-t", &session]);
    let cmd = format!("{} console {}; echo console-exited-$?; sleep 30", env!("CARGO_BIN_EXE_sts"), dir.display());
    tmux(&["new-session", "-d", "-s", &session, "-x", "200", "-y", "50", &cmd]);
    wait_for(&session, "`help` lists the commands");
    // The run stands still while the prompt waits: 4 s of thinking cost the
    // controllers no time (the first input comes at its recorded 1.2 s, not
    // 5 s into the run).
    std::thread::sleep(Duration::from_secs(4));
    // Completion: "ne" + Tab becomes "next".
    tmux(&["send-keys", "-t", &session, "ne", "Tab"]);
    wait_for(&session, "sts> next");
    tmux(&["send-keys", "-t", &session, " 3", "Enter"]);
    let pane = wait_for(&session, "migrate h3 s3 -> s1");
    let first: u64 = pane
        .lines()
        .find_map(|l| l.strip_prefix("input 1 of 4 (seq 1) at ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no first input in:\n{pane}"));
    assert!(first < 3000, "the pause at the prompt moved the run's clock: first input at {first} ms");
    // History: Up brings back "next 3".
    tmux(&["send-keys", "-t", &session, "Up", "Enter"]);
    wait_for(&session, "input 4 of 4");
    // Ctrl-C at the prompt does not end the session; Ctrl-D does.
    tmux(&["send-keys", "-t", &session, "C-c"]);
    wait_for(&session, "Ctrl-C: type quit");
    tmux(&["send-keys", "-t", &session, "C-d"]);
    let pane = wait_for(&session, "console-exited-");
    let _ = tmux(&["kill-session", "-t", &session]);
    assert!(pane.contains("console-exited-0") && pane.contains("session ended after 4 inputs"), "{pane}");
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
