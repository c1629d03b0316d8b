//! Scaling benchmark of the mock network against a real controller.
//!
//! Brings up a k-ary fat-tree with ovs-testcontroller (OpenFlow 1.0). One
//! ovs-testcontroller serves at most 16 switches (its MAX_SWITCHES), and with 16
//! fat-tree switches of 8+ ports its connections time out, so switches are
//! sharded over a pool of ceil(switches / 8) processes (`--per-controller`).
//! It then waits
//! until every switch has finished its handshake and the controller is quiet,
//! fails a seeded 5% of the switch-to-switch links, and waits until the
//! controller is quiet again. Prints one JSON line: sizes, times, message
//! counts, and the peak resident memory of sts and of the controller.
//!
//! Run one size per process (peak memory is per process):
//! `cargo run --release -p sts --example scale -- --k 16`; `scripts/bench-scale`
//! runs the series. Results: docs/benchmarks.md.

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sts_engine::clock::Clock;
use sts_engine::controller::{raise_fd_limit, Controller};
use sts_engine::netrun::{Endpoint, NetRunner, Settle};
use sts_mocknet::{Network, Topology};
use sts_proxy::wire::OFP10;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Peak resident set (VmHWM) of a process, in KiB.
fn peak_rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let k = arg("--k", 4);
    let seed = arg("--seed", 1);
    let quiet_ms = arg("--quiet-ms", 1000);
    let fd_limit = raise_fd_limit().unwrap_or(0);

    let per_controller = arg("--per-controller", 8) as usize;
    let dir = std::env::temp_dir().join(format!("sts-scale-{}-k{k}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let topo = Topology::fat_tree(k);
    let n_ctl = topo.switches.len().div_ceil(per_controller);
    let ctl_started = Instant::now();
    // Start the pool 32 at a time: each start waits for its listening socket.
    let mut ctls: Vec<Controller> = Vec::new();
    for chunk in (0..n_ctl).collect::<Vec<_>>().chunks(32) {
        let started: Vec<Controller> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&i| {
                    let dir = &dir;
                    s.spawn(move || {
                        Controller::start_on_free_port(
                            &sts_engine::presets::ovs_testcontroller(&[]),
                            &dir.join(format!("controller-{i}.log")),
                        )
                        .unwrap_or_else(|e| panic!("{e}"))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        ctls.extend(started);
    }
    let ctl_start_ms = ctl_started.elapsed().as_millis();
    let addrs: Vec<_> = ctls.iter().map(Controller::addr).collect();
    let index: std::collections::BTreeMap<u64, usize> =
        topo.switches.iter().enumerate().map(|(i, &d)| (d, i)).collect();

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(async {
        let started = Instant::now();
        let net = Network::new(&topo, OFP10);
        let build_ms = started.elapsed().as_millis();
        let clock = Clock::start();
        let mut runner =
            NetRunner::connect_with(net, &addrs, clock.clone(), |dpid| vec![index[&dpid] / per_controller]).await.unwrap_or_else(|e| panic!("{e}"));
        let connect_ms = clock.now();
        let total = runner.connection_count();
        let mut last_report = 0;
        let settle = Settle { quiet_ms, min_wait_ms: 0, max_ms: 30 * 60 * 1000 };
        let ok = runner
            .settle_with(settle, |r| {
                let now = r.clock.now();
                if now >= last_report + 2000 {
                    last_report = now;
                    eprintln!("  {:>6} ms: {}/{total} handshakes, {} messages from controllers", now, r.handshakes.len(), r.messages_from_controllers);
                }
            })
            .await;
        assert!(ok && runner.handshakes.len() == total, "only {} of {total} handshakes", runner.handshakes.len());
        // From connected to the controllers' last message (not to the end of the quiet wait).
        let up_ms = runner.last_activity.saturating_sub(connect_ms);
        let msgs_up = runner.messages_from_controllers;

        let mut links = runner.net.switch_links();
        links.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        let n_fail = (links.len() as f64 * 0.05).ceil() as usize;
        let fail_at = clock.now();
        for &((dpid, port), _) in links.iter().take(n_fail) {
            runner.set_link(Endpoint::Switch { dpid, port }, false);
        }
        runner.settle(quiet_ms, 30 * 60 * 1000).await;
        let react_ms = runner.last_activity.saturating_sub(fail_at);
        format!(
            "{{\"k\":{k},\"controllers\":{n_ctl},\"controller_start_ms\":{ctl_start_ms},\"switches\":{},\"hosts\":{},\"links\":{},\"build_ms\":{build_ms},\"connect_ms\":{connect_ms},\"up_ms\":{up_ms},\"failed_links\":{n_fail},\"react_ms\":{react_ms},\"controller_msgs_up\":{msgs_up},\"controller_msgs_total\":{},\"sts_peak_rss_kib\":{},\"controllers_peak_rss_kib_sum\":{},\"fd_limit\":{fd_limit}}}",
            topo.switches.len(),
            topo.hosts.len(),
            links.len(),
            runner.messages_from_controllers,
            peak_rss_kib("self"),
            ctls.iter().map(|c| peak_rss_kib(&c.pid().to_string())).sum::<u64>(),
        )
    });
    println!("{report}");
}
