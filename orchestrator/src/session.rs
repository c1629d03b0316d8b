//! Bringing an experiment up: start the config's controllers, build the mock
//! network, connect every switch, and wait for the handshakes. Shared by
//! `pingall`, `fuzz` and `replay`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use sts_mocknet::Network;
use sts_proxy::relay::Relay;

use crate::cli::exit;
use crate::clock::{Clock, VirtualTime};
use crate::config::Config;
use crate::controller::{Controller, ControllerSpec};
use crate::netrun::{NetRunner, Settle};

/// Why a run could not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Environment(String),
}

impl RunError {
    /// The documented exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Config(_) | RunError::BadInput(_) => exit::BAD_INPUT,
            RunError::Environment(_) => exit::ENVIRONMENT,
        }
    }
}

/// The single-threaded runtime every command runs on (one loop owns the
/// network; controllers are other processes).
pub fn runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| RunError::Environment(format!("cannot start the runtime: {e}")))
}

/// A running experiment: the controllers and the network connected to them.
pub struct Session {
    pub runner: NetRunner,
    pub controllers: Vec<Controller>,
    pub run_dir: PathBuf,
    specs: Vec<ControllerSpec>,
    logs: Vec<PathBuf>,
    /// Controllers crashed on purpose (a fuzzer input), not yet restarted.
    pub crashed: BTreeSet<usize>,
    /// The controller-to-controller relays (`[[relays]]`), by name.
    pub relays: BTreeMap<String, Relay>,
    /// On virtual time: the run's wall-clock date when its clock was made
    /// (ns since the Unix epoch), for the trace header.
    pub wall_epoch_ns: Option<u64>,
}

impl Session {
    /// Controller failure: SIGKILL to its process group. Its switches see
    /// their connections close.
    pub fn crash_controller(&mut self, i: usize) -> Result<(), String> {
        let c = self.controllers.get_mut(i).ok_or_else(|| format!("no controller c{i}"))?;
        c.kill();
        self.runner.controller_down(c.addr());
        self.crashed.insert(i);
        self.expect_controllers();
        Ok(())
    }

    /// Controller recovery: start it again on the same address, and connect
    /// every live switch to it again.
    pub async fn restart_controller(&mut self, i: usize) -> Result<(), String> {
        if !self.crashed.contains(&i) {
            return Ok(());
        }
        let (mut spec, log) = (self.specs[i].clone(), self.logs[i].clone());
        if let Some(vt) = self.runner.clock.virtual_time() {
            spec = crate::snapshot::on_virtual_time(&spec, vt).map_err(|e| e.to_string())?;
        }
        let addr = self.controllers[i].addr();
        let ctl = tokio::task::spawn_blocking(move || Controller::start(&spec, addr, &log))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("controller c{i} did not come back: {e}"))?;
        self.controllers[i] = ctl;
        self.crashed.remove(&i);
        self.expect_controllers();
        self.runner.reconnect_controller(addr).await.map_err(|e| e.to_string())
    }
}

impl Session {
    /// Tells virtual time which controller processes the run has now.
    pub(crate) fn expect_controllers(&self) {
        if let Some(vt) = self.runner.clock.virtual_time() {
            vt.expect(self.controllers.iter().map(Controller::pid));
        }
    }
}

/// Starts a controller: a fresh copy forked from its pristine snapshot when
/// `snapshot` is asked for and the controller allows it, else a new process;
/// on `clock`'s virtual time if given.
fn start_controller(spec: &ControllerSpec, log: &Path, snapshot: bool, clock: Option<&VirtualTime>) -> Result<Controller, RunError> {
    if snapshot {
        match crate::snapshot::fork_or_start(spec, log, clock) {
            Ok(c) => return Ok(c),
            Err(e @ crate::snapshot::SnapshotError::Refused(_)) => {
                tracing::warn!("{}: {e}; starting it without snapshots", spec.name);
            }
            Err(e @ crate::snapshot::SnapshotError::NoShim(_)) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| eprintln!("sts: {e}; starting controllers as new processes"));
            }
            Err(e) => return Err(RunError::Environment(format!("{}: snapshot: {e}", spec.name))),
        }
    }
    let spec = match clock.map(|vt| crate::snapshot::on_virtual_time(spec, vt)) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            // The controller cannot attach: time will never jump (see `VirtualTime::expect`).
            eprintln!("sts: {e}; this run stays on real time");
            spec.clone()
        }
        None => spec.clone(),
    };
    Controller::start_on_free_port(&spec, log).map_err(|e| RunError::Environment(e.to_string()))
}

/// A spinner with a counter, on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(ProgressStyle::with_template("{spinner} {msg} [{pos}/{len}] {elapsed}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// Starts the controllers (logs in `run_dir`), connects the network, and
/// waits until every connection finished its handshake and the controllers
/// were quiet per `settle`.
pub async fn start(config: &Config, run_dir: &Path, settle: Settle) -> Result<Session, RunError> {
    std::fs::create_dir_all(run_dir).map_err(|e| RunError::Environment(format!("cannot create {}: {e}", run_dir.display())))?;
    let mut specs = config.controller_specs(run_dir).map_err(|e| RunError::Environment(format!("cannot write controller files: {e}")))?;
    // Relays first: controllers name their addresses ({relay:NAME}).
    let mut relays = BTreeMap::new();
    for r in &config.relays {
        let to = r.to.parse().map_err(|e| RunError::BadInput(format!("relay {}: {e}", r.name)))?;
        let relay = Relay::start("127.0.0.1:0".parse().expect("a valid address"), to)
            .await
            .map_err(|e| RunError::Environment(format!("relay {}: cannot listen: {e}", r.name)))?;
        let addr = relay.addr().to_string();
        for spec in &mut specs {
            spec.command.iter_mut().for_each(|a| *a = a.replace(&r.placeholder(), &addr));
            spec.env.iter_mut().for_each(|(_, v)| *v = v.replace(&r.placeholder(), &addr));
        }
        relays.insert(r.name.clone(), relay);
    }
    let virtual_time = match config.virtual_time() {
        true => Some(VirtualTime::create().map_err(|e| RunError::Environment(format!("cannot create the virtual clock: {e}")))?),
        false => None,
    };
    // Before any controller reads it: the date a replay serves back.
    if let (Some(vt), Some(epoch)) = (&virtual_time, config.time.wall_epoch_ns) {
        vt.serve_wall_clock(epoch);
    }
    let wall_epoch_ns = virtual_time.as_ref().map(|vt| vt.wall_ns());
    let mut controllers = Vec::new();
    let mut addrs = Vec::new();
    let mut logs = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let log = run_dir.join(format!("controller-{i}-{}.log", spec.name));
        logs.push(log.clone());
        tracing::info!("starting controller {i} ({}), log {}", spec.name, log.display());
        let spec = spec.clone();
        let snapshot = config.controllers[i].snapshot();
        let vt = virtual_time.clone();
        let ctl = tokio::task::spawn_blocking(move || start_controller(&spec, &log, snapshot, vt.as_deref()))
            .await
            .map_err(|e| RunError::Environment(e.to_string()))??;
        addrs.push(ctl.addr());
        controllers.push(ctl);
    }
    let topo = config.topology();
    let mut net = Network::new(&topo, config.network.openflow.wire());
    if let Some(cap) = config.network.table_capacity {
        net.switches.values_mut().for_each(|s| s.table_capacity = cap);
    }
    net.switches.values_mut().for_each(|s| s.buffers = sts_mocknet::switch::PacketBuffers::new(config.network.packet_buffers));
    let clock = match &virtual_time {
        Some(vt) => {
            vt.expect(controllers.iter().map(Controller::pid));
            Clock::start_virtual(vt.clone())
        }
        None => Clock::start(),
    };
    let mut runner = NetRunner::connect(net, &addrs, clock).await.map_err(|e| RunError::Environment(e.to_string()))?;
    runner.interposer.whitelist = config.interpose.whitelist.iter().cloned().collect();
    let total = runner.connection_count() as u64;
    let pb = progress(total, "handshakes");
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
    Ok(Session { runner, controllers, run_dir: run_dir.to_owned(), specs, logs, crashed: BTreeSet::new(), relays, wall_epoch_ns })
}
