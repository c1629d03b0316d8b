//! Mid-run checkpoints (issue 8, `docs/snapshots.md`): a real os-ken, in the
//! middle of an OpenFlow session and holding learned state, is checkpointed.
//! The live copy goes on and learns more; a copy resumed from the checkpoint
//! continues the same session on a fresh connection (no new handshake) with
//! exactly the state of the checkpoint, and dies with its checkpoint.

use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use sts_e2e::{frames, Injection, ScriptedSwitch};
use sts_engine::checkpoint;
use sts_engine::clock::VirtualTime;
use sts_engine::controller::Controller;
use sts_engine::presets;
use sts_engine::snapshot::Zygote;
use sts_proxy::wire::{v13, OFP13};

const FLOOD: u32 = v13::port::FLOOD;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sts-e2e-checkpoint-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Sends a ping from host `from` (on port `from`) to host `to` as a
/// PACKET_IN, and returns where the controller sent it.
fn ping(sw: &mut ScriptedSwitch, from: u8, to: u8) -> Vec<u32> {
    let mark = sw.log.len();
    sw.packet_in(&Injection { in_port: from as u32, frame: frames::ping(from, to, None) }).unwrap();
    sw.serve(Duration::from_millis(300), Duration::from_secs(10)).unwrap();
    sw.packet_out_ports(mark)
}

/// A connected pair of loopback TCP sockets: (sts's end, the controller's).
fn socket_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (theirs, _) = listener.accept().unwrap();
    (ours, theirs)
}

fn gone_or_zombie(pid: u32) -> bool {
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().unwrap_or("").trim().chars().next().unwrap_or('?'));
    matches!(state, Err(_) | Ok('Z'))
}

/// os-ken's simple_switch_13 forked from a zygote (kept alive by the caller)
/// onto a new virtual time, with one switch of three ports through its
/// handshake.
fn os_ken_on_virtual_time(d: &std::path::Path) -> (Zygote, std::sync::Arc<VirtualTime>, Controller, ScriptedSwitch) {
    let mut z =
        Zygote::start(&presets::os_ken_with(&[], &["os_ken.app.simple_switch_13"]), &d.join("zygote.log")).unwrap();
    let vt = VirtualTime::create().unwrap();
    let live = z.fork(&d.join("live.log"), Some(&vt)).unwrap();
    let mut sw = ScriptedSwitch::connect(live.addr(), OFP13, 1, 3).unwrap();
    sw.serve(Duration::from_millis(300), Duration::from_secs(20)).unwrap();
    assert!(sw.log.len() > 2, "no handshake with os-ken");
    (z, vt, live, sw)
}

#[test]
fn os_ken_resumes_from_a_checkpoint_with_the_state_it_had() {
    let d = dir("osken");
    let (_z, vt, mut live, mut sw) = os_ken_on_virtual_time(&d);

    // h1 (port 1) pings h2: os-ken learns h1 and floods.
    assert_eq!(ping(&mut sw, 1, 2), [FLOOD]);

    let mut cp = checkpoint::checkpoint(&mut live).unwrap_or_else(|e| panic!("{e}"));
    let our_port = sw.local_addr().unwrap().port();
    let held: Vec<_> = cp.connections.iter().filter(|c| c.peer_port == our_port).copied().collect();
    assert_eq!(held.len(), 1, "the switch connection is among the held ones: {:?}", cp.connections);
    // The switch as it was at the checkpoint, for the resumed copy.
    let (ours, theirs) = socket_pair();
    let mut sw2 = sw.reconnected(ours).unwrap();

    // The live copy carries on and learns h2 and h3.
    assert_eq!(ping(&mut sw, 2, 1), [1], "the live copy forgot h1");
    assert_eq!(ping(&mut sw, 3, 2), [2], "the live copy did not learn h2");

    let mut resumed = cp
        .resume(&d.join("resumed.log"), &vt, vec![(held[0].fd, OwnedFd::from(theirs))])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(resumed.pid(), live.pid());
    // Same session, new connection: it knows h1, learned before the checkpoint ...
    assert_eq!(
        ping(&mut sw2, 3, 1),
        [1],
        "the resumed copy lost what it knew at the checkpoint:\n{}",
        resumed.log_tail(20)
    );
    // ... and not h2, learned by the live copy after it.
    assert_eq!(ping(&mut sw2, 3, 2), [FLOOD], "the resumed copy knows what only the live copy learned");
    // Both copies keep working, each on its own timeline.
    assert_eq!(ping(&mut sw, 1, 3), [3], "the live copy stopped working");
    assert!(live.is_alive() && resumed.is_alive());

    // A second resume from the same checkpoint starts from the same state again.
    let (ours3, theirs3) = socket_pair();
    let mut sw3 = sw.reconnected(ours3).unwrap();
    let mut again = cp.resume(&d.join("again.log"), &vt, vec![(held[0].fd, OwnedFd::from(theirs3))]).unwrap();
    assert_eq!(ping(&mut sw3, 2, 3), [FLOOD], "a second copy from the checkpoint knows h3");
    assert_eq!(ping(&mut sw3, 3, 1), [1], "a second copy from the checkpoint forgot h1");

    // Copies die with their checkpoint; the live copy does not.
    let (r1, r2) = (resumed.pid(), again.pid());
    drop(cp);
    std::thread::sleep(Duration::from_millis(300));
    assert!(gone_or_zombie(r1) && gone_or_zombie(r2), "resumed copies outlived their checkpoint");
    assert!(!resumed.is_alive() && !again.is_alive());
    assert!(live.is_alive());
}

/// The children of process `pid` (its main thread's).
fn children(pid: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    text.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// The child `pid` forks next, once it exists (within ten seconds).
fn new_child(pid: u32, before: &[u32]) -> u32 {
    for _ in 0..1000 {
        if let Some(&c) = children(pid).iter().find(|c| !before.contains(c)) {
            return c;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("process {pid} forked no child");
}

#[test]
fn a_spare_forked_ahead_is_the_copy_the_next_resume_hands_out() {
    let d = dir("spare");
    let (_z, vt, mut live, mut sw) = os_ken_on_virtual_time(&d);
    assert_eq!(ping(&mut sw, 1, 2), [FLOOD]);
    let mut cp = checkpoint::checkpoint(&mut live).unwrap_or_else(|e| panic!("{e}"));
    let our_port = sw.local_addr().unwrap().port();
    let held = cp.connections.iter().find(|c| c.peer_port == our_port).copied().expect("the switch connection");

    // The spare is forked now, while the live copy goes on and learns h2.
    let holder = cp.holder_pid();
    cp.prepare_spare(&vt).unwrap_or_else(|e| panic!("{e}"));
    let spare = new_child(holder, &[]);
    assert_eq!(ping(&mut sw, 2, 1), [1], "the live copy forgot h1");
    let (ours, theirs) = socket_pair();
    let mut sw2 = sw.reconnected(ours).unwrap();
    let mut resumed = cp.resume(&d.join("resumed.log"), &vt, vec![(held.fd, OwnedFd::from(theirs))]).unwrap();
    assert_eq!(resumed.pid(), spare, "the resume did not hand out the spare");
    // The checkpoint's state: h1 known, h2 (learned after it) not.
    assert_eq!(ping(&mut sw2, 3, 1), [1], "the spare lost what the checkpoint knew:\n{}", resumed.log_tail(20));
    assert_eq!(ping(&mut sw2, 3, 2), [FLOOD], "the spare knows what only the live copy learned");

    // A spare never used dies with its checkpoint, as resumed copies do.
    cp.prepare_spare(&vt).unwrap();
    let unused = new_child(holder, &[spare]);
    drop(cp);
    std::thread::sleep(Duration::from_millis(300));
    assert!(gone_or_zombie(unused), "an unused spare outlived its checkpoint");
    assert!(gone_or_zombie(spare) && !resumed.is_alive(), "the resumed spare outlived its checkpoint");
    assert!(live.is_alive());
}

#[test]
fn a_controller_not_on_virtual_time_cannot_be_checkpointed() {
    let d = dir("refused");
    let mut z = Zygote::start(&presets::ovs_testcontroller(&[]), &d.join("zygote.log")).unwrap();
    let mut copy = z.fork(&d.join("copy.log"), None).unwrap();
    let e = checkpoint::checkpoint(&mut copy).err().expect("a copy without a control socket was checkpointed");
    assert!(e.to_string().contains("virtual time"), "{e}");
}

/// A connected pair of loopback sockets on `rt`: (sts's end, as tokio wants
/// it; the controller's end, to hand over).
fn tokio_socket_pair(rt: &tokio::runtime::Runtime) -> (tokio::net::TcpStream, OwnedFd) {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ours, theirs) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        (ours.unwrap(), OwnedFd::from(theirs.unwrap().0.into_std().unwrap()))
    })
}

/// A whole run goes back to a checkpoint: the mock network, the connections
/// and virtual time as sts holds them, and the controller resumed from its
/// checkpoint, talking to the switches over fresh connections.
#[test]
fn a_whole_run_rolls_back_to_a_checkpoint() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let toml = "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n\n\
                [[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]\n\n[time]\nvirtual = true\n";
    let config = sts_engine::config::Config::from_toml(toml, std::path::Path::new("rollback.toml")).unwrap();
    let d = dir("rollback");
    let mut r = rt.block_on(sts_engine::pingall::run(sts_e2e::engine(), &config, &d)).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.matrix.all_reached(), "{}", sts_report::matrix(&r.matrix));
    rt.block_on(r.runner.run_for(Duration::from_millis(500)));

    let state = r.runner.state();
    let at = r.runner.clock.now();
    let mut cp = checkpoint::checkpoint(&mut r.controllers[0]).unwrap_or_else(|e| panic!("{e}"));
    let flows_at = |net: &sts_mocknet::Network| net.switches.values().map(|s| s.flow_count()).collect::<Vec<_>>();

    // Another timeline: switch 2 crashes, and time goes on.
    r.runner.fail_switch(2);
    rt.block_on(r.runner.run_for(Duration::from_secs(5)));
    assert!(!rt.block_on(r.runner.ping(0, 2, 1_000)), "h1 reaches h3 through a crashed switch");
    assert!(r.runner.clock.now() >= at + 5_000);

    // Back to the checkpoint.
    r.controllers[0].kill();
    let mut streams = std::collections::BTreeMap::new();
    let mut sockets = Vec::new();
    for (dpid, i, port) in state.open_connections() {
        let held =
            cp.connections.iter().find(|c| c.peer_port == port).unwrap_or_else(|| {
                panic!("switch {dpid}'s connection (port {port}) is not among {:?}", cp.connections)
            });
        let (ours, theirs) = tokio_socket_pair(&rt);
        streams.insert((dpid, i), ours);
        sockets.push((held.fd, theirs));
    }
    assert_eq!(sockets.len(), 3, "one connection per switch");
    let vt = r.runner.clock.virtual_time().unwrap().clone();
    vt.rewind_to(state.time_ns());
    let resumed = cp.resume(&d.join("resumed.log"), &vt, sockets).unwrap_or_else(|e| panic!("{e}"));
    vt.expect([resumed.pid()]);
    let moved = [(cp.addr(), resumed.addr())].into_iter().collect();
    r.controllers[0] = resumed;
    rt.block_on(r.runner.restore(&state, streams, &moved)).unwrap();

    let now = r.runner.clock.now();
    assert!(now >= at && now < at + 100, "time is back at the checkpoint's {at} ms: {now} ms");
    assert!(!r.runner.is_down(2), "switch 2 is up again");
    assert_eq!(flows_at(&r.runner.net), flows_at(state.net()), "the flow tables are the checkpoint's");
    assert!(rt.block_on(r.runner.ping(0, 2, 2_000)), "h1 cannot reach h3 after the rollback");

    // The resumed controller serves switch 2 over its new connection: with
    // s2's forwarding entries gone, h1 reaches h3 only if it answers s2's
    // PACKET_INs.
    let s2 = r.runner.net.switches.get_mut(&2).unwrap();
    let ports: Vec<u32> = s2.ports.keys().copied().collect();
    let any = Default::default();
    for p in ports {
        let sel = sts_mocknet::flow::Selector {
            r#match: &any,
            strict: false,
            priority: 0,
            cookie: 0,
            cookie_mask: 0,
            out_port: p,
            out_group: v13::GROUP_ANY,
        };
        s2.tables[0].delete(&sel);
    }
    assert_eq!(s2.flow_count(), 1, "only the table-miss entry is left on s2");
    let heard = r.runner.messages_from_controllers;
    assert!(
        rt.block_on(r.runner.ping(2, 0, 5_000)),
        "h3 cannot reach h1 once s2 needs the controller:\n{}",
        r.controllers[0].log_tail(20)
    );
    assert!(r.runner.messages_from_controllers > heard, "the controller said nothing");
    assert!(r.runner.disconnected().is_empty());
    assert!(r.runner.issues.is_empty(), "{:?}", r.runner.issues);
    drop(r);
    drop(cp);
}

/// PEEK with checkpoints infers, input by input, the same internal events as
/// PEEK by prefix replay, on the hand-written migration trace (os-ken).
#[test]
fn peek_with_checkpoints_sees_what_prefix_replay_sees() {
    let ws = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = ws.join("examples/traces/migration");
    let config = sts_engine::config::Config::load(&dir.join("config.toml")).unwrap_or_else(|e| panic!("{e}"));
    let trace = sts_trace::Trace::load(&dir.join("trace.jsonl")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let out = self::dir("peek");
    let prefix = rt
        .block_on(sts_engine::peek::by_prefix(sts_e2e::engine(), &config, &trace, &out))
        .unwrap_or_else(|e| panic!("{e}"));
    let cps = rt
        .block_on(sts_engine::peek::by_checkpoints(sts_e2e::engine(), &config, &trace, &out))
        .unwrap_or_else(|e| panic!("{e}"));
    let always = rt
        .block_on(sts_engine::peek::by_checkpoints_always(sts_e2e::engine(), &config, &trace, &out))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((prefix.runs, prefix.rollbacks), (4, 0));
    assert_eq!((always.runs, always.rollbacks, always.skipped), (1, 3, 0));
    // Where the rest of a window was known to be quiet, no checkpoint.
    assert_eq!((cps.runs, cps.rollbacks + cps.skipped), (1, 3), "{} rollbacks, {} skipped", cps.rollbacks, cps.skipped);
    let a = prefix.windows();
    assert_eq!(a.len(), 5, "a window before the inputs and one per input");
    // Each ping's window holds its PACKET_INs and what the controller answered.
    for w in [1, 4] {
        assert!(a[w].iter().any(|k| k.contains("packet_in")), "window {w} has no PACKET_IN: {:?}", a[w]);
    }
    for (method, b) in [("checkpoints", cps.windows()), ("a checkpoint for every input", always.windows())] {
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x, y, "window {i} differs between prefix replay and {method}");
        }
    }
}
