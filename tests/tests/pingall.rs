//! `sts pingall` end to end: the mock network against the real controllers.
//! Every pair must reach on loop-free topologies with each controller, and a
//! cycle under a plain learning switch must be reported as a loop, with sts
//! still finishing its run.

use std::path::Path;

use sts_engine::config::Config;
use sts_engine::pingall::{self, PingallRun};
use sts_mocknet::DataplaneEvent;

fn run(name: &str, toml: &str) -> PingallRun {
    let config = Config::from_toml(toml, Path::new(name)).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("sts-e2e-pingall-{}-{name}", std::process::id()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(pingall::run(sts_e2e::engine(), &config, &dir)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn all_reach(name: &str, network: &str, controller: &str) {
    let r = run(name, &format!("[network]\n{network}\n\n[[controllers]]\n{controller}\n"));
    assert!(r.matrix.all_reached(), "{name}:\n{}", sts_report::matrix(&r.matrix));
    assert!(r.runner.net.events.is_empty(), "{name}: unexpected dataplane events {:?}", r.runner.net.events);
    let (received, sent) = r.matrix.counts();
    assert!(sent >= 6 && received == sent);
}

const LINEAR_10: &str = "topology = \"linear\"\nsize = 3\nopenflow = \"1.0\"";
const TREE_10: &str = "topology = \"tree\"\ndepth = 2\nfanout = 2\nopenflow = \"1.0\"";
const LINEAR_13: &str = "topology = \"linear\"\nsize = 3\nopenflow = \"1.3\"";
const TREE_13: &str = "topology = \"tree\"\ndepth = 2\nfanout = 2\nopenflow = \"1.3\"";

const OSKEN_10: &str = "kind = \"os-ken\"\napps = [\"os_ken.app.simple_switch\"]";
const OSKEN_13: &str = "kind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]";
const OVS_10: &str = "kind = \"ovs-testcontroller\"";
const OVS_13: &str = "kind = \"ovs-testcontroller\"\nargs = [\"-O\", \"OpenFlow13\"]";
const FAUCET: &str = "kind = \"faucet\"";
/// faucet's application on c65of, a threaded OpenFlow stack of its own.
const C65FAUCET: &str = "kind = \"c65faucet\"";
const RYU_10: &str = "kind = \"ryu\"\napps = [\"ryu.app.simple_switch\"]";
const RYU_13: &str = "kind = \"ryu\"\napps = [\"ryu.app.simple_switch_13\"]";
const CERBERUS: &str = "kind = \"cerberus\"";

#[test]
fn os_ken_simple_switch_10_linear() {
    all_reach("osken10-linear", LINEAR_10, OSKEN_10);
}
#[test]
fn os_ken_simple_switch_10_tree() {
    all_reach("osken10-tree", TREE_10, OSKEN_10);
}
#[test]
fn os_ken_simple_switch_13_linear() {
    all_reach("osken13-linear", LINEAR_13, OSKEN_13);
}
#[test]
fn os_ken_simple_switch_13_tree() {
    all_reach("osken13-tree", TREE_13, OSKEN_13);
}
#[test]
fn ryu_simple_switch_10_linear() {
    all_reach("ryu10-linear", LINEAR_10, RYU_10);
}
#[test]
fn ryu_simple_switch_10_tree() {
    all_reach("ryu10-tree", TREE_10, RYU_10);
}
#[test]
fn ryu_simple_switch_13_linear() {
    all_reach("ryu13-linear", LINEAR_13, RYU_13);
}
#[test]
fn ryu_simple_switch_13_tree() {
    all_reach("ryu13-tree", TREE_13, RYU_13);
}
#[test]
fn ovs_testcontroller_10_linear() {
    all_reach("ovs10-linear", LINEAR_10, OVS_10);
}
#[test]
fn ovs_testcontroller_10_tree() {
    all_reach("ovs10-tree", TREE_10, OVS_10);
}
#[test]
fn ovs_testcontroller_13_linear() {
    all_reach("ovs13-linear", LINEAR_13, OVS_13);
}
#[test]
fn ovs_testcontroller_13_tree() {
    all_reach("ovs13-tree", TREE_13, OVS_13);
}
#[test]
fn cerberus_linear() {
    all_reach("cerberus-linear", LINEAR_13, CERBERUS);
}
#[test]
fn cerberus_tree() {
    all_reach("cerberus-tree", TREE_13, CERBERUS);
}
#[test]
fn faucet_linear() {
    all_reach("faucet-linear", LINEAR_13, FAUCET);
}
#[test]
fn faucet_tree() {
    all_reach("faucet-tree", TREE_13, FAUCET);
}
#[test]
fn c65faucet_linear() {
    all_reach("c65faucet-linear", LINEAR_13, C65FAUCET);
}
#[test]
fn c65faucet_tree() {
    all_reach("c65faucet-tree", TREE_13, C65FAUCET);
}

/// A learning switch on a triangle floods broadcasts around the cycle forever:
/// the dataplane must report it as a loop, and the run must still finish.
#[test]
fn os_ken_simple_switch_13_on_a_triangle_storms_and_is_reported() {
    let r = run(
        "osken13-triangle",
        &format!("[network]\ntopology = \"mesh\"\nsize = 3\nopenflow = \"1.3\"\n\n[[controllers]]\n{OSKEN_13}\n\n[pingall]\nattempts = 1\nping_timeout_ms = 500\n"),
    );
    let loops = r
        .runner
        .net
        .events
        .iter()
        .filter(|e| matches!(e, DataplaneEvent::HopLimit { .. } | DataplaneEvent::StepBudget { .. }))
        .count();
    assert!(loops > 0, "no loop reported; events: {:?}\n{}", r.runner.net.events, sts_report::matrix(&r.matrix));
}

/// The same triangle under os-ken's spanning tree app (1.3): once STP has
/// converged (listen and learn take 15 s each), every pair reaches and no
/// frame loops, though the controller keeps sending identical hello BPDUs
/// every 2 s (which must not be mistaken for a storm through the controller).
#[test]
fn os_ken_stp_13_on_a_triangle_converges_and_every_pair_reaches() {
    let toml =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/osken-stp-triangle.toml")).unwrap();
    let r = run("osken-stp-triangle", &toml);
    assert!(r.matrix.all_reached(), "STP did not converge:\n{}", sts_report::matrix(&r.matrix));
    assert!(r.runner.net.events.is_empty(), "unexpected dataplane events {:?}", r.runner.net.events);
}

/// Switches that buffer: 1,000-byte pings are cut to os-ken's miss_send_len
/// (128) in every table-miss PACKET_IN, and the learning switch (1.0) sends
/// them on by naming their buffer ids in PACKET_OUTs.
#[test]
fn os_ken_simple_switch_10_with_buffering_switches_forwards_big_pings_by_buffer_id() {
    let r = run(
        "osken10-buffers",
        &format!("[network]\n{LINEAR_10}\npacket_buffers = 256\n\n[[controllers]]\n{OSKEN_10}\n\n[pingall]\npayload_bytes = 1000\n"),
    );
    assert!(r.matrix.all_reached(), "{}", sts_report::matrix(&r.matrix));
    assert!(r.runner.net.events.is_empty(), "unexpected dataplane events {:?}", r.runner.net.events);
    // The buffers were used: released buffers leave nothing behind, and the
    // controller named ids (it never had the whole frame to send back).
    let held: usize = r.runner.net.switches.values().map(|s| s.buffers.len()).sum();
    assert_eq!(held, 0, "every buffered frame was sent on");
    let released: u64 = r.runner.net.switches.values().map(|s| s.buffers.released).sum();
    // At least the first echo between each of the 3 host pairs misses the
    // tables (later ones follow the installed entries).
    assert!(released >= 3, "buffered frames sent on: {released}");
    assert!(r.runner.net.hosts.iter().all(|h| h.ping_payload == 1000));
}
