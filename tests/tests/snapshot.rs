//! Pristine snapshots: a real controller parked by the shim is forked into
//! fresh copies, each on a port of its own, each a working OpenFlow
//! controller; copies die with their zygote.

use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

use sts_engine::presets;
use sts_engine::snapshot::Zygote;

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sts-e2e-snapshot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Connects to a controller and reads its first message: an OpenFlow HELLO.
fn says_hello(addr: std::net::SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return false };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut header = [0u8; 8];
    s.read_exact(&mut header).is_ok() && header[1] == 0 // OFPT_HELLO
}

fn forks_side_by_side(spec: sts_engine::controller::ControllerSpec, name: &str) {
    let d = dir(name);
    let mut z = Zygote::start(&spec, &d.join("zygote.log")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut a = z.fork(&d.join("a.log"), None).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut b = z.fork(&d.join("b.log"), None).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_ne!(a.addr(), b.addr(), "each copy listens on its own port");
    assert_ne!(a.addr(), z.addr());
    assert!(says_hello(a.addr()), "{name}: copy a does not speak OpenFlow");
    assert!(says_hello(b.addr()), "{name}: copy b does not speak OpenFlow");
    assert!(!says_hello(z.addr()), "{name}: the parked zygote must not serve");
    assert!(a.is_alive() && b.is_alive());
    a.kill();
    assert!(!a.is_alive());
    assert!(b.is_alive(), "killing one copy leaves the others");
    let c = z.fork(&d.join("c.log"), None).unwrap();
    assert!(says_hello(c.addr()), "{name}: a copy forked after another died works");
    assert_eq!(z.forks(), 3);
    let (bp, cp) = (b.pid(), c.pid());
    drop(z);
    std::thread::sleep(Duration::from_millis(300));
    for pid in [bp, cp] {
        // Gone, or a zombie waiting for whoever adopted it.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit(')').next().unwrap_or("").trim().chars().next().unwrap_or('?'));
        assert!(matches!(state, Err(_) | Ok('Z')), "{name}: copy {pid} outlived its zygote (state {state:?})");
    }
}

#[test]
fn os_ken_forks_into_working_copies() {
    forks_side_by_side(presets::os_ken_with(&[], &["os_ken.app.simple_switch_13"]), "osken");
}

#[test]
fn ovs_testcontroller_forks_into_working_copies() {
    forks_side_by_side(presets::ovs_testcontroller(&[]), "ovs");
}

#[test]
fn faucet_forks_into_working_copies() {
    // faucet needs its generated faucet.yaml: take the spec a config gives.
    let toml = "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"faucet\"\n";
    let config = sts_engine::config::Config::from_toml(toml, std::path::Path::new("faucet.toml")).unwrap();
    let specs = presets::specs(&config, &dir("faucet-files")).unwrap();
    forks_side_by_side(specs[0].clone(), "faucet");
}

/// c65faucet runs 14 threads once it listens: its zygote parks them all,
/// and each copy brings them back (`shim/src/park.rs`).
#[test]
fn c65faucet_forks_into_working_copies() {
    let toml =
        "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"c65faucet\"\n";
    let config = sts_engine::config::Config::from_toml(toml, std::path::Path::new("c65faucet.toml")).unwrap();
    let specs = presets::specs(&config, &dir("c65faucet-files")).unwrap();
    forks_side_by_side(specs[0].clone(), "c65faucet");
}

/// Experiment directories can be deep (a minimization's runs live in
/// `DIR/mcs/runs/N/logs`); the zygote's control socket must not inherit a
/// path longer than a Unix socket allows (108 bytes).
#[test]
fn a_zygote_logging_deep_in_the_tree_still_parks() {
    let deep = dir("deep").join("a-directory-name-of-some-length/".repeat(5));
    std::fs::create_dir_all(&deep).unwrap();
    let log = deep.join("controller-0-ovs-testcontroller-zygote.log");
    assert!(log.as_os_str().len() > 108);
    let mut z = Zygote::start(&presets::ovs_testcontroller(&[]), &log).unwrap_or_else(|e| panic!("{e}"));
    let copy = z.fork(&deep.join("copy.log"), None).unwrap();
    assert!(says_hello(copy.addr()));
}

/// True if every thread of `pid` sleeps (`S`).
fn all_asleep(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.trim().chars().next()) == Some('S'))
    })
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0)
}

/// A threaded zygote is parked whole, once it listens: every thread asleep in
/// its blocking call (a semaphore, a condition, a mutex another thread
/// holds, a pipe read, a poll, a timed condition loop, an accept). Each copy
/// must bring every one of them back, on its own sockets, and each must
/// finish its call when woken in the copy: one that did not come back, or
/// came back wrong, never says "back".
#[test]
fn every_thread_of_a_parked_zygote_comes_back_in_each_copy() {
    let d = dir("parked");
    let spec = sts_engine::controller::ControllerSpec {
        name: "parked".into(),
        command: vec![sts_e2e::c_fixture("parked").display().to_string(), "{port}".into()],
        env: vec![],
        config: None,
        start_timeout: Duration::from_secs(10),
        guard_group: false,
    };
    let mut z = Zygote::start(&spec, &d.join("zygote.log")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(threads_of(z.pid()), 8, "the zygote is parked whole: its main thread and 7 parked ones");
    // Copies one after another: the fixture's pipes are shared with the
    // zygote and every copy, as any descriptor is across fork.
    for name in ["a", "b", "c"] {
        let log = d.join(format!("{name}.log"));
        let mut copy = z.fork(&log, None).unwrap_or_else(|e| panic!("copy {name}: {e}"));
        assert_eq!(threads_of(copy.pid()), 8, "copy {name}: the main thread and the 7 it brought back");
        let mut s = TcpStream::connect_timeout(&copy.addr(), Duration::from_secs(2)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = [0u8; 3];
        let answered = s.read_exact(&mut reply).is_ok() && &reply == b"ok\n";
        // The copy prints "all back" before it answers; give its log a
        // moment to show it (the log is written as the copy writes, but the
        // reply can be read first).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut text = std::fs::read_to_string(&log).unwrap_or_default();
        while answered && !text.contains("all back") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            text = std::fs::read_to_string(&log).unwrap_or_default();
        }
        assert!(answered, "copy {name}: not every thread came back; it said:\n{text}");
        for thread in ["sem", "cond", "mutex", "read", "poll", "timed"] {
            assert!(text.lines().any(|l| l == format!("back {thread}")), "copy {name}: no `back {thread}` in:\n{text}");
        }
        copy.kill();
    }
    assert!(!says_hello(z.addr()), "the zygote itself serves nobody");
}

/// Python runs signal handlers in its main thread only, and the kernel hands a
/// signal sent to a process to its first thread (id = pid) first: a copy of a
/// threaded zygote must keep the controller's main thread first whichever
/// thread parked the others, or `kill -HUP PID` (faucet's reload, a
/// `[[policies]]` command) would reach a thread that cannot run the handler
/// while the main thread sleeps on.
#[test]
fn a_copy_of_a_threaded_python_zygote_takes_signals_in_its_main_thread() {
    let d = dir("signals");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/signals.py");
    let spec = sts_engine::controller::ControllerSpec {
        name: "signals".into(),
        command: vec!["python3".into(), script.display().to_string(), "{port}".into()],
        env: vec![],
        config: None,
        start_timeout: Duration::from_secs(10),
        guard_group: false,
    };
    // A worker parked the others: the case this test is for (the fixture
    // arranges it; on a loaded machine the main thread may still get there
    // last, so a few zygotes are tried).
    let mut tries = 0;
    let mut z = loop {
        tries += 1;
        let z = Zygote::start(&spec, &d.join("zygote.log")).unwrap_or_else(|e| panic!("{e}"));
        if !z.greeting().contains(&format!("parker={}", z.pid())) || tries == 5 {
            break z;
        }
    };
    assert!(
        !z.greeting().contains(&format!("parker={}", z.pid())),
        "the main thread parked in 5 tries: {}",
        z.greeting()
    );
    for name in ["a", "b"] {
        let log = d.join(format!("{name}.log"));
        let copy = z.fork(&log, None).unwrap_or_else(|e| panic!("copy {name}: {e}"));
        // Until every thread sleeps (the main one in a join).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline && !(threads_of(copy.pid()) == 6 && all_asleep(copy.pid())) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let sent = std::process::Command::new("kill").args(["-HUP", &copy.pid().to_string()]).status().unwrap();
        assert!(sent.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut text = String::new();
        while std::time::Instant::now() < deadline && !text.contains("hup") {
            std::thread::sleep(Duration::from_millis(20));
            text = std::fs::read_to_string(&log).unwrap_or_default();
        }
        assert!(text.lines().any(|l| l == "hup main"), "copy {name}: SIGHUP not handled by the main thread:\n{text}");
    }
}
