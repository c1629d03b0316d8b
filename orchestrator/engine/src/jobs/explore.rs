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
//!
//! Two faults at a time (`depth` 2, a delay bound of two): once every
//! one-fault variant is tried, each one's own recorded run is analysed as
//! the base was, and its flips whose message came after its fault was
//! armed become two-fault variants, replayed from checkpoints of that run. A two-fault variant
//! whose run, where its second fault is armed, is in a state an earlier
//! variant already left from with the same fault is not tried again
//! ([`state_key`]: every process's history so far, so orders that differ
//! only in how independent messages interleave count once, FlyMC's state
//! symmetry on what sts can see).

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
    /// Go on from where an exploration of the same kind into the same
    /// directory stopped ([`Frontier`]): its base run and candidates, the
    /// untried ones next.
    pub resume: bool,
    /// The most faults in one variant: 1, or 2 (each one-fault variant's
    /// run explored in turn; orders only, not with `random` or `drops`).
    pub depth: usize,
}

/// The deepest exploration `Options::depth` allows.
pub const MAX_DEPTH: usize = 2;

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
            resume: false,
            depth: 1,
        }
    }
}

/// A variant that ended in a violation.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Find {
    /// The experiment directory written for it (`DIR/explore/finds/N`).
    pub dir: PathBuf,
    /// Which variant (from 1) and the flip it tried.
    pub execution: usize,
    pub flip: Flip,
    /// In a two-fault variant, the fault armed before `flip` (the one-fault
    /// variant it extends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier: Option<Flip>,
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
    /// Candidates tried before this sitting (resumed), and left untried
    /// after it.
    pub resumed: usize,
    pub left: usize,
    /// Candidates the analysis offered that were the very variant of an
    /// earlier one, not tried again.
    pub repeated: usize,
    /// With depth 2: the two-fault candidates (none until every one-fault
    /// variant was tried), those left out because an earlier variant left
    /// the same state with the same fault, and those tried in this sitting.
    pub deeper: Option<DeeperSummary>,
}

/// What the two-fault level of an exploration offered and did.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct DeeperSummary {
    pub offered: usize,
    pub same_state: usize,
    pub tried: usize,
    /// Not tried yet (the budget ran out, or a find stopped it).
    pub left: usize,
    /// The one-fault variants whose runs were explored (each replayed once
    /// as a base for its own checkpoints).
    pub bases: usize,
}

/// A two-fault candidate: one-fault candidate `parent`'s variant (its index
/// in [`Frontier::flips`]) with `flip`, found in that variant's own run,
/// armed after its fault.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Deeper {
    pub parent: usize,
    pub flip: Flip,
}

/// An exploration's candidates and how far it got, written as
/// `OUT/frontier.json` when the base run is analysed and after every
/// variant, so that an exploration stopped by its budget, a signal or a
/// crash goes on where it stopped (`sts explore --resume`) with the same
/// base run and candidates, their numbers unchanged.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Frontier {
    /// `sts-explore-frontier`.
    pub format: String,
    pub version: u32,
    /// What the candidates are ([`candidates`]): resuming needs the same.
    pub candidates: String,
    /// Every candidate, in the order they are tried.
    pub flips: Vec<Flip>,
    /// Candidates left out as the very variant of an earlier one
    /// ([`distinct_variants`]).
    #[serde(default)]
    pub repeated: usize,
    /// How many of them have been tried: the first ones.
    pub tried: usize,
    pub finds: Vec<Find>,
    /// Two-fault candidates, listed once every one-fault one was tried
    /// (with depth 2), how many of them were tried, and how many were left
    /// out for a state already left from with the same fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deeper: Option<Vec<Deeper>>,
    #[serde(default)]
    pub deeper_tried: usize,
    #[serde(default)]
    pub same_state: usize,
}

const FRONTIER_FORMAT: &str = "sts-explore-frontier";

impl Frontier {
    fn path(out: &Path) -> PathBuf {
        out.join("frontier.json")
    }

    /// `out`'s frontier; a clear error when there is none or it is broken.
    pub fn load(out: &Path) -> Result<Frontier, RunError> {
        let path = Frontier::path(out);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            RunError::BadInput(format!("nothing to resume in {}: {}: {e}", out.display(), path.display()))
        })?;
        let frontier: Frontier =
            serde_json::from_str(&text).map_err(|e| RunError::BadInput(format!("{}: {e}", path.display())))?;
        let deeper_past =
            frontier.deeper.as_ref().map_or(frontier.deeper_tried > 0, |d| frontier.deeper_tried > d.len());
        if frontier.format != FRONTIER_FORMAT
            || frontier.version != 1
            || frontier.tried > frontier.flips.len()
            || deeper_past
            || frontier.deeper.as_ref().is_some_and(|d| d.iter().any(|c| c.parent >= frontier.flips.len()))
        {
            return Err(RunError::BadInput(format!(
                "{}: not a frontier sts can resume (format {:?} version {}, {} of {} tried)",
                path.display(),
                frontier.format,
                frontier.version,
                frontier.tried,
                frontier.flips.len()
            )));
        }
        Ok(frontier)
    }

    /// Written whole beside the old one, then renamed over it: a reader
    /// (or a resume after a kill) sees one or the other.
    fn save(&self, out: &Path) -> Result<(), RunError> {
        let path = Frontier::path(out);
        let tmp = out.join("frontier.json.new");
        let text = serde_json::to_string(self).expect("a frontier serializes");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| RunError::Environment(format!("{}: {e}", path.display())))
    }
}

/// What the candidates of an exploration with `opts` are, in words.
pub fn candidates(opts: &Options) -> String {
    match (opts.random, opts.drops) {
        (None, false) if opts.depth >= 2 => "orders timing alone decided, two at a time".into(),
        (None, false) => "orders timing alone decided".into(),
        (None, true) => "FLOW_MODs lost".into(),
        (Some(seed), false) => format!("random holds, seed {seed}"),
        (Some(seed), true) => format!("random losses, seed {seed}"),
    }
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
    let (message, input) = armed_at(base, flip)?;
    let at = input.unwrap_or(message);
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
    let at = armed_at(base, flip)?.1?;
    Some(base.records[..at].iter().filter(|r| r.external().is_some()).count())
}

/// Where `flip`'s message is among the base's records, and the last input
/// before it (where its fault is armed), if any.
fn armed_at(base: &Trace, flip: &Flip) -> Option<(usize, Option<usize>)> {
    let message = base.records.iter().position(|r| r.seq == flip.message)?;
    Some((message, base.records[..message].iter().rposition(|r| r.external().is_some())))
}

/// `flips` without those whose variant is the very trace of an earlier
/// one's (the same input to arm at, the same fault: a message held the same
/// time, past another event that came as soon), and how many were left out.
/// Their order is kept.
pub fn distinct_variants(base: &Trace, flips: Vec<Flip>) -> (Vec<Flip>, usize) {
    let mut seen = std::collections::HashSet::new();
    let offered = flips.len();
    let kept: Vec<Flip> = flips
        .into_iter()
        .filter(|f| {
            let at = armed_at(base, f).map(|(message, input)| input.unwrap_or(message));
            seen.insert((at, f.dpid, f.msg_type, f.drop, if f.drop { 0 } else { f.delay_ms }))
        })
        .collect();
    let repeated = offered - kept.len();
    (kept, repeated)
}

/// The input a flip arms: its message held for its delay, or dropped.
fn fault(flip: &Flip) -> External {
    if flip.drop {
        External::ControlDrop { switch: flip.dpid, msg_type: flip.msg_type }
    } else {
        External::ControlDelayNext { switch: flip.dpid, msg_type: flip.msg_type, ms: flip.delay_ms }
    }
}

/// Where a variant keeps its own run for the two-fault level: one-fault
/// candidate `k` (from 0) of the exploration written under `out`.
fn variant_trace(out: &Path, k: usize) -> PathBuf {
    out.join("variants").join(format!("{}.jsonl", k + 1))
}

/// Whether `e` is a fault a variant arms (not one of the run's inputs).
fn is_fault(e: &External) -> bool {
    matches!(e, External::ControlDelayNext { .. } | External::ControlDrop { .. })
}

/// A key for the state `trace`'s run is in just before its record `at`,
/// with `fault` about to be armed there: per process (every controller and
/// every switch), the messages delivered to it in order and how many inputs
/// came before each; the messages on their way (held by the proxy); the
/// faults armed and not yet met; the inputs given. Two runs with the same
/// key gave every process the same history, however messages to different
/// processes interleaved, so (as far as sts can see) they are in the same
/// state, and the same fault armed with the same inputs to come makes the
/// same variant. Times are left out: orders, not delays.
pub fn state_key(trace: &Trace, at: usize, fault: &External) -> u64 {
    use std::collections::BTreeMap;
    use std::hash::{Hash, Hasher};
    use sts_trace::{Direction, Internal, ProxyDecision};
    let mut inputs: Vec<String> = Vec::new();
    let mut histories: BTreeMap<String, Vec<(usize, &str)>> = BTreeMap::new();
    let mut on_the_way: BTreeMap<u64, (String, &str)> = BTreeMap::new();
    let mut armed: Vec<&External> = Vec::new();
    for r in &trace.records[..at.min(trace.records.len())] {
        match &r.event {
            Event::External(e) if is_fault(e) => armed.push(e),
            Event::External(e) => inputs.push(e.describe()),
            Event::Internal(Internal::Openflow { dpid, controller, dir, msg, fp, proxy, .. }) => {
                let to = match dir {
                    Direction::ToSwitch => format!("s{dpid}"),
                    Direction::ToController => format!("c{controller}"),
                };
                // A fault met by its message is spent.
                if proxy.is_some() {
                    if let Some(i) = armed.iter().position(|e| match e {
                        External::ControlDelayNext { switch, msg_type, .. }
                        | External::ControlDrop { switch, msg_type } => switch == dpid && msg_type == msg,
                        _ => false,
                    }) {
                        armed.remove(i);
                    }
                }
                match proxy {
                    None => histories.entry(to).or_default().push((inputs.len(), fp.0.as_str())),
                    Some(ProxyDecision::Queued) => {
                        on_the_way.insert(r.seq, (to, fp.0.as_str()));
                    }
                    Some(ProxyDecision::Dropped) => {}
                }
            }
            Event::Internal(Internal::Delivered { of }) => {
                if let Some((to, fp)) = on_the_way.remove(of) {
                    histories.entry(to).or_default().push((inputs.len(), fp));
                }
            }
            _ => {}
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    inputs.hash(&mut h);
    histories.hash(&mut h);
    on_the_way.values().collect::<Vec<_>>().hash(&mut h);
    armed.iter().map(|e| e.describe()).collect::<Vec<_>>().hash(&mut h);
    fault.describe().hash(&mut h);
    h.finish()
}

/// The two-fault candidates of an exploration written under `out` whose
/// one-fault candidates are `flips` around `base`: for each one-fault
/// variant whose run was kept and is not among `found` (a find needs no
/// second fault), the flips of that run (in the analysis's
/// order) whose message came after its fault was armed, less those armed
/// in a state an earlier variant (one-fault ones first) already left from
/// with the same fault ([`state_key`]). Returns them and how many were
/// left out so.
pub fn two_fault_candidates(
    base: &Trace,
    flips: &[Flip],
    out: &Path,
    found: &std::collections::BTreeSet<usize>,
    places: &races::Places,
    opts: &races::Options,
) -> (Vec<Deeper>, usize) {
    let mut seen = std::collections::HashSet::new();
    for f in flips {
        if let Some((message, input)) = armed_at(base, f) {
            seen.insert(state_key(base, input.unwrap_or(message), &fault(f)));
        }
    }
    let mut deeper = Vec::new();
    let mut same_state = 0;
    for (k, first) in flips.iter().enumerate().filter(|(k, _)| !found.contains(k)) {
        let Ok(run) = Trace::load(&variant_trace(out, k)) else { continue };
        let first_fault = fault(first);
        let Some(armed) = run.records.iter().position(|r| r.external() == Some(&first_fault)) else { continue };
        let (offered, _) = distinct_variants(&run, races::flips(&run, places, opts));
        for flip in offered {
            let Some((message, input)) = armed_at(&run, &flip) else { continue };
            if message <= armed {
                continue;
            }
            // Armed together with the first fault (after the same input):
            // the state includes it.
            let at = input.unwrap_or(message).max(armed + 1);
            if seen.insert(state_key(&run, at, &fault(&flip))) {
                deeper.push(Deeper { parent: k, flip });
            } else {
                same_state += 1;
            }
        }
    }
    (deeper, same_state)
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
            let event = races::Event { seq: r.seq, t_ms: r.t_ms, what, delivered: None, behind: None };
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
/// under `out` (`base/`, `frontier.json`, `runs/N/` while replaying,
/// `finds/N/`); with `opts.resume`, goes on from `out`'s frontier instead.
/// At most `opts.budget` variants per call.
pub async fn run(
    engine: &Engine,
    config: &Config,
    config_text: &str,
    trace: &Trace,
    out: &Path,
    opts: &Options,
) -> Result<Outcome, RunError> {
    if opts.depth == 0 || opts.depth > MAX_DEPTH {
        return Err(RunError::BadInput(format!("--depth {}: 1 or 2 faults per variant", opts.depth)));
    }
    if opts.depth > 1 && (opts.random.is_some() || opts.drops) {
        return Err(RunError::BadInput(
            "--depth 2 explores orders the analysis offers, not --random or --drops".into(),
        ));
    }
    // One exploration of `out` at a time (a resume beside the run it
    // resumes would rewind the same checkpoints); the lock outlives the
    // clearing of `out` below.
    std::fs::create_dir_all(out).map_err(|e| RunError::Environment(format!("{}: {e}", out.display())))?;
    let _lock = crate::dirlock::take(&out.join("lock")).map_err(|e| match e {
        crate::dirlock::Refused::Held { pid } => RunError::BadInput(format!(
            "{} is being explored by another sts{}; wait for it, or stop it",
            out.display(),
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        )),
        crate::dirlock::Refused::Io(e) => RunError::Environment(format!("{}: {e}", out.join("lock").display())),
    })?;
    let (recorded, mut frontier) = if opts.resume {
        let frontier = Frontier::load(out)?;
        let wanted = candidates(opts);
        if frontier.candidates != wanted {
            return Err(RunError::BadInput(format!(
                "{} explored {}, not {wanted}: resume with the options it started with",
                out.display(),
                frontier.candidates
            )));
        }
        let base = out.join("base").join("trace.jsonl");
        let recorded = Trace::load(&base)
            .map_err(|e| RunError::BadInput(format!("the exploration's base run ({}): {e}", base.display())))?;
        (recorded, frontier)
    } else {
        clear_all_but_lock(out);
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
                resumed: 0,
                left: 0,
                repeated: 0,
                deeper: None,
            });
        }
        let network = races::places(config);
        let offered = match (opts.random, opts.drops) {
            (None, false) => races::flips(&recorded, &network, &opts.races),
            (None, true) => races::drops(&recorded, &network, &opts.races),
            (Some(seed), drop) => random_flips(&recorded, opts.budget, seed, drop),
        };
        let (flips, repeated) = distinct_variants(&recorded, offered);
        let frontier = Frontier {
            format: FRONTIER_FORMAT.into(),
            version: 1,
            candidates: candidates(opts),
            flips,
            repeated,
            tried: 0,
            finds: Vec::new(),
            deeper: None,
            deeper_tried: 0,
            same_state: 0,
        };
        frontier.save(out)?;
        (recorded, frontier)
    };
    let resumed = frontier.tried;
    // This sitting's candidates: the untried, at most the budget's worth.
    let flips: Vec<Flip> = frontier.flips[resumed..].iter().take(opts.budget).cloned().collect();
    let total = if opts.list || (!opts.all && !frontier.finds.is_empty()) { 0 } else { flips.len() };
    let places = (opts.start != Start::Fresh).then(|| crate::warm::Places::new(out.join("warm")));
    let keep = opts.depth > 1;
    if keep {
        std::fs::create_dir_all(out.join("variants"))
            .map_err(|e| RunError::Environment(format!("{}: {e}", out.join("variants").display())))?;
    }
    let started = Instant::now();
    let mut sitting = Sitting {
        engine,
        config,
        config_text,
        out,
        places: &places,
        opts,
        executions: 0,
        branches_closed: crate::branches::Summary::default(),
        branch_summary: None,
        branches_refused: None,
    };
    let mut branches: Option<Branches> = None;
    if opts.start == Start::Branch && total > 0 {
        let departures = flips.iter().filter_map(|f| departure(&recorded, f)).collect();
        // The base's own directory: its controllers' zygotes serve again.
        let files = out.join("base").join("logs");
        branches =
            Some(Branches::start(engine, config, &recorded, &out.join("branches"), Some(&files), departures).await?);
    }
    let goal = (resumed + total) as u32;
    for (i, flip) in flips.iter().take(total).enumerate() {
        let k = resumed + i;
        engine.progress(Progress::Explore { done: k as u32, total: goal, finds: frontier.finds.len() as u32 });
        let find = out.join("finds").join((frontier.finds.len() + 1).to_string());
        let kept = keep.then(|| variant_trace(out, k));
        let found = sitting.try_variant(&recorded, flip, k, &find, kept.as_deref(), &mut branches).await?;
        let stop = found.is_some() && !opts.all;
        if let Some((dir, violation)) = found {
            frontier.finds.push(Find { dir, execution: k + 1, flip: flip.clone(), earlier: None, violation });
        }
        frontier.tried = k + 1;
        frontier.save(out)?;
        if stop {
            break;
        }
    }
    sitting.close(&mut branches);
    let deeper = if keep
        && !opts.list
        && frontier.tried == frontier.flips.len()
        && (opts.all || frontier.finds.is_empty())
        && sitting.executions < opts.budget
    {
        Some(two_faults(&mut sitting, &recorded, &mut frontier).await?)
    } else {
        frontier.deeper.as_ref().map(|d| DeeperSummary {
            offered: d.len(),
            same_state: frontier.same_state,
            ..DeeperSummary::default()
        })
    };
    let deeper = deeper.map(|d| DeeperSummary {
        left: frontier.deeper.as_ref().map_or(0, |all| all.len() - frontier.deeper_tried),
        ..d
    });
    let seconds = started.elapsed().as_secs_f64();
    engine.progress(Progress::Done);
    let _ = std::fs::remove_dir_all(out.join("runs"));
    let warm = places.as_ref().filter(|p| p.summary().places > 0).map(|p| p.summary());
    let left =
        frontier.flips.len() - frontier.tried + frontier.deeper.as_ref().map_or(0, |d| d.len() - frontier.deeper_tried);
    Ok(Outcome {
        base_violation: None,
        flips,
        executions: sitting.executions,
        finds: frontier.finds.clone(),
        seconds,
        warm,
        branches: sitting.branch_summary,
        branches_refused: sitting.branches_refused,
        resumed,
        left,
        repeated: frontier.repeated,
        deeper,
    })
}

/// The two-fault level (see the module's words): lists its candidates
/// once, then tries the untried ones, the variants extending one one-fault
/// variant replayed from checkpoints of that variant's own run.
async fn two_faults(
    sitting: &mut Sitting<'_>,
    base: &Trace,
    frontier: &mut Frontier,
) -> Result<DeeperSummary, RunError> {
    let (engine, out, opts) = (sitting.engine, sitting.out, sitting.opts);
    if frontier.deeper.is_none() {
        let places = races::places(sitting.config);
        // One-fault variants that found (numbered from 1 as candidates are).
        let found = frontier.finds.iter().filter(|f| f.earlier.is_none()).map(|f| f.execution - 1).collect();
        let (deeper, same_state) = two_fault_candidates(base, &frontier.flips, out, &found, &places, &opts.races);
        frontier.deeper = Some(deeper);
        frontier.same_state = same_state;
        frontier.save(out)?;
    }
    let deeper = frontier.deeper.clone().unwrap_or_default();
    let mut summary =
        DeeperSummary { offered: deeper.len(), same_state: frontier.same_state, ..DeeperSummary::default() };
    let room = opts.budget - sitting.executions;
    let todo: Vec<(usize, Deeper)> = deeper.into_iter().enumerate().skip(frontier.deeper_tried).take(room).collect();
    // The runs they extend, read once (checkpoints of each borrow it).
    let mut bases: std::collections::BTreeMap<usize, Trace> = std::collections::BTreeMap::new();
    for (_, d) in &todo {
        if let std::collections::btree_map::Entry::Vacant(e) = bases.entry(d.parent) {
            let path = variant_trace(out, d.parent);
            let run = Trace::load(&path)
                .map_err(|e| RunError::Environment(format!("a variant's run ({}): {e}", path.display())))?;
            e.insert(run);
        }
    }
    let first_number = frontier.flips.len();
    let goal = (first_number + frontier.deeper_tried + todo.len()) as u32;
    let mut at = 0;
    while at < todo.len() {
        let parent = todo[at].1.parent;
        let group_end = todo[at..].iter().position(|(_, d)| d.parent != parent).map_or(todo.len(), |n| at + n);
        let run = &bases[&parent];
        let mut branches = None;
        if opts.start == Start::Branch && sitting.branches_refused.is_none() {
            let departures = todo[at..group_end].iter().filter_map(|(_, d)| departure(run, &d.flip)).collect();
            // The base run's directory, as for the first level: its
            // controllers' zygotes (faucet's are keyed by the files' paths)
            // serve every base's branches.
            let files = out.join("base").join("logs");
            branches = Some(
                Branches::start(engine, sitting.config, run, &out.join("branches"), Some(&files), departures).await?,
            );
            summary.bases += 1;
        }
        for (j, d) in &todo[at..group_end] {
            let k = first_number + j;
            engine.progress(Progress::Explore { done: k as u32, total: goal, finds: frontier.finds.len() as u32 });
            let find = out.join("finds").join((frontier.finds.len() + 1).to_string());
            let found = sitting.try_variant(run, &d.flip, k, &find, None, &mut branches).await?;
            summary.tried += 1;
            let stop = found.is_some() && !opts.all;
            if let Some((dir, violation)) = found {
                let earlier = Some(frontier.flips[parent].clone());
                frontier.finds.push(Find { dir, execution: k + 1, flip: d.flip.clone(), earlier, violation });
            }
            frontier.deeper_tried = j + 1;
            frontier.save(out)?;
            if stop {
                sitting.close(&mut branches);
                return Ok(summary);
            }
        }
        sitting.close(&mut branches);
        at = group_end;
    }
    Ok(summary)
}

/// What one sitting of an exploration replays with, and what it counted.
struct Sitting<'a> {
    engine: &'a Engine,
    config: &'a Config,
    config_text: &'a str,
    out: &'a Path,
    places: &'a Option<crate::warm::Places>,
    opts: &'a Options,
    executions: usize,
    /// Checkpoints and rewinds of every base so far (the closed ones, and
    /// with the open one).
    branches_closed: crate::branches::Summary,
    branch_summary: Option<crate::branches::Summary>,
    branches_refused: Option<String>,
}

impl Sitting<'_> {
    /// Replays `flip`'s variant of `recorded` (candidate `k`, from 0) as
    /// [`Sitting::replay_variant`] does, falling back to whole replays for good when
    /// checkpoints are refused; keeps the variant's run as `keep`, if
    /// given. A find's directory and violation.
    async fn try_variant(
        &mut self,
        recorded: &Trace,
        flip: &Flip,
        k: usize,
        find: &Path,
        keep: Option<&Path>,
        branches: &mut Option<Branches<'_>>,
    ) -> Result<Option<(PathBuf, String)>, RunError> {
        let found = self.replay_variant(recorded, flip, k, find, keep, branches).await;
        let found = match found {
            Ok(found) => found,
            Err(VariantError::Run(e)) => return Err(e),
            Err(VariantError::Refused(why)) => {
                tracing::info!("variants cannot start where they leave the run ({why}); replaying them whole");
                self.branches_refused = Some(why);
                *branches = None;
                self.replay_variant(recorded, flip, k, find, keep, branches).await.map_err(|e| match e {
                    VariantError::Run(e) => e,
                    VariantError::Refused(why) => RunError::Environment(why),
                })?
            }
        };
        self.executions += 1;
        if let Some(b) = branches.as_ref() {
            self.branch_summary = Some(self.branches_closed.plus(b.summary()));
        }
        Ok(found)
    }

    /// Replays the variant of `flip` (candidate `k`, from 0), from a branch of
    /// the base run where it leaves it when `branches` has one, otherwise whole;
    /// a find is written as `find`: its directory and violation. With `keep`,
    /// the variant's recorded run is copied there.
    async fn replay_variant(
        &self,
        recorded: &Trace,
        flip: &Flip,
        k: usize,
        find: &Path,
        keep: Option<&Path>,
        branches: &mut Option<Branches<'_>>,
    ) -> Result<Option<(PathBuf, String)>, VariantError> {
        let (engine, config, config_text, out, places) =
            (self.engine, self.config, self.config_text, self.out, self.places);
        if let (Some(b), Some(p)) = (branches.as_mut(), departure(recorded, flip)) {
            let found = b.variant(p, &fault(flip)).await;
            if let (Some(to), Ok(_)) = (keep, &found) {
                b.keep_trace(to).map_err(VariantError::Run)?;
            }
            return match found {
                Ok(Some(v)) => {
                    b.save(find, config_text).map_err(VariantError::Run)?;
                    Ok(Some((find.to_owned(), v.summary.clone())))
                }
                Ok(None) => Ok(None),
                Err(PeekError::Run(e)) => Err(VariantError::Run(e)),
                Err(PeekError::Refused(why)) => Err(VariantError::Refused(why)),
            };
        }
        let Some(cand) = variant(recorded, flip) else { return Ok(None) };
        let n = k as u32 + 1;
        let dir = out.join("runs").join(n.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let result: Option<ReplayResult> = match places {
            Some(p) => p.replay(engine, config, &cand, &dir, n, None).await.map_err(VariantError::Run)?,
            None => Some(replay::replay_once(engine, config, &cand, &dir, n).await.map_err(VariantError::Run)?),
        };
        if let (Some(to), Some(r)) = (keep, result.as_ref()) {
            std::fs::copy(&r.trace, to)
                .map_err(|e| VariantError::Run(RunError::Environment(format!("{}: {e}", to.display()))))?;
        }
        match result.as_ref().and_then(|r| r.violation.as_ref().map(|v| (r, v))) {
            Some((r, v)) => {
                keep_find(config, config_text, r, v, &dir, find).map_err(VariantError::Run)?;
                Ok(Some((find.to_owned(), v.summary.clone())))
            }
            None => {
                let _ = std::fs::remove_dir_all(&dir);
                Ok(None)
            }
        }
    }

    /// Lets `branches` go (its controllers with it), its checkpoints and
    /// rewinds counted with those of the bases before it.
    fn close(&mut self, branches: &mut Option<Branches<'_>>) {
        if let Some(b) = branches.take() {
            self.branches_closed = self.branches_closed.plus(b.summary());
        }
    }
}

/// Empties `out` of an earlier exploration, its lock aside.
fn clear_all_but_lock(out: &Path) {
    for entry in std::fs::read_dir(out).into_iter().flatten().flatten() {
        if entry.file_name() != "lock" {
            let path = entry.path();
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
    }
}

/// Why a variant was not replayed.
enum VariantError {
    Run(RunError),
    /// It cannot start where it leaves the run: replay it whole.
    Refused(String),
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

    fn of(dpid: u64, dir: Direction, msg: &str, body: &str, proxy: Option<sts_trace::ProxyDecision>) -> Record {
        record(
            0,
            Event::Internal(Internal::Openflow {
                dpid,
                controller: 0,
                dir,
                msg: MsgType::from_name(msg).unwrap(),
                fp: sts_proxy::wire::Fingerprint(format!("of4/{msg} {body}")),
                raw: None,
                proxy,
            }),
        )
    }

    #[test]
    fn a_state_is_every_process_history_whatever_the_interleaving() {
        use sts_trace::ProxyDecision::Queued;
        let up = |d: u64, body: &str| of(d, Direction::ToController, "packet_in", body, None);
        let down = |d: u64, body: &str| of(d, Direction::ToSwitch, "flow_mod", body, None);
        let key = |mut records: Vec<Record>| {
            for (i, r) in records.iter_mut().enumerate() {
                r.seq = i as u64 + 1;
            }
            let t = Trace { header: Header::new(Some(1)), records };
            let at = t.records.len();
            state_key(&t, at, &fault(&Flip { drop: true, ..flip_of(1) }))
        };
        let base = key(vec![ping(0), up(1, "a"), down(2, "x"), up(2, "b")]);
        // A rule to s2 and a packet-in from s1 reach different processes:
        // either order is the same state.
        assert_eq!(key(vec![ping(0), down(2, "x"), up(1, "a"), up(2, "b")]), base);
        // Two packet-ins read by the controller in the other order: not.
        assert_ne!(key(vec![ping(0), down(2, "x"), up(2, "b"), up(1, "a")]), base);
        // A message before or after an input: not.
        assert_ne!(key(vec![up(1, "a"), ping(0), down(2, "x"), up(2, "b")]), base);
        // A message still held by the proxy, then delivered in its place.
        let held = vec![ping(0), of(1, Direction::ToController, "packet_in", "a", Some(Queued)), down(2, "x")];
        assert_ne!(key(held.clone()), base);
        let mut delivered = held.clone();
        delivered.push(record(0, Event::Internal(Internal::Delivered { of: 2 })));
        delivered.push(up(2, "b"));
        assert_eq!(key(delivered), base);
        // A fault armed and not yet met is part of the state; met, it is spent.
        let armed = record(0, Event::External(fault(&Flip { drop: true, ..flip_of(1) })));
        let mut pending = vec![armed.clone(), ping(0), up(1, "a"), down(2, "x"), up(2, "b")];
        assert_ne!(key(pending.clone()), base);
        pending.push(of(1, Direction::ToController, "packet_in", "c", Some(sts_trace::ProxyDecision::Dropped)));
        assert_eq!(key(pending), base);
        // And the fault about to be armed is part of the key.
        let t = Trace { header: Header::new(Some(1)), records: vec![ping(0), up(1, "a")] }.renumbered();
        assert_ne!(state_key(&t, 2, &fault(&flip_of(1))), state_key(&t, 2, &fault(&Flip { drop: true, ..flip_of(1) })));
    }

    /// A hold of s1's next PACKET_IN (the message `message`) for 400 ms.
    fn flip_of(message: u64) -> Flip {
        Flip {
            message,
            dpid: 1,
            msg_type: MsgType::from_name("packet_in").unwrap(),
            past: 5,
            at: "c0".into(),
            conflict: String::new(),
            delay_ms: 400,
            drop: false,
            first: races::Event { seq: message, t_ms: 0, what: String::new(), delivered: None, behind: None },
            second: races::Event { seq: 5, t_ms: 0, what: String::new(), delivered: None, behind: None },
        }
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
        let flip = flip_of;
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

        // The same message held the same time past two events is one
        // variant; held longer, or lost, another; so is the same type and
        // switch held past the same input (a fault takes whichever comes
        // first).
        let past = |f: Flip, past: u64, ms: u64| Flip { past, delay_ms: ms, ..f };
        let offered = vec![
            past(flip(4), 5, 400),
            past(flip(4), 6, 400),
            past(flip(4), 6, 500),
            Flip { drop: true, ..flip(4) },
            Flip { drop: true, delay_ms: 900, ..flip(4) },
            past(flip(3), 6, 400),
            past(flip(6), 5, 400),
        ];
        let (kept, repeated) = distinct_variants(&base, offered.clone());
        assert_eq!(repeated, 3);
        assert_eq!(kept, vec![offered[0].clone(), offered[2].clone(), offered[3].clone(), offered[6].clone()]);
    }
}
