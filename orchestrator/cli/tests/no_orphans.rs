//! No orphaned controller processes, even when sts is killed with SIGKILL.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Processes whose environment holds `entry` (`NAME=value`): controllers
/// inherit sts's environment, and forks of them keep it.
fn processes_with_env(entry: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env.split(|&b| b == 0).any(|v| v == entry.as_bytes()) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Runs `sts pingall` on `config` (a long one: on real time, since virtual
/// time would skip its waiting), waits until at least `processes`
/// controller processes run, SIGKILLs sts mid-run and asserts that none of
/// them survives. Controllers are found by a marker in sts's environment,
/// which they inherit (their command lines need not name anything of the
/// run; a zombie's environment reads empty: dead processes waiting to be
/// reaped do not count).
fn sigkill_mid_pingall_leaves_nothing(name: &str, config: &str, processes: usize) {
    let path = std::env::temp_dir().join(format!("sts-orphans-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, config).unwrap();
    let mark = format!("STS_ORPHAN_MARK={name}-{}", std::process::id());
    let (key, value) = mark.split_once('=').unwrap();
    let mut sts = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["pingall", "--config", path.to_str().unwrap()])
        .env(key, value)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sts_pid = sts.id();
    let controllers = || -> Vec<u32> { processes_with_env(&mark).into_iter().filter(|&p| p != sts_pid).collect() };
    let deadline = Instant::now() + Duration::from_secs(20);
    while controllers().len() < processes {
        assert!(Instant::now() < deadline, "{name}: the controllers never started: {:?}", controllers());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500)); // mid-run: switches connected
    sts.kill().unwrap(); // SIGKILL: no cleanup code in sts runs
    sts.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = controllers();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{name}: controllers survived SIGKILL of sts: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigkill_of_sts_leaves_no_controller_behind() {
    let config = "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.0\"\n\n\
         [[controllers]]\nkind = \"ovs-testcontroller\"\nsnapshot = false\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\nsnapshot = false\n\n\
         [[controllers]]\nkind = \"ovs-testcontroller\"\nsnapshot = false\n\n[pingall]\nmin_wait_ms = 60000\nsettle_ms = 60000\n\n[time]\nvirtual = false\n";
    sigkill_mid_pingall_leaves_nothing("processes", config, 3);
}

/// A `command` controller behind a wrapper shell that does not `exec`: the
/// real controller is the shell's child. SIGKILL of sts takes it down too
/// (its process group is watched from outside; issue 19).
#[test]
fn sigkill_of_sts_leaves_no_grandchild_of_a_wrapper_behind() {
    let config = "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.0\"\n\n\
         [[controllers]]\nkind = \"command\"\n\
         command = [\"sh\", \"-c\", \"ovs-testcontroller --unixctl={run_dir}/wrapped.ctl ptcp:{port}:{address}; true\"]\n\n\
         [pingall]\nmin_wait_ms = 60000\nsettle_ms = 60000\n\n[time]\nvirtual = false\n";
    sigkill_mid_pingall_leaves_nothing("wrapper", config, 2);
}

/// With snapshots, each controller is a parked zygote plus the copies forked
/// from it; SIGKILL of sts takes down zygotes and copies alike.
#[test]
fn sigkill_of_sts_leaves_no_zygote_or_copy_behind() {
    // Two different commands: two zygotes, and a copy of each.
    let config = "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.0\"\n\n\
         [[controllers]]\nkind = \"ovs-testcontroller\"\nsnapshot = true\n\n\
         [[controllers]]\nkind = \"ovs-testcontroller\"\nargs = [\"--verbose=off\"]\nsnapshot = true\n\n\
         [pingall]\nmin_wait_ms = 60000\nsettle_ms = 60000\n\n[time]\nvirtual = false\n";
    sigkill_mid_pingall_leaves_nothing("snapshots", config, 4);
}

/// A fuzz run killed half-way leaves a readable experiment directory (config,
/// metadata, every trace line written so far) and no controller behind.
#[test]
fn a_fuzz_run_killed_half_way_leaves_a_readable_directory() {
    let config = std::env::temp_dir().join(format!("sts-killed-fuzz-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.0\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n\n\
         [fuzz]\nsteps = 100000\nstep_ms = 20\n\n[fuzz.rates]\ntraffic = 0.9\nlink_failure = 0.0\nhost_migration = 0.0\n",
    )
    .unwrap();
    let out = std::env::temp_dir().join(format!("sts-killed-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mark = format!("STS_ORPHAN_MARK=killed-fuzz-{}", std::process::id());
    let mut sts = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["fuzz", "--config", config.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .env("STS_ORPHAN_MARK", mark.split_once('=').unwrap().1)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let trace = out.join("trace.jsonl");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&trace).map_or(0, |t| t.matches("\"external\"").count()) < 20 {
        assert!(Instant::now() < deadline, "the fuzz run never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    sts.kill().unwrap();
    sts.wait().unwrap();
    let t = sts_trace::Trace::load(&trace).unwrap_or_else(|e| panic!("the trace of a killed run must load: {e}"));
    assert!(t.externals().len() >= 20);
    assert_eq!(t.header.seed, Some(1));
    sts_engine::config::Config::load(&out.join("config.toml")).expect("config.toml is whole");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).expect("meta.json is whole");
    assert_eq!(meta["seed"], 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with_env(&mark).is_empty() {
        assert!(Instant::now() < deadline, "a controller survived");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The parent of process `pid` (0 if it is gone).
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name (in parentheses): state, then the parent's pid.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
}

/// PEEK with checkpoints adds processes of its own: a holder per checkpoint
/// (parked, keeping a controller's state), which becomes the controller when
/// PEEK rolls back to it, its parent (the copy that ran on) killed. SIGKILL of
/// sts once such a holder runs as the controller takes it down too, though no
/// parent of sts's is left for it to die with.
#[test]
fn sigkill_mid_peek_leaves_no_holder_or_resumed_copy_behind() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("sts-orphans-peek-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let made = Command::new("python3")
        .arg(workspace.join("tests/suite/make_trace.py"))
        .args(["stale_routes", "30", "1", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // The whole minimization takes about a second and a holder runs as the
    // controller only for part of it: a loaded machine's scan of /proc can
    // miss every such spell. So sts is stopped (SIGSTOP) while /proc is
    // read, which makes each look a consistent picture of the process tree
    // sts made, and a run that ends unseen is tried again.
    let stderr_path = std::env::temp_dir().join(format!("sts-orphans-peek-{}.stderr", std::process::id()));
    for attempt in 1..=5 {
        let _ = std::fs::remove_dir_all(dir.join("mcs"));
        let _ = std::fs::remove_dir_all(dir.join("report"));
        // Every controller process here (zygote, copies, holders) inherits this.
        let tag = format!("STS_ORPHAN_TEST=peek-{}-{attempt}", std::process::id());
        let (key, value) = tag.split_once('=').unwrap();
        let mut sts = Command::new(env!("CARGO_BIN_EXE_sts"))
            .args(["minimize", dir.to_str().unwrap(), "--peek", "checkpoints", "--replays", "1"])
            .env(key, value)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        let sts_pid = sts.id();
        let pid = nix::unistd::Pid::from_raw(sts_pid as i32);
        let live = || processes_with_env(&tag).into_iter().filter(|&p| p != sts_pid).collect::<Vec<_>>();
        // A holder that took over: a controller process whose parent is none
        // of the run's (its own parent, the copy it was forked from, is gone).
        let taken_over = || {
            let live = live();
            live.iter()
                .copied()
                .filter(|&p| ![sts_pid, 0].contains(&parent_of(p)) && !live.contains(&parent_of(p)))
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let seen = loop {
            if sts.try_wait().unwrap().is_some() {
                break false;
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
            if taken_over() > 0 {
                break true;
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
            assert!(Instant::now() < deadline, "no holder ever took over in a minute: {:?}", live());
            std::thread::sleep(Duration::from_millis(2));
        };
        if !seen {
            all_gone_within_5s("after a minimization that ended", live);
            // Why: a PEEK that fell back to prefix replay makes no holders.
            let said = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            let notable: Vec<&str> =
                said.lines().filter(|l| !l.contains("minimizing:") && !l.starts_with("  ")).take(8).collect();
            eprintln!(
                "attempt {attempt}: the minimization ended before a holder was seen running; again (sts said: {notable:?})"
            );
            continue;
        }
        sts.kill().unwrap(); // SIGKILL takes a stopped process down too
        sts.wait().unwrap();
        all_gone_within_5s("mid-PEEK", live);
        return;
    }
    panic!("in 5 minimizations no holder was ever seen running as the controller");
}

/// Waits until `live` lists no process (zombies, reaped by whoever adopted
/// them, have an empty environment and command line), for at most 5 s.
fn all_gone_within_5s(when: &str, live: impl Fn() -> Vec<u32>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = live();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "controller processes survived SIGKILL of sts {when}: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The console with two checkpoints and a rewind: a zygote, the copies
/// resumed from the checkpoint, the checkpoints' parked holders; SIGKILL of
/// sts in the middle of a long `run-to` takes every one of them down.
#[test]
fn sigkill_of_a_console_with_checkpoints_leaves_nothing_behind() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("sts-orphans-console-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(workspace.join("examples/traces/migration").join(f), dir.join(f)).unwrap();
    }
    let script = dir.join("script.txt");
    std::fs::write(&script, "checkpoint a\nnext\ncheckpoint b\nrewind a\nrun-to +100000s\nquit\n").unwrap();
    let tag = format!("STS_ORPHAN_TEST=console-{}", std::process::id());
    let mut sts = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["console", dir.to_str().unwrap(), "--script", script.to_str().unwrap()])
        .env("STS_ORPHAN_TEST", format!("console-{}", std::process::id()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sts_pid = sts.id();
    let live = || processes_with_env(&tag).into_iter().filter(|&p| p != sts_pid).collect::<Vec<_>>();
    // Wait for the long run-to: the rewind is done, both checkpoints held.
    let mut out = sts.stdout.take().unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.contains("sts> run-to +100000s") {
        assert!(Instant::now() < deadline, "the session never got to its run-to: {seen}");
        let mut buf = [0u8; 4096];
        let n = std::io::Read::read(&mut out, &mut buf).unwrap();
        assert!(n > 0, "sts ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("rewound to a"), "{seen}");
    assert!(live().len() >= 4, "a zygote, a resumed copy and two holders at least: {:?}", live());
    sts.kill().unwrap();
    sts.wait().unwrap();
    all_gone_within_5s("in a console", live);
}
