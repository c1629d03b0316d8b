//! `sts replay`: run a recorded trace's external events again, against fresh
//! controllers and a fresh network, and see whether its violation comes back.
//!
//! As the research did it (the STS paper): each external event is injected at the
//! recorded spacing from the previous one, but not before the internal events
//! that preceded it in the original run (its happens-before predecessors,
//! matched by fingerprint) have been seen again, and not later than the
//! expected time plus epsilon if some never come. Internal events that are new
//! pass through. Keepalives are never waited on (they are not recorded).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use sts_invariants::{Same, Violation};
use sts_mocknet::Network;

use sts_trace::dir::{self as experiment, Experiment};
use sts_trace::{self as trace, External, Header, Trace};

use crate::config::Config;
use crate::inputs;
use crate::monitor::Monitor;
use crate::session::{self, RunError, Session};
use crate::{Engine, NoticeKind, Progress};

/// How long replay waits in one slice while watching for expected events
/// (and, when something may pause it, between looks at the pause).
const SLICE_MS: u64 = 10;

/// How long, in real time, a step keeps its input's place
/// ([`Replayer::keep_place`]) before it lets what it held go: a safety net
/// for a controller that would wait on a held message and never let
/// virtual time move on.
const PLACE_KEPT_AT_MOST: Duration = Duration::from_secs(1);

/// Where a replay first differed from the original, and by how much.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Divergence {
    /// The first original internal event (trace seq and key) not seen again.
    pub first_missing: Option<(u64, String)>,
    /// The first replayed internal event the original did not have.
    pub first_unexpected: Option<String>,
    /// Original internal events (before its violation) not seen again.
    pub missing: usize,
    /// Replayed internal events the original did not have.
    pub unexpected: usize,
}

/// The outcome of one replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayResult {
    pub run: u32,
    pub reproduced: bool,
    /// The persistent violation this replay found, if any.
    pub violation: Option<Violation>,
    /// External events injected.
    pub injected: usize,
    /// External events injected after waiting the full epsilon for
    /// predecessors that never came.
    pub timeouts: usize,
    pub divergence: Divergence,
    pub trace: PathBuf,
    /// On virtual time: how much of it ran in how much real time.
    pub clock: Option<String>,
}

/// Expected-minus-observed counts of internal events by key.
#[derive(Default, Clone)]
struct Balance {
    counts: HashMap<String, i64>,
    /// Keys with a positive count (expected and not yet seen).
    missing: usize,
    /// OpenFlow messages expected and not yet seen, by kind
    /// ([`message_kind`]).
    missing_by_kind: HashMap<String, u32>,
}

impl Balance {
    fn expect(&mut self, key: &str) {
        let c = self.counts.entry(key.to_string()).or_default();
        *c += 1;
        if *c == 1 {
            self.missing += 1;
        }
        if *c > 0 {
            if let Some(kind) = message_kind(key) {
                *self.missing_by_kind.entry(kind).or_default() += 1;
            }
        }
    }

    fn see(&mut self, key: &str) {
        let c = self.counts.entry(key.to_string()).or_default();
        if *c == 1 {
            self.missing -= 1;
        }
        if *c > 0 {
            if let Some(n) = message_kind(key).and_then(|kind| self.missing_by_kind.get_mut(&kind)) {
                *n = n.saturating_sub(1);
            }
        }
        *c -= 1;
    }
}

/// The kind of an OpenFlow message's key (`of 1 0 to_switch of4/flow_mod
/// {...}`): `of 1 0 to_switch flow_mod`, its channel, direction and type.
fn message_kind(key: &str) -> Option<String> {
    let mut words = key.splitn(6, ' ');
    let (of, dpid, controller, dir, fp) = (words.next()?, words.next()?, words.next()?, words.next()?, words.next()?);
    (of == "of").then(|| format!("of {dpid} {controller} {dir} {}", fp.split_once('/').map_or(fp, |(_, t)| t)))
}

/// Checks a trace against a config before anything is started: every
/// external event must fit the network. Errors name the trace line.
pub fn validate(config: &Config, trace: &Trace, path: &Path) -> Result<(), RunError> {
    let net = Network::new(&config.topology(), config.network.openflow.wire());
    for r in &trace.records {
        if let Some(e) = r.external() {
            inputs::validate(
                &net,
                config.controllers.len(),
                &config.relays.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
                &config.policies.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
                e,
            )
            .map_err(|m| RunError::BadInput(format!("{}:{}: external: {m}", path.display(), r.line)))?;
        }
    }
    crate::records::first_violation(trace).map_err(|e| RunError::BadInput(format!("{}: {e}", path.display())))?;
    Ok(())
}

/// What one [`Replayer::step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Injected the external event at this index of the trace's external
    /// events (its record's `seq` in the original trace given too).
    Injected { index: usize, seq: u64 },
    /// The wanted violation showed up while waiting: nothing more is
    /// injected.
    Reproduced,
    /// Every external event has been injected.
    End,
    /// The pause test ([`Replayer::set_pause`]) held while waiting: the next
    /// input is not injected yet (stepping again goes on waiting for it).
    Paused,
}

/// Where a replay stands, beyond its running system: what a rewind puts back.
#[derive(Clone)]
struct Place {
    monitor: Monitor,
    balance: Balance,
    /// The internal events seen so far, by key.
    observed: Vec<String>,
    found: Option<Violation>,
    injected: usize,
    timeouts: usize,
    last_orig: Option<u64>,
    last_injected: u64,
    /// Records of the original consumed into `balance` so far.
    pending: usize,
    /// The index of the next external event to inject.
    next: usize,
    stopped: bool,
    /// Inputs go in without waiting for the original's messages
    /// ([`Replayer::give_inputs_only`]).
    inputs_only: bool,
}

/// A point of a replay to come back to ([`Replayer::checkpoint`],
/// [`Replayer::rewind`]): every controller's checkpoint, the network's
/// state, and where the replay stood. Keep it as long as the run goes on:
/// controllers resumed from it die with it.
pub struct Mark {
    state: crate::session::SessionState,
    checkpoints: Vec<crate::checkpoint::Checkpoint>,
    place: Place,
    written: trace::WriterMark,
    /// Virtual time at the mark (ms).
    pub at_ms: u64,
    /// Inputs injected before it (from the trace and by hand).
    pub injected: usize,
    /// Rewinds to it so far.
    pub rewinds: u32,
}

/// A replay that can be driven one external event at a time (the console
/// steps it; [`replay_once`] runs it through).
pub struct Replayer<'t> {
    config: Config,
    trace: &'t Trace,
    session: Session,
    writer: trace::Writer,
    /// The original's violation, and when another is the same bug.
    wanted: Option<Violation>,
    same: Same,
    place: Place,
    /// (time, record index) of each external event.
    externals: Vec<(u64, usize)>,
    /// For each external event, the kinds of OpenFlow message
    /// ([`message_kind`]) the original saw after it and before the next:
    /// what must not overtake it ([`Replayer::step`] keeps its place).
    after: Vec<Vec<(PlaceKind, u32)>>,
    trace_path: PathBuf,
    run: u32,
    out: PathBuf,
    /// Tested between waiting slices: when it holds, stepping pauses.
    pause: Option<Pause>,
    /// The pause is a call-off, not a person: it needs no finer slices than
    /// the invariant checks'.
    coarse_pause: bool,
    rewinds: u32,
    /// The trace input [`Replayer::step`] injected last, as it went in.
    last_input: Option<External>,
}

/// A kind of OpenFlow message (channel, direction, type) that the original
/// saw after an input: `kind` as [`message_kind`] writes it.
#[derive(Debug, Clone)]
struct PlaceKind {
    channel: sts_proxy::interpose::ChannelId,
    dir: sts_proxy::interpose::Direction,
    msg_type: &'static str,
    kind: String,
}

/// Inputs whose place [`Replayer::step`] keeps: those the mock network
/// applies at once, without waiting on a controller. A policy, a controller
/// crash or restart, a switch coming up (its handshake) or a proxy rule
/// needs the controllers or the proxy to move while it is applied, and what
/// follows them in the original is mostly their own effect anyway.
fn keeps_place(e: &External) -> bool {
    matches!(
        e,
        External::Ping { .. }
            | External::HostMigrate { .. }
            | External::LinkDown { .. }
            | External::LinkUp { .. }
            | External::SwitchDown { .. }
            | External::DataplaneDrop { .. }
            | External::DataplaneDropEnd { .. }
            | External::DataplaneDelay { .. }
            | External::DataplaneDelayEnd { .. }
    )
}

/// Messages a replay may hold to keep an input's place: those nobody waits
/// for (a controller's FLOW_MOD, PACKET_OUT, GROUP_MOD; a switch's
/// PACKET_IN, PORT_STATUS, FLOW_REMOVED). Replies, echoes and barriers
/// always pass: a controller blocked on one would stall the run.
const HOLDABLE: [&str; 8] =
    ["flow_mod", "packet_out", "group_mod", "meter_mod", "port_mod", "packet_in", "port_status", "flow_removed"];

/// For each external event of `trace` (`externals`: record indices), the
/// kinds of OpenFlow message recorded after it and before the next input,
/// each with how many of that kind came between the input before it and it.
/// Empty for an input whose place is not kept ([`keeps_place`]); only
/// kinds nobody waits for ([`HOLDABLE`]) are counted.
fn kinds_after(trace: &Trace, externals: &[(u64, usize)]) -> Vec<Vec<(PlaceKind, u32)>> {
    externals
        .iter()
        .enumerate()
        .map(|(k, &(_, at))| {
            if !trace.records[at].external().is_some_and(keeps_place) {
                return Vec::new();
            }
            let end = externals.get(k + 1).map_or(trace.records.len(), |&(_, i)| i);
            let start = if k == 0 { 0 } else { externals[k - 1].1 + 1 };
            let kind_of = |r: &sts_trace::Record| match r.internal() {
                Some(sts_trace::Internal::Openflow { dpid, controller, dir, msg, .. }) => {
                    Some(format!("of {dpid} {controller} {} {}", dir.as_str(), msg.as_str()))
                }
                _ => None,
            };
            let before: Vec<String> = trace.records[start..at].iter().filter_map(kind_of).collect();
            let mut kinds: Vec<(PlaceKind, u32)> = Vec::new();
            for r in &trace.records[at + 1..end] {
                let Some(sts_trace::Internal::Openflow { dpid, controller, dir, msg, .. }) = r.internal() else {
                    continue;
                };
                let Some(&msg_type) = HOLDABLE.iter().find(|n| **n == msg.as_str()) else { continue };
                let kind = format!("of {dpid} {controller} {} {msg_type}", dir.as_str());
                if kinds.iter().any(|(p, _)| p.kind == kind) {
                    continue;
                }
                let came_before = before.iter().filter(|b| **b == kind).count() as u32;
                let dir = match dir {
                    sts_trace::Direction::ToSwitch => sts_proxy::interpose::Direction::ControllerToSwitch,
                    sts_trace::Direction::ToController => sts_proxy::interpose::Direction::SwitchToController,
                };
                let channel = sts_proxy::interpose::ChannelId { dpid: *dpid, controller: *controller };
                kinds.push((PlaceKind { channel, dir, msg_type, kind }, came_before));
            }
            kinds
        })
        .collect()
}

/// A test that makes a waiting replay pause ([`Replayer::set_pause`]).
pub type Pause = Box<dyn FnMut(&Session) -> bool + Send>;

impl<'t> Replayer<'t> {
    /// Brings up fresh controllers and a fresh network for a replay of
    /// `trace`, writing the new trace and logs into `out`.
    pub async fn start(
        engine: &Engine,
        config: &Config,
        trace: &'t Trace,
        out: &Path,
        run: u32,
    ) -> Result<Replayer<'t>, RunError> {
        Replayer::start_in(engine, config, trace, out, None, run).await
    }

    /// [`Replayer::start`], the controllers' files in `files_dir` when given
    /// (an earlier run's, to fork from its zygotes: [`session::start_in`]).
    pub async fn start_in(
        engine: &Engine,
        config: &Config,
        trace: &'t Trace,
        out: &Path,
        files_dir: Option<&Path>,
        run: u32,
    ) -> Result<Replayer<'t>, RunError> {
        let config = replay_config(config, trace);
        let logs = out.join("logs");
        let session = session::start_in(engine, &config, &logs, files_dir.unwrap_or(&logs), config.settle()).await?;
        Replayer::on_session(config, trace, session, None, out, run)
    }

    /// A replay of `trace` on a session already up (its controllers past
    /// their handshakes, as [`Replayer::start`] leaves them): one resumed
    /// from a checkpoint ([`crate::warm`]). `config` as [`replay_config`]
    /// makes it; `prologue`, what the session saw before it was handed
    /// over, goes into the trace first. The new trace goes into `out`.
    pub fn on_session(
        config: Config,
        trace: &'t Trace,
        session: Session,
        prologue: Option<crate::monitor::Drained>,
        out: &Path,
        run: u32,
    ) -> Result<Replayer<'t>, RunError> {
        let wanted = crate::records::first_violation(trace).map_err(RunError::BadInput)?;
        std::fs::create_dir_all(out).map_err(|e| RunError::Environment(format!("{}: {e}", out.display())))?;
        let trace_path = out.join("trace.jsonl");
        let header = Header { wall_epoch_ns: session.wall_epoch_ns, ..Header::new(trace.header.seed) };
        let writer = trace::Writer::create(&trace_path, &header)
            .map_err(|e| RunError::Environment(format!("{}: {e}", out.display())))?;
        let mut monitor = Monitor::new(&config, session.runner.clock.now());
        if let Some(p) = prologue {
            monitor.set_prologue(p);
        }
        let externals = trace.external_positions();
        let after = kinds_after(trace, &externals);
        Ok(Replayer {
            wanted,
            same: config.invariants.same,
            config,
            trace,
            session,
            writer,
            place: Place {
                monitor,
                balance: Balance::default(),
                observed: Vec::new(),
                found: None,
                injected: 0,
                timeouts: 0,
                last_orig: None,
                last_injected: 0,
                pending: 0,
                next: 0,
                stopped: false,
                inputs_only: false,
            },
            externals,
            after,
            trace_path,
            run,
            out: out.to_owned(),
            pause: None,
            coarse_pause: false,
            rewinds: 0,
            last_input: None,
        })
    }

    /// Where this replay's trace is being written.
    pub fn trace_path(&self) -> &Path {
        &self.trace_path
    }

    /// Writes what happened so far into this replay's trace (it is written
    /// as the run goes, between waits; call this before reading it).
    pub fn flush(&mut self) -> Result<(), RunError> {
        let recorded = self.place.monitor.record(&mut self.session, &mut self.writer).map_err(self.env())?;
        self.see(recorded);
        Ok(())
    }

    /// Makes waiting pause whenever `pause` holds (tested after every slice
    /// of run time): [`Replayer::step`] returns [`Step::Paused`] and
    /// [`Replayer::settle`] returns early. For a person's Ctrl-C, or a
    /// breakpoint on a message.
    pub fn set_pause(&mut self, pause: Option<Pause>) {
        self.pause = pause;
        self.coarse_pause = false;
    }

    /// Makes waiting stop whenever `off` holds, as a pause does, but
    /// without a person's finer slices: a replay nobody needs any more.
    pub fn set_call_off(&mut self, off: CallOff) {
        self.pause = Some(Box::new(move |_| off()));
        self.coarse_pause = true;
    }

    fn paused(&mut self) -> bool {
        match self.pause.as_mut() {
            Some(p) => p(&self.session),
            None => false,
        }
    }

    /// Injects `e` now, by hand (the console's typed inputs): recorded in
    /// this replay's trace like any input. Returns its seq in that trace.
    pub async fn inject(&mut self, e: &External) -> Result<u64, RunError> {
        let relays: Vec<String> = self.session.relays.keys().cloned().collect();
        let policies: Vec<String> = self.session.policies.keys().cloned().collect();
        inputs::validate(&self.session.runner.net, self.session.controllers.len(), &relays, &policies, e)
            .map_err(RunError::from)?;
        self.flush()?;
        let now = self.session.runner.clock.now();
        // A typed policy names its controller, as the fuzzer's do (for reports).
        let e = &match e {
            External::Policy { name, controller: None } => External::Policy {
                name: name.clone(),
                controller: self.session.policies.get(name).map(|p| p.controller.clone()),
            },
            other => other.clone(),
        };
        let seq = self.writer.external(now, e.clone()).map_err(self.env())?;
        inputs::apply(&mut self.session, e).await.map_err(RunError::from)?;
        self.place.monitor.disturbed();
        self.place.injected += 1;
        Ok(seq)
    }

    /// Lets the run go on for `ms` of its time without injecting anything,
    /// observing as a replay does (a pause cuts it short). True when the
    /// wanted violation showed up.
    pub async fn run_for(&mut self, ms: u64) -> Result<bool, RunError> {
        let until = self.session.runner.clock.now() + ms;
        while self.session.runner.clock.now() < until {
            if self.slice(self.slice_len(until)).await? && self.place.found.is_some() {
                return Ok(true);
            }
            if self.paused() {
                break;
            }
        }
        Ok(false)
    }

    /// Checkpoints the run where it stands, once it is at rest: every
    /// controller (a fork of each, parked), the network and the
    /// interposer's queues and rules, and the replay's own place (its trace
    /// is cut back to here on rewind). Needs virtual time, controllers
    /// forked from snapshots, every controller running and no relays;
    /// otherwise [`PeekError::Refused`] says which.
    pub async fn checkpoint(&mut self) -> Result<Mark, crate::peek::PeekError> {
        use crate::peek::PeekError;
        if !self.config.relays.is_empty() {
            return Err(PeekError::Refused("the config has relays, whose connections are not checkpointed".into()));
        }
        if self.session.runner.clock.virtual_time().is_none() {
            return Err(PeekError::Refused("the run is on real time, where sts cannot tell when it is at rest".into()));
        }
        let mut busy = 0;
        let here = format!("the checkpoint at {} ms", self.session.runner.clock.now());
        let checkpoints = crate::peek::checkpoint_all(&mut self.session, &here, &mut busy).await?;
        self.flush()?;
        let written = self.writer.mark().map_err(self.env())?;
        Ok(Mark {
            state: self.session.state(),
            checkpoints,
            place: self.place.clone(),
            written,
            at_ms: self.session.runner.clock.now(),
            injected: self.place.injected,
            rewinds: 0,
        })
    }

    /// Puts the run back to `mark`: the controllers resumed from their
    /// checkpoints (the ones running now are killed), the network, the
    /// clock and the replay's place as they were; the trace loses what was
    /// written since.
    pub async fn rewind(&mut self, mark: &mut Mark) -> Result<(), crate::peek::PeekError> {
        self.rewinds += 1;
        mark.rewinds += 1;
        let label = format!("rewind-{}", self.rewinds);
        crate::peek::roll_back(
            &mut self.session,
            &mark.state,
            crate::peek::Restart::Resume(&mut mark.checkpoints),
            &label,
        )
        .await?;
        self.place = mark.place.clone();
        self.writer.truncate(&mark.written).map_err(self.env())?;
        Ok(())
    }

    /// Writes the run so far into the new experiment directory `dir` (the
    /// config from `config_text`, with the files it names, and this
    /// replay's trace, ending with the violation found so far): `sts
    /// replay` and `sts minimize` accept it.
    pub fn save(&mut self, dir: &Path, config_text: &str) -> Result<PathBuf, RunError> {
        self.flush()?;
        let exp = crate::fuzz::create_experiment(&self.config, config_text, dir)?;
        let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", dir.display()));
        let mut text = std::fs::read_to_string(&self.trace_path).map_err(env)?;
        if let Some(v) = &self.place.found {
            text.push_str(&self.writer.violation_line(self.session.runner.clock.now(), crate::records::to_record(v)));
            text.push('\n');
            experiment::write_json(&exp.violation(), v).map_err(env)?;
        }
        experiment::write_atomic(&exp.trace(), text.as_bytes()).map_err(env)?;
        Ok(exp.dir)
    }

    fn env(&self) -> impl Fn(std::io::Error) -> RunError + '_ {
        move |e| RunError::Environment(format!("{}: {e}", self.out.display()))
    }

    /// The running system (network, controllers, clock).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The running system, to act on by hand between steps.
    pub fn session_mut(&mut self) -> &mut Session {
        self.place.monitor.disturbed();
        &mut self.session
    }

    /// The index (among the trace's external events) of the next one to
    /// inject, and how many there are.
    pub fn position(&self) -> (usize, usize) {
        (self.place.next, self.externals.len())
    }

    /// The next external event to inject, if any.
    pub fn upcoming(&self) -> Option<&'t External> {
        let trace: &'t Trace = self.trace;
        self.externals.get(self.place.next).and_then(|&(_, i)| trace.records[i].external())
    }

    /// When (on the run's clock) the next input comes due: at its recorded
    /// time for the first, else at its recorded spacing from the last one
    /// injected ([`Replayer::step`] may wait longer, for what preceded it).
    pub fn upcoming_due(&self) -> Option<u64> {
        let &(orig_t, _) = self.externals.get(self.place.next)?;
        Some(match self.place.last_orig {
            None => orig_t,
            Some(prev) => self.place.last_injected + orig_t.saturating_sub(prev),
        })
    }

    /// The trace input [`Replayer::step`] injected last, as it went in (a
    /// migration from where the host was then).
    pub fn last_input(&self) -> Option<&External> {
        self.last_input.as_ref()
    }

    /// The next input as it would go in now ([`inputs::as_now`]: a
    /// migration from where the host is now).
    pub fn upcoming_as_now(&self) -> Option<External> {
        self.upcoming().map(|e| inputs::as_now(&self.session.runner.net, e))
    }

    /// Passes over the trace's next input without injecting it (the
    /// console's `skip`): the inputs after it keep their spacing from its
    /// place, as if it had gone in now. Returns its index among the inputs,
    /// its seq and the input; `None` past the last.
    pub fn skip(&mut self) -> Option<(usize, u64, &'t External)> {
        let &(orig_t, index) = self.externals.get(self.place.next)?;
        // What preceded it still precedes the inputs after it.
        while self.place.pending < index {
            if let Some(k) = self.trace.records[self.place.pending].internal().and_then(|i| self.key(i)) {
                self.place.balance.expect(&k);
            }
            self.place.pending += 1;
        }
        self.place.pending = index + 1;
        self.place.last_orig = Some(orig_t);
        self.place.last_injected = self.session.runner.clock.now();
        self.place.next += 1;
        let trace: &'t Trace = self.trace;
        let r = &trace.records[index];
        Some((self.place.next - 1, r.seq, r.external()?))
    }

    /// The trace `seq` of the next input to inject.
    pub fn upcoming_seq(&self) -> Option<u64> {
        self.externals.get(self.place.next).map(|&(_, i)| self.trace.records[i].seq)
    }

    /// The input at `index` among the trace's external events.
    pub fn injected_input(&self, index: usize) -> Option<&'t External> {
        let trace: &'t Trace = self.trace;
        self.externals.get(index).and_then(|&(_, i)| trace.records[i].external())
    }

    /// The persistent violation found so far, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.place.found.as_ref()
    }

    /// Fingerprints of the violations present at the last check.
    pub fn current_violations(&self) -> &[String] {
        &self.place.monitor.current
    }

    /// What replay matches `e` on: its key, with the experiment's learned
    /// masks applied when it has some.
    fn key(&self, e: &sts_trace::Internal) -> Option<String> {
        sts_trace::masks::key(self.config.masks.as_ref(), e)
    }

    fn see(&mut self, events: Vec<sts_trace::Internal>) {
        for e in events {
            if let Some(k) = self.key(&e) {
                self.place.balance.see(&k);
                self.place.observed.push(k);
            }
        }
    }

    /// Whether `v` is the violation this replay looks for (without one in
    /// the trace, any persistent violation is).
    fn is_wanted(&self, v: &Violation) -> bool {
        self.wanted.as_ref().is_none_or(|w| w.same_bug(v, self.same))
    }

    /// True when slices may run past [`SLICE_MS`]: on virtual time, with
    /// nothing to pause the run at a finer grain than a slice (a person's
    /// breakpoint on a message).
    fn long_slices(&self) -> bool {
        (self.pause.is_none() || self.coarse_pause) && self.session.runner.clock.virtual_time().is_some()
    }

    /// How long the next slice runs, ending by `end` (run time, ms). On
    /// virtual time with nothing to pause the run, it runs to the next
    /// invariant check: between checks observing only records events, which
    /// carry their own times, so a slice end would buy nothing but a clock
    /// jump (a replay of a long trace made about a thousand of them); and
    /// past checks that cannot find anything new ([`Monitor::until_news`]).
    /// On real time, or when a pause is set (a breakpoint on a message),
    /// slices stay [`SLICE_MS`] long.
    fn slice_len(&self, end: u64) -> u64 {
        let now = self.session.runner.clock.now();
        let end = if self.long_slices() {
            let monitor = &self.place.monitor;
            let mut check = monitor.next_check_ms();
            // A run at rest after a steady check stays as it is until its
            // next timer: the checks before then would find the same.
            if end > check && monitor.steady_now(now) {
                if let Some(still) = self.session.runner.still_until() {
                    check = monitor.until_news(now, still);
                }
            }
            end.min(check.max(now + 1))
        } else {
            end.min(now + SLICE_MS)
        };
        end.saturating_sub(now).max(1)
    }

    /// Runs for `ms` and observes: true when the wanted violation (or,
    /// without one, any persistent violation) has been found.
    async fn slice(&mut self, ms: u64) -> Result<bool, RunError> {
        self.session.runner.run_for(Duration::from_millis(ms)).await;
        self.flush()?;
        let persistent = self.place.monitor.observe(&mut self.session, &mut self.writer).map_err(self.env())?;
        // Any persistent violation that is the same bug will do (a bug with
        // several victims may starve another host this time).
        let hit = persistent.iter().position(|v| self.is_wanted(v));
        let first = hit.unwrap_or(0);
        if let Some(v) = persistent.into_iter().nth(first) {
            if hit.is_some() || self.place.found.is_none() {
                self.place.found = Some(v);
            }
        }
        Ok(hit.is_some())
    }

    /// Keeps the next input's place among the messages: the kinds of message
    /// the original saw after it pass only as many times as the original
    /// saw them since the input before (and not yet here); the rest wait in the proxy
    /// until the input is in. Without it, a reply that in the original came
    /// after an input given in the same instant (a fuzz step's ping and a
    /// migration) can overtake it while replay waits for the input's
    /// predecessors, and the run takes another path.
    fn keep_place(&mut self) {
        if self.place.inputs_only {
            return;
        }
        let Some(kinds) = self.after.get(self.place.next) else { return };
        let balance = &self.place.balance;
        self.session.runner.interposer.keep_place(kinds.iter().map(|(k, came_before)| {
            let missing = balance.missing_by_kind.get(&k.kind).copied().unwrap_or(0);
            ((k.channel, k.dir, k.msg_type), missing.min(*came_before))
        }));
    }

    /// Ends [`Replayer::keep_place`]: nothing more is held, and what was
    /// held is due now (delivered in its connection's order).
    fn release_place(&mut self) {
        for seq in self.session.runner.interposer.end_place() {
            self.session.runner.delay_queued(seq, 0);
        }
    }

    /// Waits for the next external event's happens-before predecessors (or
    /// its time plus epsilon) and injects it.
    pub async fn step(&mut self) -> Result<Step, RunError> {
        if let Some(step) = self.wait_for_next().await? {
            return Ok(step);
        }
        let (orig_t, index) = self.externals[self.place.next];
        // Nothing more is held; what was waits until the input is in.
        self.session.runner.interposer.keep_place([]);
        self.flush()?;
        let now = self.session.runner.clock.now();
        let trace: &'t Trace = self.trace;
        let r = &trace.records[index];
        let e = inputs::as_now(&self.session.runner.net, r.external().expect("an external record"));
        self.writer.external(now, e.clone()).map_err(self.env())?;
        inputs::apply(&mut self.session, &e).await.map_err(RunError::from)?;
        self.place.monitor.disturbed();
        // What the input's place held goes on after it, in order.
        self.release_place();
        self.last_input = Some(e);
        self.place.injected += 1;
        self.place.last_orig = Some(orig_t);
        self.place.last_injected = now;
        self.place.next += 1;
        Ok(Step::Injected { index: self.place.next - 1, seq: r.seq })
    }

    /// The waiting half of [`Replayer::step`]: returns `None` once the next
    /// external event is due (its predecessors in, or its time plus epsilon
    /// past), with the messages its place keeps still held; otherwise the
    /// step that ended the wait (the violation, the end, a pause). Waiting
    /// again for the same event returns at once.
    pub async fn wait_for_next(&mut self) -> Result<Option<Step>, RunError> {
        if self.place.stopped {
            return Ok(Some(Step::Reproduced));
        }
        let Some(&(orig_t, index)) = self.externals.get(self.place.next) else { return Ok(Some(Step::End)) };
        // Everything recorded before this event is its happens-before set
        // (none of it once the replay gives inputs alone).
        while self.place.pending < index && !self.place.inputs_only {
            if let Some(k) = self.trace.records[self.place.pending].internal().and_then(|i| self.key(i)) {
                self.place.balance.expect(&k);
            }
            self.place.pending += 1;
        }
        self.place.pending = self.place.pending.max(index + 1);
        let epsilon = self.config.interpose.epsilon_ms;
        let target = self.upcoming_due().unwrap_or(orig_t);
        let keeping_since = tokio::time::Instant::now();
        loop {
            let now = self.session.runner.clock.now();
            if now >= target && self.place.balance.missing == 0 {
                break;
            }
            if now >= target + epsilon {
                self.place.timeouts += 1;
                break;
            }
            // Before the event's time only its predecessors' arrival counts,
            // and they are looked for once it is due.
            let end = if now < target { target } else { self.look_again_at(target + epsilon, now) };
            if keeping_since.elapsed() < PLACE_KEPT_AT_MOST {
                self.keep_place();
            } else {
                self.release_place();
            }
            if self.slice(self.slice_len(end)).await? && self.wanted.is_some() {
                self.release_place();
                self.place.stopped = true;
                return Ok(Some(Step::Reproduced));
            }
            if self.paused() {
                self.release_place();
                return Ok(Some(Step::Paused));
            }
        }
        Ok(None)
    }

    /// When a wait for a due input's predecessors looks again (it gives up
    /// at `give_up`): every [`SLICE_MS`] while they may arrive; on a run
    /// that stays as it is until its next timer ([`NetRunner::still_until`]),
    /// nothing can arrive before then, and the wait goes straight there.
    ///
    /// [`NetRunner::still_until`]: crate::netrun::NetRunner::still_until
    fn look_again_at(&self, give_up: u64, now: u64) -> u64 {
        let soon = give_up.min(now + SLICE_MS);
        if !self.long_slices() || soon == give_up {
            return soon;
        }
        match self.session.runner.still_until() {
            Some(still) if still > soon => give_up.min(still),
            _ => soon,
        }
    }

    /// From here on the trace's inputs go in at their recorded spacing
    /// without waiting for (or holding back) the original's messages, as a
    /// trace of the inputs alone would be replayed: the run has left the
    /// original's path (an exploration's variant, [`crate::explore`]). A
    /// rewind to a mark taken before puts the waiting back.
    pub fn give_inputs_only(&mut self) {
        self.place.inputs_only = true;
    }

    /// Steps until `stop` says so after a step, the violation shows up, or
    /// the inputs run out; returns the last step.
    pub async fn run_until(&mut self, mut stop: impl FnMut(&Replayer<'t>, &Step) -> bool) -> Result<Step, RunError> {
        loop {
            let step = self.step().await?;
            if !matches!(step, Step::Injected { .. }) || stop(self, &step) {
                return Ok(step);
            }
        }
    }

    /// After the last input: waits as long as the original took to show its
    /// violation, plus the persistence threshold, a check and epsilon, or
    /// until the wanted violation shows up; true if it did.
    pub async fn settle(&mut self) -> Result<bool, RunError> {
        let epsilon = self.config.interpose.epsilon_ms;
        let tail = match (self.trace.records.iter().find(|r| r.violation().is_some()), self.externals.last()) {
            (Some(v), Some((t, _))) => v.t_ms.saturating_sub(*t),
            _ => 0,
        };
        let inv = &self.config.invariants;
        let until = self.session.runner.clock.now() + tail + inv.persist_ms + inv.check_every_ms + epsilon;
        let mut reproduced = self.place.found.as_ref().is_some_and(|v| self.is_wanted(v));
        while !reproduced && self.session.runner.clock.now() < until {
            reproduced = self.slice(self.slice_len(until)).await? && self.place.found.is_some();
            if self.paused() {
                break;
            }
        }
        Ok(reproduced)
    }

    /// [`Replayer::settle`], then writes the violation and compares the runs.
    pub async fn finish(mut self) -> Result<ReplayResult, RunError> {
        self.pause = None;
        self.finish_keeping().await.map(|(r, _)| r)
    }

    /// [`Replayer::finish`], the controllers' teardown left to a blocking
    /// thread ([`Session::end_aside`]): what comes next need not wait for
    /// it, and their logs are complete once the runtime is gone.
    pub async fn finish_aside(mut self) -> Result<ReplayResult, RunError> {
        self.pause = None;
        let (result, session) = self.finish_keeping().await?;
        session.end_aside();
        Ok(result)
    }

    /// Gives the session up as it stands, mid-run: a replay called off.
    pub fn into_session(self) -> Session {
        self.session
    }

    /// [`Replayer::finish`], giving the session back instead of ending it
    /// (to roll it back for the next replay, [`crate::warm`]).
    ///
    /// Unlike `finish`, it keeps the pause test: when it holds, the wait for
    /// the violation ends early, unseen.
    pub async fn finish_keeping(mut self) -> Result<(ReplayResult, Session), RunError> {
        let reproduced = self.settle().await?;
        if let Some(v) = &self.place.found {
            let now = self.session.runner.clock.now();
            self.writer.violation(now, crate::records::to_record(v)).map_err(self.env())?;
        }
        self.session.clock_notices();
        let divergence = diverge(self.trace, &self.place.observed, self.config.masks.as_ref());
        let clock = self.session.runner.clock.summary();
        let result = ReplayResult {
            run: self.run,
            reproduced,
            violation: self.place.found,
            injected: self.place.injected,
            timeouts: self.place.timeouts,
            divergence,
            trace: self.trace_path,
            clock,
        };
        Ok((result, self.session))
    }
}

/// A test that calls a replay off (a minimization's candidate whose round
/// is already decided).
pub type CallOff = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// Runs a replay through: `None` if `call_off` held before its violation
/// showed up (the run stops at its next slice; a verdict of "not
/// reproduced" then means nothing). The session is given back either way.
pub async fn run_through(
    mut replayer: Replayer<'_>,
    call_off: Option<CallOff>,
) -> Result<(Option<ReplayResult>, Session), RunError> {
    if let Some(off) = &call_off {
        replayer.set_call_off(off.clone());
    }
    if matches!(replayer.run_until(|_, _| false).await?, Step::Paused) {
        return Ok((None, replayer.into_session()));
    }
    let (result, session) = replayer.finish_keeping().await?;
    let off = !result.reproduced && call_off.is_some_and(|off| off());
    Ok(((!off).then_some(result), session))
}

/// [`replay_once`], unless `call_off` stops it first (`None`).
pub async fn replay_unless(
    engine: &Engine,
    config: &Config,
    trace: &Trace,
    out: &Path,
    run: u32,
    call_off: Option<CallOff>,
) -> Result<Option<ReplayResult>, RunError> {
    let replayer = Replayer::start(engine, config, trace, out, run).await?;
    Ok(run_through(replayer, call_off).await?.0)
}

/// The config a replay of `trace` runs with: `config`, serving the recorded
/// run's dates back to the controllers.
pub fn replay_config(config: &Config, trace: &Trace) -> Config {
    let mut config = config.clone();
    config.time.wall_epoch_ns = trace.header.wall_epoch_ns;
    config
}

/// [`replay_once`], its controllers' teardown off the caller's path
/// ([`Replayer::finish_aside`]): a minimization's final replays, each place
/// free for the next as soon as its verdict is in.
pub async fn replay_once_aside(
    engine: &Engine,
    config: &Config,
    trace: &Trace,
    out: &Path,
    run: u32,
) -> Result<ReplayResult, RunError> {
    replay_to_end(Replayer::start(engine, config, trace, out, run).await?, true).await
}

/// Replays `trace` once, writing the new trace and logs into `out`.
pub async fn replay_once(
    engine: &Engine,
    config: &Config,
    trace: &Trace,
    out: &Path,
    run: u32,
) -> Result<ReplayResult, RunError> {
    replay_to_end(Replayer::start(engine, config, trace, out, run).await?, false).await
}

/// Runs `r` through its inputs and finishes it, the teardown `aside` or not.
async fn replay_to_end(mut r: Replayer<'_>, aside: bool) -> Result<ReplayResult, RunError> {
    r.run_until(|_, _| false).await?;
    match aside {
        true => r.finish_aside().await,
        false => r.finish().await,
    }
}

/// The first original internal event not seen again, and the first replayed
/// one the original did not have (both by key, as multisets in order), and
/// how many of each; `masks` apply to the original's keys as they did to
/// `observed`.
pub fn diverge(trace: &Trace, observed: &[String], masks: Option<&sts_trace::masks::Masks>) -> Divergence {
    let key = |i: &sts_trace::Internal| sts_trace::masks::key(masks, i);
    let original: Vec<(u64, String)> = trace
        .records
        .iter()
        .take_while(|r| r.violation().is_none())
        .filter_map(|r| r.internal().and_then(key).map(|k| (r.seq, k)))
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for k in observed {
        *seen.entry(k).or_default() += 1;
    }
    let (mut first_missing, mut missing) = (None, 0);
    for (seq, k) in &original {
        match seen.get_mut(k.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                missing += 1;
                first_missing.get_or_insert_with(|| (*seq, k.clone()));
            }
        }
    }
    let mut had: HashMap<&str, usize> = HashMap::new();
    for (_, k) in &original {
        *had.entry(k).or_default() += 1;
    }
    let (mut first_unexpected, mut unexpected) = (None, 0);
    for k in observed {
        match had.get_mut(k.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                unexpected += 1;
                first_unexpected.get_or_insert_with(|| k.clone());
            }
        }
    }
    Divergence { first_missing, first_unexpected, missing, unexpected }
}

/// The summary `sts replay` writes to `DIR/replays/summary.json`.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// The wanted violation's identity at `same`.
    pub violation: Option<String>,
    /// When a replay's violation counted as the original's.
    pub same: Same,
    pub runs: Vec<ReplayResult>,
    pub reproduced: usize,
}

/// Creates the first `replays/N` after `after` that does not exist yet, and
/// returns its N.
fn claim_run_dir(exp: &Experiment, after: u32) -> Result<u32, RunError> {
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", exp.dir.join("replays").display()));
    crate::session::own_dir(&exp.dir.join("replays"))?;
    for n in after + 1.. {
        match std::fs::create_dir(exp.replay(n)) {
            Ok(()) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(env(e)),
        }
    }
    unreachable!("u32 run numbers run out")
}

/// Loads an experiment directory for replay: its config and its trace,
/// checked against each other (errors name the file and line).
/// `same`, when given, is the level of bug identity the job judges by
/// (`--same`) instead of the config's `[invariants] same`: this is the one
/// place the two meet, so every job run on the experiment judges alike.
pub fn load(dir: &Path, same: Option<sts_invariants::Same>) -> Result<(Experiment, Config, Trace), RunError> {
    let exp = Experiment::open(dir);
    let mut config = Config::load(&exp.config())?;
    if let Some(same) = same {
        config.invariants.same = same;
    }
    config.masks = sts_trace::masks::Masks::load(dir).map_err(RunError::BadInput)?;
    if !exp.trace().exists() && exp.meta().exists() {
        return Err(RunError::BadInput(format!(
            "{}: no trace: the run that made this directory ended before its controllers were up, so nothing \
             was recorded (its config.toml and meta.json are there)",
            dir.display()
        )));
    }
    let trace = Trace::load(&exp.trace()).map_err(|e| RunError::BadInput(e.to_string()))?;
    validate(&config, &trace, &exp.trace())?;
    Ok((exp, config, trace))
}

/// `sts replay`: replays the experiment in `dir` `repeat` times (into
/// `DIR/replays/N/`, numbered after those already there), calling `each`
/// after every run, and writes `DIR/replays/summary.json`.
pub async fn run(
    engine: &Engine,
    dir: &Path,
    repeat: u32,
    each: impl FnMut(&ReplayResult),
) -> Result<Summary, RunError> {
    let (exp, config, trace) = load(dir, None)?;
    run_loaded(engine, &exp, &config, &trace, repeat, each).await
}

/// [`run`] on an experiment already [`load`]ed.
pub async fn run_loaded(
    engine: &Engine,
    exp: &Experiment,
    config: &Config,
    trace: &Trace,
    repeat: u32,
    mut each: impl FnMut(&ReplayResult),
) -> Result<Summary, RunError> {
    let dir = exp.dir.as_path();
    let wanted = crate::records::first_violation(trace)
        .map_err(|e| RunError::BadInput(format!("{}: {e}", exp.trace().display())))?
        .map(|v| v.identity(config.invariants.same));
    let mut runs = Vec::new();
    let mut n = 0;
    for i in 0..repeat.max(1) {
        // Claim the next free replays/N atomically: replays of one directory
        // running at once never share one.
        n = claim_run_dir(exp, n)?;
        engine.progress(Progress::Replay { run: i + 1, of: repeat.max(1) });
        let r = replay_once(engine, config, trace, &exp.replay(n), n).await?;
        each(&r);
        runs.push(r);
    }
    engine.progress(Progress::Done);
    let reproduced = runs.iter().filter(|r| r.reproduced).count();
    let summary = Summary { violation: wanted, same: config.invariants.same, reproduced, runs };
    if let Err(e) = experiment::write_json(&dir.join("replays").join("summary.json"), &summary) {
        engine.notice(NoticeKind::Info, format!("cannot write the replay summary: {e}"));
    }
    Ok(summary)
}

#[cfg(test)]
mod place_tests {
    use super::*;

    /// A trace from JSON lines (header first), read as `sts replay` reads one.
    fn trace(lines: &[&str]) -> Trace {
        let path = std::env::temp_dir().join(format!("sts-place-{}-{}.jsonl", std::process::id(), lines.len()));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let t = Trace::load(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        t
    }

    fn of(seq: u64, dpid: u64, dir: &str, msg: &str) -> String {
        format!(
            r#"{{"seq":{seq},"t_ms":{seq},"internal":{{"type":"openflow","dpid":{dpid},"controller":0,"dir":"{dir}","msg":"{msg}","fp":"of4/{msg} {{}}","raw":""}}}}"#
        )
    }

    fn kinds(trace: &Trace) -> Vec<Vec<(String, u32)>> {
        let externals = trace.external_positions();
        kinds_after(trace, &externals)
            .into_iter()
            .map(|ks| ks.into_iter().map(|(k, n)| (k.kind, n)).collect())
            .collect()
    }

    /// A ping and a migration in one instant: the migration's place is kept
    /// against s2's PACKET_OUT that came after it (one came before it, since
    /// the ping); replies and a policy's aftermath are never held.
    #[test]
    fn an_inputs_place_is_the_kinds_of_message_nobody_waits_for_that_came_after_it() {
        let header = r#"{"format":"sts-trace","version":1,"seed":1}"#;
        let lines = [
            header.to_string(),
            r#"{"seq":1,"t_ms":1,"external":{"type":"ping","src":"h2","dst":"h3"}}"#.to_string(),
            of(2, 2, "to_controller", "packet_in"),
            of(3, 2, "to_switch", "packet_out"),
            r#"{"seq":4,"t_ms":4,"external":{"type":"host_migrate","host":"h3","from":3,"to":1}}"#.to_string(),
            of(5, 2, "to_switch", "packet_out"),
            of(6, 2, "to_switch", "packet_out"),
            of(7, 2, "to_controller", "echo_reply"),
            of(8, 1, "to_controller", "port_status"),
            r#"{"seq":9,"t_ms":9,"external":{"type":"policy","name":"p"}}"#.to_string(),
            of(10, 1, "to_switch", "flow_mod"),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let k = kinds(&trace(&refs));
        assert_eq!(k.len(), 3);
        // After the ping: s2's PACKET_IN and PACKET_OUT, none of either before it.
        assert_eq!(
            k[0],
            [("of 2 0 to_controller packet_in".to_string(), 0), ("of 2 0 to_switch packet_out".to_string(), 0)]
        );
        // After the migration: one PACKET_OUT of s2 came between the ping and
        // it, so one may pass before it; s1's PORT_STATUS, none; no echo reply.
        assert_eq!(
            k[1],
            [("of 2 0 to_switch packet_out".to_string(), 1), ("of 1 0 to_controller port_status".to_string(), 0)]
        );
        // A policy needs the controller while it is applied: nothing held.
        assert!(k[2].is_empty());
    }
}
