//! `sts pingall`: bring the network up with its controllers, ping every host
//! pair, print the reachability matrix.

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use sts_mocknet::{DataplaneEvent, Network};

use crate::cli::exit;
use crate::clock::Clock;
use crate::config::Config;
use crate::controller::Controller;
use crate::netrun::{NetRunner, Settle};

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

/// Why a run could not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Environment(String),
}

impl RunError {
    /// The documented exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Config(_) => exit::BAD_INPUT,
            RunError::Environment(_) => exit::ENVIRONMENT,
        }
    }
}

fn progress(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(ProgressStyle::with_template("{spinner} {msg} [{pos}/{len}] {elapsed}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// Runs a pingall from a loaded config, keeping controller logs in `run_dir`.
pub async fn run(config: &Config, run_dir: &Path) -> Result<PingallRun, RunError> {
    std::fs::create_dir_all(run_dir).map_err(|e| RunError::Environment(format!("cannot create {}: {e}", run_dir.display())))?;
    let specs = config.controller_specs(run_dir).map_err(|e| RunError::Environment(format!("cannot write controller files: {e}")))?;
    let mut controllers = Vec::new();
    let mut addrs = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let log = run_dir.join(format!("controller-{i}-{}.log", spec.name));
        eprintln!("starting controller {i} ({}), log {}", spec.name, log.display());
        let spec = spec.clone();
        let ctl = tokio::task::spawn_blocking(move || Controller::start_on_free_port(&spec, &log))
            .await
            .map_err(|e| RunError::Environment(e.to_string()))?
            .map_err(|e| RunError::Environment(e.to_string()))?;
        addrs.push(ctl.addr());
        controllers.push(ctl);
    }

    let topo = config.topology();
    let net = Network::new(&topo, config.network.openflow.wire());
    let clock = Clock::start();
    let mut runner = NetRunner::connect(net, &addrs, clock).await.map_err(|e| RunError::Environment(e.to_string()))?;
    let p = &config.pingall;

    let total = runner.connection_count() as u64;
    let pb = progress(total, "handshakes");
    let settle = Settle { quiet_ms: p.quiet_ms, min_wait_ms: p.min_wait_ms, max_ms: p.settle_ms };
    runner.settle_with(settle, |r| pb.set_position(r.handshakes.len() as u64)).await;
    pb.finish_and_clear();
    let done = runner.handshakes.len();
    if done < total as usize {
        let mut why = format!("only {done} of {total} switch connections completed the OpenFlow handshake (waited {} ms)", runner.clock.now());
        for issue in runner.issues.iter().take(5) {
            why.push_str(&format!("\n  switch {} / controller {}: {}", issue.dpid, issue.controller, issue.what));
        }
        for c in &controllers {
            why.push_str(&format!("\n  last log lines of the controller on {}:\n{}", c.addr(), c.log_tail(10)));
        }
        return Err(RunError::Environment(why));
    }
    eprintln!("{done} switch connections up; pinging {} host pairs", topo.hosts.len() * topo.hosts.len().saturating_sub(1));

    let n = runner.net.hosts.len();
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
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts pingall: cannot start the runtime: {e}");
            return exit::ENVIRONMENT;
        }
    };
    match rt.block_on(run(&config, &run_dir)) {
        Ok(run) => {
            print!("{}", run.matrix.render());
            for e in run.runner.net.events.iter().take(5) {
                match e {
                    DataplaneEvent::HopLimit { dpid, in_port, summary } => {
                        eprintln!("dataplane: forwarding loop: a frame ({summary}) exceeded the hop limit at switch {dpid} port {in_port}")
                    }
                    DataplaneEvent::StepBudget { deliveries } => eprintln!("dataplane: broadcast storm: one injection caused over {deliveries} deliveries"),
                    DataplaneEvent::FaultDrop { at } => eprintln!("dataplane: a frame was dropped by the fault on the link at {at:?}"),
                }
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
