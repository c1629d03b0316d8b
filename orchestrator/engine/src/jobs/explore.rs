//! `sts explore`: the message orders an interposer can produce around a
//! run, tried one at a time. The run is replayed once as it was recorded
//! (the *base*); its conflicting pairs that timing alone ordered
//! ([`crate::races::flips`]) each become a variant: the base's inputs with
//! one `control_delay_next` placed before the input that set the pair's
//! first message off, holding it at the proxy until after the second. A variant that
//! ends in a persistent violation is a find, written as an experiment
//! directory like a fuzz find (replay, minimize, console and report work on
//! it unchanged).
//!
//! Race-directed rather than exhaustive: the candidates are the orders the
//! happens-before analysis says nothing forced, in the order
//! [`crate::races::flips`] gives (flips past an input first).
//!
//! Stateful by default: a variant starts from a checkpoint of the base run
//! taken where it leaves it ([`crate::branches`]); [`Start`] chooses
//! checkpoints after the handshakes or fresh controllers instead (what
//! `scripts/evaluate-explore` compares).

use std::path::{Path, PathBuf};
use std::time::Instant;

use sts_trace::{Event, External, Record, Trace};

use crate::branches::Branches;
use crate::config::Config;
use crate::peek::PeekError;
use crate::races::{self, Flip};
use crate::replay::{self, ReplayResult};
use crate::{Engine, Progress, RunError};

/// How far to explore.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The most variants replayed.
    pub budget: usize,
    /// Keep going after the first find.
    pub all: bool,
    /// Where each variant's replay starts.
    pub start: Start,
    /// How the run is analysed (the reaction window; how messages are
    /// described).
    pub races: races::Options,
    /// Only list the flips the base run offers; replay none.
    pub list: bool,
    /// Instead of the analysis's flips, random ones from this seed: a
    /// message of the base run picked at random, held 50–1,000 ms (random
    /// message fuzzing around the same inputs: the baseline the analysis is
    /// measured against).
    pub random: Option<u64>,
    /// Losses instead of orders: each FLOW_MOD a variant can drop
    /// ([`races::drops`]; with `random`, random messages dropped).
    pub drops: bool,
}

/// Where a variant's replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// From a checkpoint of the base run taken where the variant leaves it
    /// ([`crate::branches`]): only the variant's own suffix is replayed.
    #[default]
    Branch,
    /// From a checkpoint taken after the handshakes ([`crate::warm`]), as a
    /// minimization's candidates: the whole variant is replayed.
    Handshakes,
    /// From new controllers, every time (re-execution from the start).
    Fresh,
}

impl Start {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Start::Branch => "branch",
            Start::Handshakes => "handshakes",
            Start::Fresh => "fresh",
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            budget: 200,
            all: false,
            start: Start::Branch,
            races: races::Options::default(),
            list: false,
            random: None,
            drops: false,
        }
    }
}

/// A variant that ended in a violation.
#[derive(Debug, Clone)]
pub struct Find {
    /// The experiment directory written for it (`DIR/explore/finds/N`).
    pub dir: PathBuf,
    /// Which variant (from 1) and the flip it tried.
    pub execution: usize,
    pub flip: Flip,
    /// The violation's one-line summary.
    pub violation: String,
}

/// What an exploration did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The base run already violated (this summary): nothing was explored.
    pub base_violation: Option<String>,
    /// The flips the base run offered (at most the budget's worth), and
    /// variants replayed (the base not counted).
    pub flips: Vec<Flip>,
    pub executions: usize,
    pub finds: Vec<Find>,
    /// Wall time of the variants alone, seconds.
    pub seconds: f64,
    /// Warm places used (or why every replay was fresh).
    pub warm: Option<crate::warm::Summary>,
    /// Checkpoints on the base run and rewinds to them (starting from
    /// branches), or why variants could not start there.
    pub branches: Option<crate::branches::Summary>,
    pub branches_refused: Option<String>,
}

impl Outcome {
    /// Variants replayed per second of wall time.
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.executions as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The base's records up to the input that set `flip`'s message off (the
/// last input before it; the message itself when none is), the delay
/// placed there, then the base's later inputs alone (what follows the delay
/// may not happen again: a replay waits for none of it), renumbered. Placed
/// before that input, the delay is armed when the message comes, whichever
/// message of its type and switch comes first (a later one waits behind it).
pub fn variant(base: &Trace, flip: &Flip) -> Option<Trace> {
    let message = base.records.iter().position(|r| r.seq == flip.message)?;
    let at = base.records[..message].iter().rposition(|r| r.external().is_some()).unwrap_or(message);
    let mut records: Vec<Record> = base.records[..at].iter().filter(|r| r.violation().is_none()).cloned().collect();
    records.push(Record { seq: 0, t_ms: base.records[at].t_ms, event: Event::External(fault(flip)), line: 0 });
    records.extend(base.records[at..].iter().filter(|r| r.external().is_some()).cloned());
    Some(Trace { header: base.header.clone(), records }.renumbered())
}

/// The input `flip`'s variant leaves the base at (its index among the
/// base's inputs: the fault goes in just before it), as [`variant`] places
/// the fault; `None` when no input came before the message (a variant of
/// the handshakes, which starts no later than the base).
pub fn departure(base: &Trace, flip: &Flip) -> Option<usize> {
    let message = base.records.iter().position(|r| r.seq == flip.message)?;
    let at = base.records[..message].iter().rposition(|r| r.external().is_some())?;
    Some(base.records[..at].iter().filter(|r| r.external().is_some()).count())
}

/// The input a flip arms: its message held for its delay, or dropped.
fn fault(flip: &Flip) -> External {
    if flip.drop {
        External::ControlDrop { switch: flip.dpid, msg_type: flip.msg_type }
    } else {
        External::ControlDelayNext { switch: flip.dpid, msg_type: flip.msg_type, ms: flip.delay_ms }
    }
}

/// `n` random flips of `base`: each a message picked at random (HELLOs and
/// echoes aside, and among those a variant can hold: the first of their
/// type and switch after an input) held a random 50–1,000 ms, or dropped.
pub fn random_flips(base: &Trace, n: usize, seed: u64, drop: bool) -> Vec<Flip> {
    use rand::{Rng, SeedableRng};
    let messages: Vec<&Record> = races::placeable(base).into_iter().map(|i| &base.records[i]).collect();
    if messages.is_empty() {
        return Vec::new();
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .filter_map(|_| {
            let r = messages[rng.gen_range(0..messages.len())];
            let Some(sts_trace::Internal::Openflow { dpid, msg, dir, .. }) = r.internal() else { return None };
            let what = match dir {
                sts_trace::Direction::ToSwitch => format!("{msg} → s{dpid}"),
                sts_trace::Direction::ToController => format!("{msg} s{dpid} →"),
            };
            let event = races::Event { seq: r.seq, t_ms: r.t_ms, what, delivered: None };
            Some(Flip {
                message: r.seq,
                dpid: *dpid,
                msg_type: *msg,
                past: r.seq,
                at: format!("s{dpid}"),
                conflict: "picked at random".into(),
                delay_ms: rng.gen_range(50..=1000),
                drop,
                first: event.clone(),
                second: event,
            })
        })
        .collect()
}

/// Explores around `trace` (an experiment's, with `config`) and writes
/// under `out` (`base/`, `runs/N/` while replaying, `finds/N/`).
pub async fn run(
    engine: &Engine,
    config: &Config,
    config_text: &str,
    trace: &Trace,
    out: &Path,
    opts: &Options,
) -> Result<Outcome, RunError> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).map_err(|e| RunError::Environment(format!("{}: {e}", out.display())))?;
    let base = replay::replay_once(engine, config, trace, &out.join("base"), 1).await?;
    let recorded = Trace::load(&base.trace).map_err(|e| RunError::Environment(e.to_string()))?;
    if let Some(v) = &base.violation {
        return Ok(Outcome {
            base_violation: Some(v.summary.clone()),
            flips: Vec::new(),
            executions: 0,
            finds: Vec::new(),
            seconds: 0.0,
            warm: None,
            branches: None,
            branches_refused: None,
        });
    }
    let network = races::places(config);
    let flips = match (opts.random, opts.drops) {
        (None, false) => races::flips(&recorded, &network, &opts.races),
        (None, true) => races::drops(&recorded, &network, &opts.races),
        (Some(seed), drop) => random_flips(&recorded, opts.budget, seed, drop),
    };
    let flips: Vec<Flip> = flips.into_iter().take(opts.budget).collect();
    let total = if opts.list { 0 } else { flips.len() };
    let places = (opts.start != Start::Fresh).then(|| crate::warm::Places::new(out.join("warm")));
    let started = Instant::now();
    let mut finds = Vec::new();
    let mut executions = 0;
    let mut branches: Option<Branches> = None;
    let mut branch_summary = None;
    let mut branches_refused = None;
    if opts.start == Start::Branch && total > 0 {
        let departures = flips.iter().filter_map(|f| departure(&recorded, f)).collect();
        branches = Some(Branches::start(engine, config, &recorded, &out.join("branches"), departures).await?);
    }
    for (k, flip) in flips.iter().take(total).enumerate() {
        engine.progress(Progress::Explore { done: k as u32, total: total as u32, finds: finds.len() as u32 });
        let n = k as u32 + 1;
        let find = out.join("finds").join((finds.len() + 1).to_string());
        // From a branch of the base run, where the variant leaves it.
        if let (Some(b), Some(p)) = (branches.as_mut(), departure(&recorded, flip)) {
            match b.variant(p, &fault(flip)).await {
                Ok(found) => {
                    executions += 1;
                    branch_summary = Some(b.summary());
                    if let Some(v) = found {
                        b.save(&find, config_text)?;
                        finds.push(Find {
                            dir: find,
                            execution: k + 1,
                            flip: flip.clone(),
                            violation: v.summary.clone(),
                        });
                        if !opts.all {
                            break;
                        }
                    }
                    continue;
                }
                Err(PeekError::Run(e)) => return Err(e),
                Err(PeekError::Refused(why)) => {
                    tracing::info!("variants cannot start where they leave the run ({why}); replaying them whole");
                    branches_refused = Some(why);
                    branches = None;
                }
            }
        }
        let Some(cand) = variant(&recorded, flip) else { continue };
        let dir = out.join("runs").join(n.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let result: Option<ReplayResult> = match &places {
            Some(p) => p.replay(engine, config, &cand, &dir, n, None).await?,
            None => Some(replay::replay_once(engine, config, &cand, &dir, n).await?),
        };
        executions += 1;
        match result.as_ref().and_then(|r| r.violation.as_ref().map(|v| (r, v))) {
            Some((r, v)) => {
                keep_find(config, config_text, r, v, &dir, &find)?;
                finds.push(Find { dir: find, execution: k + 1, flip: flip.clone(), violation: v.summary.clone() });
                if !opts.all {
                    break;
                }
            }
            None => {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(branches);
    engine.progress(Progress::Done);
    let _ = std::fs::remove_dir_all(out.join("runs"));
    let warm = places.as_ref().filter(|p| p.summary().places > 0).map(|p| p.summary());
    Ok(Outcome {
        base_violation: None,
        flips,
        executions,
        finds,
        seconds,
        warm,
        branches: branch_summary,
        branches_refused,
    })
}

/// A find as an experiment directory, as `sts fuzz` writes one: the config
/// and the files it names, the variant's recorded run as its trace (ending
/// in the violation), the violation, the controllers' logs.
fn keep_find(
    config: &Config,
    config_text: &str,
    result: &ReplayResult,
    violation: &sts_invariants::Violation,
    run_dir: &Path,
    find: &Path,
) -> Result<(), RunError> {
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", find.display()));
    let _ = std::fs::remove_dir_all(find);
    let exp = crate::fuzz::create_experiment(config, config_text, find)?;
    std::fs::copy(&result.trace, exp.trace()).map_err(env)?;
    sts_trace::dir::write_json(&exp.violation(), violation).map_err(env)?;
    if run_dir.join("logs").is_dir() {
        std::fs::rename(run_dir.join("logs"), exp.logs()).map_err(env)?;
    }
    let _ = std::fs::remove_dir_all(run_dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_trace::{Direction, Header, Internal, MsgType};

    fn record(t_ms: u64, event: Event) -> Record {
        Record { seq: 0, t_ms, event, line: 0 }
    }

    fn message(t_ms: u64, msg: &str) -> Record {
        record(
            t_ms,
            Event::Internal(Internal::Openflow {
                dpid: 1,
                controller: 0,
                dir: Direction::ToController,
                msg: MsgType::from_name(msg).unwrap(),
                fp: sts_proxy::wire::Fingerprint(format!("of4/{msg} {{}}")),
                raw: None,
                proxy: None,
            }),
        )
    }

    fn ping(t_ms: u64) -> Record {
        record(t_ms, Event::External(External::Ping { src: "h1".into(), dst: "h2".into() }))
    }

    #[test]
    fn a_variant_arms_the_delay_before_the_input_that_set_the_message_off_and_keeps_later_inputs_alone() {
        let base = Trace {
            header: Header::new(Some(1)),
            records: vec![
                message(5, "features_reply"),
                ping(100),
                message(100, "packet_in"),
                message(101, "packet_in"),
                ping(900),
                message(900, "packet_in"),
            ],
        }
        .renumbered();
        let flip = |message: u64| Flip {
            message,
            dpid: 1,
            msg_type: MsgType::from_name("packet_in").unwrap(),
            past: 5,
            at: "c0".into(),
            conflict: String::new(),
            delay_ms: 400,
            drop: false,
            first: races::Event { seq: message, t_ms: 0, what: String::new(), delivered: None },
            second: races::Event { seq: 5, t_ms: 0, what: String::new(), delivered: None },
        };
        let v = variant(&base, &flip(4)).unwrap();
        let kinds: Vec<String> = v
            .records
            .iter()
            .map(|r| match &r.event {
                Event::External(e) => e.describe(),
                Event::Internal(Internal::Openflow { msg, .. }) => msg.to_string(),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(
            kinds,
            ["features_reply", "delay the next packet_in of s1 by 400 ms", "ping h1 -> h2", "ping h1 -> h2"]
        );
        assert_eq!(v.records[1].t_ms, 100, "armed when the ping went in");
        assert_eq!(v.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3, 4], "renumbered");
        // A message before any input: the delay goes just before it.
        let v = variant(&base, &flip(1)).unwrap();
        assert!(matches!(v.records[0].event, Event::External(External::ControlDelayNext { ms: 400, .. })));
        assert_eq!(v.records.len(), 3);
        // A loss: a control_drop in the same place.
        let v = variant(&base, &Flip { drop: true, ..flip(4) }).unwrap();
        assert!(
            matches!(&v.records[1].event, Event::External(e) if e.describe() == "drop the next packet_in of s1"),
            "{:?}",
            v.records[1]
        );
        assert!(variant(&base, &flip(99)).is_none());
        // Where a branch leaves the base: before the input the message
        // followed (its index among the inputs); a message of the
        // handshakes leaves before any input, which no branch serves.
        assert_eq!(departure(&base, &flip(4)), Some(0));
        assert_eq!(departure(&base, &flip(6)), Some(1));
        assert_eq!(departure(&base, &flip(1)), None);
        assert_eq!(departure(&base, &flip(99)), None);
    }
}
