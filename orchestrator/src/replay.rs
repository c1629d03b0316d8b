//! `sts replay`: run a recorded trace's external events again, against fresh
//! controllers and a fresh network, and see whether its violation comes back.
//!
//! As the research did it (brief §6): each external event is injected at the
//! recorded spacing from the previous one, but not before the internal events
//! that preceded it in the original run (its happens-before predecessors,
//! matched by fingerprint) have been seen again, and not later than the
//! expected time plus epsilon if some never come. Internal events that are new
//! pass through. Keepalives are never waited on (they are not recorded).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use sts_invariants::Violation;
use sts_mocknet::Network;

use crate::cli::exit;
use crate::config::Config;
use crate::experiment::{self, Experiment};
use crate::observe::Monitor;
use crate::inputs;
use crate::netrun::Settle;
use crate::session::{self, RunError};
use crate::trace::{self, External, Header, Trace};

/// How long replay waits in one slice while watching for expected events.
const SLICE_MS: u64 = 10;

/// Where a replay first differed from the original.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Divergence {
    /// The first original internal event (trace seq and key) not seen again.
    pub first_missing: Option<(u64, String)>,
    /// The first replayed internal event the original did not have.
    pub first_unexpected: Option<String>,
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
#[derive(Default)]
struct Balance {
    counts: HashMap<String, i64>,
    /// Keys with a positive count (expected and not yet seen).
    missing: usize,
}

impl Balance {
    fn expect(&mut self, key: &str) {
        let c = self.counts.entry(key.to_string()).or_default();
        *c += 1;
        if *c == 1 {
            self.missing += 1;
        }
    }

    fn see(&mut self, key: &str) {
        let c = self.counts.entry(key.to_string()).or_default();
        if *c == 1 {
            self.missing -= 1;
        }
        *c -= 1;
    }
}

/// Checks a trace against a config before anything is started: every
/// external event must fit the network. Errors name the trace line.
pub fn validate(config: &Config, trace: &Trace, path: &Path) -> Result<(), RunError> {
    let net = Network::new(&config.topology(), config.network.openflow.wire());
    for r in &trace.records {
        if let Some(e) = &r.external {
            inputs::validate(&net, config.controllers.len(), &config.relays.iter().map(|r| r.name.clone()).collect::<Vec<_>>(), e).map_err(|m| RunError::BadInput(format!("{}:{}: external: {m}", path.display(), r.line)))?;
        }
    }
    Ok(())
}

/// Replays `trace` once, writing the new trace and logs into `out`.
pub async fn replay_once(config: &Config, trace: &Trace, out: &Path, run: u32) -> Result<ReplayResult, RunError> {
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", out.display()));
    let epsilon = config.interpose.epsilon_ms;
    let p = &config.pingall;
    let settle = Settle { quiet_ms: p.quiet_ms, min_wait_ms: p.min_wait_ms, max_ms: p.settle_ms };
    // The recorded run's dates, served back to the controllers.
    let mut config = config.clone();
    config.time.wall_epoch_ns = trace.header.wall_epoch_ns;
    let mut s = session::start(&config, &out.join("logs"), settle).await?;
    let config = &config;
    let trace_path = out.join("trace.jsonl");
    let header = Header { wall_epoch_ns: s.wall_epoch_ns, ..Header::new(trace.header.seed) };
    let mut writer = trace::Writer::create(&trace_path, &header).map_err(env)?;
    let mut monitor = Monitor::new(config, s.runner.clock.now());
    let wanted = trace.violation().map(Violation::fingerprint);

    let mut balance = Balance::default();
    let mut observed: Vec<String> = Vec::new();
    let mut found: Option<Violation> = None;
    let (mut injected, mut timeouts) = (0, 0);
    let mut last_orig: Option<u64> = None;
    let mut last_injected = 0u64;
    let mut pending = trace.records.iter().peekable();

    // Observes for one slice; true when the wanted violation (or, without
    // one, any persistent violation) has been found.
    macro_rules! slice {
        ($ms:expr) => {{
            s.runner.run_for(Duration::from_millis($ms)).await;
            for e in monitor.record(&mut s, &mut writer).map_err(env)? {
                if let Some(k) = e.key() {
                    balance.see(&k);
                    observed.push(k);
                }
            }
            if let Some(v) = monitor.observe(&mut s, &mut writer).map_err(env)? {
                let hit = wanted.as_ref().is_none_or(|w| *w == v.fingerprint());
                if hit || found.is_none() {
                    found = Some(v);
                }
                hit
            } else {
                false
            }
        }};
    }

    let externals: Vec<(u64, &External)> = trace.externals();
    'events: for (orig_t, e) in &externals {
        // Everything recorded before this event is its happens-before set.
        while let Some(r) = pending.peek() {
            if r.external.as_ref().is_some_and(|x| std::ptr::eq(x, *e)) {
                pending.next();
                break;
            }
            if let Some(k) = r.internal.as_ref().and_then(|i| i.key()) {
                balance.expect(&k);
            }
            pending.next();
        }
        let target = match last_orig {
            None => *orig_t,
            Some(prev) => last_injected + orig_t.saturating_sub(prev),
        };
        loop {
            let now = s.runner.clock.now();
            if now >= target && balance.missing == 0 {
                break;
            }
            if now >= target + epsilon {
                timeouts += 1;
                break;
            }
            if slice!(SLICE_MS.min((target + epsilon).saturating_sub(now)).max(1)) && wanted.is_some() {
                break 'events;
            }
        }
        for e in monitor.record(&mut s, &mut writer).map_err(env)? {
            if let Some(k) = e.key() {
                balance.see(&k);
                observed.push(k);
            }
        }
        let now = s.runner.clock.now();
        writer.external(now, (*e).clone()).map_err(env)?;
        inputs::apply(&mut s, e).await.map_err(RunError::BadInput)?;
        injected += 1;
        last_orig = Some(*orig_t);
        last_injected = now;
    }
    // After the last input: as long as the original took to show its
    // violation, plus the persistence threshold, a check and epsilon.
    let tail = match (trace.records.iter().find(|r| r.violation.is_some()), externals.last()) {
        (Some(v), Some((t, _))) => v.t_ms.saturating_sub(*t),
        _ => 0,
    };
    let until = s.runner.clock.now() + tail + config.invariants.persist_ms + config.invariants.check_every_ms + epsilon;
    let mut reproduced = found.as_ref().is_some_and(|v| wanted.as_ref().is_none_or(|w| *w == v.fingerprint()));
    while !reproduced && s.runner.clock.now() < until {
        reproduced = slice!(SLICE_MS) && found.is_some();
    }
    if let Some(v) = &found {
        writer.violation(s.runner.clock.now(), v.clone()).map_err(env)?;
    }
    let divergence = diverge(trace, &observed);
    let clock = s.runner.clock.summary();
    Ok(ReplayResult { run, reproduced, violation: found, injected, timeouts, divergence, trace: trace_path, clock })
}

/// The first original internal event not seen again, and the first replayed
/// one the original did not have (both by key, as multisets in order).
fn diverge(trace: &Trace, observed: &[String]) -> Divergence {
    let original: Vec<(u64, String)> =
        trace.records.iter().take_while(|r| r.violation.is_none()).filter_map(|r| r.internal.as_ref().and_then(|i| i.key()).map(|k| (r.seq, k))).collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for k in observed {
        *seen.entry(k).or_default() += 1;
    }
    let mut first_missing = None;
    for (seq, k) in &original {
        match seen.get_mut(k.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                first_missing = Some((*seq, k.clone()));
                break;
            }
        }
    }
    let mut had: HashMap<&str, usize> = HashMap::new();
    for (_, k) in &original {
        *had.entry(k).or_default() += 1;
    }
    let mut first_unexpected = None;
    for k in observed {
        match had.get_mut(k.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                first_unexpected = Some(k.clone());
                break;
            }
        }
    }
    Divergence { first_missing, first_unexpected }
}

/// The summary `sts replay` writes to `DIR/replays/summary.json`.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub violation: Option<String>,
    pub runs: Vec<ReplayResult>,
    pub reproduced: usize,
}

/// The `sts replay` command.
pub fn command(dir: &Path, repeat: u32) -> u8 {
    let exp = Experiment::open(dir);
    let config = match Config::load(&exp.config()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sts replay: {e}");
            return exit::BAD_INPUT;
        }
    };
    let trace = match Trace::load(&exp.trace()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sts replay: {e}");
            return exit::BAD_INPUT;
        }
    };
    if let Err(e) = validate(&config, &trace, &exp.trace()) {
        eprintln!("sts replay: {e}");
        return e.exit_code();
    }
    let rt = match crate::session::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts replay: {e}");
            return e.exit_code();
        }
    };
    let wanted = trace.violation().map(Violation::fingerprint);
    let first_free = (1..).find(|n| !exp.replay(*n).exists()).unwrap_or(1);
    eprintln!(
        "sts replay: {} external events, looking for {}; {repeat} run(s)",
        trace.externals().len(),
        wanted.as_deref().unwrap_or("any persistent violation")
    );
    // A trace written by hand (or by a tool that records only inputs) has no
    // internal events: every replayed message would be "unexpected".
    let has_internals = trace.records.iter().any(|r| r.internal.is_some());
    if !has_internals {
        eprintln!("sts replay: the trace records no internal events, so divergence is not reported");
    }
    let mut runs = Vec::new();
    for i in 0..repeat.max(1) {
        let n = first_free + i;
        match rt.block_on(replay_once(&config, &trace, &exp.replay(n), n)) {
            Ok(r) => {
                let what = match (&r.violation, r.reproduced) {
                    (Some(v), true) => format!("reproduced: {}", v.summary),
                    (Some(v), false) => format!("not reproduced; found instead: {}", v.fingerprint()),
                    (None, _) => "not reproduced".to_string(),
                };
                println!("replay {n}: {what} ({} inputs, {} waits timed out)", r.injected, r.timeouts);
                if let Some(clock) = &r.clock {
                    println!("  {clock}");
                }
                if let Some((seq, k)) = &r.divergence.first_missing {
                    println!("  first missing: seq {seq}: {}", shorten(k));
                }
                if let Some(k) = r.divergence.first_unexpected.as_ref().filter(|_| has_internals) {
                    println!("  first unexpected: {}", shorten(k));
                }
                runs.push(r);
            }
            Err(e) => {
                eprintln!("sts replay: {e}");
                return e.exit_code();
            }
        }
    }
    let reproduced = runs.iter().filter(|r| r.reproduced).count();
    println!("reproduced {reproduced}/{} ({})", runs.len(), wanted.as_deref().unwrap_or("any violation"));
    let summary = Summary { violation: wanted, reproduced, runs };
    if let Err(e) = experiment::write_json(&dir.join("replays").join("summary.json"), &summary) {
        eprintln!("sts replay: cannot write the summary: {e}");
    }
    if reproduced > 0 {
        exit::VIOLATION
    } else {
        exit::OK
    }
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 160 {
        format!("{}...", s.chars().take(160).collect::<String>())
    } else {
        s.to_string()
    }
}
