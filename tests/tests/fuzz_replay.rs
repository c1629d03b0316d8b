//! Fuzzing finds a real bug from a seed, the same seed finds it again, and
//! replay reproduces it; a hand-written trace replays too.
//!
//! The bug: os-ken's `simple_switch_13` installs flows without timeouts and
//! ignores port status, so after a host migrates its traffic still goes to
//! the old port (a persistent blackhole). The config has no hint of it beyond
//! rates and topology (`examples/fuzz-osken13-migration.toml`).

use std::path::{Path, PathBuf};

use sts_engine::config::Config;
use sts_engine::{fuzz, replay};
use sts_trace::dir::Experiment;
use sts_trace::Trace;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn fresh(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sts-e2e-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn fuzzing_finds_the_migration_blackhole_the_same_seed_finds_it_again_and_replay_reproduces_it() {
    let path = workspace().join("examples/fuzz-osken13-migration.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let config = Config::from_toml(&text, &path).unwrap();
    let rt = rt();
    let mut fingerprints = Vec::new();
    let mut first = None;
    for run in ["a", "b"] {
        let exp = Experiment::create(&fresh(run), &text).unwrap();
        let out = rt.block_on(fuzz::run(sts_e2e::engine(), &config, &exp)).unwrap_or_else(|e| panic!("{e}"));
        let v = out.violation.unwrap_or_else(|| panic!("run {run}: no violation in {} steps", out.steps));
        assert_eq!(v.invariant, sts_invariants::Invariant::Blackhole, "{v:?}");
        assert!(v.witness.is_some());
        fingerprints.push(v.fingerprint());
        first.get_or_insert(exp);
    }
    assert_eq!(fingerprints[0], fingerprints[1], "the same seed finds the same bug");

    let exp = first.unwrap();
    let trace = Trace::load(&exp.trace()).unwrap();
    assert_eq!(trace.header.seed, Some(1));
    assert!(trace.violation().is_some() && exp.violation().exists());
    replay::validate(&config, &trace, &exp.trace()).unwrap();
    for n in 1..=2 {
        let r = rt.block_on(replay::replay_once(sts_e2e::engine(), &config, &trace, &exp.replay(n), n)).unwrap();
        assert!(r.reproduced, "replay {n} did not reproduce: {:?}", r.violation);
        let replayed = Trace::load(&r.trace).expect("each replay writes a readable trace");
        // On virtual time the replay's controllers see the recorded run's dates.
        let (rec, rep) = (
            trace.header.wall_epoch_ns.expect("the fuzz run recorded its date"),
            replayed.header.wall_epoch_ns.expect("the replay's date"),
        );
        assert!(rec.abs_diff(rep) < 10_000_000, "replay {n} started at {rep} ns, the recorded run at {rec} ns");
    }
}

#[test]
fn a_hand_written_trace_replays_and_reproduces_its_violation() {
    let src = workspace().join("examples/traces/migration");
    let dir = fresh("hand-written");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let exp = Experiment::open(&dir);
    let config = Config::load(&exp.config()).unwrap();
    let trace = Trace::load(&exp.trace()).unwrap();
    assert_eq!(trace.externals().len(), 4);
    replay::validate(&config, &trace, &exp.trace()).unwrap();
    let r = rt().block_on(replay::replay_once(sts_e2e::engine(), &config, &trace, &exp.replay(1), 1)).unwrap();
    assert!(r.reproduced, "{:?}", r.violation);
    assert_eq!(r.injected, 4);
    assert_eq!(r.violation.map(|v| v.fingerprint()).as_deref(), Some("blackhole:h3"));
}

#[test]
fn minimizing_the_hand_written_trace_keeps_the_migration_and_one_ping_and_resumes() {
    use sts_engine::minimize::{self, Options};
    let src = workspace().join("examples/traces/migration");
    let dir = fresh("minimize");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let opts = Options { jobs: 2, final_replays: 2, ..Options::default() };
    let r = rt().block_on(minimize::run(sts_e2e::engine(), &dir, &opts)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((r.original_inputs, r.mcs_inputs), (4, 2), "{r:?}");
    // os-ken on virtual time: candidates went on from the checkpoint after
    // the handshakes, one live run per place.
    let warm = r.warm.as_ref().expect("warm places by default");
    assert!(warm.fresh_because.is_none(), "{warm:?}");
    assert!(warm.resumed > 0 && (1..=2).contains(&warm.places), "{warm:?}");
    let left = dir.join("mcs/runs").read_dir().map_or(0, |d| d.count());
    assert_eq!(left, 0, "the places' logs are gone");
    assert!(r.mcs.iter().any(|e| e.contains("migrate h3")), "{:?}", r.mcs);
    assert!(r.mcs.iter().any(|e| e.contains("ping h1 -> h3") || e.contains("ping h3 -> h1")), "{:?}", r.mcs);
    assert!(r.final_reproduced >= 1, "{r:?}");
    let mcs = Trace::load(&dir.join("mcs/trace.jsonl")).unwrap();
    assert_eq!(mcs.externals().len(), 2);
    assert!(dir.join("mcs/report.json").exists() && dir.join("mcs/config.toml").exists());
    // Started again, every candidate is already known: only the final replays run.
    let again = rt().block_on(minimize::run(sts_e2e::engine(), &dir, &Options { final_replays: 1, ..opts })).unwrap();
    assert_eq!(again.mcs_inputs, 2);
    // Its count: the search's replays (none new) and this run's one final replay.
    assert_eq!(
        again.replays,
        r.replays - u64::from(opts.final_replays) + 1,
        "resumed without replaying candidates again"
    );
}

/// Switch crashes and recoveries, controller crashes and restarts: the
/// switches reconnect (fresh handshakes), nothing is reported as a liveness
/// failure while down on purpose, and the trace replays input for input.
#[test]
fn failures_and_restarts_are_injected_and_replayed() {
    let text = "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.0\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n\n\
                [fuzz]\nseed = 2\nsteps = 200\nstep_ms = 50\n\n[fuzz.rates]\ntraffic = 0.5\nlink_failure = 0.0\nhost_migration = 0.0\n\
                controller_crash = 0.03\ncontroller_recovery = 0.1\nswitch_failure = 0.02\nswitch_recovery = 0.1\n";
    let config = Config::from_toml(text, Path::new("failures.toml")).unwrap();
    let rt = rt();
    let exp = Experiment::create(&fresh("failures"), text).unwrap();
    let out = rt.block_on(fuzz::run(sts_e2e::engine(), &config, &exp)).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.violation.is_none(), "a learning switch on a line survives crashes: {:?}", out.violation);
    let trace = Trace::load(&exp.trace()).unwrap();
    let kinds: Vec<String> = trace.externals().iter().map(|(_, e)| e.describe()).collect();
    for k in ["switch s1 fails", "switch s1 recovers", "controller c0 crashes", "controller c0 restarts"] {
        assert!(kinds.iter().any(|d| d == k), "no {k:?} in {kinds:?}");
    }
    let handshakes = trace
        .records
        .iter()
        .filter(|r| matches!(r.internal(), Some(sts_trace::Internal::Openflow { msg, .. }) if msg == "features_reply"))
        .count();
    assert!(handshakes > 3, "switches reconnected ({handshakes} handshakes)");
    let r = rt.block_on(replay::replay_once(sts_e2e::engine(), &config, &trace, &exp.replay(1), 1)).unwrap();
    assert_eq!(r.injected, trace.externals().len());
    assert!(r.violation.is_none(), "{:?}", r.violation);
}

/// A replay called off mid-run stops at its next slice and says nothing
/// (a minimization's candidate whose round an earlier one decided).
#[test]
fn a_replay_called_off_stops_and_gives_no_verdict() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let src = workspace().join("examples/traces/migration");
    let config = Config::load(&src.join("config.toml")).unwrap();
    let trace = Trace::load(&src.join("trace.jsonl")).unwrap();
    let rt = rt();
    let whole = rt.block_on(replay::replay_once(sts_e2e::engine(), &config, &trace, &fresh("whole"), 1)).unwrap();
    assert!(whole.reproduced && whole.injected == 4, "{whole:?}");
    // Asked after every slice: called off after the first few.
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = asked.clone();
    let off: replay::CallOff = Arc::new(move || seen.fetch_add(1, Ordering::Relaxed) >= 3);
    let r =
        rt.block_on(replay::replay_unless(sts_e2e::engine(), &config, &trace, &fresh("off"), 1, Some(off))).unwrap();
    assert!(r.is_none(), "called off, yet a verdict: {r:?}");
    assert!(asked.load(Ordering::Relaxed) <= 5, "it went on after being called off");
    // Never called off: the replay's own verdict.
    let never: replay::CallOff = Arc::new(|| false);
    let r =
        rt.block_on(replay::replay_unless(sts_e2e::engine(), &config, &trace, &fresh("on"), 1, Some(never))).unwrap();
    assert!(r.is_some_and(|r| r.reproduced));
}

/// Warm places with a threaded controller: checkpoints are refused, so
/// every replay is fresh and the summary says why; the replays themselves
/// are the same as without warm places.
#[test]
fn a_threaded_controller_is_replayed_fresh_and_the_summary_says_why() {
    let src = workspace().join("examples/traces/migration");
    let text = std::fs::read_to_string(src.join("config.toml"))
        .unwrap()
        .replace("kind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]", "kind = \"c65faucet\"");
    assert!(text.contains("c65faucet"));
    let config = Config::from_toml(&text, &src.join("config.toml")).unwrap();
    let trace = Trace::load(&src.join("trace.jsonl")).unwrap();
    let dir = fresh("threaded");
    let places = sts_engine::warm::Places::new(dir.join("places"));
    let rt = rt();
    for run in 1..=2 {
        let r = rt.block_on(places.replay(sts_e2e::engine(), &config, &trace, &dir.join(format!("{run}")), run, None));
        let r = r.unwrap_or_else(|e| panic!("{e}")).expect("not called off");
        assert_eq!(r.injected, 4, "{r:?}");
    }
    let summary = places.summary();
    assert_eq!(summary.resumed, 0, "{summary:?}");
    let why = summary.fresh_because.expect("a reason");
    assert!(why.contains("threads"), "{why}");
}
