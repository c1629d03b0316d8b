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

/// The shim announces every wait a controller thread enters, so sts hears
/// at once that the run may be idle instead of looking for it on a timer;
/// the jump log says, for each jump that ended a reaction, how long after
/// the last wait entered sts knew (`docs/virtual-time.md`).
#[test]
fn a_controllers_waits_are_announced_and_the_jump_log_says_how_soon_idle_was_known() {
    let d = dir("announced");
    let (vt, clock, mut ctl) = timers_on_virtual_time(&d, &[]);
    let jumps = d.join("jumps.jsonl");
    vt.log_jumps_to(&jumps).unwrap();
    let rt = runtime();
    let heard = rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), vt.announced()).await });
    assert!(heard.is_ok(), "no wait of the controller was announced in 20 s");
    ticks_follow_virtual_time(&clock, &vt, &d.join("timers.log"));
    ctl.kill();
    let log = std::fs::read_to_string(&jumps).unwrap();
    let known: Vec<f64> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|j| j.get("idle_known_after_us")?.as_f64())
        .collect();
    // Each of the twelve ticks is a reaction: the timer fires, the stand-in
    // prints and waits again.
    assert!(known.len() >= 12, "{} jumps ended a reaction; log:\n{log}", known.len());
    assert!(known.iter().all(|&us| us >= 0.0), "{known:?}");
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
    // While some slot looks busy (the killed process may have been working),
    // threads' kernel states are read only every few milliseconds: the death
    // is noticed at one of the next looks, not necessarily the first.
    let mut departed = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while departed.is_empty() && std::time::Instant::now() < until {
        clock.jump_if_idle(clock.now() + 60_000, 0);
        departed = vt.take_departed();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(departed, vec![u64::from(pid)]);
    for _ in 0..20 {
        clock.jump_if_idle(clock.now() + 60_000, 0);
        std::thread::sleep(Duration::from_millis(1));
    }
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

/// c65faucet: fourteen threads at idle (timers in `time.sleep` loops, an
/// accept loop polling every 0.5 s, workers on queues), all on virtual time.
#[test]
fn c65faucet_keeps_its_switches_over_idle_virtual_minutes() {
    survives_idle_minutes("c65faucet-idle", "kind = \"c65faucet\"", true);
}

/// A controller with a second thread (sleeping an hour in `time.sleep`)
/// follows virtual time like a single-threaded one: every thread has a slot.
#[test]
fn a_threaded_controller_follows_virtual_time() {
    let d = dir("threads");
    let (vt, clock, mut ctl) = timers_on_virtual_time(&d, &["--thread"]);
    ticks_follow_virtual_time(&clock, &vt, &d.join("timers.log"));
    assert_eq!(vt.refusal(), None);
    ctl.kill();
}

/// Runs the waits fixture's `primitive` for `seconds` of its time on a fresh
/// virtual clock, letting time jump whenever the run is idle, for at most
/// `real` of real time. Returns the log and the clock.
fn run_wait(primitive: &str, seconds: u32, real: Duration) -> (String, std::sync::Arc<VirtualTime>) {
    let d = dir(&format!("wait-{primitive}"));
    let vt = VirtualTime::create().unwrap();
    let clock = Clock::start_virtual(vt.clone());
    let spec = ControllerSpec {
        name: "waits".into(),
        command: vec![
            sts_e2e::c_fixture("waits").display().to_string(),
            "{port}".into(),
            primitive.into(),
            seconds.to_string(),
        ],
        env: vec![],
        config: None,
        start_timeout: Duration::from_secs(10),
        guard_group: false,
    };
    let spec = snapshot::on_virtual_time(&spec, &vt).unwrap();
    let log = d.join("waits.log");
    let mut ctl = Controller::start_on_free_port(&spec, &log).unwrap();
    vt.expect([ctl.pid()]);
    let give_up = Instant::now() + real;
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("done") || Instant::now() >= give_up {
            break text;
        }
        clock.jump_if_idle(clock.now() + 3_600_000, 0);
        std::thread::sleep(Duration::from_micros(300));
    };
    ctl.kill();
    (text, vt)
}

/// Every way a thread waits on a clock runs on virtual time: a thread
/// waiting 120 s in each of them is done in seconds of real time, and never
/// early (regression tests: take a primitive out of the shim and its case
/// fails here, as its thread then sleeps the 120 s for real).
#[test]
fn every_timed_wait_of_a_thread_runs_on_virtual_time() {
    const PRIMITIVES: &[&str] = &[
        "sem_timedwait",
        "sem_clockwait",
        "cond_timedwait",
        "cond_timedwait_monotonic",
        "cond_clockwait",
        "mutex_timedlock",
        "futex_wait",
        "futex_wait_bitset",
        "nanosleep",
        "clock_nanosleep",
        "sleep",
        "usleep",
        "poll",
        "ppoll",
        "select",
        "epoll_wait",
    ];
    let mut wrong = Vec::new();
    for primitive in PRIMITIVES {
        let (text, vt) = run_wait(primitive, 120, Duration::from_secs(15));
        let waited: Option<f64> = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("waited {primitive} ")))
            .and_then(|v| v.trim().parse().ok());
        match waited {
            Some(w) if (120.0..121.0).contains(&w) && vt.refusal().is_none() => {}
            Some(w) => {
                wrong.push(format!("{primitive}: waited {w:.3} s (want 120 to 121), refusal {:?}", vt.refusal()))
            }
            None => wrong.push(format!(
                "{primitive}: not done in 15 s of real time ({} jumps, refusal {:?}); log:\n{text}",
                vt.jumps(),
                vt.refusal()
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A wait the shim cannot see (a raw system call) or a timer it cannot
/// move (a socket timeout, a timerfd) never runs on a wrong clock: time
/// stops jumping, and the clock says why.
#[test]
fn a_wait_or_timer_the_shim_cannot_follow_stops_time_with_its_reason() {
    for (primitive, seconds, reason) in [
        ("invisible", 60, "which the shim does not see"),
        ("socket-timeout", 3, "a socket timeout"),
        ("timerfd", 3, "a timerfd"),
    ] {
        let (text, vt) = run_wait(primitive, seconds, Duration::from_secs(6));
        let why =
            vt.refusal().unwrap_or_else(|| panic!("{primitive}: no refusal ({} jumps); log:\n{text}", vt.jumps()));
        assert!(why.contains(reason), "{primitive}: {why}");
        if let Some(waited) = text.lines().find_map(|l| l.strip_prefix(&format!("waited {primitive} "))) {
            // A timer on real time, and a clock that did not jump past it.
            let waited: f64 = waited.trim().parse().unwrap();
            assert!((seconds as f64..seconds as f64 + 1.0).contains(&waited), "{primitive}: waited {waited}");
        }
    }
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
