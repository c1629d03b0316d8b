//! The command-line contract, through the real binary: exit codes and error
//! messages that name the file, the line and the field.

use std::process::Command;

fn sts(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("sts-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn help_lists_the_contract() {
    let (code, out, _) = sts(&["--help"]);
    assert_eq!(code, 0);
    for cmd in ["pingall", "fuzz", "replay", "minimize", "campaign", "pcap", "report", "console", "serve", "proxy"] {
        assert!(out.contains(cmd), "--help lacks {cmd}");
    }
}

/// An experiment directory holding `trace` and a one-switch config.
fn experiment(name: &str, trace: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("trace.jsonl"), trace).unwrap();
    dir
}

#[test]
fn a_bad_trace_exits_2_naming_file_line_and_field() {
    let h = r#"{"format":"sts-trace","version":1}"#;
    let ping = |seq: u32, dst: &str| {
        format!(r#"{{"seq":{seq},"t_ms":0,"external":{{"type":"ping","src":"h1","dst":"{dst}"}}}}"#)
    };
    let cases = [
        ("newer", r#"{"format":"sts-trace","version":4}"#.to_string(), "trace.jsonl:1: header.version"),
        // A cut line before the last is an error (the last one alone is dropped with a warning).
        (
            "truncated",
            format!("{h}\n{}\n{}\n{}", ping(1, "h2"), &ping(2, "h2")[..30], ping(3, "h2")),
            "trace.jsonl:3: EOF",
        ),
        (
            "unknown-event",
            format!("{h}\n{}", r#"{"seq":1,"t_ms":0,"external":{"type":"teleport"}}"#),
            "trace.jsonl:2: unknown variant `teleport`",
        ),
        (
            "missing-field",
            format!("{h}\n{}", r#"{"seq":1,"t_ms":0,"external":{"type":"ping","src":"h1"}}"#),
            "trace.jsonl:2: missing field `dst`",
        ),
        (
            "unknown-host",
            format!("{h}\n{}\n{}", ping(1, "h2"), ping(2, "h9")),
            "trace.jsonl:3: external: no host named \"h9\"",
        ),
        ("not-json", format!("{h}\nhello"), "trace.jsonl:2: expected value"),
    ];
    for (name, trace, want) in cases {
        let dir = experiment(name, &trace);
        let (code, _, err) = sts(&["replay", dir.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err:?} should contain {want:?}");
    }
    let (code, _, err) = sts(&["replay", "/nonexistent"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/config.toml"), "{err}");
}

#[test]
fn fuzz_refuses_bad_rates_and_an_existing_experiment() {
    let p = write("rates.toml", "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n\n[fuzz.rates]\ntraffic = 1.5\n");
    let out = std::env::temp_dir().join(format!("sts-cli-{}-rates-out", std::process::id()));
    let (code, _, err) = sts(&["fuzz", "--config", p.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fuzz.rates.traffic"), "{err}");
    let dir = experiment("existing", r#"{"format":"sts-trace","version":1}"#);
    let good = write(
        "good.toml",
        "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n",
    );
    let (code, _, err) = sts(&["fuzz", "--config", good.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already holds an experiment"), "{err}");
}

#[test]
fn a_broken_config_exits_2_naming_file_line_and_field() {
    let p = write("bad.toml", "[network]\ntopology = \"linear\"\nsize = \"three\"\n");
    let (code, _, err) = sts(&["pingall", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(p.to_str().unwrap()) && err.contains("line 3") && err.contains("size"), "{err}");
    let (code, _, err) = sts(&["pingall", "--config", "/nonexistent/x.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/x.toml"), "{err}");
}

#[test]
fn a_controller_that_exits_at_once_exits_3_with_its_log() {
    let p = write(
        "dies.toml",
        "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"command\"\ncommand = [\"sh\", \"-c\", \"echo config rejected >&2; exit 1\"]\n",
    );
    let (code, _, err) = sts(&["pingall", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("exited") && err.contains("config rejected"), "{err}");
}

#[test]
fn a_controller_that_never_listens_exits_3_after_its_timeout() {
    let p = write(
        "silent.toml",
        "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"command\"\ncommand = [\"sleep\", \"30\"]\nstart_timeout_ms = 500\n",
    );
    let (code, _, err) = sts(&["pingall", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("did not listen"), "{err}");
}

#[test]
fn a_controller_that_writes_garbage_exits_3_naming_the_framing_error() {
    // Listens, then answers every switch with a header whose length field is 2.
    let script = "import socket,time\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', {port}))\ns.listen()\nwhile True:\n    c,_=s.accept()\n    c.sendall(bytes([1,0,0,2,0,0,0,0]))\n";
    let p = write(
        "garbage.toml",
        &format!("[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"command\"\ncommand = [\"python3\", \"-c\", {script:?}]\n"),
    );
    let started = std::time::Instant::now();
    let (code, _, err) = sts(&["pingall", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("bad framing") && err.contains("shorter than the 8-byte OpenFlow header"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "took {:?}: should fail fast", started.elapsed());
}

/// A hand-written trace has inputs only: replay says divergence cannot be
/// reported instead of calling every replayed message unexpected, and the
/// run shows how much virtual time it covered.
#[test]
fn replaying_a_hand_written_trace_reports_no_divergence_noise() {
    let dir = experiment("by-hand", "{\"format\":\"sts-trace\",\"version\":1}\n{\"seq\":1,\"t_ms\":3000,\"external\":{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}}\n");
    let (code, out, err) = sts(&["replay", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("records no internal events"), "{err}");
    assert!(!out.contains("first unexpected"), "{out}");
    assert!(out.contains("replay 1: not reproduced (1 inputs") && out.contains("virtual time: "), "{out}");
    // For CI: the expectation decides the exit code.
    let (code, out, err) = sts(&["replay", dir.to_str().unwrap(), "--expect", "vanish"]);
    assert_eq!(code, 0, "nothing reproduced, as expected\n{out}\n{err}");
    assert!(out.contains("expected it to vanish: it did"), "{out}");
    let (code, out, _) = sts(&["replay", dir.to_str().unwrap(), "--expect", "reproduce"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("expected it to reproduce: it did not"), "{out}");
    let (code, _, err) = sts(&["replay", dir.to_str().unwrap(), "--expect", "maybe"]);
    assert_eq!(code, 2, "{err}");
}

/// A relative experiment directory works with every controller kind (an
/// ovs-testcontroller run used to fail: its control socket path, relative,
/// went under /var/run/openvswitch), for fuzz and then minimize.
#[test]
fn a_relative_experiment_directory_fuzzes_and_minimizes_with_ovs_testcontroller() {
    let cwd = std::env::temp_dir().join(format!("sts-cli-{}-relative", std::process::id()));
    let _ = std::fs::remove_dir_all(&cwd);
    std::fs::create_dir_all(&cwd).unwrap();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs-mesh.toml");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sts")).args(args).current_dir(&cwd).output().expect("run sts");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = run(&["fuzz", "--config", config.to_str().unwrap(), "--out", "rel/dir"]);
    assert_eq!(code, 1, "the mesh's loop is found\n{out}");
    let (code, out) = run(&["minimize", "rel/dir", "--final-replays", "1"]);
    assert_eq!(code, 0, "{out}");
    assert!(cwd.join("rel/dir/mcs/report.json").exists(), "{out}");
}

/// A topology file named with `..` (beside the config's directory, not in
/// it): the experiment directory gets a copy and points at it, so it replays
/// from anywhere (it used to name `../topo/...` relative to itself).
#[test]
fn a_topology_file_outside_the_config_directory_travels_with_the_experiment() {
    let root = std::env::temp_dir().join(format!("sts-cli-{}-dotdot", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("topo")).unwrap();
    std::fs::create_dir_all(root.join("cfg")).unwrap();
    std::fs::write(root.join("topo/line.topo"), "link s1 s2\nlink h1 s1\nlink h2 s2\n").unwrap();
    let config = root.join("cfg/config.toml");
    std::fs::write(
        &config,
        "[network]\ntopology = \"file\"\nfile = \"../topo/line.topo\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n\n[fuzz]\nsteps = 5\n",
    )
    .unwrap();
    let out = root.join("deep/down/exp");
    let (code, _, err) = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(matches!(code, 0 | 1), "{err}");
    assert!(out.join("topology-line.topo").exists(), "the topology file is copied in");
    let (code, _, err) = sts(&["replay", out.to_str().unwrap()]);
    assert!(matches!(code, 0 | 1), "the experiment loads and replays: exit {code}\n{err}");
}

/// A fuzz run killed before its controllers were up leaves its config and
/// meta.json but no trace: replay says so plainly (it said `trace.jsonl:0`).
#[test]
fn a_directory_without_a_trace_is_explained() {
    let dir = std::env::temp_dir().join(format!("sts-cli-{}-no-trace", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("meta.json"), "{}\n").unwrap();
    let (code, _, err) = sts(&["replay", dir.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no trace: the run that made this directory ended before its controllers were up"), "{err}");
}

/// Replaying a directory runs the programs its config names: sts says
/// which, before running them.
#[test]
fn replay_says_which_commands_the_config_runs() {
    let dir = experiment(
        "commands",
        "{\"format\":\"sts-trace\",\"version\":1}\n{\"seq\":1,\"t_ms\":0,\"external\":{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}}\n",
    );
    std::fs::write(
        dir.join("config.toml"),
        "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"command\"\ncommand = [\"true\", \"{port}\"]\nstart_timeout_ms = 2000\n",
    )
    .unwrap();
    let (code, _, err) = sts(&["replay", dir.to_str().unwrap()]);
    assert!(err.contains("sts replay: runs `true {port}` (a command from"), "{err}");
    assert_eq!(code, 3, "the command exits at once: {err}");
}

/// A config naming an app file that does not exist is bad input: exit 2,
/// naming the config's line and field, and no experiment directory is left.
#[test]
fn a_missing_app_file_is_bad_input_and_leaves_nothing_behind() {
    let config = write("missing-app.toml", "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"os-ken\"\napps = [\"no_such_app.py\"]\n");
    let out = std::env::temp_dir().join(format!("sts-cli-{}-missing-app-out", std::process::id()));
    let (code, _, err) = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing-app.toml: line 7: controllers[0].apps: \"no_such_app.py\": no such file"), "{err}");
    assert!(!out.exists(), "no partial experiment directory");
}

/// Arguments that cannot mean anything are bad input (exit 2), said before
/// anything runs: no replay at all, an output "directory" that is a file.
#[test]
fn meaningless_arguments_are_bad_input() {
    let (code, _, err) = sts(&["replay", "/nonexistent", "--repeat", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--repeat"), "{err}");
    let file = write("out-is-a-file", "not a directory\n");
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs-mesh.toml");
    let (code, _, err) = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a directory"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory\n", "left as it was");
}

/// A trace whose last line was cut (a run killed while writing it) still
/// replays: the lines before it are good, and sts says what it dropped.
#[test]
fn a_trace_cut_in_its_last_line_replays_the_rest_with_a_warning() {
    let h = r#"{"format":"sts-trace","version":2}"#;
    let good = r#"{"seq":1,"t_ms":0,"external":{"type":"ping","src":"h1","dst":"h2"}}"#;
    let dir = experiment("cut-last", &format!("{h}\n{good}\n{{\"seq\":2,\"t_ms\":5,\"exter"));
    let (code, out, err) = sts(&["replay", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("trace.jsonl:3: the last line is cut short") && err.contains("using the 1 records"), "{err}");
    assert_eq!(err.matches("cut short").count(), 1, "said once: {err}");
    assert!(out.contains("replay 1: not reproduced (1 inputs"), "{out}");
}

/// Nothing sts writes overwrites a user's file or goes through a link out
/// of the experiment; sizes past what a number can mean are bad input.
#[test]
fn writers_never_overwrite_or_write_through_links() {
    let base = std::env::temp_dir().join(format!("sts-cli-{}-writers", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs-mesh.toml");
    let config = config.to_str().unwrap();

    // `fuzz --out` a folder of the user's: refused, their config.toml untouched.
    let mine = base.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("config.toml"), "my own\n").unwrap();
    let (code, _, err) = sts(&["fuzz", "--config", config, "--out", mine.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already holds files") && err.contains("config.toml"), "{err}");
    assert_eq!(std::fs::read_to_string(mine.join("config.toml")).unwrap(), "my own\n");

    // `replays/` or `mcs/` a link out of the experiment: refused, nothing written there.
    let exp = experiment("writers-links", "{\"format\":\"sts-trace\",\"version\":2}\n");
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let _ = std::fs::remove_file(exp.join("replays"));
    std::os::unix::fs::symlink(&outside, exp.join("replays")).unwrap();
    let (code, _, err) = sts(&["replay", exp.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(std::fs::read_dir(&outside).unwrap().next().is_none(), "nothing written through the link");

    // `proxy --record` onto an existing file, or into a missing directory: exit 2, the file kept.
    let recording = base.join("recording.jsonl");
    std::fs::write(&recording, "someone's recording\n").unwrap();
    for (path, says) in [(recording.clone(), "never overwritten"), (base.join("no/such/dir/r.jsonl"), "does not exist")]
    {
        let (code, _, err) = sts(&[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--controller",
            "127.0.0.1:1",
            "--record",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(says), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&recording).unwrap(), "someone's recording\n");

    // A budget no deadline can be.
    let (code, _, err) = sts(&["minimize", exp.to_str().unwrap(), "--budget", "18446744073709551615"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--budget"), "{err}");
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_dir_all(&exp);
}

/// A pingall where every pair reaches leaves nothing in the temporary
/// directory; `--out` keeps the controllers' logs where the user says.
#[test]
fn pingall_cleans_up_after_itself_unless_told_where_to_keep_logs() {
    let tmp = std::env::temp_dir().join(format!("sts-cli-{}-pingall-tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let config = write(
        "pingall-ok.toml",
        "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n",
    );
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sts"))
            .env("TMPDIR", &tmp)
            .args(["pingall", "--config", config.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // (`sts-sockets-UID` is the per-user folder for controllers' sockets, kept for every run.)
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("sts-sockets-"))
        .collect();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
    let keep = tmp.join("logs");
    let out = run(&["--out", keep.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("controller logs: {}", keep.display())));
    assert!(std::fs::read_dir(&keep).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".log")));
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `sts pcap` on a hand-written trace (inputs only) says where the messages
/// are: in a replay's recording, not in an empty capture without a word.
#[test]
fn a_capture_of_a_hand_written_trace_points_at_its_replay() {
    let dir = experiment("pcap-by-hand", "{\"format\":\"sts-trace\",\"version\":2}\n{\"seq\":1,\"t_ms\":3000,\"external\":{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}}\n");
    let (code, out, err) = sts(&["pcap", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 OpenFlow messages"), "{out}");
    assert!(err.contains("records inputs only") && err.contains("sts replay"), "{err}");
    let (code, _, err) = sts(&["replay", dir.to_str().unwrap()]);
    assert!(code <= 1, "{err}");
    let (_, _, err) = sts(&["pcap", dir.to_str().unwrap()]);
    assert!(err.contains(&format!("sts pcap {}", dir.join("replays/1").display())), "{err}");
    let (code, out, err) = sts(&["pcap", dir.join("replays/1").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("who is who: s1 127.1.0.1, s2 127.1.0.2, c0 127.0.0.1"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace whose own run does not show its violation has nothing to
/// minimize: `sts minimize` says so, with its own exit code (5), after a few
/// replays of the whole trace instead of a full ddmin of failures.
#[test]
fn minimizing_a_trace_that_does_not_reproduce_is_refused_with_exit_5() {
    // A loop recorded, but two pings on a two-switch line never make one.
    let dir = experiment(
        "no-repro",
        "{\"format\":\"sts-trace\",\"version\":2}\n\
         {\"seq\":1,\"t_ms\":1000,\"external\":{\"type\":\"ping\",\"src\":\"h1\",\"dst\":\"h2\"}}\n\
         {\"seq\":2,\"t_ms\":1500,\"external\":{\"type\":\"ping\",\"src\":\"h2\",\"dst\":\"h1\"}}\n\
         {\"seq\":3,\"t_ms\":3000,\"violation\":{\"invariant\":\"loop\",\"elements\":[\"s1\",\"s2\"],\"summary\":\"a loop\"}}\n",
    );
    let _ = std::fs::remove_dir_all(dir.join("mcs"));
    let (code, _, err) = sts(&["minimize", dir.to_str().unwrap(), "--final-replays", "1"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("did not show its violation") && err.contains("in 3 replays"), "{err}");
    assert!(err.contains("--repeat 10"), "says how to look: {err}");
    assert!(!dir.join("mcs/report.json").exists(), "no MCS claimed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A find that never replays (`tests/fixtures/once_controller.py`: the bug
/// shows in the controller's first run only) is reported as such by `sts
/// fuzz` itself (`sts minimize` then refuses it, exit 5: tested above).
#[test]
fn a_find_that_does_not_replay_is_said_so_by_fuzz() {
    let dir = std::env::temp_dir().join(format!("sts-cli-{}-once", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/once_controller.py");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"command\"\n\
             command = [\"python3\", {:?}, {:?}, \"{{port}}\"]\n\n[fuzz]\nseed = 1\nsteps = 40\nstep_ms = 50\n\n\
             [fuzz.rates]\ntraffic = 0.5\nlink_failure = 0.0\nlink_recovery = 0.0\nhost_migration = 0.0\n\n\
             [invariants]\ncheck = [\"blackhole\"]\npersist_ms = 500\n",
            fixture.to_str().unwrap(),
            dir.join("started-once").to_str().unwrap()
        ),
    )
    .unwrap();
    let exp = dir.join("exp");
    let (code, out, err) = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", exp.to_str().unwrap()]);
    assert_eq!(code, 1, "the first run's blackhole is found: {out}\n{err}");
    assert!(out.contains("WARNING: the find replayed 0/1"), "{out}");
    assert!(exp.join("check/1/trace.jsonl").is_file(), "the check's replay is kept");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Minimizing a finished directory again reports what the minimization
/// cost, not that plus every earlier run's final replays.
#[test]
fn minimizing_again_does_not_inflate_the_replay_count() {
    let dir = std::env::temp_dir().join(format!("sts-cli-{}-again", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs-mesh.toml");
    let (code, _, err) = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let replays = || {
        let (code, out, err) = sts(&["minimize", dir.to_str().unwrap(), "--final-replays", "2"]);
        assert_eq!(code, 0, "{err}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("mcs/report.json")).unwrap()).unwrap();
        (report["replays"].as_u64().unwrap(), out)
    };
    let (first, out) = replays();
    let (second, again) = replays();
    assert_eq!(first, second, "{out}\n{again}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sts ... | head`: a reader that goes away early is no error. The output
/// here (a k = 16 fat-tree's wiring, 84 KB) outgrows the pipe, so the
/// command meets the closed pipe; it must end normally, without a panic.
#[test]
fn a_closed_pipe_on_standard_output_is_no_error() {
    use std::io::Read;
    let config = write(
        "fat-tree.toml",
        "[network]\ntopology = \"fat-tree\"\nsize = 16\nopenflow = \"1.3\"\n\n\
         [[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["import", "--config", config.to_str().unwrap(), "--wiring"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sts");
    let mut first = [0u8; 10];
    child.stdout.take().expect("stdout").read_exact(&mut first).expect("the first bytes");
    // The read end is closed here (dropped).
    let out = child.wait_with_output().expect("sts ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(first.starts_with(b"switch"), "{:?}", String::from_utf8_lossy(&first));
}
