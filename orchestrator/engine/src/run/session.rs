//! Bringing an experiment up: start the config's controllers, build the mock
//! network, connect every switch, and wait for the handshakes. Shared by
//! `pingall`, `fuzz` and `replay`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sts_mocknet::Network;
use sts_proxy::relay::Relay;

use crate::clock::{Clock, VirtualTime};
use crate::config::{Config, StepConfig};
use crate::controller::{Controller, ControllerSpec};
use crate::netrun::{NetRunner, Settle};
use crate::policy::Target;
use crate::InputError;

pub use crate::error::{own_dir, RunError};

/// A running experiment: the controllers and the network connected to them.
pub struct Session {
    pub runner: NetRunner,
    pub controllers: Vec<Controller>,
    /// Where the run's logs go.
    pub run_dir: PathBuf,
    /// Where the controllers' files are (faucet.yaml ...): what policies
    /// edit (`{dir}`). The run's own directory, unless it shares another
    /// run's (see [`start_in`]).
    pub files_dir: PathBuf,
    specs: Vec<ControllerSpec>,
    logs: Vec<PathBuf>,
    /// Controllers crashed on purpose (a fuzzer input), not yet restarted.
    pub crashed: BTreeSet<usize>,
    /// The controller-to-controller relays (`[[relays]]`), by name.
    pub relays: BTreeMap<String, Relay>,
    /// On virtual time: the run's wall-clock date when its clock was made
    /// (ns since the Unix epoch), for the trace header.
    pub wall_epoch_ns: Option<u64>,
    /// The engine this run belongs to (its notices, its zygotes).
    pub engine: crate::Engine,
    /// Each controller's `setup` steps.
    pub setup: Vec<Vec<crate::config::StepConfig>>,
    /// The config's `[[policies]]`, by name.
    pub policies: BTreeMap<String, crate::config::PolicyConfig>,
    /// The policies applied so far in this run, in order.
    pub applied_policies: Vec<String>,
    /// The config's own `[invariants] isolation` pairs.
    base_isolation: Vec<(String, String)>,
}

/// Where a run stands beyond its network ([`crate::netrun::RunState`]): what
/// a rollback to a checkpoint restores besides the controllers.
#[derive(Clone)]
pub struct SessionState {
    pub run: crate::netrun::RunState,
    applied_policies: Vec<String>,
    /// The controllers' files as they were (faucet.yaml ...): a policy
    /// applied after the checkpoint edited them, and the copies resumed
    /// from it must read them as they were then (on a reload, or a restart).
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl Session {
    /// Controller failure: SIGKILL to its process group. Its switches see
    /// their connections close.
    pub fn crash_controller(&mut self, i: usize) -> Result<(), InputError> {
        let count = self.controllers.len();
        let c = self.controllers.get_mut(i).ok_or_else(|| InputError::NoController { name: format!("c{i}"), count })?;
        if c.is_remote() {
            return Err(InputError::RemoteController(i));
        }
        c.kill();
        self.runner.controller_down(c.addr());
        self.crashed.insert(i);
        self.expect_controllers();
        Ok(())
    }

    /// Controller recovery: start it again on the same address, and connect
    /// every live switch to it again.
    pub async fn restart_controller(&mut self, i: usize) -> Result<(), InputError> {
        if !self.crashed.contains(&i) {
            return Ok(());
        }
        let failed = |e: &dyn std::fmt::Display| InputError::Restart(format!("controller c{i} did not come back: {e}"));
        let (mut spec, log) = (self.specs[i].clone(), self.logs[i].clone());
        if let Some(vt) = self.runner.clock.virtual_time() {
            spec = crate::snapshot::on_virtual_time(&spec, vt).map_err(|e| failed(&e))?;
        }
        let addr = self.controllers[i].addr();
        let ctl = tokio::task::spawn_blocking(move || Controller::start(&spec, addr, &log))
            .await
            .map_err(|e| failed(&e))?
            .map_err(|e| failed(&e))?;
        self.controllers[i] = ctl;
        self.crashed.remove(&i);
        self.expect_controllers();
        self.runner.reconnect_controller(addr).await.map_err(|e| failed(&e))?;
        if !self.setup[i].is_empty() {
            // Once its switches are back: the steps configure them.
            self.runner.settle(200, 10_000).await;
            self.set_up(i).await?;
        }
        Ok(())
    }

    /// Where the run stands, for a rollback ([`Session::restore_state`]).
    pub fn state(&self) -> SessionState {
        let files = self
            .specs
            .iter()
            .filter_map(|spec| spec.config.as_ref())
            .filter_map(|path| std::fs::read(path).ok().map(|content| (path.clone(), content)))
            .collect();
        SessionState { run: self.runner.state(), applied_policies: self.applied_policies.clone(), files }
    }

    /// Puts the controllers' files back as they were in `state` (before the
    /// controllers resume from it). Only the files that changed are written.
    pub fn restore_files(&self, state: &SessionState) -> std::io::Result<()> {
        for (path, content) in &state.files {
            if std::fs::read(path).ok().as_ref() != Some(content) {
                std::fs::write(path, content)?;
            }
        }
        Ok(())
    }

    /// Takes back the session's own part of `state` (the network's is
    /// restored with the controllers, by `peek::roll_back`).
    pub fn restore_state(&mut self, state: &SessionState) {
        self.applied_policies = state.applied_policies.clone();
    }

    /// The host pairs that must not communicate now: the config's, with the
    /// applied policies' `isolate` and `allow` on top.
    pub fn isolation(&self) -> Vec<(String, String)> {
        crate::policy::isolation(
            &self.base_isolation,
            self.applied_policies.iter().filter_map(|n| self.policies.get(n)),
        )
    }
}

/// A run held still by [`Session::freeze`].
#[must_use = "a frozen run stays stopped until it is thawed"]
pub struct Frozen {
    /// Virtual time when the controllers stopped (none on real time).
    at_ns: Option<u64>,
    /// The stopped process groups.
    groups: Vec<i32>,
}

/// Whether every process of group `pgid` is stopped (or gone).
fn group_stopped(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return true };
    entries.flatten().all(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { return true };
        // pid (comm) state ppid pgrp ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return true };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let in_group = fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid);
        !in_group || matches!(fields.first(), Some(&"T") | Some(&"t") | Some(&"Z") | Some(&"X"))
    })
}

impl Session {
    /// Holds the run still while a person looks at it (the console's
    /// prompt): every controller's process group is stopped (SIGSTOP, and
    /// waited for, up to a second) and, on virtual time, the clock is noted.
    /// [`Session::thaw`] sets the clock back there and resumes them, so no
    /// controller sees the pause: no timer fires, no keepalive is missed.
    /// (On real time the controllers find time has passed.)
    pub fn freeze(&mut self) -> Frozen {
        let crashed = &self.crashed;
        let groups: Vec<i32> = self
            .controllers
            .iter_mut()
            .enumerate()
            // A remote controller is not sts's to stop (and has no group).
            .filter_map(|(i, c)| (!crashed.contains(&i) && !c.is_remote() && c.is_alive()).then(|| c.pid() as i32))
            .collect();
        for &g in &groups {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(g), nix::sys::signal::Signal::SIGSTOP);
        }
        for _ in 0..1000 {
            if groups.iter().all(|&g| group_stopped(g)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Read after they stopped: no controller saw a later time.
        let at_ns = self.runner.clock.virtual_time().map(|vt| vt.now_ns());
        Frozen { at_ns, groups }
    }

    /// Resumes a run held by [`Session::freeze`] at the time it stopped.
    pub fn thaw(&mut self, frozen: Frozen) {
        if let (Some(ns), Some(vt)) = (frozen.at_ns, self.runner.clock.virtual_time()) {
            vt.rewind_to(ns);
        }
        for g in frozen.groups {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(g), nix::sys::signal::Signal::SIGCONT);
        }
    }

    /// Ends the run off the caller's path: every controller is sent SIGKILL
    /// now (none runs its code again), and the wait for them to be gone
    /// (their memory freed, their last output copied into their logs) goes
    /// on a blocking thread, which the runtime waits for before sts exits.
    /// The next run need not wait for this one's teardown.
    pub fn end_aside(mut self) {
        for c in self.controllers.iter_mut() {
            c.stop();
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || drop(self))),
            Err(_) => drop(self),
        }
    }

    /// Tells virtual time which controller processes the run has now.
    pub(crate) fn expect_controllers(&self) {
        if let Some(vt) = self.runner.clock.virtual_time() {
            vt.expect(self.controllers.iter().map(Controller::pid));
        }
    }

    /// Passes on what the clock found worth saying (once per engine): a
    /// controller whose timers the shim cannot follow keeps the run on real time.
    pub fn clock_notices(&self) {
        let Some(vt) = self.runner.clock.virtual_time() else { return };
        for pid in vt.take_departed() {
            let Some(i) = self.controllers.iter().position(|c| u64::from(c.pid()) == pid) else { continue };
            if self.crashed.contains(&i) {
                continue; // crashed on purpose (an input)
            }
            // Once per engine: in a minimization whose bug is a crash, every
            // candidate that reproduces it would say it again.
            self.engine.notice_once(
                crate::NoticeKind::ControllerExited,
                format!(
                    "controller c{i} (pid {pid}) exited during the run; time no longer waits for it (last log lines:\n{})",
                    self.controllers[i].log_tail(5)
                ),
            );
        }
        if let Some(why) = vt.refusal() {
            self.engine.notice_once(
                crate::NoticeKind::TimeStopped,
                format!("virtual time stops jumping: {why}; this run continues on real time"),
            );
        }
    }
}

/// Starts a controller: a fresh copy forked from its pristine snapshot when
/// `snapshot` is asked for and the controller allows it, else a new process;
/// on `clock`'s virtual time if given.
fn start_controller(
    engine: &crate::Engine,
    spec: &ControllerSpec,
    log: &Path,
    snapshot: bool,
    clock: Option<&VirtualTime>,
) -> Result<Controller, RunError> {
    if snapshot {
        match crate::snapshot::fork_or_start(engine, spec, log, clock) {
            Ok(c) => return Ok(c),
            Err(e @ crate::snapshot::SnapshotError::Refused(_)) => {
                tracing::warn!("{}: {e}; starting it without snapshots", spec.name);
            }
            Err(e @ crate::snapshot::SnapshotError::NoShim(_)) => {
                engine.notice_once(crate::NoticeKind::NoShim, format!("{e}; starting controllers as new processes"));
            }
            Err(e) => return Err(RunError::Environment(format!("{}: snapshot: {e}", spec.name))),
        }
    }
    let spec = match clock.map(|vt| crate::snapshot::on_virtual_time(spec, vt)) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            // The controller cannot attach: time will never jump (see `VirtualTime::expect`).
            engine.notice_once(crate::NoticeKind::ShimCannotAttach, format!("{e}; this run stays on real time"));
            spec.clone()
        }
        None => spec.clone(),
    };
    Controller::start_on_free_port(&spec, log).map_err(|e| RunError::Environment(e.to_string()))
}

/// Starts the controllers (logs in `run_dir`), connects the network, and
/// waits until every connection finished its handshake and the controllers
/// were quiet per the config's `[pingall]` settle times.
pub async fn start(engine: &crate::Engine, config: &Config, run_dir: &Path) -> Result<Session, RunError> {
    start_with(engine, config, run_dir, config.settle()).await
}

/// [`start`] with settle times of the caller's.
pub async fn start_with(
    engine: &crate::Engine,
    config: &Config,
    run_dir: &Path,
    settle: Settle,
) -> Result<Session, RunError> {
    start_in(engine, config, run_dir, run_dir, settle).await
}

/// [`start_with`], the controllers' files (rewritten as the config makes
/// them) in `files_dir` rather than beside the logs: a run that follows
/// another, never beside it, can take the earlier run's `files_dir`, and
/// with it the earlier run's zygotes (a controller whose command names its
/// files, as faucet's does, gets a zygote per directory).
pub async fn start_in(
    engine: &crate::Engine,
    config: &Config,
    run_dir: &Path,
    files_dir: &Path,
    settle: Settle,
) -> Result<Session, RunError> {
    for dir in [run_dir, files_dir] {
        std::fs::create_dir_all(dir)
            .map_err(|e| RunError::Environment(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut specs = crate::presets::specs(config, files_dir)
        .map_err(|e| RunError::Environment(format!("cannot write controller files: {e}")))?;
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
        true => Some(
            VirtualTime::create()
                .map_err(|e| RunError::Environment(format!("cannot create the virtual clock: {e}")))?,
        ),
        false => None,
    };
    // Before any controller reads it: the date a replay serves back.
    if let (Some(vt), Some(epoch)) = (&virtual_time, config.time.wall_epoch_ns) {
        vt.serve_wall_clock(epoch);
    }
    if let Some(vt) = virtual_time.as_ref().filter(|_| config.time.jump_log) {
        let path = run_dir.join("jumps.jsonl");
        vt.log_jumps_to(&path).map_err(|e| RunError::Environment(format!("{}: {e}", path.display())))?;
    }
    let wall_epoch_ns = virtual_time.as_ref().map(|vt| vt.wall_ns());
    let mut controllers = Vec::new();
    let mut addrs = Vec::new();
    let mut logs = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let log = run_dir.join(format!("controller-{i}-{}.log", spec.name));
        logs.push(log.clone());
        tracing::info!("starting controller {i} ({}), log {}", spec.name, log.display());
        if let Some(addr) = config.controllers[i].remote_address() {
            let ctl =
                Controller::remote(addr, &log).map_err(|e| RunError::Environment(format!("{}: {e}", log.display())))?;
            addrs.push(addr);
            controllers.push(ctl);
            continue;
        }
        let spec = spec.clone();
        let snapshot = config.controllers[i].snapshot();
        let vt = virtual_time.clone();
        let eng = engine.clone();
        let ctl = tokio::task::spawn_blocking(move || start_controller(&eng, &spec, &log, snapshot, vt.as_deref()))
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
    net.switches
        .values_mut()
        .for_each(|s| s.buffers = sts_mocknet::switch::PacketBuffers::new(config.network.packet_buffers));
    // The hosts' frames go into the trace (`sts pcap` writes them out).
    net.capture = true;
    let clock = match &virtual_time {
        Some(vt) => {
            vt.expect(controllers.iter().map(Controller::pid));
            Clock::start_virtual(vt.clone())
        }
        None => Clock::start(),
    };
    let mut runner = NetRunner::connect(net, &addrs, clock).await.map_err(|e| RunError::Environment(e.to_string()))?;
    runner.interposer.set_whitelist(config.interpose.whitelist.iter().cloned());
    runner.interposer.drop_messages(config.drop_ids.clone());
    let total = runner.connection_count() as u64;
    let mut reported = u64::MAX;
    runner
        .settle_with(settle, |r| {
            let done = r.handshakes.len() as u64;
            if done != reported {
                reported = done;
                engine.progress(crate::Progress::Handshakes { done, total });
            }
        })
        .await;
    // No `Done`: the job's next phase (pings, fuzzing) takes the screen, and
    // inside a job (a minimization's replays) the handshakes are the job's.
    let done = runner.handshakes.len();
    if done < total as usize {
        let mut why = format!(
            "only {done} of {total} switch connections completed the OpenFlow handshake (waited {} ms)",
            runner.clock.now()
        );
        for issue in runner.issues.iter().take(5) {
            why.push_str(&format!("\n  switch {} / controller {}: {}", issue.dpid, issue.controller, issue.what));
        }
        for c in &mut controllers {
            // Whether it is still there tells a controller that died from one
            // that never answered.
            let state = match (c.is_remote(), c.is_alive()) {
                (true, _) => "remote".to_string(),
                (false, true) => format!("pid {}, running", c.pid()),
                (false, false) => format!("pid {}, exited", c.pid()),
            };
            why.push_str(&format!(
                "\n  last log lines of the controller on {} ({state}):\n{}",
                c.addr(),
                c.log_tail(10)
            ));
        }
        if let Some(summary) = runner.clock.summary() {
            why.push_str(&format!("\n  {summary}"));
        }
        return Err(RunError::Environment(why));
    }
    let mut session = Session {
        runner,
        controllers,
        run_dir: run_dir.to_owned(),
        files_dir: files_dir.to_owned(),
        specs,
        logs,
        crashed: BTreeSet::new(),
        relays,
        wall_epoch_ns,
        engine: engine.clone(),
        setup: config.controllers.iter().map(|c| c.setup.clone()).collect(),
        policies: config.policies.iter().map(|p| (p.name.clone(), p.clone())).collect(),
        applied_policies: Vec::new(),
        base_isolation: config.invariants.isolation.clone(),
    };
    for i in 0..session.controllers.len() {
        session.set_up(i).await.map_err(RunError::from)?;
    }
    if session.setup.iter().any(|s| !s.is_empty()) {
        // What the steps set off (FLOW_MODs ...) settles before the run goes on.
        session.runner.settle(settle.quiet_ms, settle.max_ms).await;
    }
    Ok(session)
}

/// Controller `c<i>`'s index among `n` controllers.
pub(crate) fn controller_index(name: &str, n: usize) -> Result<usize, InputError> {
    name.strip_prefix('c')
        .and_then(|i| i.parse::<usize>().ok())
        .filter(|&i| i < n)
        .ok_or_else(|| InputError::NoController { name: name.to_string(), count: n })
}

/// Things done to a controller from outside OpenFlow ([`crate::policy`]):
/// its setup steps and the named policy changes.
impl Session {
    /// Runs `step` against controller `i`, keeping the network running
    /// until it is done. The error names the step and what went wrong.
    pub async fn run_step(&mut self, i: usize, step: &StepConfig) -> Result<(), InputError> {
        let count = self.controllers.len();
        let c = self.controllers.get(i).ok_or_else(|| InputError::NoController { name: format!("c{i}"), count })?;
        let target = Target {
            port: c.addr().port(),
            aux_port: c.aux_port(),
            pid: c.pid(),
            dir: self.files_dir.display().to_string(),
        };
        let (step, timeout) = (step.clone(), step.timeout());
        let what = step.describe();
        let job = tokio::task::spawn_blocking(move || crate::policy::perform(&step, &target, timeout));
        // Generous: `perform` itself gives up at the step's timeout.
        let finished = self.runner.serve_until(timeout + Duration::from_secs(1), || job.is_finished()).await;
        if !finished {
            return Err(InputError::Step(format!("c{i}: `{what}` did not finish within {} ms", timeout.as_millis())));
        }
        // What the request set off (a FLOW_MOD still in the controller's send
        // queue when it answered) goes out before the run moves on: on virtual
        // time, until every controller waits again with nothing in flight.
        self.runner.quiesce(Duration::from_secs(2)).await;
        job.await
            .map_err(|e| InputError::Step(format!("c{i}: `{what}`: {e}")))?
            .map_err(|e| InputError::Step(format!("c{i}: `{what}`: {e}")))
    }

    /// Runs the setup steps of controller `i`, in order.
    pub async fn set_up(&mut self, i: usize) -> Result<(), InputError> {
        let steps = self.setup.get(i).cloned().unwrap_or_default();
        for (k, step) in steps.iter().enumerate() {
            self.run_step(i, step).await.map_err(|e| InputError::Step(format!("setup step {} of c{i}: {e}", k + 1)))?;
        }
        Ok(())
    }

    /// Applies policy `name`, unless a policy it must come after was not
    /// applied earlier in the run: then it is skipped (`Ok(false)`), as
    /// minimization's candidates that left the prerequisite out expect.
    pub async fn apply_policy(&mut self, name: &str) -> Result<bool, InputError> {
        let Some(policy) = self.policies.get(name).cloned() else {
            return Err(crate::policy::unknown(name, &self.policies.keys().cloned().collect::<Vec<_>>()));
        };
        if let Some(missing) = policy.after.iter().find(|a| !self.applied_policies.contains(a)) {
            tracing::debug!("policy {name} skipped: {missing} was not applied before it");
            return Ok(false);
        }
        let i = controller_index(&policy.controller, self.controllers.len())?;
        if self.crashed.contains(&i) {
            // The operator's request meets a dead controller: refused, nothing changes.
            tracing::debug!("policy {name} skipped: c{i} is down");
            return Ok(false);
        }
        if let Err(e) = self.run_step(i, &policy.step()).await {
            // The controller's answer, not sts's failure: the run goes on, as
            // an operator's would, without the change.
            self.engine.notice_once(
                crate::NoticeKind::PolicyFailed,
                format!("policy {name} failed and was not applied (said once per job): {e}"),
            );
            return Ok(false);
        }
        self.applied_policies.push(name.to_string());
        Ok(true)
    }
}
