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
use sts_invariants::check::{ControllerState, Facts, IsolationRule};
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
/// OpenFlow version, returning the flows installed per switch; the error
/// names the file and line.
pub type InstallTables = fn(&Path, &mut Network, u8) -> Result<BTreeMap<u64, usize>, String>;

/// Frames (or OpenFlow messages) per second that make a quiet network's
/// traffic a storm: far above what a settled network of hosts that stopped
/// pinging carries, far below what a loop on a software switch produces.
const STORM_PER_S: f64 = 1000.0;

/// Where a testbed's tables (the network they were installed on) first
/// differ from the lab's at its violation (the experiment directory and its
/// trace), in words; `None` when they do not (or the lab has no tables to
/// compare).
pub type TableDifference = fn(&Path, &sts_trace::Trace, &Network) -> Option<String>;

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
    /// Whether the lab's violation names a culprit.
    pub lab_culprit: bool,
    /// Whether the trace records a violation the verdict was compared with.
    pub compared: bool,
    pub pings: Vec<PingOutcome>,
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
    Netem {
        a: u64,
        b: u64,
        what: Vec<String>,
    },
    Crash(usize),
    Restart(usize),
    Policy(String),
    /// A one-shot rule armed on every proxy.
    Arm(Rule),
    /// A standing rule added to every proxy.
    AddRule(Rule),
    /// The standing delay rules of a switch taken out.
    EndDelay(u64),
}

/// The testbed's steps for the trace's inputs, and the inputs it cannot do.
fn plan(config: &Config, inputs: &[(u64, &External)]) -> (Vec<(u64, Step)>, Vec<Skipped>) {
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
            External::DataplaneDrop { a, b } => {
                Ok(Step::Netem { a: a.switch, b: b.switch, what: vec!["drop".into()] })
            }
            External::DataplaneDelay { a, b, ms } => {
                Ok(Step::Netem { a: a.switch, b: b.switch, what: vec!["delay".into(), ms.to_string()] })
            }
            External::DataplaneDropEnd { a, b } | External::DataplaneDelayEnd { a, b } => {
                Ok(Step::Netem { a: a.switch, b: b.switch, what: vec!["clear".into()] })
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
            External::ControlDelay { switch, ms } => Ok(Step::AddRule(Rule {
                dir: Some(Direction::ControllerToSwitch),
                datapath: Some(*switch),
                action: Action::Delay(*ms),
                ..Rule::default()
            })),
            External::ControlDelayEnd { switch } => Ok(Step::EndDelay(*switch)),
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

/// Replays the experiment in `dir` on Open vSwitch `opts.repeat` times,
/// calling `each` after every run, and writes `OUT/summary.json`.
pub async fn run(engine: &Engine, dir: &Path, opts: &Options, mut each: impl FnMut(&Run)) -> Result<Summary, RunError> {
    let (exp, config, trace) = crate::replay::load(dir, None)?;
    let inputs = trace.externals();
    let (steps, skipped) = plan(&config, &inputs);
    let lab = trace.violation().cloned();
    let config_text = std::fs::read_to_string(exp.config())
        .map_err(|e| RunError::Environment(format!("{}: {e}", exp.config().display())))?;
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| RunError::Environment(format!("cannot create {}: {e}", opts.out.display())))?;
    let mut summary = Summary {
        experiment: dir.to_path_buf(),
        lab: lab.clone(),
        inputs: inputs.len(),
        skipped,
        runs: Vec::new(),
        reproduced: 0,
        same_culprit: 0,
    };
    let lab_violation = lab.as_ref().map(crate::records::to_violation).transpose().map_err(RunError::BadInput)?;
    for n in 1..=opts.repeat {
        let run_dir = opts.out.join(n.to_string());
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| RunError::Environment(format!("cannot create {}: {e}", run_dir.display())))?;
        engine.progress(crate::Progress::Replay { run: n, of: opts.repeat });
        let mut one = OneRun::new(n, &run_dir);
        if let Err(e) = one.go(&exp.config(), &config, &steps, opts.install_tables).await {
            one.result.error = Some(e);
        }
        one.finish(lab_violation.as_ref()).await;
        if one.result.error.is_none() {
            match import_recording(&config, &config_text, &run_dir) {
                Ok(path) => one.result.experiment = Some(path),
                Err(e) => one.result.import_error = Some(e),
            }
        }
        if !one.result.reproduced && one.result.error.is_none() {
            one.result.differs = one.tables.as_ref().and_then(|net| (opts.table_difference)(dir, &trace, net));
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
                compared: false,
                lab_culprit: false,
                pings: Vec::new(),
                flows: BTreeMap::new(),
                recorded: 0,
                experiment: None,
                import_error: None,
                differs: None,
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
        let dir = self.result.dir.clone();
        let clock = Clock::start();
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
        let (cfg, addrs) = (config_path.to_path_buf(), listen.clone());
        let testbed = tokio::task::spawn_blocking(move || Testbed::up(&testbed_dir, &cfg, &addrs))
            .await
            .map_err(|e| e.to_string())??;
        self.testbed = Some(testbed);
        let switches = config.topology().switches.len();
        self.handshakes(switches, Duration::from_secs(20)).await?;
        self.quiet(Duration::from_millis(500), Duration::from_secs(10)).await;
        let policies: BTreeMap<String, crate::config::PolicyConfig> =
            config.policies.iter().map(|p| (p.name.clone(), p.clone())).collect();
        let mut applied: Vec<String> = Vec::new();
        for i in 0..self.controllers.len() {
            for (k, step) in config.controllers[i].setup.iter().enumerate() {
                self.perform(i, step, &dir).await.map_err(|e| format!("setup step {} of c{i}: {e}", k + 1))?;
            }
        }
        self.quiet(Duration::from_millis(500), Duration::from_secs(10)).await;

        // The model: the config's network as the inputs leave it, for the
        // tables read back at the end.
        let mut model = Network::new(&config.topology(), sts_proxy::wire::OFP13);
        let mut down: BTreeMap<u64, Vec<Endpoint>> = BTreeMap::new();
        let mut crashed = BTreeSet::new();
        let mut pings = Vec::new();
        let start = clock.now();
        for (at, step) in steps {
            let due = start + at;
            let now = clock.now();
            if due > now {
                tokio::time::sleep(Duration::from_millis(due - now)).await;
            }
            let t = clock.now() - start;
            match step {
                Step::Ping { src, dst } => {
                    let child = self.testbed()?.ping(src, dst)?;
                    pings.push((t, src.clone(), dst.clone(), child));
                }
                Step::Link { a, b, up, at } => {
                    self.script(&["link", if *up { "up" } else { "down" }, &a.to_string(), &b.to_string()]).await?;
                    model.set_link(*at, *up);
                }
                Step::Switch { dpid, up } => {
                    self.script(&["switch", if *up { "up" } else { "down" }, &dpid.to_string()]).await?;
                    if *up {
                        for e in down.remove(dpid).unwrap_or_default() {
                            model.set_link(e, true);
                        }
                    } else if !down.contains_key(dpid) {
                        let taken: Vec<Endpoint> = model.switches.get(dpid).map_or_else(Vec::new, |s| {
                            s.ports
                                .iter()
                                .filter(|(_, p)| p.link_up)
                                .map(|(&port, _)| Endpoint::Switch { dpid: *dpid, port })
                                .filter(|e| model.live_peer(*e).is_some())
                                .collect()
                        });
                        for e in &taken {
                            model.set_link(*e, false);
                        }
                        down.insert(*dpid, taken);
                    }
                }
                Step::Migrate { host, to } => {
                    let Some(i) = model.hosts.iter().position(|h| &h.name == host) else {
                        return Err(format!("no host {host} in the config's network"));
                    };
                    let from = match model.live_peer(Endpoint::Host(i)) {
                        Some(Endpoint::Switch { dpid, port }) => (dpid, port),
                        _ => return Err(format!("host {host} is not plugged into a switch")),
                    };
                    model.migrate_host(i, *to);
                    let Some(Endpoint::Switch { dpid, port }) = model.live_peer(Endpoint::Host(i)) else {
                        return Err(format!("host {host} could not move to s{to}"));
                    };
                    let args = [from.0, from.1 as u64, dpid, port as u64].map(|n| n.to_string());
                    self.script(&["migrate", host, &args[0], &args[1], &args[2], &args[3]]).await?;
                }
                Step::Netem { a, b, what } => {
                    let mut args = vec!["netem".to_string(), a.to_string(), b.to_string()];
                    args.extend(what.iter().cloned());
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    self.script(&args).await?;
                }
                Step::Crash(i) => {
                    self.controllers[*i].kill();
                    crashed.insert(*i);
                }
                Step::Restart(i) => {
                    if crashed.remove(i) {
                        let (spec, log, addr) = (specs[*i].clone(), logs[*i].clone(), self.controllers[*i].addr());
                        let ctl = tokio::task::spawn_blocking(move || Controller::start(&spec, addr, &log))
                            .await
                            .map_err(|e| e.to_string())?
                            .map_err(|e| format!("controller c{i} did not come back: {e}"))?;
                        self.controllers[*i] = ctl;
                        // The bridges reconnect within their backoff (1 s), as
                        // the mock network's switches do at once; the steps
                        // configure them.
                        let _ = self.handshakes(switches - down.len(), Duration::from_secs(10)).await;
                        self.quiet(Duration::from_millis(200), Duration::from_secs(5)).await;
                        for step in &config.controllers[*i].setup {
                            self.perform(*i, step, &dir).await?;
                        }
                    }
                }
                Step::Policy(name) => {
                    let Some(policy) = policies.get(name) else {
                        return Err(format!("policy {name} is not in the config"));
                    };
                    let i = crate::session::controller_index(&policy.controller, self.controllers.len())
                        .map_err(|e| e.to_string())?;
                    let after = policy.after.iter().all(|a| applied.contains(a));
                    // As on the mock network: skipped without its prerequisite
                    // or with its controller down; refused, it changes nothing.
                    if after && !crashed.contains(&i) && self.perform(i, &policy.step(), &dir).await.is_ok() {
                        applied.push(name.clone());
                    }
                }
                Step::Arm(rule) => self.proxies.iter().for_each(|(c, _)| c.arm_once(rule.clone())),
                Step::AddRule(rule) => self.proxies.iter().for_each(|(c, _)| c.add_fault_rule(rule.clone())),
                Step::EndDelay(switch) => self.proxies.iter().for_each(|(c, _)| {
                    c.remove_fault_rules(|r| r.datapath == Some(*switch) && matches!(r.action, Action::Delay(_)))
                }),
            }
        }
        // Every live bridge connected again (a restarted controller, a
        // recovered switch), pings answered within their 2 s, the
        // controllers settled.
        let _ = self.handshakes(switches - down.len(), Duration::from_secs(10)).await;
        for (at, src, dst, mut child) in pings {
            let answered =
                tokio::task::spawn_blocking(move || child.wait().is_ok_and(|s| s.success())).await.unwrap_or(false);
            self.result.pings.push(PingOutcome { at_ms: at, src, dst, answered });
        }
        self.quiet(Duration::from_millis(500), Duration::from_secs(10)).await;

        let isolation: Vec<IsolationRule> =
            crate::policy::isolation(&config.invariants.isolation, applied.iter().filter_map(|n| policies.get(n)))
                .into_iter()
                .map(|(from, to)| IsolationRule { from, to })
                .collect();
        let checker = sts_invariants::Checker { isolation, ..config.checker() };
        let disconnected: Vec<u64> = down.keys().copied().collect();
        let mut log_lines = Vec::new();
        let mut checks = Vec::new();
        // Between the two dumps no input runs and every ping has ended: frames
        // still crossing a bridge by the thousand per second, or messages
        // between the bridges and the controllers, are a storm: the loop the
        // mock network's dataplane sees as a frame over its hop limit (which
        // no flow table shows when it runs through a controller's floods).
        let (mut counted, mut messages, mut dumped_at) = (BTreeMap::new(), 0, 0);
        for round in 0..2 {
            if round == 1 {
                tokio::time::sleep(Duration::from_millis(config.invariants.persist_ms.max(200))).await;
            }
            let tables = dir.join(format!("tables-{}", round + 1));
            let now_messages: u64 = self.proxies.iter().map(|(c, _)| c.stats().messages).sum();
            let now = clock.now();
            self.script(&["dump", &tables.display().to_string()]).await?;
            let now_counted = crate::ovs::frames_counted(&tables);
            let mut storms = Vec::new();
            if round == 1 && checker.enabled.contains(&sts_invariants::Invariant::Loop) {
                let secs = (now - dumped_at).max(1) as f64 / 1000.0;
                let fastest = now_counted
                    .iter()
                    .map(|(d, n)| (n.saturating_sub(counted.get(d).copied().unwrap_or(0)), *d))
                    .max()
                    .filter(|(grew, _)| *grew as f64 / secs > STORM_PER_S);
                let sent = now_messages - messages;
                let storm = |elements: Vec<String>, summary: String| Violation {
                    invariant: sts_invariants::Invariant::Loop,
                    elements,
                    summary,
                    witness: None,
                    culprit: None,
                };
                if let Some((grew, dpid)) = fastest {
                    storms.push(storm(
                        vec![format!("s{dpid}")],
                        format!("a storm on Open vSwitch: {grew} frames crossed s{dpid}'s entries in {secs:.1} s with no input running"),
                    ));
                } else if sent as f64 / secs > STORM_PER_S {
                    storms.push(storm(
                        Vec::new(),
                        format!("a storm through the controllers: {sent} OpenFlow messages in {secs:.1} s with no input running"),
                    ));
                }
            }
            (counted, messages, dumped_at) = (now_counted, now_messages, now);
            let mut net = model.clone();
            let flows = install(&tables, &mut net, config.network.openflow.wire())
                .map_err(|e| format!("reading the tables back: {e}"))?;
            self.result.flows = flows.into_iter().map(|(d, n)| (format!("s{d}"), n)).collect();
            for (i, c) in self.controllers.iter().enumerate() {
                log_lines.extend(c.take_log_lines().into_iter().map(|l| (crate::monitor::controller_name(i), l.line)));
            }
            let facts = Facts {
                controllers: self
                    .controllers
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| !crashed.contains(i))
                    .map(|(i, c)| ControllerState { name: crate::monitor::controller_name(i), alive: c.is_alive() })
                    .collect(),
                disconnected: disconnected.clone(),
                dataplane: Vec::new(),
                log_lines: log_lines.clone(),
            };
            let mut violations = checker.check(&net, &facts).violations;
            violations.extend(storms);
            checks.push(violations);
            self.tables = Some(net);
        }
        let [first, second] = <[Vec<Violation>; 2]>::try_from(checks).expect("two checks");
        // Present in both dumps; a storm is measured across the two, so it
        // is persistent by its own measure.
        let storm = |v: &Violation| v.invariant == sts_invariants::Invariant::Loop && v.witness.is_none();
        self.found = second
            .into_iter()
            .filter(|v| storm(v) || first.iter().any(|f| f.same_bug(v, Same::Victim)))
            .collect::<Vec<_>>();
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
        self.result.compared = lab.is_some();
        self.result.lab_culprit = lab.is_some_and(|l| l.culprit.is_some());
        if self.result.error.is_none() {
            let found_if = |level: Same| lab.is_some_and(|lab| self.found.iter().any(|v| v.same_bug(lab, level)));
            self.result.reproduced = if lab.is_some() { found_if(Same::Victim) } else { !self.found.is_empty() };
            self.result.same_culprit = self.result.lab_culprit && found_if(Same::Switch);
        }
    }
}

/// Makes a run's recording (the first controller's) an experiment directory
/// in `RUN/experiment`, as `sts import` does.
fn import_recording(config: &Config, config_text: &str, run_dir: &Path) -> Result<PathBuf, String> {
    let out = run_dir.join("experiment");
    let exp = crate::fuzz::create_experiment(config, config_text, &out).map_err(|e| e.to_string())?;
    crate::import::import(&run_dir.join("recording-c0.jsonl"), config, &exp.trace()).map_err(|e| e.to_string())?;
    Ok(out)
}
