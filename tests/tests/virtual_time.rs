//! Virtual time (issue 8, `docs/virtual-time.md`): real controller processes
//! read sts's clock through the shim, and when everything is idle time jumps
//! to their next timer. Timers still fire in order, timestamps stay
//! monotonic, connections survive minutes of virtual time, and os-ken's STP
//! converges without its 30 s being waited for.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sts_engine::clock::{Clock, VirtualTime};
use sts_engine::config::Config;
use sts_engine::controller::{Controller, ControllerSpec};
use sts_engine::snapshot::{self, Zygote};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sts-e2e-vtime-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn timers_spec() -> ControllerSpec {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/timers.py");
    ControllerSpec {
        name: "timers".into(),
        command: vec!["python3".into(), script.display().to_string(), "{port}".into()],
        env: vec![],
        config: None,
        start_timeout: Duration::from_secs(20),
        guard_group: false,
    }
}

/// Lets time jump whenever the stand-in is idle until it has printed its
/// twelve ticks (60 s of its time), then checks the ticks.
fn ticks_follow_virtual_time(clock: &Clock, vt: &VirtualTime, log: &Path) {
    // A bound so a broken jump fails the test instead of hanging it: without
    // jumps the ticks need 60 s.
    let give_up = Instant::now() + Duration::from_secs(40);
    let text = loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("done") {
            break text;
        }
        assert!(
            Instant::now() < give_up,
            "the ticks did not finish on virtual time ({} jumps); log:\n{text}",
            vt.jumps()
        );
        clock.jump_if_idle(clock.now() + 60_000, 0);
        std::thread::sleep(Duration::from_micros(300));
    };
    let ticks: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("tick "))
        .map(|l| {
            let f: Vec<f64> = l.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
            (f[0], f[1])
        })
        .collect();
    assert_eq!(ticks.len(), 12, "log:\n{text}");
    for w in ticks.windows(2) {
        let (mono, wall) = (w[1].0 - w[0].0, w[1].1 - w[0].1);
        // Each tick comes 5 s after the last on both clocks (a tick may come
        // up to a jump's latency, 1 ms, after its timer, so a gap can be 1 ms short).
        assert!((4.99..5.5).contains(&mono), "monotonic gap {mono} between ticks: {:?}", w);
        assert!((4.99..5.5).contains(&wall), "wall-clock gap {wall} between ticks: {:?}", w);
    }
    assert!(vt.jumps() >= 12, "{} jumps", vt.jumps());
    assert!(vt.offset() >= Duration::from_secs(30), "virtual time is only {:?} ahead", vt.offset());
}

/// The stand-in started as a new process on a fresh virtual clock (with
/// `extra` arguments), logging into `d/timers.log`.
fn timers_on_virtual_time(d: &Path, extra: &[&str]) -> (std::sync::Arc<VirtualTime>, Clock, Controller) {
    let vt = VirtualTime::create().unwrap();
    let clock = Clock::start_virtual(vt.clone());
    let mut spec = timers_spec();
    spec.command.extend(extra.iter().map(|a| a.to_string()));
    let spec = snapshot::on_virtual_time(&spec, &vt).unwrap();
    let ctl = Controller::start_on_free_port(&spec, &d.join("timers.log")).unwrap();
    vt.expect([ctl.pid()]);
    (vt, clock, ctl)
}

#[test]
fn a_new_process_reads_virtual_time_and_its_timers_fire_in_order() {
    let d = dir("process");
    let (vt, clock, mut ctl) = timers_on_virtual_time(&d, &[]);
    ticks_follow_virtual_time(&clock, &vt, &d.join("timers.log"));
    ctl.kill();
}

/// A controller that forks a helper process: the child gets a clock slot of
/// its own. (It used to inherit its parent's and write its own 30 s waits
/// into it, so time jumped past the parent's 5 s timers: found while looking
/// for issue 17's stall, fixed in the shim's `pthread_atfork` handler.)
#[test]
fn a_controllers_child_process_never_hides_its_timers() {
    let d = dir("child");
    let (vt, clock, mut ctl) = timers_on_virtual_time(&d, &["--child"]);
    ticks_follow_virtual_time(&clock, &vt, &d.join("timers.log"));
    assert_eq!(vt.attached(), 2, "the controller and its child each have a slot");
    ctl.kill();
}

/// A controller process that dies mid-run stops holding time back, and the
/// clock says so once (sessions turn it into a notice naming the controller).
#[test]
fn a_controller_that_dies_is_noticed_once() {
    let d = dir("dies");
    let (vt, clock, mut ctl) = timers_on_virtual_time(&d, &[]);
    let jumps = d.join("jumps.jsonl");
    vt.log_jumps_to(&jumps).unwrap();
    let pid = ctl.pid();
    while !std::fs::read_to_string(d.join("timers.log")).unwrap_or_default().contains("tick 1") {
        clock.jump_if_idle(clock.now() + 60_000, 0);
        std::thread::sleep(Duration::from_micros(300));
    }
    // (Helpers that attached on the way may have left: `python3` can be a
    // wrapper script, and every process it runs loads the shim.)
    assert!(!vt.take_departed().contains(&u64::from(pid)), "alive");
    ctl.kill();
    clock.jump_if_idle(clock.now() + 60_000, 0);
    assert_eq!(vt.take_departed(), vec![u64::from(pid)]);
    assert!(vt.take_departed().is_empty(), "said once");
    let log = std::fs::read_to_string(&jumps).unwrap();
    assert!(log.contains(&format!("process {pid} is gone")), "{log}");
    assert!(log.lines().any(|l| l.contains("\"processes\"")), "jumps are logged: {log}");
}

#[test]
fn a_forked_copy_gets_the_runs_virtual_time() {
    let d = dir("fork");
    let mut z = Zygote::start(&timers_spec(), &d.join("zygote.log")).unwrap();
    let vt = VirtualTime::create().unwrap();
    let clock = Clock::start_virtual(vt.clone());
    let mut copy = z.fork(&d.join("copy.log"), Some(&vt)).unwrap();
    vt.expect([copy.pid()]);
    assert_eq!(vt.attached(), 1, "the copy took a slot on the run's clock page");
    ticks_follow_virtual_time(&clock, &vt, &d.join("copy.log"));
    copy.kill();
}

/// A pingall on `rt`, which must stay alive as long as the run is used (its
/// connections are tasks on it).
fn pingall(rt: &tokio::runtime::Runtime, name: &str, toml: &str) -> sts_engine::pingall::PingallRun {
    let config = Config::from_toml(toml, Path::new(name)).unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(sts_engine::pingall::run(sts_e2e::engine(), &config, &dir(name)))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn os_ken_stp_converges_on_virtual_time() {
    let rt = runtime();
    let r = pingall(
        &rt,
        "stp",
        "[network]\ntopology = \"mesh\"\nsize = 3\nopenflow = \"1.3\"\n\n\
         [[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_stp_13\"]\n\n\
         [time]\nvirtual = true\n\n[pingall]\nmin_wait_ms = 35000\nsettle_ms = 40000\n",
    );
    assert!(r.matrix.all_reached(), "{}", sts_report::matrix(&r.matrix));
    assert!(r.runner.net.events.is_empty(), "{:?}", r.runner.net.events);
    let vt = r.runner.clock.virtual_time().unwrap();
    assert!(
        vt.offset() >= Duration::from_secs(20),
        "STP's 30 s were waited for, not jumped: {}",
        r.runner.clock.summary().unwrap()
    );
    let log = std::fs::read_to_string(r.run_dir.join("controller-0-os-ken.log")).unwrap();
    assert!(log.contains("/ FORWARD") && log.contains("/ BLOCK"), "STP converged with a blocked port:\n{log}");
}

/// Two minutes of virtual time with nothing happening: keepalives still
/// flow, no connection drops, and the network still works afterwards (after
/// idle timeouts, for controllers that set them: ovs-testcontroller's 60 s).
fn survives_idle_minutes(name: &str, controller: &str, speaks_when_idle: bool) {
    let rt = runtime();
    let mut r = pingall(&rt, name, &format!("[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n\n[[controllers]]\n{controller}\n\n[time]\nvirtual = true\n"));
    assert!(r.matrix.all_reached(), "{name}:\n{}", sts_report::matrix(&r.matrix));
    let before = r.runner.clock.now();
    let issues_before = r.runner.issues.len();
    let heard = r.runner.messages_from_controllers;
    rt.block_on(r.runner.run_for(Duration::from_secs(120)));
    if speaks_when_idle {
        // Its timers fired on virtual time: it spoke with nothing to react to.
        assert!(r.runner.messages_from_controllers > heard, "{name}: silent for two virtual minutes");
    }
    assert!(r.runner.clock.now() >= before + 120_000);
    assert_eq!(r.runner.issues.len(), issues_before, "{name}: {:?}", r.runner.issues);
    assert!(r.runner.disconnected().is_empty(), "{name}: switches lost their controller");
    assert!(rt.block_on(r.runner.ping(0, 2, 2_000)), "{name}: h1 cannot reach h3 after the idle minutes");
    assert!(
        r.runner.clock.virtual_time().unwrap().offset() >= Duration::from_secs(60),
        "{name}: {}",
        r.runner.clock.summary().unwrap()
    );
}

#[test]
fn ovs_testcontroller_keeps_its_switches_over_idle_virtual_minutes() {
    // Its flows idle out after 60 s: the ping afterwards needs it again.
    survives_idle_minutes("ovs13-idle", "kind = \"ovs-testcontroller\"\nargs = [\"-O\", \"OpenFlow13\"]", true);
}

#[test]
fn os_ken_keeps_its_switches_over_idle_virtual_minutes() {
    survives_idle_minutes("osken13-idle", "kind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]", false);
}

#[test]
fn faucet_keeps_its_switches_over_idle_virtual_minutes() {
    survives_idle_minutes("faucet-idle", "kind = \"faucet\"", true);
}

/// A controller that starts a second thread cannot be followed (one slot,
/// several waits): the shim says so in its log, and time stops jumping.
#[test]
fn a_multi_threaded_controller_keeps_the_run_on_real_time() {
    let d = dir("threads");
    let vt = VirtualTime::create().unwrap();
    let clock = Clock::start_virtual(vt.clone());
    let mut spec = timers_spec();
    spec.command.push("--thread".into());
    let spec = snapshot::on_virtual_time(&spec, &vt).unwrap();
    let log = d.join("timers.log");
    let mut ctl = Controller::start_on_free_port(&spec, &log).unwrap();
    vt.expect([ctl.pid()]);
    let give_up = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("second thread") {
        assert!(Instant::now() < give_up, "the shim never said it saw the thread:\n{}", ctl.log_tail(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    // The process waits for its 5 s timer like the single-threaded one, but
    // time does not jump.
    for _ in 0..50 {
        clock.jump_if_idle(clock.now() + 60_000, 0);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(vt.jumps(), 0);
    assert!(vt.stopped_by_threads());
    assert!(clock.now() < 5_000, "time stayed real: {} ms", clock.now());
    ctl.kill();
}

/// A replay serves the recorded run's dates: a controller on a clock page
/// whose wall clock was set to a recorded date reads that date (plus the
/// virtual time that passed) from `time.time()`, while its monotonic clock
/// is untouched by the date.
#[test]
fn a_controller_reads_the_served_wall_clock_date() {
    let d = dir("wall");
    let vt = VirtualTime::create().unwrap();
    let recorded = 978_307_200_000_000_000u64; // 2001-01-01T00:00:00Z
    vt.serve_wall_clock(recorded);
    let clock = Clock::start_virtual(vt.clone());
    let spec = snapshot::on_virtual_time(&timers_spec(), &vt).unwrap();
    let log = d.join("timers.log");
    let mut ctl = Controller::start_on_free_port(&spec, &log).unwrap();
    vt.expect([ctl.pid()]);
    let give_up = Instant::now() + Duration::from_secs(30);
    let first_tick = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.starts_with("tick ")) {
            break l.to_string();
        }
        assert!(Instant::now() < give_up, "no tick on virtual time; log:\n{text}");
        clock.jump_if_idle(clock.now() + 60_000, 0);
        std::thread::sleep(Duration::from_micros(300));
    };
    ctl.kill();
    let fields: Vec<f64> = first_tick.split_whitespace().skip(2).map(|x| x.parse().unwrap()).collect();
    let (mono, wall) = (fields[0], fields[1]);
    let served = recorded as f64 / 1e9;
    // The first tick comes 5 s (of its time) after its start.
    assert!(wall >= served + 4.9 && wall < served + 30.0, "wall clock {wall}, served from {served}");
    assert!(mono < served / 2.0, "the monotonic clock took the date too: {mono}");
}
