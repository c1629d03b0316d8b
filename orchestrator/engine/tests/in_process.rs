//! The run loop in process: a scripted controller (a tokio task speaking
//! `sts_proxy::wire`, the mirror of the tests' scripted switch) that the
//! experiment names as a `remote` controller, so that [`Replayer`] stepping,
//! breakpoints and PEEK windows are tested in milliseconds, without Python
//! and without any controller process.
//!
//! The scripted controller is a hub with one bug: it floods every
//! PACKET_IN, and on any PORT_STATUS it installs a match-all drop rule of
//! priority 100 on that switch, which outlives the link's recovery. A link
//! failure therefore leaves a blackhole behind.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use futures::{SinkExt, StreamExt};
use sts_engine::config::Config;
use sts_engine::replay::{Replayer, Step};
use sts_engine::Engine;
use sts_proxy::wire::v13::{self, port, Action, FlowMod, Instruction, Match, PacketOut, NO_BUFFER};
use sts_proxy::wire::{Body, Hello, Message, OfpCodec};
use sts_trace::{External, Internal, Trace};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::codec::Framed;

/// The scripted controller: one task accepting switches, one per switch.
/// Dropping it ends them all.
struct ScriptedController {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// Whether the scripted controller has its bug.
#[derive(Clone, Copy, PartialEq)]
enum Build {
    Buggy,
    Fixed,
}

impl ScriptedController {
    async fn start(build: Build) -> ScriptedController {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            // Owned by this task: aborting it aborts every connection's task.
            let mut switches = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                switches.spawn(serve(stream, build));
            }
        });
        ScriptedController { addr, task }
    }
}

impl Drop for ScriptedController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One switch's session: HELLO, FEATURES_REQUEST, a table-miss rule to the
/// controller, echoes answered, PACKET_INs flooded, and the bug.
async fn serve(stream: TcpStream, build: Build) {
    let _ = stream.set_nodelay(true);
    let mut conn = Framed::new(stream, OfpCodec);
    let mut xid = 0;
    let mut next = || {
        xid += 1;
        xid
    };
    let hello = Message::new(next(), Body::Hello { version: 4, hello: Hello::with_versions(&[4]) });
    let features = Message::new(next(), Body::V13(v13::Msg::FeaturesRequest));
    if conn.send(&hello).await.is_err() || conn.send(&features).await.is_err() {
        return;
    }
    while let Some(Ok(frame)) = conn.next().await {
        let Ok(m) = frame.decode() else { continue };
        let Body::V13(msg) = m.body else { continue };
        let reply = match msg {
            v13::Msg::EchoRequest(data) => Message::new(m.xid, Body::V13(v13::Msg::EchoReply(data))),
            v13::Msg::FeaturesReply(_) => {
                let to_controller = Action::Output { port: port::CONTROLLER, max_len: v13::CML_NO_BUFFER };
                let miss = FlowMod::add(0, 0, Match::new([]), vec![Instruction::ApplyActions(vec![to_controller])]);
                Message::new(next(), Body::V13(v13::Msg::FlowMod(miss)))
            }
            v13::Msg::PacketIn(p) => {
                let out = PacketOut {
                    buffer_id: NO_BUFFER,
                    in_port: p.r#match.in_port().unwrap_or(port::CONTROLLER),
                    actions: vec![Action::Output { port: port::FLOOD, max_len: 0 }],
                    data: p.data,
                };
                Message::new(next(), Body::V13(v13::Msg::PacketOut(out)))
            }
            // The bug: a port changed, so drop everything on this switch, forever.
            v13::Msg::PortStatus(_) if build == Build::Buggy => {
                Message::new(next(), Body::V13(v13::Msg::FlowMod(FlowMod::add(0, 100, Match::new([]), vec![]))))
            }
            _ => continue,
        };
        if conn.send(&reply).await.is_err() {
            return;
        }
    }
}

/// A directory of this test's, emptied.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-in-process-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Two switches, a host on each, the scripted controller; short settle,
/// check and persistence times (real time: a remote controller has its own).
fn config(controller: SocketAddr, dir: &Path) -> Config {
    let text = format!(
        r#"
[network]
topology = "custom"
switches = 2
links = [[1, 2]]
hosts = [1, 2]
openflow = "1.3"

[[controllers]]
kind = "remote"
address = "{controller}"

[pingall]
settle_ms = 1000
quiet_ms = 20
min_wait_ms = 20

[invariants]
check = ["blackhole"]
check_every_ms = 20
persist_ms = 60

[interpose]
epsilon_ms = 100
"#
    );
    Config::from_toml(&text, &dir.join("config.toml")).unwrap_or_else(|e| panic!("{e}"))
}

/// A trace of inputs only: a ping, the link between the switches failing
/// and recovering, a ping.
fn inputs_only(config: &Config, dir: &Path) -> Trace {
    let net = sts_mocknet::Network::new(&config.topology(), 4);
    let ((s1, p1), (s2, p2)) = net.switch_links()[0];
    let link = format!(r#""a":{{"switch":{s1},"port":{p1}}},"b":{{"switch":{s2},"port":{p2}}}"#);
    let lines = [
        r#"{"format":"sts-trace","version":3}"#.to_string(),
        r#"{"seq":1,"t_ms":50,"external":{"type":"ping","src":"h1","dst":"h2"}}"#.to_string(),
        format!(r#"{{"seq":2,"t_ms":150,"external":{{"type":"link_down",{link}}}}}"#),
        format!(r#"{{"seq":3,"t_ms":250,"external":{{"type":"link_up",{link}}}}}"#),
        r#"{"seq":4,"t_ms":350,"external":{"type":"ping","src":"h1","dst":"h2"}}"#.to_string(),
    ];
    let path = dir.join("inputs.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").expect("the trace written");
    Trace::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the inputs once and returns the trace that run recorded (every
/// OpenFlow message, and the blackhole it ended with).
async fn recorded(engine: &Engine, config: &Config, dir: &Path) -> Trace {
    let inputs = inputs_only(config, dir);
    let out = dir.join("recorded");
    let mut r = Replayer::start(engine, config, &inputs, &out, 1).await.unwrap_or_else(|e| panic!("{e}"));
    r.run_until(|_, _| false).await.unwrap_or_else(|e| panic!("{e}"));
    let result = r.finish().await.unwrap_or_else(|e| panic!("{e}"));
    let v = result.violation.clone().unwrap_or_else(|| panic!("the link failure leaves a blackhole: {result:?}"));
    assert_eq!(v.invariant.name(), "blackhole", "{v:?}");
    Trace::load(&out.join("trace.jsonl")).unwrap_or_else(|e| panic!("{e}"))
}

/// The switch's flow table 0 has the bug's drop rule.
fn has_drop_rule(r: &Replayer<'_>, dpid: u64) -> bool {
    let net = &r.session().runner.net;
    net.switches[&dpid].tables[0].entries().iter().any(|e| e.priority == 100)
}

/// What every test starts from: the buggy scripted controller, a scratch
/// directory (removed at the end), the experiment's config, an engine, and
/// the trace one run of the inputs recorded.
struct Recorded {
    controller: ScriptedController,
    dir: PathBuf,
    config: Config,
    engine: Engine,
    original: Trace,
}

impl Recorded {
    async fn new(name: &str) -> Recorded {
        let controller = ScriptedController::start(Build::Buggy).await;
        let dir = scratch(name);
        let config = config(controller.addr, &dir);
        let engine = Engine::silent();
        let original = recorded(&engine, &config, &dir).await;
        Recorded { controller, dir, config, engine, original }
    }

    /// A replay of the recorded trace, into `DIR/replay`.
    async fn replayer(&self) -> Replayer<'_> {
        Replayer::start(&self.engine, &self.config, &self.original, &self.dir.join("replay"), 1).await.unwrap()
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_steps_one_input_at_a_time_and_reproduces_the_recorded_bug() {
    let bench = Recorded::new("steps").await;
    let flow_mods = bench
        .original
        .records
        .iter()
        .filter(|r| matches!(r.internal(), Some(Internal::Openflow { msg, .. }) if msg.as_str() == "flow_mod"))
        .count();
    assert!(flow_mods >= 4, "two table-miss rules and two drop rules recorded: {flow_mods}");

    let mut r = bench.replayer().await;
    assert_eq!(r.position(), (0, 4));
    assert!(matches!(r.upcoming(), Some(External::Ping { .. })));
    assert!(matches!(r.step().await.unwrap(), Step::Injected { index: 0, .. }));
    assert!(!has_drop_rule(&r, 1), "nothing has failed yet");
    assert!(matches!(r.step().await.unwrap(), Step::Injected { index: 1, .. }));
    assert!(matches!(r.last_input(), Some(External::LinkDown { .. })));
    // The input's PORT_STATUS and the FLOW_MOD it sets off come before the next input.
    assert!(matches!(r.step().await.unwrap(), Step::Injected { index: 2, .. }));
    assert!(has_drop_rule(&r, 1) && has_drop_rule(&r, 2), "the bug's rules are in before the link comes back");
    let last = r.step().await.unwrap();
    assert!(matches!(last, Step::Injected { index: 3, .. } | Step::Reproduced), "{last:?}");
    let result = r.finish().await.unwrap();
    assert!(result.reproduced, "{result:?}");
    assert_eq!(result.divergence.missing, 0, "every recorded event came again: {:?}", result.divergence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breakpoint_stops_the_replay_where_it_holds_and_the_replay_goes_on_from_there() {
    let bench = Recorded::new("breakpoints").await;
    let mut r = bench.replayer().await;
    // On an input: stop right after the link fails.
    let at = r.run_until(|r, _| matches!(r.last_input(), Some(External::LinkDown { .. }))).await.unwrap();
    assert!(matches!(at, Step::Injected { index: 1, .. }), "{at:?}");
    assert_eq!(r.position().0, 2, "two inputs in");
    // On the network's state: stop once s1 holds the bug's rule; it comes in
    // while the replay waits for the next input (the link's recovery).
    let at = r.run_until(|r, _| has_drop_rule(r, 1)).await.unwrap();
    assert!(matches!(at, Step::Injected { index: 2, .. }), "{at:?}");
    assert!(matches!(r.last_input(), Some(External::LinkUp { .. })));
    // And on from there to the end.
    let end = r.run_until(|_, _| false).await.unwrap();
    assert!(matches!(end, Step::Reproduced | Step::End), "{end:?}");
    assert!(r.finish().await.unwrap().reproduced);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_controller_diverges_where_the_bug_was_and_does_not_reproduce_it() {
    let mut bench = Recorded::new("divergence").await;
    bench.controller = ScriptedController::start(Build::Fixed).await;
    bench.config = config(bench.controller.addr, &bench.dir);
    let mut r = bench.replayer().await;
    r.run_until(|_, _| false).await.unwrap();
    let result = r.finish().await.unwrap();
    assert!(!result.reproduced && result.violation.is_none(), "{result:?}");
    let (_, first) = result.divergence.first_missing.clone().expect("the drop rules are missing");
    assert!(first.contains("to_switch of4/flow_mod") && first.contains(r#""priority":100"#), "{first}");
    // The drop rule, sent at the failure and again at the recovery, per switch.
    assert_eq!(result.divergence.missing, 4, "{:?}", result.divergence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_window_holds_what_its_input_set_off() {
    let bench = Recorded::new("peek").await;
    let (engine, config, dir) = (&bench.engine, &bench.config, &bench.dir);
    let peek = sts_engine::peek::by_prefix(engine, config, &bench.original, &dir.join("peek")).await.unwrap();
    assert_eq!(peek.runs, 4, "one prefix run per input");
    let windows = peek.windows();
    assert_eq!(windows.len(), 5, "before the first input, then one per input: {windows:#?}");
    let has = |w: &[String], dir: &str, msg: &str| w.iter().any(|k| k.contains(&format!("{dir} of4/{msg} ")));
    // The first ping: its frames reach the controller and are flooded.
    assert!(
        has(&windows[1], "to_controller", "packet_in") && has(&windows[1], "to_switch", "packet_out"),
        "{:#?}",
        windows[1]
    );
    // The link failure: each switch says so, and gets the drop rule.
    let down = &windows[2];
    assert_eq!(down.iter().filter(|k| k.contains("to_controller of4/port_status ")).count(), 2, "{down:#?}");
    assert_eq!(
        down.iter().filter(|k| k.contains("to_switch of4/flow_mod ") && k.contains(r#""priority":100"#)).count(),
        2,
        "{down:#?}"
    );
    // The last ping is dropped at s1: nothing reaches the controller.
    assert!(!has(&windows[4], "to_controller", "packet_in"), "{:#?}", windows[4]);
}
