//! `sts pingall`: bring the network up with its controllers, ping every host
//! pair, print the reachability matrix.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::controller::Controller;
use crate::netrun::NetRunner;
use crate::session::{self, Session};
use crate::{Engine, Progress};

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
        let received =
            (0..n).flat_map(|i| (0..n).map(move |j| (i, j))).filter(|&(i, j)| i != j && self.reached[i][j]).count();
        (received, sent)
    }

    /// True when every pair reached.
    pub fn all_reached(&self) -> bool {
        let (r, s) = self.counts();
        r == s
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
pub async fn run(engine: &Engine, config: &Config, run_dir: &Path) -> Result<PingallRun, RunError> {
    let p = &config.pingall;
    let mut s = session::start(engine, config, run_dir).await?;
    s.clock_notices();
    let n = s.runner.net.hosts.len();
    for h in &mut s.runner.net.hosts {
        h.ping_payload = p.payload_bytes;
    }
    let total = (n * n.saturating_sub(1)) as u64;
    engine.notice(
        crate::NoticeKind::Info,
        format!("{} switch connections up; pinging {total} host pairs", s.runner.handshakes.len()),
    );
    let mut done = 0;

    let mut reached = vec![vec![false; n]; n];
    for (i, row) in reached.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            if i == j {
                continue;
            }
            for _ in 0..p.attempts.max(1) {
                if s.runner.ping(i, j, p.ping_timeout_ms).await {
                    *cell = true;
                    break;
                }
            }
            done += 1;
            engine.progress(Progress::Pings { done, total });
        }
    }
    engine.progress(Progress::Done);
    s.clock_notices();
    // On real time too: a controller gone leaves every ping unanswered.
    for (i, c) in s.controllers.iter_mut().enumerate() {
        if !s.crashed.contains(&i) && !c.is_alive() {
            // The same kind as the clock's notice: a controller is named once.
            engine.notice_once(
                crate::NoticeKind::ControllerExited,
                format!("controller c{i} ({}) is no longer running; last log lines:\n{}", c.name(), c.log_tail(10)),
            );
        }
    }
    let Session { runner, controllers, .. } = s;
    for sw in runner.net.switches.values() {
        tracing::debug!("{}", sw.describe());
    }
    let matrix = Matrix { hosts: runner.net.hosts.iter().map(|h| h.name.clone()).collect(), reached };
    Ok(PingallRun { matrix, runner, controllers, run_dir: run_dir.to_owned() })
}
