//! `sts pingall`: bring the network up with its controllers, ping every host
//! pair, print the reachability matrix.

use std::path::{Path, PathBuf};

use sts_mocknet::DataplaneEvent;

use crate::cli::exit;
use crate::config::Config;
use crate::controller::Controller;
use crate::netrun::{NetRunner, Settle};
use crate::session::{self, progress, Session};

/// The outcome of a pingall: `reached[i][j]` for every ordered pair i ≠ j.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub hosts: Vec<String>,
    pub reached: Vec<Vec<bool>>,
}

impl Matrix {
    /// (received, sent).
    pub fn counts(&self) -> (usize, usize) {
        let n = self.hosts.len();
        let sent = n * n.saturating_sub(1);
        let received = (0..n).flat_map(|i| (0..n).map(move |j| (i, j))).filter(|&(i, j)| i != j && self.reached[i][j]).count();
        (received, sent)
    }

    /// True when every pair reached.
    pub fn all_reached(&self) -> bool {
        let (r, s) = self.counts();
        r == s
    }

    /// Mininet-style rendering: one line per source host, `X` for a miss.
    pub fn render(&self) -> String {
        let mut s = String::from("*** Ping: testing ping reachability\n");
        for (i, h) in self.hosts.iter().enumerate() {
            s.push_str(&format!("{h} ->"));
            for (j, g) in self.hosts.iter().enumerate() {
                if i != j {
                    s.push(' ');
                    s.push_str(if self.reached[i][j] { g } else { "X" });
                }
            }
            s.push('\n');
        }
        let (r, t) = self.counts();
        let dropped = (100 * (t - r)).checked_div(t).unwrap_or(0);
        s.push_str(&format!("*** Results: {dropped}% dropped ({r}/{t} received)\n"));
        s
    }
}

/// Everything a pingall run produced.
pub struct PingallRun {
    pub matrix: Matrix,
    pub runner: NetRunner,
    pub controllers: Vec<Controller>,
    pub run_dir: PathBuf,
}

pub use crate::session::RunError;

/// Runs a pingall from a loaded config, keeping controller logs in `run_dir`.
pub async fn run(config: &Config, run_dir: &Path) -> Result<PingallRun, RunError> {
    let p = &config.pingall;
    let settle = Settle { quiet_ms: p.quiet_ms, min_wait_ms: p.min_wait_ms, max_ms: p.settle_ms };
    let Session { mut runner, controllers, .. } = session::start(config, run_dir, settle).await?;
    let n = runner.net.hosts.len();
    for h in &mut runner.net.hosts {
        h.ping_payload = p.payload_bytes;
    }
    eprintln!("{} switch connections up; pinging {} host pairs", runner.handshakes.len(), n * n.saturating_sub(1));

    let mut reached = vec![vec![false; n]; n];
    let pb = progress((n * n.saturating_sub(1)) as u64, "pings");
    for (i, row) in reached.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            if i == j {
                continue;
            }
            for _ in 0..p.attempts.max(1) {
                if runner.ping(i, j, p.ping_timeout_ms).await {
                    *cell = true;
                    break;
                }
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    for sw in runner.net.switches.values() {
        tracing::debug!("{}", sw.describe());
    }
    let matrix = Matrix { hosts: runner.net.hosts.iter().map(|h| h.name.clone()).collect(), reached };
    Ok(PingallRun { matrix, runner, controllers, run_dir: run_dir.to_owned() })
}

/// The `sts pingall` command.
pub fn command(config_path: &Path) -> u8 {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sts pingall: {e}");
            return exit::BAD_INPUT;
        }
    };
    let run_dir = std::env::temp_dir().join(format!("sts-pingall-{}", std::process::id()));
    let rt = match crate::session::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts pingall: {e}");
            return e.exit_code();
        }
    };
    match rt.block_on(run(&config, &run_dir)) {
        Ok(run) => {
            print!("{}", run.matrix.render());
            for e in run.runner.net.events.iter().take(5) {
                match e {
                    DataplaneEvent::HopLimit { dpid, in_port, summary } if *in_port == sts_proxy::wire::v13::port::CONTROLLER => {
                        eprintln!("dataplane: forwarding loop: a frame ({summary}) went back and forth between switch {dpid} and its controller until it exceeded the hop limit")
                    }
                    DataplaneEvent::HopLimit { dpid, in_port, summary } => {
                        eprintln!("dataplane: forwarding loop: a frame ({summary}) exceeded the hop limit at switch {dpid} port {in_port}")
                    }
                    DataplaneEvent::StepBudget { deliveries } => eprintln!("dataplane: broadcast storm: one injection caused over {deliveries} deliveries"),
                    DataplaneEvent::FaultDrop { at } => eprintln!("dataplane: a frame was dropped by the fault on the link at {at:?}"),
                }
            }
            if let Some(line) = run.runner.clock.summary() {
                eprintln!("{line}");
            }
            eprintln!("controller logs: {}", run.run_dir.display());
            if run.matrix.all_reached() {
                exit::OK
            } else {
                exit::VIOLATION
            }
        }
        Err(e) => {
            eprintln!("sts pingall: {e}");
            e.exit_code()
        }
    }
}
