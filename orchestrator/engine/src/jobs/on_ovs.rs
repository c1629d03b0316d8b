//! `sts replay DIR --on ovs`: a trace's inputs replayed on real Open vSwitch
//! switches ([`crate::ovs`]), to answer the question a QA engineer asks of a
//! minimal causal sequence before filing it: does this happen on real
//! switches too?
//!
//! Each run builds the experiment's network with Open vSwitch, starts the
//! experiment's controllers for real (the same presets and setup steps, on
//! real time: no shim, no snapshots), puts a recording proxy
//! ([`sts_proxy::standalone`]) between each controller and the bridges, and
//! injects the trace's inputs in order with their recorded spacing. Then it
//! reads every bridge's flow and group tables back (`ovs-testbed dump`),
//! installs them on a model of the network that went through the same
//! inputs (links down, hosts moved, switches failed), and checks the config's
//! invariants there, twice, `persist_ms` apart: a violation present both
//! times is the run's verdict, compared with the lab's by victim and by
//! culprit. Inputs a testbed cannot perform are listed, never skipped
//! silently.
//!
//! Reading the tables is the caller's ([`InstallTables`]: the report crate's
//! `dump_flows::install_dir`), which keeps this crate below the reader.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use sts_invariants::check::Facts;
use sts_invariants::{Same, Violation};
use sts_mocknet::network::Endpoint;
use sts_mocknet::Network;
use sts_proxy::interpose::{Action, Direction, Rule};
use sts_trace::{External, ViolationRecord};

use crate::clock::Clock;
use crate::config::Config;
use crate::controller::Controller;
use crate::ovs::Testbed;
use crate::policy::Target;
use crate::{Engine, RunError};

/// Installs a directory of `dump-flows`/`dump-groups` listings on a network
/// (`s<DPID>.flows`, `s<DPID>.groups`) whose bridges speak the given
/// OpenFlow version, returning what each switch's listing held; the error
/// names the file and line.
pub type InstallTables = fn(&Path, &mut Network, u8) -> Result<BTreeMap<u64, SwitchTables>, String>;

/// What one bridge's dump held.
#[derive(Debug, Clone, Copy, Default)]
pub struct SwitchTables {
    pub flows: usize,
    /// The frames its flows counted (`n_packets`, summed).
    pub packets: u64,
}

/// Frames (or OpenFlow messages) per second that make a quiet network's
/// traffic a storm: far above what a settled network of hosts that stopped
/// pinging carries, far below what a loop on a software switch produces.
const STORM_PER_S: f64 = 1000.0;

/// Where a testbed's tables (the network they were installed on) first
/// differ from the lab's at its violation (a lab trace with its OpenFlow
/// messages, [`lab_trace`]), in words; `None` when they do not.
pub type TableDifference = fn(&sts_trace::Trace, &Network) -> Option<String>;

/// An OpenFlow message's bytes in words, when it has some.
pub type DescribeMessage = fn(&bytes::Bytes) -> Option<String>;

/// How to replay on Open vSwitch.
pub struct Options {
    /// Runs, each on a fresh testbed.
    pub repeat: u32,
    /// Where the runs go (`OUT/1/`, `OUT/2/` ... and `OUT/summary.json`).
    pub out: PathBuf,
    /// Reads a dump directory onto a network.
    pub install_tables: InstallTables,
    /// Compares a run's tables with the lab's, for runs that do not reproduce.
    pub table_difference: TableDifference,
    /// A message's bytes in words (`dump-flows` words for a FLOW_MOD).
    pub describe_message: DescribeMessage,
}

/// An input the testbed cannot perform, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Its position among the trace's inputs (0-based).
    pub index: usize,
    pub input: String,
    pub why: String,
}

/// A ping sent on the testbed, and whether it was answered.
#[derive(Debug, Clone, Serialize)]
pub struct PingOutcome {
    /// When it was sent, ms after the first input.
    pub at_ms: u64,
    pub src: String,
    pub dst: String,
    pub answered: bool,
}

/// One run on a fresh testbed.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub run: u32,
    pub dir: PathBuf,
    /// The violations seen in both checks, `persist_ms` apart.
    pub violations: Vec<ViolationRecord>,
    /// Some violation is the lab's (same invariant and victim); when the
    /// trace records no violation, some persistent violation was found.
    pub reproduced: bool,
    /// Some violation is the lab's with the same culprit on the same switch
    /// (always false without a lab culprit to compare with).
    pub same_culprit: bool,
    pub pings: Vec<PingOutcome>,
    /// Inputs this machine could not perform in this run (a dataplane delay
    /// without the kernel's netem), with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_performed: Vec<String>,
    /// Flows per switch in the final dump.
    pub flows: BTreeMap<String, usize>,
    /// OpenFlow messages the proxies recorded (every controller).
    pub recorded: u64,
    /// The run's recording imported as an experiment (`RUN/experiment`):
    /// its report, pcap and console work as on any run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experiment: Option<PathBuf>,
    /// Why the recording could not be imported, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub import_error: Option<String>,
    /// When it did not reproduce: where its final tables first differ from
    /// the lab's at the violation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differs: Option<String>,
    /// When it did not reproduce: the controller-to-switch messages whose
    /// count differs between the lab (up to its violation) and the testbed,
    /// per switch, by fingerprint (a few).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages_differ: Vec<String>,
    /// What went wrong, when the run could not finish (a controller that did
    /// not start, a script that failed): the run counts as not reproducing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every run's verdict beside the lab's.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub experiment: PathBuf,
    /// The violation of the lab's trace, if it has one.
    pub lab: Option<ViolationRecord>,
    pub inputs: usize,
    pub skipped: Vec<Skipped>,
    pub runs: Vec<Run>,
    pub reproduced: u32,
    pub same_culprit: u32,
}

/// What a testbed does for an input, decided before any run.
enum Step {
    Ping {
        src: String,
        dst: String,
    },
    Link {
        a: u64,
        b: u64,
        up: bool,
        at: Endpoint,
    },
    Switch {
        dpid: u64,
        up: bool,
    },
    Migrate {
        host: String,
        to: u64,
    },
    /// A dataplane fault on the link at `at` (`None`: it ends).
    Netem {
        a: u64,
        b: u64,
        at: Endpoint,
        fault: Option<sts_mocknet::network::LinkFault>,
    },
    Crash(usize),
    Restart(usize),
    Policy(String),
    /// A one-shot rule armed on every proxy.
    Arm(Rule),
    /// Every controller-to-switch message of a switch delayed by this many
    /// ms, in place of an earlier delay (`None`: the delay ends).
    Delay {
        switch: u64,
        ms: Option<u64>,
    },
}

/// What a testbed does with a trace's inputs: its steps (with their times
/// from the first input), and the inputs it cannot perform.
pub struct Plan {
    steps: Vec<(u64, Step)>,
    /// The inputs a testbed cannot perform, skipped in every run.
    pub skipped: Vec<Skipped>,
    /// The trace's inputs, performed or not.
    pub inputs: usize,
}

/// The testbed's plan for `trace`'s inputs on `config`'s network.
pub fn plan(config: &Config, trace: &sts_trace::Trace) -> Plan {
    let inputs = trace.externals();
    let (steps, skipped) = plan_inputs(config, &inputs);
    Plan { steps, skipped, inputs: inputs.len() }
}

fn plan_inputs(config: &Config, inputs: &[(u64, &External)]) -> (Vec<(u64, Step)>, Vec<Skipped>) {
    let net = Network::new(&config.topology(), sts_proxy::wire::OFP13);
    let link_end = |a: &sts_trace::Port| Endpoint::Switch { dpid: a.switch, port: a.port };
    let (mut steps, mut skipped) = (Vec::new(), Vec::new());
    let first = inputs.first().map_or(0, |(t, _)| *t);
    for (index, (t, e)) in inputs.iter().enumerate() {
        let skip = |why: &str| Skipped { index, input: e.describe(), why: why.to_string() };
        let controller = |name: &str| crate::session::controller_index(name, config.controllers.len()).ok();
        let datapath_rule = |switch: u64, msg_type: &sts_trace::MsgType, action: Action| Rule {
            datapath: Some(switch),
            msg_type: Some(msg_type.as_str().to_string()),
            action,
            ..Rule::default()
        };
        let step = match e {
            External::Ping { src, dst } => Ok(Step::Ping { src: src.clone(), dst: dst.clone() }),
            External::LinkDown { a, b } | External::LinkUp { a, b } => {
                if net.peer(link_end(a)) == Some(link_end(b)) {
                    Ok(Step::Link { a: a.switch, b: b.switch, up: matches!(e, External::LinkUp { .. }), at: link_end(a) })
                } else {
                    Err(skip("no such link in the config's network"))
                }
            }
            External::SwitchDown { switch } => Ok(Step::Switch { dpid: *switch, up: false }),
            External::SwitchUp { switch } => Ok(Step::Switch { dpid: *switch, up: true }),
            External::HostMigrate { host, to, .. } => Ok(Step::Migrate { host: host.clone(), to: *to }),
            External::DataplaneDrop { a, b }
            | External::DataplaneDelay { a, b, .. }
            | External::DataplaneDropEnd { a, b }
            | External::DataplaneDelayEnd { a, b } => {
                use sts_mocknet::network::LinkFault;
                let fault = match e {
                    External::DataplaneDrop { .. } => Some(LinkFault::Drop),
                    External::DataplaneDelay { ms, .. } => Some(LinkFault::Delay(*ms)),
                    _ => None,
                };
                if net.peer(link_end(a)) == Some(link_end(b)) {
                    Ok(Step::Netem { a: a.switch, b: b.switch, at: link_end(a), fault })
                } else {
                    Err(skip("no such link in the config's network"))
                }
            }
            External::ControllerCrash { controller: c } => match controller(c) {
                Some(i) if config.controllers[i].remote_address().is_none() => Ok(Step::Crash(i)),
                _ => Err(skip("not a controller sts starts")),
            },
            External::ControllerRestart { controller: c } => match controller(c) {
                Some(i) if config.controllers[i].remote_address().is_none() => Ok(Step::Restart(i)),
                _ => Err(skip("not a controller sts starts")),
            },
            External::Policy { name, .. } => Ok(Step::Policy(name.clone())),
            External::ControlDrop { switch, msg_type } => Ok(Step::Arm(datapath_rule(*switch, msg_type, Action::Drop))),
            External::ControlDelayNext { switch, msg_type, ms } => {
                Ok(Step::Arm(datapath_rule(*switch, msg_type, Action::Delay(*ms))))
            }
            External::ControlReorderNext { switch, msg_type, ms } => {
                Ok(Step::Arm(datapath_rule(*switch, msg_type, Action::Reorder(*ms))))
            }
            External::ControlDelay { switch, ms } => Ok(Step::Delay { switch: *switch, ms: Some(*ms) }),
            External::ControlDelayEnd { switch } => Ok(Step::Delay { switch: *switch, ms: None }),
            External::ControlHold { .. } | External::ControlRelease { .. } | External::HeldMessage { .. } => {
                Err(skip("holding and releasing single messages is the mock network's (a real switch's messages are relayed as they come)"))
            }
            External::Partition { .. } | External::PartitionHeal { .. } => {
                Err(skip("controller-to-controller relays are not part of the testbed"))
            }
        };
        match step {
            Ok(s) => steps.push((t - first, s)),
            Err(s) => skipped.push(s),
        }
    }
    (steps, skipped)
}

/// Replays an experiment ([`crate::replay::load`]ed, its inputs
/// [`plan`]ned) on Open vSwitch `opts.repeat` times, calling `each` after
/// every run, and writes `OUT/summary.json`.
pub async fn run(
    engine: &Engine,
    exp: &sts_trace::dir::Experiment,
    config: &Config,
    trace: &sts_trace::Trace,
    plan: &Plan,
    opts: &Options,
    mut each: impl FnMut(&Run),
) -> Result<Summary, RunError> {
    let dir = exp.dir.as_path();
    if crate::controller::effective_uid() != Some(0) {
        return Err(RunError::Environment(
            "a testbed needs root (veth pairs, network namespaces, Open vSwitch's daemons): run as root".into(),
        ));
    }
    let lab = trace.violation().cloned();
    let config_text = std::fs::read_to_string(exp.config())
        .map_err(|e| RunError::Environment(format!("{}: {e}", exp.config().display())))?;
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| RunError::Environment(format!("cannot create {}: {e}", opts.out.display())))?;
    let mut summary = Summary {
        experiment: dir.to_path_buf(),
        lab: lab.clone(),
        inputs: plan.inputs,
        skipped: plan.skipped.clone(),
        runs: Vec::new(),
        reproduced: 0,
        same_culprit: 0,
    };
    let lab_violation = lab.as_ref().map(crate::records::to_violation).transpose().map_err(RunError::BadInput)?;
    let lab_run = lab_trace(dir, trace);
    for n in 1..=opts.repeat {
        let run_dir = opts.out.join(n.to_string());
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| RunError::Environment(format!("cannot create {}: {e}", run_dir.display())))?;
        engine.progress(crate::Progress::Replay { run: n, of: opts.repeat });
        let mut one = OneRun::new(n, &run_dir);
        if let Err(e) = one.go(&exp.config(), config, &plan.steps, opts.install_tables).await {
            one.result.error = Some(e);
        }
        one.finish(lab_violation.as_ref()).await;
        if one.result.error.is_none() {
            match import_recording(config, &config_text, &run_dir) {
                Ok(path) => one.result.experiment = Some(path),
                Err(e) => one.result.import_error = Some(e),
            }
        }
        if !one.result.reproduced && one.result.error.is_none() {
            if let Some(lab) = &lab_run {
                one.result.differs = one.tables.as_ref().and_then(|net| (opts.table_difference)(lab, net));
                let ovs =
                    one.result.experiment.as_ref().and_then(|e| sts_trace::Trace::load(&e.join("trace.jsonl")).ok());
                if let Some(ovs) = ovs {
                    one.result.messages_differ = messages_differ(lab, &ovs, opts.describe_message);
                }
            }
        }
        if one.result.reproduced {
            summary.reproduced += 1;
        }
        if one.result.same_culprit {
            summary.same_culprit += 1;
        }
        each(&one.result);
        summary.runs.push(one.result);
        sts_trace::dir::write_json(&opts.out.join("summary.json"), &summary)
            .map_err(|e| RunError::Environment(format!("cannot write {}: {e}", opts.out.display())))?;
    }
    Ok(summary)
}

/// One run's parts while it goes: torn down when it is dropped (controllers
/// killed, proxies stopped, the testbed taken down).
struct OneRun {
    result: Run,
    found: Vec<Violation>,
    /// The network with the last dump's tables installed.
    tables: Option<Network>,
    testbed: Option<Testbed>,
    controllers: Vec<Controller>,
    proxies: Vec<(sts_proxy::standalone::Control, tokio::task::JoinHandle<()>)>,
    recorders: Vec<sts_proxy::standalone::RecorderHandle>,
}

impl OneRun {
    fn new(n: u32, dir: &Path) -> OneRun {
        OneRun {
            result: Run {
                run: n,
                dir: dir.to_path_buf(),
                violations: Vec::new(),
                reproduced: false,
                same_culprit: false,
                pings: Vec::new(),
                not_performed: Vec::new(),
                flows: BTreeMap::new(),
                recorded: 0,
                experiment: None,
                import_error: None,
                differs: None,
                messages_differ: Vec::new(),
                error: None,
            },
            found: Vec::new(),
            tables: None,
            testbed: None,
            controllers: Vec::new(),
            proxies: Vec::new(),
            recorders: Vec::new(),
        }
    }

    fn testbed(&self) -> Result<&Testbed, String> {
        self.testbed.as_ref().ok_or_else(|| "the testbed is not up".to_string())
    }

    /// Brings the testbed up, injects `steps`, checks the tables.
    async fn go(
        &mut self,
        config_path: &Path,
        config: &Config,
        steps: &[(u64, Step)],
        install: InstallTables,
    ) -> Result<(), String> {
        let clock = Clock::start();
        let started = self.bring_up(config_path, config, &clock).await?;
        let mut world = World::new(config);
        let start = clock.now();
        for (at, step) in steps {
            let due = start + at;
            let now = clock.now();
            if due > now {
                tokio::time::sleep(Duration::from_millis(due - now)).await;
            }
            self.perform_step(step, clock.now() - start, &mut world, config, &started).await?;
        }
        // Every live bridge connected again (a restarted controller, a
        // recovered switch), pings answered within their 2 s, the
        // controllers settled.
        let _ = self.handshakes(world.live_switches(), Duration::from_secs(10)).await;
        for (at, src, dst, mut child) in std::mem::take(&mut world.pings) {
            let answered =
                tokio::task::spawn_blocking(move || child.wait().is_ok_and(|s| s.success())).await.unwrap_or(false);
            self.result.pings.push(PingOutcome { at_ms: at, src, dst, answered });
        }
        self.quiet(Duration::from_millis(500), Duration::from_secs(10)).await;
        self.check(config, &world, &clock, install).await
    }

    /// Starts the controllers, their recording proxies and the testbed,
    /// waits for every handshake and runs the setup steps.
    async fn bring_up(&mut self, config_path: &Path, config: &Config, clock: &Clock) -> Result<Started, String> {
        let dir = self.result.dir.clone();
        let specs = crate::presets::specs(config, &dir).map_err(|e| format!("cannot write controller files: {e}"))?;
        let mut logs = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let log = dir.join(format!("controller-{i}-{}.log", spec.name));
            logs.push(log.clone());
            let ctl = match config.controllers[i].remote_address() {
                Some(addr) => Controller::remote(addr, &log).map_err(|e| format!("{}: {e}", log.display()))?,
                None => {
                    let spec = spec.clone();
                    tokio::task::spawn_blocking(move || Controller::start_on_free_port(&spec, &log))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| format!("controller c{i} did not start: {e}"))?
                }
            };
            self.controllers.push(ctl);
        }
        let mut listen = Vec::new();
        for (i, c) in self.controllers.iter().enumerate() {
            let path = dir.join(format!("recording-c{i}.jsonl"));
            let (recording, recorder) =
                sts_proxy::standalone::record_to(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut proxy = sts_proxy::standalone::Proxy::bind(
                "127.0.0.1:0".parse().expect("an address"),
                c.addr(),
                Some(recording),
                Vec::new(),
                1024,
                clock.now_fn(),
            )
            .await
            .map_err(|e| format!("cannot start the recording proxy for c{i}: {e}"))?;
            listen.push(proxy.local_addr());
            let control = proxy.control();
            let task = tokio::spawn(async move {
                let _ = proxy.serve().await;
            });
            self.proxies.push((control, task));
            self.recorders.push(recorder);
        }
        let testbed_dir = dir.join("ovs");
        let cfg = config_path.to_path_buf();
        let testbed = tokio::task::spawn_blocking(move || Testbed::up(&testbed_dir, &cfg, &listen))
            .await
            .map_err(|e| e.to_string())??;
        self.testbed = Some(testbed);
        self.handshakes(config.topology().switches.len(), Duration::from_secs(20)).await?;
        self.quiet(Duration::from_millis(500), Duration::from_secs(10)).await;
        for i in 0..self.controllers.len() {
            for (k, step) in config.controllers[i].setup.iter().enumerate() {
                self.perform(i, step, &dir).await.map_err(|e| format!("setup step {} of c{i}: {e}", k + 1))?;
            }
        }
        self.quiet(Duration::from_millis(500), Duration::from_secs(10)).await;
        Ok(Started { specs, logs })
    }

    /// Performs one input on the testbed (`t` ms after the first), keeping
    /// `world` in step.
    async fn perform_step(
        &mut self,
        step: &Step,
        t: u64,
        world: &mut World,
        config: &Config,
        started: &Started,
    ) -> Result<(), String> {
        let dir = self.result.dir.clone();
        match step {
            Step::Ping { src, dst } => {
                let child = self.testbed()?.ping(src, dst)?;
                world.pings.push((t, src.clone(), dst.clone(), child));
            }
            Step::Link { a, b, up, at } => {
                self.script(&["link", if *up { "up" } else { "down" }, &a.to_string(), &b.to_string()]).await?;
                world.model.set_link(*at, *up);
            }
            Step::Switch { dpid, up } => {
                self.script(&["switch", if *up { "up" } else { "down" }, &dpid.to_string()]).await?;
                world.switch(*dpid, *up);
            }
            Step::Migrate { host, to } => {
                let (from, at) = world.migrate(host, *to)?;
                let args = [from.0, from.1.into(), at.0, at.1.into()].map(|n: u64| n.to_string());
                self.script(&["migrate", host, &args[0], &args[1], &args[2], &args[3]]).await?;
            }
            Step::Netem { a, b, at, fault } => {
                let what = match fault {
                    Some(sts_mocknet::network::LinkFault::Drop) => vec!["drop".to_string()],
                    Some(sts_mocknet::network::LinkFault::Delay(ms)) => vec!["delay".to_string(), ms.to_string()],
                    None => vec!["clear".to_string()],
                };
                let mut args = vec!["netem".to_string(), a.to_string(), b.to_string()];
                args.extend(what);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                // A fault this machine's kernel cannot make (a delay without
                // sch_netem) is said, and the run goes on without it.
                match self.script(&args).await {
                    Ok(()) => world.model.set_link_fault(*at, *fault),
                    Err(e) => self.result.not_performed.push(format!("at {t} ms: {e}")),
                }
            }
            Step::Crash(i) => {
                self.controllers[*i].kill();
                world.crashed.insert(*i);
            }
            Step::Restart(i) if world.crashed.remove(i) => {
                let (spec, log, addr) =
                    (started.specs[*i].clone(), started.logs[*i].clone(), self.controllers[*i].addr());
                let ctl = tokio::task::spawn_blocking(move || Controller::start(&spec, addr, &log))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("controller c{i} did not come back: {e}"))?;
                self.controllers[*i] = ctl;
                // The bridges reconnect within their backoff (1 s), as the
                // mock network's switches do at once; the steps configure them.
                let _ = self.handshakes(world.live_switches(), Duration::from_secs(10)).await;
                self.quiet(Duration::from_millis(200), Duration::from_secs(5)).await;
                for step in &config.controllers[*i].setup {
                    self.perform(*i, step, &dir).await?;
                }
            }
            Step::Restart(_) => {}
            Step::Policy(name) => {
                let Some(policy) = world.policies.get(name).cloned() else {
                    return Err(format!("policy {name} is not in the config"));
                };
                let i = crate::session::controller_index(&policy.controller, self.controllers.len())
                    .map_err(|e| e.to_string())?;
                let after = policy.after.iter().all(|a| world.applied.contains(a));
                // As on the mock network: skipped without its prerequisite or
                // with its controller down; refused, it changes nothing.
                if after && !world.crashed.contains(&i) && self.perform(i, &policy.step(), &dir).await.is_ok() {
                    world.applied.push(name.clone());
                }
            }
            Step::Arm(rule) => self.proxies.iter().for_each(|(c, _)| c.arm_once(rule.clone())),
            Step::Delay { switch, ms } => {
                for (c, _) in &self.proxies {
                    // As the mock network's interposer does: a new delay replaces the old.
                    c.remove_fault_rules(|r| r.datapath == Some(*switch) && matches!(r.action, Action::Delay(_)));
                    if let Some(ms) = ms {
                        c.add_fault_rule(Rule {
                            dir: Some(Direction::ControllerToSwitch),
                            datapath: Some(*switch),
                            action: Action::Delay(*ms),
                            ..Rule::default()
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Dumps the bridges' tables twice, `persist_ms` apart, and keeps the
    /// violations both show (and any storm measured between them).
    async fn check(
        &mut self,
        config: &Config,
        world: &World,
        clock: &Clock,
        install: InstallTables,
    ) -> Result<(), String> {
        let dir = self.result.dir.clone();
        let isolation = crate::policy::isolation(
            &config.invariants.isolation,
            world.applied.iter().filter_map(|n| world.policies.get(n)),
        );
        let checker = crate::monitor::checker_isolating(config, isolation);
        let mut log_lines = Vec::new();
        let mut checks = Vec::new();
        let mut traffic = Vec::new();
        for round in 0..2 {
            if round == 1 {
                tokio::time::sleep(Duration::from_millis(config.invariants.persist_ms.max(200))).await;
            }
            let tables = dir.join(format!("tables-{}", round + 1));
            let messages: u64 = self.proxies.iter().map(|(c, _)| c.stats().messages).sum();
            let at = clock.now();
            self.script(&["dump", &tables.display().to_string()]).await?;
            let mut net = world.model.clone();
            let read = install(&tables, &mut net, config.network.openflow.wire())
                .map_err(|e| format!("reading the tables back: {e}"))?;
            self.result.flows = read.iter().map(|(d, t)| (format!("s{d}"), t.flows)).collect();
            traffic.push(Traffic { at, messages, frames: read.iter().map(|(d, t)| (*d, t.packets)).collect() });
            for (i, c) in self.controllers.iter().enumerate() {
                log_lines.extend(c.take_log_lines().into_iter().map(|l| (crate::monitor::controller_name(i), l.line)));
            }
            let facts = Facts {
                controllers: crate::monitor::controller_states(&mut self.controllers, &world.crashed),
                disconnected: world.down.keys().copied().collect(),
                dataplane: Vec::new(),
                log_lines: log_lines.clone(),
            };
            checks.push(checker.check(&net, &facts).violations);
            self.tables = Some(net);
        }
        let [first, second] = <[Vec<Violation>; 2]>::try_from(checks).expect("two checks");
        self.found = second.into_iter().filter(|v| first.iter().any(|f| f.same_bug(v, Same::Victim))).collect();
        // A storm is measured across the two dumps: persistent by its own measure.
        if checker.enabled.contains(&sts_invariants::Invariant::Loop) {
            self.found.extend(storm(&traffic[0], &traffic[1]));
        }
        Ok(())
    }

    /// Runs a testbed script command off the runtime's threads.
    async fn script(&self, args: &[&str]) -> Result<(), String> {
        let command = self.testbed()?.command(args);
        tokio::task::spawn_blocking(move || command.run()).await.map_err(|e| e.to_string())?
    }

    /// Performs a setup step or a policy's step against controller `i`.
    async fn perform(&self, i: usize, step: &crate::config::StepConfig, dir: &Path) -> Result<(), String> {
        let c = &self.controllers[i];
        let target =
            Target { port: c.addr().port(), aux_port: c.aux_port(), pid: c.pid(), dir: dir.display().to_string() };
        let (step, timeout) = (step.clone(), step.timeout());
        let what = step.describe();
        tokio::task::spawn_blocking(move || crate::policy::perform(&step, &target, timeout))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("`{what}`: {e}"))
    }

    /// Waits until every proxy relays `switches` bridges whose handshakes
    /// are done (connected now, each connection's FEATURES_REPLY seen).
    async fn handshakes(&self, switches: usize, limit: Duration) -> Result<(), String> {
        let clock = Clock::start();
        loop {
            let done = self.proxies.iter().map(|(c, _)| c.connected_datapaths()).min().unwrap_or(0);
            if done >= switches {
                return Ok(());
            }
            if clock.now() > limit.as_millis() as u64 {
                return Err(format!(
                    "only {done} of {switches} bridges connected to every controller within {} s (OVS log: {})",
                    limit.as_secs(),
                    self.testbed()
                        .map_or_else(|_| String::new(), |t| t.dir().join("log/ovs-vswitchd.log").display().to_string())
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until no OpenFlow message passed for `spell` (at most `limit`).
    async fn quiet(&self, spell: Duration, limit: Duration) {
        let clock = Clock::start();
        let seen = || self.proxies.iter().map(|(c, _)| c.stats().messages).sum::<u64>();
        let (mut last, mut since) = (seen(), 0);
        while clock.now() < limit.as_millis() as u64 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = seen();
            if now != last {
                (last, since) = (now, clock.now());
            } else if clock.now() - since >= spell.as_millis() as u64 {
                return;
            }
        }
    }

    /// Tears the run down (its recordings written out) and judges it
    /// against the lab's violation.
    async fn finish(&mut self, lab: Option<&Violation>) {
        for c in &mut self.controllers {
            c.kill();
        }
        for (control, task) in self.proxies.drain(..) {
            task.abort();
            let _ = task.await;
            drop(control);
        }
        for recorder in self.recorders.drain(..) {
            // Its connections' tasks go as the runtime drops them: wait off it.
            if let Ok(Ok(n)) = tokio::task::spawn_blocking(move || recorder.finish()).await {
                self.result.recorded += n;
            }
        }
        if let Some(t) = self.testbed.take() {
            let _ = tokio::task::spawn_blocking(move || t.down()).await;
        }
        self.result.violations = self.found.iter().map(crate::records::to_record).collect();
        if self.result.error.is_none() {
            let found_if = |level: Same| lab.is_some_and(|lab| self.found.iter().any(|v| v.same_bug(lab, level)));
            self.result.reproduced = if lab.is_some() { found_if(Same::Victim) } else { !self.found.is_empty() };
            self.result.same_culprit = lab.is_some_and(|l| l.culprit.is_some()) && found_if(Same::Switch);
        }
    }
}

/// What [`OneRun::bring_up`] started that a restart needs again.
struct Started {
    specs: Vec<crate::controller::ControllerSpec>,
    logs: Vec<PathBuf>,
}

/// A switch's port: (datapath id, port number).
type SwitchPort = (u64, u32);

/// The network as the inputs leave it, beside the testbed: the model the
/// bridges' tables are judged on, and what the run did to it.
struct World {
    model: Network,
    /// Failed switches, with the links their failure took down.
    down: BTreeMap<u64, Vec<Endpoint>>,
    crashed: BTreeSet<usize>,
    policies: BTreeMap<String, crate::config::PolicyConfig>,
    applied: Vec<String>,
    /// Pings sent: when, from, to, the running `ping`.
    pings: Vec<(u64, String, String, std::process::Child)>,
}

impl World {
    fn new(config: &Config) -> World {
        World {
            model: Network::new(&config.topology(), sts_proxy::wire::OFP13),
            down: BTreeMap::new(),
            crashed: BTreeSet::new(),
            policies: config.policies.iter().map(|p| (p.name.clone(), p.clone())).collect(),
            applied: Vec::new(),
            pings: Vec::new(),
        }
    }

    /// Switches not failed by an input.
    fn live_switches(&self) -> usize {
        self.model.switches.len() - self.down.len()
    }

    /// Switch `dpid` fails (its live links go down with it) or recovers
    /// (those links come back), as on the mock network.
    fn switch(&mut self, dpid: u64, up: bool) {
        if up {
            for e in self.down.remove(&dpid).unwrap_or_default() {
                self.model.set_link(e, true);
            }
            return;
        }
        if self.down.contains_key(&dpid) {
            return;
        }
        let model = &self.model;
        let taken: Vec<Endpoint> = model.switches.get(&dpid).map_or_else(Vec::new, |s| {
            s.ports
                .iter()
                .filter(|(_, p)| p.link_up)
                .map(|(&port, _)| Endpoint::Switch { dpid, port })
                .filter(|e| model.live_peer(*e).is_some())
                .collect()
        });
        for e in &taken {
            self.model.set_link(*e, false);
        }
        self.down.insert(dpid, taken);
    }

    /// Moves `host` to switch `to` on the model: where it was and where it
    /// is now (switch, port), the port numbered as the mock network does.
    fn migrate(&mut self, host: &str, to: u64) -> Result<(SwitchPort, SwitchPort), String> {
        let Some(i) = self.model.hosts.iter().position(|h| h.name == host) else {
            return Err(format!("no host {host} in the config's network"));
        };
        let Some(Endpoint::Switch { dpid, port }) = self.model.live_peer(Endpoint::Host(i)) else {
            return Err(format!("host {host} is not plugged into a switch"));
        };
        self.model.migrate_host(i, to);
        let Some(Endpoint::Switch { dpid: now, port: at }) = self.model.live_peer(Endpoint::Host(i)) else {
            return Err(format!("host {host} could not move to s{to}"));
        };
        Ok(((dpid, port), (now, at)))
    }
}

/// What crossed the testbed up to a dump: frames counted by each bridge's
/// entries, OpenFlow messages through the proxies, and when (run ms).
struct Traffic {
    at: u64,
    messages: u64,
    frames: BTreeMap<u64, u64>,
}

/// A storm between two dumps with no input running: frames still crossing a
/// bridge's entries by the thousand per second, or messages between the
/// bridges and the controllers. It is the loop the mock network's dataplane
/// sees as a frame over its hop limit (which no flow table shows when it
/// runs through a controller's floods).
fn storm(before: &Traffic, now: &Traffic) -> Option<Violation> {
    let secs = now.at.saturating_sub(before.at).max(1) as f64 / 1000.0;
    let violation = |elements: Vec<String>, summary: String| Violation {
        invariant: sts_invariants::Invariant::Loop,
        elements,
        summary,
        witness: None,
        culprit: None,
    };
    let fastest = now
        .frames
        .iter()
        .map(|(d, n)| (n.saturating_sub(before.frames.get(d).copied().unwrap_or(0)), *d))
        .max()
        .filter(|(grew, _)| *grew as f64 / secs > STORM_PER_S);
    if let Some((grew, dpid)) = fastest {
        return Some(violation(
            vec![format!("s{dpid}")],
            format!(
                "a storm on Open vSwitch: {grew} frames crossed s{dpid}'s entries in {secs:.1} s with no input running"
            ),
        ));
    }
    let sent = now.messages.saturating_sub(before.messages);
    (sent as f64 / secs > STORM_PER_S).then(|| {
        violation(
            Vec::new(),
            format!("a storm through the controllers: {sent} OpenFlow messages in {secs:.1} s with no input running"),
        )
    })
}

/// The lab's run with its OpenFlow messages, up to its violation: the
/// experiment's own trace, or, when it records inputs only (a minimal causal
/// sequence, a hand-written trace), the first of its replays (`final/N`,
/// `replays/N`) that recorded messages up to a violation.
pub fn lab_trace(dir: &Path, trace: &sts_trace::Trace) -> Option<sts_trace::Trace> {
    let until_violation = |t: &sts_trace::Trace| -> Option<sts_trace::Trace> {
        let end = t.records.iter().position(|r| r.violation().is_some())?;
        let has_messages =
            t.records[..end].iter().any(|r| matches!(r.internal(), Some(sts_trace::Internal::Openflow { .. })));
        has_messages.then(|| sts_trace::Trace { header: t.header.clone(), records: t.records[..=end].to_vec() })
    };
    if let Some(found) = until_violation(trace) {
        return Some(found);
    }
    let mut runs: Vec<PathBuf> = ["final", "replays"]
        .iter()
        .filter_map(|kind| std::fs::read_dir(dir.join(kind)).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path().join("trace.jsonl")))
        .collect();
    runs.sort();
    runs.iter().filter_map(|p| sts_trace::Trace::load(p).ok()).find_map(|t| until_violation(&t))
}

/// The controller-to-switch messages whose count differs between the lab's
/// run and the testbed's, per switch and fingerprint, each in `describe`'s
/// words where it has some (else its fingerprint), at most three and how
/// many more.
fn messages_differ(lab: &sts_trace::Trace, ovs: &sts_trace::Trace, describe: DescribeMessage) -> Vec<String> {
    type Tally = BTreeMap<(u64, String), (usize, Option<bytes::Bytes>)>;
    let tally = |t: &sts_trace::Trace| {
        let mut out = Tally::new();
        for r in &t.records {
            if let Some(sts_trace::Internal::Openflow {
                dpid, dir: sts_trace::Direction::ToSwitch, msg, fp, raw, ..
            }) = r.internal()
            {
                if !matches!(msg.as_str(), "echo_request" | "echo_reply") {
                    let e = out.entry((*dpid, fp.0.clone())).or_insert((0, raw.clone()));
                    e.0 += 1;
                }
            }
        }
        out
    };
    let (a, b) = (tally(lab), tally(ovs));
    let mut out = Vec::new();
    for key in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
        let (n, m) = (a.get(key).map_or(0, |e| e.0), b.get(key).map_or(0, |e| e.0));
        if n != m {
            let raw = a.get(key).or_else(|| b.get(key)).and_then(|e| e.1.as_ref());
            let words = raw.and_then(describe).unwrap_or_else(|| sts_trace::bounded_message(key.1.clone(), 200));
            out.push(format!("s{}: {n} in the lab, {m} on Open vSwitch: {words}", key.0));
        }
    }
    if out.len() > 3 {
        let more = out.len() - 3;
        out.truncate(3);
        out.push(format!("... and {more} more"));
    }
    out
}

/// Makes a run's recording (the first controller's) an experiment directory
/// in `RUN/experiment`, as `sts import` does.
fn import_recording(config: &Config, config_text: &str, run_dir: &Path) -> Result<PathBuf, String> {
    let out = run_dir.join("experiment");
    let exp = crate::fuzz::create_experiment(config, config_text, &out).map_err(|e| e.to_string())?;
    crate::import::import(&run_dir.join("recording-c0.jsonl"), config, &exp.trace()).map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_trace::{MsgType, Port};

    fn traffic(at: u64, messages: u64, frames: &[(u64, u64)]) -> Traffic {
        Traffic { at, messages, frames: frames.iter().copied().collect() }
    }

    #[test]
    fn frames_crossing_a_bridge_by_the_thousand_a_second_are_a_storm_on_it() {
        let before = traffic(1000, 50, &[(1, 10), (2, 100)]);
        let v = storm(&before, &traffic(2200, 60, &[(1, 12), (2, 6100)])).expect("a storm");
        assert_eq!((v.invariant, v.elements.clone()), (sts_invariants::Invariant::Loop, vec!["s2".to_string()]));
        assert!(v.summary.contains("6000 frames crossed s2's entries in 1.2 s"), "{}", v.summary);
        // A settled network's trickle is none.
        assert!(storm(&before, &traffic(2200, 60, &[(1, 30), (2, 900)])).is_none());
        // Nor is a bridge whose counters went back (its tables cleared).
        assert!(storm(&before, &traffic(2200, 60, &[(1, 0), (2, 0)])).is_none());
    }

    #[test]
    fn messages_to_the_controllers_by_the_thousand_a_second_are_a_storm_through_them() {
        let v = storm(&traffic(0, 100, &[]), &traffic(1000, 5100, &[])).expect("a storm");
        assert!(v.elements.is_empty());
        assert!(v.summary.contains("5000 OpenFlow messages in 1.0 s"), "{}", v.summary);
    }

    #[test]
    fn inputs_a_testbed_cannot_perform_are_listed_with_their_place_and_why() {
        let config = Config::from_toml(
            "[network]\ntopology = \"linear\"\nsize = 3\n[[controllers]]\nkind = \"os-ken\"\napps = [\"x\"]\n",
            Path::new("config.toml"),
        )
        .unwrap();
        let port = |switch, port| Port { switch, port };
        let inputs = [
            External::Ping { src: "h1".into(), dst: "h3".into() },
            External::ControlHold { switch: Some(1), msg_type: MsgType::from_name("flow_mod").unwrap() },
            External::LinkDown { a: port(1, 2), b: port(2, 2) },
            External::LinkDown { a: port(1, 3), b: port(3, 3) },
            External::Partition { relay: "r".into() },
            External::ControlDrop { switch: 2, msg_type: MsgType::from_name("flow_mod").unwrap() },
        ];
        let timed: Vec<(u64, &External)> = inputs.iter().enumerate().map(|(i, e)| (1000 + 100 * i as u64, e)).collect();
        let (steps, skipped) = plan_inputs(&config, &timed);
        assert_eq!(skipped.iter().map(|s| s.index).collect::<Vec<_>>(), [1, 3, 4]);
        assert!(skipped[0].why.contains("holding"), "{}", skipped[0].why);
        assert!(skipped[1].why.contains("no such link"), "{}", skipped[1].why);
        // The others keep their spacing from the first input.
        assert_eq!(steps.iter().map(|(t, _)| *t).collect::<Vec<_>>(), [0, 200, 500]);
        assert!(matches!(&steps[2].1, Step::Arm(r) if r.datapath == Some(2) && r.action == Action::Drop));
    }
}
