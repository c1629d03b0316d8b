//! What the invariant checker needs to know beyond the forwarding state:
//! which controllers are alive, which switches lost their controllers, what
//! the dataplane and the controllers' logs said since the last check.

use std::collections::BTreeSet;

use sts_invariants::check::{ControllerState, Facts};
use sts_invariants::{Persistence, Violation};
use sts_mocknet::DataplaneEvent;

use crate::config::Config;
use crate::controller::Controller;
use crate::netrun::NetRunner;
use crate::session::Session;
use sts_trace::{self as trace, Internal, MsgType};

/// The name a controller goes by in violations and traces: `c0`, `c1` ... in
/// config order.
pub fn controller_name(index: usize) -> String {
    format!("c{index}")
}

/// Whether each controller is alive, those in `crashed` (crashed on
/// purpose by an input) left out: they are not liveness failures.
pub fn controller_states(controllers: &mut [Controller], crashed: &BTreeSet<usize>) -> Vec<ControllerState> {
    controllers
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| !crashed.contains(i))
        .map(|(i, c)| ControllerState { name: controller_name(i), alive: c.is_alive() })
        .collect()
}

/// Gathers the facts for one check of a session. `dataplane` and
/// `log_lines` are what happened since the previous check (the caller also
/// records them).
pub fn facts(session: &mut Session, dataplane: Vec<DataplaneEvent>, log_lines: Vec<(String, String)>) -> Facts {
    facts_of(&session.runner, &mut session.controllers, &session.crashed, dataplane, log_lines)
}

/// The same from the parts: controllers in `crashed` were crashed on purpose
/// (a fuzzer input) and are not liveness failures.
pub fn facts_of(
    runner: &NetRunner,
    controllers: &mut [Controller],
    crashed: &BTreeSet<usize>,
    dataplane: Vec<DataplaneEvent>,
    log_lines: Vec<(String, String)>,
) -> Facts {
    Facts {
        controllers: controller_states(controllers, crashed),
        disconnected: runner.disconnected(),
        dataplane,
        log_lines,
    }
}

/// Everything observed since the last drain, taken out of the runner and the
/// controllers: internal events for the trace (with their times), and the
/// raw material of the next check.
///
/// Here an [`Internal::Delivered`]'s `of` is the proxy's sequence number of
/// the message (as `queued` gives it for the queued arrivals), not yet a
/// trace `seq`: [`Monitor::record`] translates it.
#[derive(Clone, Default)]
pub struct Drained {
    pub internal: Vec<(u64, Internal)>,
    /// For each entry of `internal`, the proxy's sequence number of a queued
    /// OpenFlow message (`None` for everything else).
    pub queued: Vec<Option<u64>>,
    pub dataplane: Vec<DataplaneEvent>,
    pub log_lines: Vec<(String, String)>,
}

/// Takes the interposer's log (keepalives left out), the controllers' output
/// lines and the dataplane's reports.
pub fn drain(runner: &mut NetRunner, controllers: &[Controller]) -> Drained {
    let now = runner.clock.now();
    let mut internal = Vec::new();
    let mut queued_seqs = Vec::new();
    // A delivery goes among the arrivals where it happened: after those that
    // came before it, before those that came after (which may be its
    // consequence); the sort by time below is stable.
    let mut delivered = runner.interposer.take_delivered().into_iter().peekable();
    for r in runner.interposer.take_log() {
        while let Some(d) = delivered.next_if(|d| d.arrivals <= r.seq) {
            internal.push((d.time_ms, Internal::Delivered { of: d.seq }));
        }
        if matches!(r.msg_type, "echo_request" | "echo_reply") {
            continue;
        }
        let e = Internal::Openflow {
            dpid: r.channel.dpid,
            controller: r.channel.controller,
            dir: r.dir.into(),
            msg: MsgType::recorded(r.msg_type),
            fp: r.fingerprint(),
            raw: Some(r.raw.clone()),
            proxy: match r.disposition {
                sts_proxy::interpose::Disposition::Passed => None,
                sts_proxy::interpose::Disposition::Queued => Some(sts_trace::ProxyDecision::Queued),
                sts_proxy::interpose::Disposition::Dropped => Some(sts_trace::ProxyDecision::Dropped),
            },
        };
        if r.disposition == sts_proxy::interpose::Disposition::Queued {
            queued_seqs.push((internal.len(), r.seq));
        }
        internal.push((r.time_ms, e));
    }
    for d in delivered {
        internal.push((d.time_ms, Internal::Delivered { of: d.seq }));
    }
    let mut log_lines = Vec::new();
    for (i, c) in controllers.iter().enumerate() {
        for l in c.take_log_lines() {
            log_lines.push((controller_name(i), l.line.clone()));
            internal.push((now, Internal::Log { controller: controller_name(i), line: l.line, fp: l.fingerprint }));
        }
    }
    let dropped = std::mem::take(&mut runner.net.capture_dropped);
    if dropped > 0 {
        tracing::debug!(
            "{dropped} host frames not recorded: over {} since the last drain",
            sts_mocknet::network::CAPTURE_MAX
        );
    }
    for f in runner.net.take_captured() {
        let host = runner.net.hosts.get(f.host).map_or_else(|| format!("h?{}", f.host), |h| h.name.clone());
        internal.push((f.t_ms, Internal::Frame { host, sent: f.sent, raw: Some(f.frame.into()) }));
    }
    let dataplane = std::mem::take(&mut runner.net.events);
    for e in &dataplane {
        internal.push((now, Internal::dataplane(e)));
    }
    let mut tagged: Vec<(u64, Internal, Option<u64>)> = internal.into_iter().map(|(t, e)| (t, e, None)).collect();
    for (i, seq) in queued_seqs {
        tagged[i].2 = Some(seq);
    }
    tagged.sort_by_key(|(t, _, _)| *t);
    let (internal, queued) = tagged.into_iter().map(|(t, e, q)| ((t, e), q)).unzip();
    Drained { internal, queued, dataplane, log_lines }
}

/// The checker `config` describes, for `session` as it stands now (the
/// isolation pairs its applied policies added or removed).
pub fn checker(config: &Config, session: &Session) -> sts_invariants::Checker {
    checker_isolating(config, session.isolation())
}

/// The checker `config` describes, with `isolation` (host pairs that must
/// not communicate) in place of the config's own pairs.
pub fn checker_isolating(config: &Config, isolation: Vec<(String, String)>) -> sts_invariants::Checker {
    sts_invariants::Checker { isolation: isolation_rules(isolation), ..config.checker() }
}

fn isolation_rules(pairs: Vec<(String, String)>) -> Vec<sts_invariants::check::IsolationRule> {
    pairs.into_iter().map(|(from, to)| sts_invariants::check::IsolationRule { from, to }).collect()
}

/// Checks invariants on a schedule and tracks persistence (fuzz and replay).
#[derive(Clone)]
pub struct Monitor {
    checker: sts_invariants::Checker,
    persistence: Persistence,
    every_ms: u64,
    next_ms: u64,
    dataplane: Vec<sts_mocknet::DataplaneEvent>,
    log_lines: Vec<(String, String)>,
    /// Fingerprints of the violations present at the last check.
    pub current: Vec<String>,
    /// Controllers whose open traceback was held back at the last check.
    held_from: BTreeSet<String>,
    /// The trace `seq` of each queued message not yet delivered, by the
    /// proxy's sequence number (for its `delivered` record).
    queued_at: std::collections::BTreeMap<u64, u64>,
    /// The time of the last check when it was steady: nothing in its facts
    /// (no dataplane event, no controller log line, none held back for the
    /// next check) and nothing recorded or done to the run since. Until the
    /// run changes, every later check finds what that one found.
    steady_at: Option<u64>,
    /// What happened before this monitor's run was handed over (a run
    /// resumed from a checkpoint taken after the handshakes: their messages
    /// and log lines), recorded first by the next [`Monitor::record`].
    prologue: Option<Drained>,
}

impl Monitor {
    pub fn new(config: &Config, now: u64) -> Monitor {
        Monitor {
            checker: config.checker(),
            persistence: Persistence::new(config.invariants.persist_ms, config.invariants.same),
            every_ms: config.invariants.check_every_ms,
            next_ms: now,
            dataplane: Vec::new(),
            log_lines: Vec::new(),
            current: Vec::new(),
            held_from: BTreeSet::new(),
            queued_at: std::collections::BTreeMap::new(),
            steady_at: None,
            prologue: None,
        }
    }

    /// Records `drained` first, before what the run does next: what a run
    /// resumed from a checkpoint saw before it, as a fresh run would have.
    pub fn set_prologue(&mut self, drained: Drained) {
        self.prologue = Some(drained);
    }

    /// Writes what happened since the last call into the trace (do this
    /// before writing an external event, so the trace's order is the order
    /// things happened in).
    pub fn record(
        &mut self,
        session: &mut Session,
        writer: &mut trace::Writer,
    ) -> std::io::Result<Vec<trace::Internal>> {
        let mut drained = drain(&mut session.runner, &session.controllers);
        if let Some(mut first) = self.prologue.take() {
            // Everything in it happened before the hand-over: its times are
            // no later than the run's.
            first.internal.append(&mut drained.internal);
            first.queued.append(&mut drained.queued);
            first.dataplane.append(&mut drained.dataplane);
            first.log_lines.append(&mut drained.log_lines);
            drained = first;
        }
        if !(drained.internal.is_empty() && drained.dataplane.is_empty() && drained.log_lines.is_empty()) {
            self.steady_at = None;
        }
        let mut out = Vec::with_capacity(drained.internal.len());
        for ((t, e), queued) in drained.internal.into_iter().zip(drained.queued) {
            let e = match e {
                // A delivery whose arrival this trace has not recorded (it
                // came before the trace began) is left out.
                Internal::Delivered { of } => match self.queued_at.remove(&of) {
                    Some(seq) => Internal::Delivered { of: seq },
                    None => continue,
                },
                e => e,
            };
            let seq = writer.internal(t, e.clone())?;
            if let Some(proxy_seq) = queued {
                self.queued_at.insert(proxy_seq, seq);
            }
            out.push(e);
        }
        self.dataplane.extend(drained.dataplane);
        self.log_lines.extend(drained.log_lines);
        Ok(out)
    }

    /// The log lines for this check. A live controller's traceback that has
    /// not ended (its exception line not yet read) waits for the next check,
    /// once: an error's culprit is read from the whole traceback.
    fn hold_open_tracebacks(&mut self, session: &mut Session) -> Vec<(String, String)> {
        let mut lines = std::mem::take(&mut self.log_lines);
        let mut held = Vec::new();
        let names: BTreeSet<String> = lines.iter().map(|(n, _)| n.clone()).collect();
        for name in names {
            let index = (0..session.controllers.len()).find(|&i| controller_name(i) == name);
            let alive = index.is_some_and(|i| session.controllers[i].is_alive());
            if !alive || !self.held_from.insert(name.clone()) {
                continue;
            }
            let own: Vec<&str> = lines.iter().filter(|(n, _)| *n == name).map(|(_, l)| l.as_str()).collect();
            if let Some(start) = sts_invariants::identity::open_traceback(&own) {
                // The `start`-th line of this controller, and every later one of it.
                let mut seen = 0;
                let mut keep = Vec::with_capacity(lines.len());
                for (n, l) in lines {
                    if n == name {
                        seen += 1;
                        if seen > start {
                            held.push((n, l));
                            continue;
                        }
                    }
                    keep.push((n, l));
                }
                lines = keep;
            } else {
                self.held_from.remove(&name);
            }
        }
        // Held once already: released whatever follows.
        self.held_from.retain(|n| held.iter().any(|(h, _)| h == n));
        self.log_lines = held;
        lines
    }

    /// When the next invariant check is due (run time, ms): nothing is judged
    /// before then.
    pub fn next_check_ms(&self) -> u64 {
        self.next_ms
    }

    /// Says the run was acted on from outside (an input given, the session
    /// handed out to change by hand): the next check may find something new.
    pub fn disturbed(&mut self) {
        self.steady_at = None;
    }

    /// True when the last check, made at `now`, was steady (see
    /// [`Monitor::until_news`]).
    pub fn steady_now(&self, now: u64) -> bool {
        self.steady_at == Some(now)
    }

    /// The last check that can be left to itself when the run stays as it
    /// is until `still_until` (exclusive, run ms; [`NetRunner::still_until`]):
    /// after a steady check at `now`, every check on the schedule before
    /// then finds the same violations, and only the one where a violation
    /// present will have lasted the persistence threshold can say something
    /// new. Returns the latest check time on the schedule before
    /// `still_until` and no later than that one (the caller runs up to it
    /// and checks there, as if every check between had been made), or
    /// [`Monitor::next_check_ms`] when nothing can be skipped.
    ///
    /// [`NetRunner::still_until`]: crate::netrun::NetRunner::still_until
    pub fn until_news(&self, now: u64, still_until: u64) -> u64 {
        let next = self.next_ms;
        if !self.steady_now(now) || self.every_ms == 0 {
            return next;
        }
        let every = self.every_ms;
        let mut last = still_until.saturating_sub(1);
        if let Some(p) = self.persistence.next_persistent_at(now) {
            last = last.min(now + p.saturating_sub(now).div_ceil(every) * every);
        }
        (now + last.saturating_sub(now) / every * every).max(next)
    }

    /// Records, then checks the invariants if a check is due. Returns the
    /// persistent violations, most fundamental first
    /// ([`Persistence::observe`]).
    pub fn observe(&mut self, session: &mut Session, writer: &mut trace::Writer) -> std::io::Result<Vec<Violation>> {
        self.record(session, writer)?;
        session.clock_notices();
        let now = session.runner.clock.now();
        if now < self.next_ms {
            return Ok(Vec::new());
        }
        self.next_ms = now + self.every_ms;
        let log_lines = self.hold_open_tracebacks(session);
        let steady = self.dataplane.is_empty() && log_lines.is_empty() && self.log_lines.is_empty();
        let facts = facts(session, std::mem::take(&mut self.dataplane), log_lines);
        if !session.policies.is_empty() {
            // Policies move the pairs that must not communicate.
            self.checker.isolation = isolation_rules(session.isolation());
        }
        let report = self.checker.check(&session.runner.net, &facts);
        self.current = report.violations.iter().map(Violation::fingerprint).collect();
        self.steady_at = steady.then_some(now);
        Ok(self.persistence.observe(now, &report.violations))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_invariants::check::Invariant;

    fn monitor(now: u64) -> Monitor {
        let config = Config::from_toml(
            "[network]\ntopology = \"linear\"\nsize = 2\n[[controllers]]\nkind = \"os-ken\"\napps = [\"x\"]\n\
             [invariants]\npersist_ms = 1000\ncheck_every_ms = 10\n",
            std::path::Path::new("config.toml"),
        )
        .unwrap();
        Monitor::new(&config, now)
    }

    fn blackhole() -> Violation {
        Violation {
            invariant: Invariant::Blackhole,
            elements: vec!["h1".into(), "h2".into()],
            summary: String::new(),
            witness: None,
            culprit: None,
        }
    }

    /// A steady check at `now` with `violations` present, as `observe` makes it.
    fn steady_check(m: &mut Monitor, now: u64, violations: &[Violation]) {
        m.persistence.observe(now, violations);
        m.next_ms = now + m.every_ms;
        m.steady_at = Some(now);
    }

    #[test]
    fn a_steady_run_skips_to_the_last_check_before_its_next_timer() {
        let mut m = monitor(0);
        steady_check(&mut m, 100, &[]);
        assert_eq!(m.until_news(100, 2_505), 2_500, "the last check on the schedule before 2,505 ms");
        assert_eq!(m.until_news(100, 2_500), 2_490, "a timer due at a check's time is not skipped over");
        assert_eq!(m.until_news(100, 105), 110, "nothing to skip: the next check as usual");
        let far = m.until_news(100, u64::MAX);
        assert!(far > 1 << 60 && (far - 100).is_multiple_of(10), "no timer at all: {far}");
    }

    #[test]
    fn a_violation_present_is_checked_where_it_would_start_to_persist() {
        let mut m = monitor(0);
        steady_check(&mut m, 95, &[blackhole()]);
        steady_check(&mut m, 100, &[blackhole()]);
        // First seen at 95: persistent from 1,095 on, so the check at 1,100
        // (checks come at 100 + 10 k), not one later.
        assert_eq!(m.until_news(100, 5_000), 1_100);
        assert_eq!(m.until_news(100, 700), 690, "a timer first");
    }

    #[test]
    fn an_unsteady_check_or_a_disturbance_skips_nothing() {
        let mut m = monitor(0);
        steady_check(&mut m, 100, &[]);
        assert_eq!(m.until_news(101, 5_000), 110, "not right after the check");
        m.disturbed();
        assert_eq!(m.until_news(100, 5_000), 110, "an input was given since");
    }
}
