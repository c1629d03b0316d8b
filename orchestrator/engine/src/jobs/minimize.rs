//! `sts minimize`: shrink a failing trace to a minimal causal sequence (MCS)
//! with delta debugging over its external events.
//!
//! - Events that must go together form one *unit*: a link or switch failure
//!   with its recovery, a controller crash with its restart, a dataplane or
//!   control fault with its end. Host migrations are units of
//!   their own; a candidate's migrations are rewritten so each starts where the
//!   host really is (it never jumps).
//! - Each candidate is replayed up to `--replays` times and counts as
//!   reproducing at the first reproduction (non-determinism).
//! - Every result is cached by candidate and saved in `DIR/mcs/state.json`
//!   after each test: `sts minimize` killed and started again continues from
//!   its last completed test.
//! - `--jobs J` keeps up to J candidates under test, each with its own
//!   controllers, a freed place taking the next candidate at once; the
//!   outcome is the same as one at a time (the first reproducing candidate
//!   in order wins, and a round ends as soon as that one is known).
//!
//! Internal events to wait for: by default a candidate keeps the original
//! internal events that followed the inputs it keeps (and those before the
//! first input). `--peek` infers them for each candidate instead
//! ([`PeekMode`]): by one dry run of its inputs without waits (`on`), by a
//! prefix replay per input as the research did (`prefix`), or by one run with
//! a checkpoint and rollback per input (`checkpoints`, `crate::peek`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};
use sts_invariants::{Same, Violation};
use sts_trace::dir as experiment;
use sts_trace::{External, Port, Trace};

use crate::config::Config;
use crate::replay;
use crate::session::RunError;
use crate::{Engine, NoticeKind, Progress};

/// Groups external events (indices into `externals`) into units that are
/// kept or removed together.
pub fn units(externals: &[&External]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut open: BTreeMap<Condition<'_>, usize> = BTreeMap::new();
    for (i, e) in externals.iter().enumerate() {
        match pairing(e) {
            Some((condition, true)) => {
                open.insert(condition, out.len());
                out.push(vec![i]);
            }
            Some((condition, false)) => match open.remove(&condition) {
                Some(u) => out[u].push(i),
                None => out.push(vec![i]),
            },
            None => out.push(vec![i]),
        }
    }
    out
}

/// What kind of input `e` is, for trying whole kinds at once: traffic,
/// link failures, migrations, switch failures, message-level faults ...
fn kind(e: &External) -> &'static str {
    match e {
        External::Ping { .. } => "traffic",
        External::LinkDown { .. } | External::LinkUp { .. } => "link",
        External::HostMigrate { .. } => "migration",
        External::DataplaneDrop { .. }
        | External::DataplaneDropEnd { .. }
        | External::DataplaneDelay { .. }
        | External::DataplaneDelayEnd { .. } => "dataplane",
        External::SwitchDown { .. } | External::SwitchUp { .. } => "switch",
        External::ControlDelay { .. } | External::ControlDelayEnd { .. } => "control delay",
        External::ControllerCrash { .. } | External::ControllerRestart { .. } => "controller",
        External::Partition { .. } | External::PartitionHeal { .. } => "partition",
        _ => "message",
    }
}

/// The units ([`units`]) grouped by the kind of their first input, the
/// largest group first (ties by kind): what [`Ddmin::by_groups`] tries to
/// remove whole. Empty when all are of one kind (nothing to try).
pub fn kinds(externals: &[&External], units: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut by_kind: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (u, events) in units.iter().enumerate() {
        by_kind.entry(kind(externals[events[0]])).or_default().push(u);
    }
    if by_kind.len() < 2 {
        return Vec::new();
    }
    let mut groups: Vec<(&str, Vec<usize>)> = by_kind.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    groups.into_iter().map(|(_, g)| g).collect()
}

/// A condition one input starts and a later one ends: a failed link (named
/// by its two ends as the trace gives them), a data-plane fault on a link, a
/// failed switch, a delayed control channel, a crashed controller, a cut
/// relay, held messages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Condition<'e> {
    LinkDown(Port, Port),
    Dropping(Port, Port),
    Delaying(Port, Port),
    SwitchDown(u64),
    ControlDelayed(u64),
    Crashed(&'e str),
    Partitioned(&'e str),
    Holding(Option<u64>, sts_trace::MsgType),
}

/// For an event that starts or ends a condition: which, and whether it
/// starts it. The end goes with the latest start of the same condition.
fn pairing(e: &External) -> Option<(Condition<'_>, bool)> {
    use Condition::*;
    Some(match e {
        External::LinkDown { a, b } => (LinkDown(*a, *b), true),
        External::LinkUp { a, b } => (LinkDown(*a, *b), false),
        External::DataplaneDrop { a, b } => (Dropping(*a, *b), true),
        External::DataplaneDropEnd { a, b } => (Dropping(*a, *b), false),
        External::DataplaneDelay { a, b, .. } => (Delaying(*a, *b), true),
        External::DataplaneDelayEnd { a, b } => (Delaying(*a, *b), false),
        External::SwitchDown { switch } => (SwitchDown(*switch), true),
        External::SwitchUp { switch } => (SwitchDown(*switch), false),
        External::ControlDelay { switch, .. } => (ControlDelayed(*switch), true),
        External::ControlDelayEnd { switch } => (ControlDelayed(*switch), false),
        External::ControllerCrash { controller } => (Crashed(controller), true),
        External::ControllerRestart { controller } => (Crashed(controller), false),
        External::Partition { relay } => (Partitioned(relay), true),
        External::PartitionHeal { relay } => (Partitioned(relay), false),
        External::ControlHold { switch, msg_type } => (Holding(*switch, *msg_type), true),
        // A release ends every hold of its switch (or all): paired with none
        // in particular, it stays where it is.
        // Policies depend on each other by name (`after`): a policy whose
        // prerequisites were left out is skipped when it comes (inputs::apply).
        External::Ping { .. }
        | External::Policy { .. }
        | External::HostMigrate { .. }
        | External::ControlRelease { .. }
        | External::HeldMessage { .. }
        | External::ControlDrop { .. }
        | External::ControlDelayNext { .. }
        | External::ControlReorderNext { .. } => return None,
    })
}

/// The candidate trace keeping the external events `keep` (indices into the
/// trace's external events): the header, the internal events before the
/// first input and after each kept input, the kept inputs with migrations
/// rewritten to start where the host is, and the original violation.
///
/// Times are kept, except that the pause before the first kept input is cut
/// to the original's pause before its first input: removed inputs need no
/// time, and replay injects at the recorded times.
pub fn candidate(trace: &Trace, keep: &BTreeSet<usize>, host_start: &BTreeMap<String, u64>) -> Trace {
    let externals = trace.externals();
    let first_orig = externals.first().map_or(0, |(t, _)| *t);
    let first_kept = keep.iter().next().and_then(|&i| externals.get(i)).map_or(first_orig, |(t, _)| *t);
    let shift = first_kept.saturating_sub(first_orig);
    let mut records = Vec::new();
    let mut ext = 0usize;
    let mut keeping = true;
    let mut at = host_start.clone();
    for r in &trace.records {
        if r.external().is_some() {
            keeping = keep.contains(&ext);
            ext += 1;
            if keeping {
                let mut r = r.clone();
                r.t_ms = r.t_ms.saturating_sub(shift);
                if let sts_trace::Event::External(External::HostMigrate { host, from, to }) = &mut r.event {
                    if let Some(now) = at.get(host.as_str()) {
                        *from = *now;
                    }
                    at.insert(host.clone(), *to);
                }
                records.push(r);
            }
        } else if r.violation().is_some() || keeping {
            let mut r = r.clone();
            if ext > 0 {
                r.t_ms = r.t_ms.saturating_sub(shift);
            }
            records.push(r);
        }
    }
    Trace { header: trace.header.clone(), records }
}

/// Zeller's ddmin over `n` units, as a state machine the caller drives:
/// [`Ddmin::candidates`] gives the current round's candidates (sorted unit
/// indices), [`Ddmin::advance`] takes their verdicts (in order; only the
/// first success counts, so candidates may be tested in parallel and untested
/// ones after a success answered `false`). Ends with a 1-minimal subset for
/// which the test holds (it must hold for all units).
///
/// Made [`Ddmin::by_groups`], it first tries removing whole groups (the
/// inputs of one kind: every ping, every switch failure ...), one group per
/// candidate, before it splits what is left in halves.
#[derive(Debug, Clone)]
pub struct Ddmin {
    kept: Vec<usize>,
    granularity: usize,
    round: Vec<Vec<usize>>,
    chunks: usize,
    done: bool,
    /// Groups not yet tried for removal as a whole (empty once the halves
    /// begin), and which group each candidate of a group round leaves out.
    groups: Vec<Vec<usize>>,
    round_groups: Vec<usize>,
}

impl Ddmin {
    /// Starts over all `n` units.
    pub fn new(n: usize) -> Ddmin {
        Self::by_groups(n, Vec::new())
    }

    /// Starts over all `n` units, first trying to remove each of `groups`
    /// whole, in the order given: a round of candidates each leaving one
    /// group out; the first that reproduces is kept and the other groups are
    /// tried again on it, until a round keeps none. Then plain ddmin on
    /// what is left. The result is still 1-minimal.
    pub fn by_groups(n: usize, groups: Vec<Vec<usize>>) -> Ddmin {
        let mut d = Ddmin {
            kept: (0..n).collect(),
            granularity: 2,
            round: Vec::new(),
            chunks: 0,
            done: false,
            groups,
            round_groups: Vec::new(),
        };
        d.plan();
        d
    }

    fn plan(&mut self) {
        if self.kept.len() < 2 {
            self.done = true;
            self.round.clear();
            return;
        }
        if !self.groups.is_empty() {
            let kept = &self.kept;
            let (round, which): (Vec<Vec<usize>>, Vec<usize>) = self
                .groups
                .iter()
                .enumerate()
                .map(|(g, group)| (kept.iter().copied().filter(|u| !group.contains(u)).collect::<Vec<_>>(), g))
                .filter(|(rest, _)| !rest.is_empty() && rest.len() < kept.len())
                .unzip();
            if !round.is_empty() {
                self.round = round;
                self.round_groups = which;
                self.chunks = 0;
                return;
            }
            self.groups.clear();
        }
        self.round_groups.clear();
        let chunks = split(&self.kept, self.granularity);
        self.chunks = chunks.len();
        let mut round = chunks.clone();
        if self.granularity > 2 {
            round.extend(chunks.iter().map(|ch| self.kept.iter().copied().filter(|x| !ch.contains(x)).collect()));
        }
        self.round = round;
    }

    /// This round's candidates; empty when done.
    pub fn candidates(&self) -> &[Vec<usize>] {
        &self.round
    }

    /// True when the kept units are 1-minimal.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// How many of this round's candidates, from the first, are chunks that
    /// may be presumed misses when each is part of a set already seen not to
    /// reproduce (under monotonicity it cannot reproduce either). The result
    /// stays 1-minimal whatever the bug: that rests on the last round, at a
    /// granularity of one unit per chunk, whose complements (the kept units
    /// less one) are always tried. Only in a round of two units are the
    /// chunks those complements: none there, and none in a round of whole
    /// kinds.
    pub fn presumable_chunks(&self) -> usize {
        match self.round_groups.is_empty() && self.kept.len() > 2 {
            true => self.chunks,
            false => 0,
        }
    }

    /// The smallest subset found so far.
    pub fn kept(&self) -> &[usize] {
        &self.kept
    }

    /// The rounds that can follow this one, one per outcome: candidate `i`
    /// the first to reproduce, in order, then none of them. Their
    /// candidates are what free places test speculatively ([`Search::test`]).
    pub fn next_rounds(&self) -> Vec<Ddmin> {
        self.next_rounds_given(&[])
    }

    /// [`Ddmin::next_rounds`] after the outcomes `known` verdicts of this
    /// round's candidates (in order; `None` or missing: not known yet) rule
    /// out: "candidate `i` first" needs no success before `i` and no
    /// failure of `i`; "none" needs no success.
    pub fn next_rounds_given(&self, known: &[Option<bool>]) -> Vec<Ddmin> {
        let n = self.round.len();
        let verdict = |j: usize| known.get(j).copied().flatten();
        let possible =
            |i: usize| (0..i.min(n)).all(|j| verdict(j) != Some(true)) && (i == n || verdict(i) != Some(false));
        let mut outcomes: Vec<Vec<bool>> = (0..n).map(|i| (0..n).map(|j| j == i).collect()).collect();
        outcomes.push(vec![false; n]);
        outcomes
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| possible(i))
            .filter_map(|(_, verdicts)| {
                let mut next = self.clone();
                next.advance(&verdicts);
                (!next.is_done()).then_some(next)
            })
            .collect()
    }

    /// Takes this round's verdicts; true when the kept set shrank.
    pub fn advance(&mut self, results: &[bool]) -> bool {
        if self.done {
            return false;
        }
        if !self.round_groups.is_empty() {
            let taken = results.iter().position(|&ok| ok).filter(|&i| i < self.round.len());
            match taken {
                Some(i) => {
                    self.kept = self.round.swap_remove(i);
                    self.groups.remove(self.round_groups[i]);
                }
                None => self.groups.clear(),
            }
            self.plan();
            return taken.is_some();
        }
        let reduced = match results.iter().position(|&ok| ok) {
            Some(i) if i < self.round.len() => {
                self.kept = self.round.swap_remove(i);
                self.granularity = if i < self.chunks { 2 } else { (self.granularity - 1).max(2) };
                true
            }
            _ if self.granularity >= self.kept.len() => {
                self.done = true;
                false
            }
            _ => {
                self.granularity = (self.granularity * 2).min(self.kept.len());
                false
            }
        };
        if !self.done {
            self.plan();
        }
        reduced
    }
}

/// [`Ddmin`] run through with a synchronous `test`; `on_reduce` sees each
/// smaller subset.
pub fn ddmin(
    n: usize,
    mut test: impl FnMut(&[Vec<usize>]) -> Vec<bool>,
    mut on_reduce: impl FnMut(&[usize]),
) -> Vec<usize> {
    let mut d = Ddmin::new(n);
    while !d.is_done() {
        let results = test(d.candidates());
        if d.advance(&results) {
            on_reduce(d.kept());
        }
    }
    d.kept
}

fn split(c: &[usize], n: usize) -> Vec<Vec<usize>> {
    let n = n.min(c.len()).max(1);
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let end = start + (c.len() - start) / (n - i);
        out.push(c[start..end].to_vec());
        start = end;
    }
    out
}

/// What `DIR/mcs/state.json` keeps between runs.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    /// Candidate (sorted unit indices, joined by commas) → reproduced.
    pub tested: BTreeMap<String, bool>,
    pub replays: u64,
    pub curve: Vec<usize>,
    /// The level of sameness the verdicts were reached at (a resumed
    /// minimization at another level starts again).
    #[serde(default)]
    pub same: Option<Same>,
    /// Candidates tested ahead of their round, in places a round left free.
    #[serde(default)]
    pub speculated: u64,
    /// Candidates whose replays were called off once an earlier one of
    /// their round reproduced (their verdicts were not needed).
    #[serde(default)]
    pub called_off: u64,
    /// Each round of the search: its candidates, and how many of them had
    /// to be known (up to the first that reproduced): what K places could
    /// test at once (docs/cluster.md's scaling model).
    #[serde(default)]
    pub rounds: Vec<[usize; 2]>,
    /// Chunks presumed misses without a replay, as parts of a candidate
    /// already seen not to reproduce ([`Options::monotone`]).
    #[serde(default)]
    pub presumed: u64,
    /// Some candidate reproduced though a larger one did not: no chunk is
    /// presumed a miss any more ([`Search::misses`]).
    #[serde(default)]
    pub not_monotone: bool,
}

/// Whether two culprits are the same at `level`: with the switch they name
/// at `switch` and `exact`, without it otherwise (the rule is the bug; the
/// switch is where it showed this time).
pub fn culprits_agree(a: &str, b: &str, level: Same) -> bool {
    match level {
        Same::Switch | Same::Exact => a == b,
        _ => sts_invariants::identity::without_switch(a) == sts_invariants::identity::without_switch(b),
    }
}

/// The report written to `DIR/mcs/report.{json,md}`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The original violation's identity at `same`.
    pub violation: String,
    /// When a replay's violation counted as the original's.
    pub same: Same,
    /// What caused the original violation, where known.
    pub culprit: Option<String>,
    /// Whether the final replays' violation has the original's culprit, at
    /// `same` ([`culprits_agree`]; `None` when either has none, or no final
    /// replay reproduced). `observed` has theirs.
    pub same_culprit: Option<bool>,
    pub original_inputs: usize,
    pub mcs_inputs: usize,
    pub replays: u64,
    /// Of those, candidates tested ahead of their round in places a round
    /// left free (more workers than candidates); 0 with `--jobs 1`.
    #[serde(default)]
    pub speculated: u64,
    /// Candidates of a round called off once an earlier one reproduced.
    #[serde(default)]
    pub called_off: u64,
    /// Chunks presumed misses without a replay, as parts of a candidate
    /// seen not to reproduce (`--monotone`).
    #[serde(default)]
    pub presumed: u64,
    /// Presuming stopped: some candidate reproduced though a larger one did
    /// not (a bug that is not monotone, or replays that are not deterministic).
    #[serde(default)]
    pub not_monotone: bool,
    /// How candidates were replayed from checkpoints after the handshakes
    /// (`--warm`; absent when off, or on another executor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<crate::warm::Summary>,
    /// Each round: [its candidates, those needed up to the first success].
    #[serde(default)]
    pub rounds: Vec<[usize; 2]>,
    pub seconds: f64,
    /// External events left after each reduction.
    pub curve: Vec<usize>,
    pub final_replays: u32,
    pub final_reproduced: usize,
    pub budget_exhausted: bool,
    /// The violation shows up with no input at all (the empty sequence,
    /// tried first, reproduces it): the network was never healthy.
    #[serde(default)]
    pub present_without_inputs: bool,
    /// The search past delta debugging's 1-minimal result, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond: Option<Beyond>,
    /// The MCS's inputs, each with its place in the original trace.
    #[serde(default)]
    pub events: Vec<McsEvent>,
    /// The violation as the first reproducing final replay saw it, with its
    /// witness (absent when none reproduced).
    #[serde(default)]
    pub observed: Option<Violation>,
    /// The inputs as one line each (`T ms: input`, replay times).
    pub mcs: Vec<String>,
}

/// What the search past ddmin ([`Options::beyond`]) did: inputs before and
/// after it, and the replays it cost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Beyond {
    pub from: usize,
    pub to: usize,
    pub replays: u64,
    /// It stopped at its replay cap (as many replays as before it).
    #[serde(default)]
    pub capped: bool,
}

/// One input of the MCS.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McsEvent {
    /// Its `seq` in the original trace.
    pub seq: u64,
    /// When the original run injected it.
    pub original_t_ms: u64,
    /// When the MCS's replays inject it: the original times, less the pause
    /// the removed inputs before the first kept one took.
    pub t_ms: u64,
    pub input: String,
}

fn key(c: &[usize]) -> String {
    c.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(",")
}

/// How a candidate's internal events are inferred (PEEK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeekMode {
    /// Keep the original run's internal events after each kept input.
    Off,
    /// One dry run of the candidate's inputs, without waits (`--peek on`).
    Dry,
    /// One run per input replaying its prefix, then peeking (the research's PEEK).
    Prefix,
    /// One run with a checkpoint and rollback per input; falls back to
    /// `Prefix` where checkpoints cannot be used (it says why, once).
    Checkpoints,
}

impl PeekMode {
    /// Every mode, in the order `--help` lists them.
    pub const ALL: [PeekMode; 4] = [PeekMode::Off, PeekMode::Dry, PeekMode::Prefix, PeekMode::Checkpoints];

    /// Parses the `--peek` values: off, on, prefix, checkpoints.
    pub fn from_name(s: &str) -> Option<PeekMode> {
        Some(match s {
            "off" => PeekMode::Off,
            "on" => PeekMode::Dry,
            "prefix" => PeekMode::Prefix,
            "checkpoints" => PeekMode::Checkpoints,
            _ => return None,
        })
    }

    /// The `--peek` value naming this mode.
    pub fn name(self) -> &'static str {
        match self {
            PeekMode::Off => "off",
            PeekMode::Dry => "on",
            PeekMode::Prefix => "prefix",
            PeekMode::Checkpoints => "checkpoints",
        }
    }
}

/// Options of `sts minimize`.
#[derive(Debug, Clone)]
pub struct Options {
    pub replays: u32,
    pub jobs: u32,
    /// How to infer each candidate's internal events (PEEK), if at all.
    pub peek: PeekMode,
    pub budget_s: Option<u64>,
    pub final_replays: u32,
    /// When two violations are the same bug; `None`: the config's
    /// `[invariants] same` (default `culprit`).
    pub same: Option<Same>,
    /// After ddmin, look for a smaller sequence elsewhere in the trace
    /// (ddmin's result is 1-minimal, not always the smallest): see
    /// [`Search::beyond`].
    pub beyond: bool,
    /// Fill places a round leaves free with later rounds' candidates
    /// ([`speculation`]), and a place nothing else wants with a candidate's
    /// next replay ([`Testing`]); the result is the same either way.
    pub speculate: bool,
    /// Before splitting the trace in halves, try removing each kind of
    /// input whole ([`kinds`], [`Ddmin::by_groups`]).
    pub by_kind: bool,
    /// Replay candidates on this machine from a checkpoint taken after the
    /// handshakes ([`crate::warm`]) instead of starting their controllers.
    pub warm: bool,
    /// Presume a miss, without replaying it, for a chunk that is part of a
    /// candidate already seen not to reproduce
    /// ([`Ddmin::presumable_chunks`]): a bug that needs more inputs
    /// needs them all. The result is still 1-minimal.
    pub monotone: bool,
}

impl Default for Options {
    /// What `sts minimize` does without options.
    fn default() -> Options {
        Options {
            replays: 1,
            jobs: 1,
            peek: PeekMode::Off,
            budget_s: None,
            final_replays: 10,
            same: None,
            beyond: true,
            speculate: true,
            by_kind: true,
            warm: true,
            monotone: true,
        }
    }
}

/// One candidate to test: its trace, where its runs go, and how.
#[derive(Debug, Clone)]
pub struct CandidateRun {
    pub trace: Trace,
    /// The minimization's `mcs/` directory (runs go under `runs/`).
    pub mcs_dir: PathBuf,
    /// The number of its first run directory.
    pub first_run: u32,
    pub replays: u32,
    pub peek: PeekMode,
    /// Whether its replays may go on from a checkpoint after the
    /// handshakes (`--warm`; the local executor goes by its places, a
    /// worker by this).
    pub warm: bool,
    /// Its place among its round's candidates, when a reproduction by an
    /// earlier one makes its verdict moot (a replay on this machine then
    /// stops early).
    pub in_round: Option<InRound>,
}

/// A candidate's place in its round: ddmin keeps the first candidate in
/// order that reproduces, so once one does, the verdicts of those after it
/// are not needed (their replays are called off). A candidate tested ahead
/// of its round has a place of its own, called off when the search no
/// longer needs it.
#[derive(Debug, Clone)]
pub struct InRound {
    /// The index of the first candidate known to reproduce (`usize::MAX`: none yet).
    first_hit: Arc<AtomicUsize>,
    index: usize,
    /// Set when the search needs this candidate's verdict no more.
    off: Arc<AtomicBool>,
}

impl InRound {
    /// Places for `n` candidates of one round, in order.
    fn round(n: usize) -> Vec<InRound> {
        let first_hit = Arc::new(AtomicUsize::new(usize::MAX));
        (0..n).map(|index| InRound { first_hit: first_hit.clone(), index, off: Arc::default() }).collect()
    }

    /// The place of a candidate tested outside its round (speculated on).
    fn alone() -> InRound {
        InRound::round(1).remove(0)
    }

    /// True once the candidate (by another of its tries) or an earlier one
    /// of the round reproduced, or the candidate was called off: no replay
    /// of it is needed any more.
    pub fn moot(&self) -> bool {
        self.off.load(Ordering::Relaxed) || self.first_hit.load(Ordering::Relaxed) <= self.index
    }

    /// This candidate reproduced.
    fn hit(&self) {
        self.first_hit.fetch_min(self.index, Ordering::Relaxed);
    }

    /// Its verdict is needed no more.
    fn call_off(&self) {
        self.off.store(true, Ordering::Relaxed);
    }
}

/// The verdict on one candidate: (reproduced, replays used).
pub type Verdict = Result<(bool, u64), RunError>;

/// Where candidates are tested: the seam between delta debugging and the
/// machines its replays run on. Verdicts come back in the order of `batch`.
pub trait Executor: Send + Sync {
    fn test<'a>(
        &'a self,
        engine: &'a Engine,
        config: &'a Config,
        batch: Vec<CandidateRun>,
    ) -> BoxFuture<'a, Vec<Verdict>>;

    /// Replays `trace` once into `out` (run number `run`): the final
    /// replays of the MCS. On this machine unless the executor says otherwise.
    fn replay<'a>(
        &'a self,
        engine: &'a Engine,
        config: &'a Config,
        trace: &'a Trace,
        out: PathBuf,
        run: u32,
    ) -> BoxFuture<'a, Result<Replayed, RunError>> {
        Box::pin(async move {
            let r = replay::replay_once_aside(engine, config, trace, &out, run).await?;
            Ok(Replayed { reproduced: r.reproduced, violation: r.violation })
        })
    }

    /// What replays from checkpoints did, if this executor makes them.
    fn warm(&self) -> Option<crate::warm::Summary> {
        None
    }

    /// The search is over (only the final replays follow): what only
    /// candidates used may go.
    fn search_over(&self) {}
}

/// What one final replay of the MCS showed.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub reproduced: bool,
    pub violation: Option<Violation>,
}

/// Tests a batch on this machine, all at once, each candidate with its own
/// controllers (the default executor): on warm places when it has them.
#[derive(Default)]
pub struct Local {
    warm: Option<crate::warm::Places>,
}

impl Local {
    /// Candidates replayed from warm places whose logs go under `dir`
    /// ([`crate::warm`]).
    pub fn warm(dir: PathBuf) -> Local {
        Local { warm: Some(crate::warm::Places::new(dir)) }
    }
}

impl Executor for Local {
    fn test<'a>(
        &'a self,
        engine: &'a Engine,
        config: &'a Config,
        batch: Vec<CandidateRun>,
    ) -> BoxFuture<'a, Vec<Verdict>> {
        let warm = self.warm.as_ref();
        Box::pin(futures::future::join_all(
            batch.into_iter().map(move |c| async move { reproduces_on(engine, config, c, warm).await }),
        ))
    }

    fn warm(&self) -> Option<crate::warm::Summary> {
        self.warm.as_ref().map(crate::warm::Places::summary)
    }

    fn search_over(&self) {
        if let Some(places) = &self.warm {
            places.release();
        }
    }
}

/// Minimizes the trace in `dir` on this machine; writes `dir/mcs/`
/// (`config.toml` and the files it names, `trace.jsonl`, `state.json`,
/// `report.json`; `sts-report` renders `report.md`).
pub async fn run(engine: &Engine, dir: &Path, opts: &Options) -> Result<Report, RunError> {
    let local = match opts.warm {
        true => Local::warm(dir.join("mcs").join("runs")),
        false => Local::default(),
    };
    run_on(engine, &local, dir, opts).await
}

/// [`run`] with candidates tested by `executor`.
pub async fn run_on(engine: &Engine, executor: &dyn Executor, dir: &Path, opts: &Options) -> Result<Report, RunError> {
    let (exp, config, trace) = replay::load(dir, opts.same)?;
    let same = config.invariants.same;
    let violation: Violation = crate::records::first_violation(&trace)
        .map_err(|e| RunError::BadInput(format!("{}: {e}", exp.trace().display())))?
        .ok_or_else(|| {
            RunError::BadInput(format!("{}: the trace records no violation to minimize for", exp.trace().display()))
        })?;
    let mcs_dir = dir.join("mcs");
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", mcs_dir.display()));
    crate::session::own_dir(&mcs_dir)?;
    let _lock = Lock::take(&mcs_dir.join("lock"))?;
    let state_path = mcs_dir.join("state.json");
    let mut state: State =
        std::fs::read_to_string(&state_path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
    if !state.tested.is_empty() && state.same.is_some_and(|s| s != same) {
        engine.notice(
            NoticeKind::Info,
            format!(
                "starting again: the {} candidates already tested were judged by {}, not {same}",
                state.tested.len(),
                state.same.map_or("?", Same::name)
            ),
        );
        state = State::default();
    }
    state.same = Some(same);
    if !state.tested.is_empty() {
        engine.notice(NoticeKind::Resuming, format!("resuming: {} candidates already tested", state.tested.len()));
    }
    let externals: Vec<&External> = trace.externals().into_iter().map(|(_, e)| e).collect();
    let groups = units(&externals);
    let kinds = if opts.by_kind { kinds(&externals, &groups) } else { Vec::new() };
    let topo = config.topology();
    let host_start: BTreeMap<String, u64> = topo.hosts.iter().map(|h| (h.name.clone(), h.switch)).collect();
    let events_of = |c: &[usize]| -> BTreeSet<usize> { c.iter().flat_map(|&u| groups[u].iter().copied()).collect() };
    let started = Instant::now();
    // A budget too far away to be an instant is no deadline at all.
    let deadline = opts.budget_s.and_then(|s| started.checked_add(std::time::Duration::from_secs(s)));
    let mut curve = vec![externals.len()];
    let all: Vec<usize> = (0..groups.len()).collect();
    let mut search = Search {
        engine,
        executor,
        config: &config,
        trace: &trace,
        groups: &groups,
        kinds: &kinds,
        host_start: &host_start,
        mcs_dir: &mcs_dir,
        state_path: &state_path,
        state: &mut state,
        opts,
        run_no: 0,
        curve: &mut curve,
        deadline,
        budget_exhausted: false,
        replay_cap: None,
        capped: false,
        started,
        running: FuturesUnordered::new(),
        under_test: BTreeMap::new(),
        whole: None,
    };
    // The empty sequence first: a violation present without any input is not
    // caused by any of them, and ddmin (which never tries it) would name one.
    // The whole trace, which ddmin never tries either, matters only while no
    // candidate reproduces (an original that does not reproduce has nothing
    // to minimize): with one place it is replayed first; with more, beside
    // the search once its first candidates all missed
    // ([`Search::wants_whole`]), or after it, if none ever reproduced.
    let present_without_inputs = search.baseline().await?;
    if present_without_inputs {
        engine.notice(NoticeKind::Info, "the violation is present without any input: the empty sequence reproduces it");
    }
    let mut best = Vec::new();
    if !present_without_inputs {
        let identity = violation.identity(same);
        // Replays of the whole trace that missed beside the search.
        let mut missed_beside = 0;
        loop {
            // With one place (or once its replay beside the search missed),
            // the whole trace not known to reproduce is replayed alone first.
            let whole_known = |s: &Search| s.state.tested.get(&key(&all)).copied().unwrap_or(false);
            if (opts.jobs < 2 || missed_beside > 0) && search.whole.is_none() && !whole_known(&search) {
                search.confirm_whole(&all, missed_beside, &identity, dir).await?;
            }
            best = search.ddmin(&all, true, opts.replays.max(1)).await?;
            // Its replay beside the search, if it started, is waited for.
            search.whole_verdict().await?;
            // It missed: the search stopped, and goes on from what it knows
            // (its verdicts stand) once the whole trace reproduces alone.
            if search.whole.take().is_none() {
                // No candidate reproduced: only the whole trace may.
                if !search.any_hit() && !search.budget_exhausted && !whole_known(&search) {
                    search.confirm_whole(&all, 0, &identity, dir).await?;
                }
                break;
            }
            missed_beside = 1;
            search.settle().await;
        }
    }
    let mut beyond = None;
    // From three units up (a smaller result from two would be one input,
    // rare enough not to pay for), within as many replays as were spent so
    // far: at most twice the work. A chunk presumed a miss counts as the
    // replay it saved, so presuming does not starve this search.
    if opts.beyond && !search.budget_exhausted && best.len() >= BEYOND_FROM {
        let before = search.state.replays;
        let work = before + search.state.presumed;
        search.replay_cap = Some(before + work.max(BEYOND_MIN_REPLAYS));
        let found = search.beyond(best.clone()).await?;
        beyond = Some(Beyond {
            from: events_of(&best).len(),
            to: events_of(&found).len(),
            replays: search.state.replays - before,
            capped: search.capped,
        });
        best = found;
    }
    search.settle().await;
    let budget_exhausted = search.budget_exhausted;
    drop(search);
    executor.search_over();
    engine.progress(Progress::Done);
    let keep = events_of(&best);
    state.curve = curve.clone();
    let mcs = candidate(&trace, &keep, &host_start);
    std::fs::copy(exp.config(), mcs_dir.join("config.toml")).map_err(env)?;
    experiment::copy_config_files(config.local_files(), &mcs_dir).map_err(env)?;
    mcs.renumbered().save(&mcs_dir.join("trace.jsonl")).map_err(env)?;
    let mut final_reproduced = 0;
    // The final replays `jobs` at a time, a freed place taking the next at once.
    let replays = (1..=opts.final_replays).map(|n| {
        let out = mcs_dir.join("final").join(n.to_string());
        let _ = std::fs::remove_dir_all(&out);
        let mcs = &mcs;
        let config = &config;
        async move { (n, executor.replay(engine, config, mcs, out, n).await) }
    });
    let mut finals = futures::stream::iter(replays).buffer_unordered(opts.jobs.max(1) as usize);
    let mut reproduced_in: BTreeMap<u32, Option<Violation>> = BTreeMap::new();
    let mut done = 0;
    engine.progress(Progress::FinalReplays { done, total: opts.final_replays });
    while let Some((n, r)) = finals.next().await {
        let r = r?;
        done += 1;
        engine.progress(Progress::FinalReplays { done, total: opts.final_replays });
        if r.reproduced {
            final_reproduced += 1;
            reproduced_in.insert(n, r.violation);
        }
    }
    drop(finals);
    // The violation as the MCS's own replays saw it (its witness shows the
    // rules the MCS installs, not the original run's): the first in run order.
    let observed: Option<Violation> = reproduced_in.into_values().flatten().next();
    engine.progress(Progress::Done);
    if let Some(v) = &observed {
        let mut seen = mcs.clone();
        seen.records
            .iter_mut()
            .filter(|r| r.violation().is_some())
            .for_each(|r| r.event = sts_trace::Event::Violation(crate::records::to_record(v)));
        seen.renumbered().save(&mcs_dir.join("trace.jsonl")).map_err(env)?;
    }
    let original_t: BTreeMap<u64, u64> = trace.records.iter().map(|r| (r.seq, r.t_ms)).collect();
    let events = mcs
        .records
        .iter()
        .filter_map(|r| {
            let e = r.external()?;
            Some(McsEvent {
                seq: r.seq,
                original_t_ms: original_t.get(&r.seq).copied().unwrap_or(r.t_ms),
                t_ms: r.t_ms,
                input: e.describe(),
            })
        })
        .collect();
    let same_culprit = match (&violation.culprit, observed.as_ref().and_then(|v| v.culprit.as_ref())) {
        (Some(a), Some(b)) => Some(culprits_agree(a, b, same)),
        _ => None,
    };
    let report = Report {
        violation: violation.identity(same),
        same,
        culprit: violation.culprit.clone(),
        same_culprit,
        original_inputs: externals.len(),
        mcs_inputs: keep.len(),
        // The search's replays (kept across resumptions) and this run's final ones.
        replays: state.replays + u64::from(opts.final_replays),
        speculated: state.speculated,
        called_off: state.called_off,
        presumed: state.presumed,
        not_monotone: state.not_monotone,
        warm: executor.warm(),
        rounds: state.rounds.clone(),
        seconds: started.elapsed().as_secs_f64(),
        curve,
        final_replays: opts.final_replays,
        final_reproduced,
        budget_exhausted,
        present_without_inputs,
        beyond,
        events,
        observed,
        mcs: mcs.externals().iter().map(|(t, e)| format!("{t} ms: {}", e.describe())).collect(),
    };
    experiment::write_json(&state_path, &state).map_err(env)?;
    experiment::write_json(&mcs_dir.join("report.json"), &report).map_err(env)?;
    Ok(report)
}

/// Unit sets the rounds after `dd`'s current one may test, in order
/// ([`Ddmin::next_rounds_given`] the verdicts `known` so far, then the
/// rounds after those): enough to fill the places a round that replays
/// fewer than `jobs` candidates (`to_replay`: those whose verdicts were
/// not known, from the cache or presumed, when it began) leaves free; none
/// when the round fills them itself (so `--jobs 1` and a round that replays
/// at least as many as the executor has places test exactly what they
/// would without it). A round does not speculate in a place freed by an
/// early verdict: on this machine's cores, a guess beside the round's last
/// candidate slows it more than the guess pays (docs/benchmarks.md).
///
/// `verdicts` gives what is known of a later round's candidates (tested
/// before, or to be presumed misses): a known candidate is no guess, a
/// round ends at its first known success (what follows it is never
/// needed), and the rounds after it follow from what is known.
fn speculation(
    dd: &Ddmin,
    jobs: usize,
    to_replay: usize,
    known: &[Option<bool>],
    verdicts: impl Fn(&Ddmin) -> Vec<Option<bool>>,
) -> Vec<Vec<usize>> {
    let room = jobs.saturating_sub(to_replay);
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut next = dd.next_rounds_given(known);
    while out.len() < room && !next.is_empty() {
        let known: Vec<Vec<Option<bool>>> = next.iter().map(&verdicts).collect();
        // Each round's candidates that may need a replay: the unknown ones
        // up to its first known success.
        let open: Vec<Vec<&Vec<usize>>> = next
            .iter()
            .zip(&known)
            .map(|(d, k)| {
                let end = k.iter().position(|v| *v == Some(true)).unwrap_or(d.candidates().len());
                d.candidates()[..end]
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| k.get(*i).copied().flatten().is_none())
                    .map(|(_, c)| c)
                    .collect()
            })
            .collect();
        // Breadth first, and across outcomes: each next round's first
        // open candidate, then each one's second, ...
        let widest = open.iter().map(Vec::len).max().unwrap_or(0);
        for k in 0..widest {
            for c in open.iter().filter_map(|o| o.get(k)) {
                if !out.contains(c) {
                    out.push((*c).clone());
                }
            }
        }
        if next.len() > 64 {
            break;
        }
        next = next.iter().zip(&known).flat_map(|(d, k)| d.next_rounds_given(k)).collect();
    }
    out.truncate(room);
    out
}

/// The candidates of later rounds worth testing ahead, given the verdicts
/// of this round's candidates known so far and the candidates tested
/// before (by key: none of them is guessed again) ([`speculation`]).
type Guesses<'g> = dyn Fn(&[Option<bool>], &BTreeMap<String, bool>) -> Vec<Vec<usize>> + Sync + 'g;

/// Rounds of [`Search::beyond`] at most (each one a smaller sequence found).
const BEYOND_ROUNDS: usize = 3;

/// The smallest ddmin result (in units) [`Search::beyond`] looks past.
const BEYOND_FROM: usize = 3;

/// Replays [`Search::beyond`] may always use, however cheap ddmin was.
const BEYOND_MIN_REPLAYS: u64 = 8;

/// The search over units (groups of inputs that go together) of one
/// minimization: candidates are tested by the executor, their verdicts kept
/// in `state` (a resumed minimization asks nothing twice).
struct Search<'a> {
    engine: &'a Engine,
    executor: &'a dyn Executor,
    config: &'a Config,
    trace: &'a Trace,
    groups: &'a [Vec<usize>],
    /// The units by kind of input, tried whole first ([`kinds`]).
    kinds: &'a [Vec<usize>],
    host_start: &'a BTreeMap<String, u64>,
    mcs_dir: &'a Path,
    state_path: &'a Path,
    state: &'a mut State,
    opts: &'a Options,
    run_no: u32,
    curve: &'a mut Vec<usize>,
    deadline: Option<Instant>,
    budget_exhausted: bool,
    /// No candidate is tested once `state.replays` reaches this (`capped`
    /// then says so): the search past ddmin's bound.
    replay_cap: Option<u64>,
    capped: bool,
    started: Instant,
    /// Candidates under test: this round's, and later rounds' started in
    /// places a round left free.
    running: FuturesUnordered<BoxFuture<'a, Ended>>,
    /// The keys of their unit sets, each with its tries.
    under_test: BTreeMap<String, Testing>,
    /// The whole trace's replay beside the search ([`Search::wants_whole`]),
    /// while it has given no "yes".
    whole: Option<Whole>,
}

/// Candidates that must miss, none reproducing, before the whole trace's
/// replay goes beside the search ([`Search::wants_whole`]).
const WHOLE_AFTER_MISSES: usize = 3;

/// The whole trace's replay beside the search, started once its first
/// candidates all missed: their verdicts do not depend on it, and a search
/// that finds nothing is not done before it reproduced.
struct Whole {
    key: String,
    /// It ended without reproducing (or without a verdict): the search
    /// stops, and the whole trace is tried alone.
    missed: bool,
}

/// A candidate under test. Without PEEK its replays are tries of one
/// replay each: the next starts when one misses (as the executor would
/// replay them one after the other), or beside the one under way in a place
/// nothing else wants ([`Search::test`]); the first "yes" calls off the
/// others. With PEEK its replays are one try (they follow its dry run).
struct Testing {
    set: Vec<usize>,
    /// Its place in its round, shared by its tries.
    place: InRound,
    speculated: bool,
    trace: Trace,
    peek: PeekMode,
    /// Replays per try: one without PEEK, all of them with it.
    per_try: u32,
    /// Tries not started yet.
    left: u32,
    /// Tries under way.
    running: u32,
}

/// What a free place takes next in [`Search::test`].
enum Next<'c> {
    /// A candidate (unit set) not under test yet: its place, and whether it
    /// is speculated on.
    Candidate(&'c [usize], InRound, bool),
    /// Another try of the candidate under test by this key.
    Try(String),
    /// The whole trace's replay ([`Search::wants_whole`]).
    Whole,
}

/// A try of a candidate, ended.
struct Ended {
    key: String,
    verdict: Verdict,
}

impl<'a> Search<'a> {
    fn events_of(&self, c: &[usize]) -> BTreeSet<usize> {
        c.iter().flat_map(|&u| self.groups[u].iter().copied()).collect()
    }

    /// Whether a candidate (the whole trace's replay aside) reproduced.
    fn any_hit(&self) -> bool {
        let all = key(&(0..self.groups.len()).collect::<Vec<_>>());
        self.state.tested.iter().any(|(k, &ok)| ok && *k != all)
    }

    /// Whether the whole trace's replay should take the next free place:
    /// with two places or more, when it is neither known to reproduce nor
    /// under way, no candidate has reproduced yet and
    /// [`WHOLE_AFTER_MISSES`] have missed. Until then it is not needed: a
    /// candidate that reproduces shows there is something to minimize, and
    /// the search's first rounds have both places to themselves. A run of
    /// misses is what a trace that does not come back looks like; its
    /// replay beside the search then ends such a search early.
    fn wants_whole(&self) -> bool {
        let all = key(&(0..self.groups.len()).collect::<Vec<_>>());
        let missed = self.state.tested.iter().filter(|(k, &ok)| !ok && !k.is_empty() && **k != all).count();
        self.opts.jobs >= 2
            && self.whole.is_none()
            && !self.state.tested.contains_key(&all)
            && !self.any_hit()
            && missed >= WHOLE_AFTER_MISSES
    }

    /// Starts the whole trace's replay beside the search.
    fn start_whole(&mut self) {
        let all: Vec<usize> = (0..self.groups.len()).collect();
        self.whole = Some(Whole { key: key(&all), missed: false });
        self.start_with(&all, InRound::alone(), false, 1, PeekMode::Off);
    }

    /// What chunks may be presumed misses from ([`Options::monotone`]): the
    /// unit sets tested and seen not to reproduce, as long as the verdicts so
    /// far agree with monotonicity. Once a set reproduced that is part of one
    /// that did not, the bug is not monotone here, or its replays not
    /// deterministic (a miss was bad luck): nothing is presumed from then on
    /// (said once), since presuming from a miss that could have been a hit
    /// costs more replays than it saves.
    fn misses(&mut self) -> Vec<BTreeSet<usize>> {
        if !self.opts.monotone || self.state.not_monotone {
            return Vec::new();
        }
        let units = |k: &str| -> Option<BTreeSet<usize>> {
            k.split(',').filter(|u| !u.is_empty()).map(str::parse).collect::<Result<_, _>>().ok()
        };
        let (mut hits, mut misses) = (Vec::new(), Vec::new());
        for (k, &ok) in &self.state.tested {
            if let Some(set) = units(k) {
                if ok {
                    hits.push(set)
                } else {
                    misses.push(set)
                }
            }
        }
        if hits.iter().any(|h| misses.iter().any(|m| h.is_subset(m))) {
            self.state.not_monotone = true;
            self.engine.notice(
                NoticeKind::Info,
                "a candidate reproduced though a larger one did not: from now on every chunk is replayed, none presumed a miss",
            );
            return Vec::new();
        }
        misses
    }

    /// Tests `cands` (unit sets) in order, up to the first that reproduces,
    /// keeping `jobs` candidates under test: a place that frees takes the
    /// next candidate at once (no waiting for a batch's slowest), and the
    /// round ends as soon as its first success in order is known (the
    /// candidates after it are called off). Verdicts known from earlier are
    /// not asked again. Returns each one's verdict (`None`: not tested,
    /// after a hit).
    ///
    /// Places left free once every candidate of the round is under test
    /// take untested `spare` ones (later rounds' candidates): their verdicts
    /// are only kept, for when their round comes, and they go on across
    /// rounds (a later round that neither tests nor speculates on one calls
    /// it off). What is tested in order, and so the result, is the same as
    /// without them. A place nothing else wants then takes the next try of
    /// a candidate of the round under way ([`Testing`]).
    ///
    /// A candidate `presumed` a miss (by its index) counts as one without
    /// being tested, unless its verdict is known.
    async fn test(
        &mut self,
        cands: &[Vec<usize>],
        presumed: &[bool],
        spare: &Guesses<'_>,
        replays: u32,
    ) -> Result<Vec<Option<bool>>, RunError> {
        let mut results: Vec<Option<bool>> = cands
            .iter()
            .enumerate()
            .map(|(i, c)| match self.state.tested.get(&key(c)) {
                Some(&known) => Some(known),
                None if presumed.get(i).copied().unwrap_or(false) => {
                    self.state.presumed += 1;
                    Some(false)
                }
                None => None,
            })
            .collect();
        let jobs = self.opts.jobs.max(1) as usize;
        let round = self.state.rounds.len();
        self.state.rounds.push([cands.len(), cands.len()]);
        let places = InRound::round(cands.len());
        let mut spares = spare(&results, &self.state.tested);
        self.call_off_unwanted(cands, &spares);
        loop {
            // Decided: the first candidate not known to fail reproduces, or all fail.
            match results.iter().position(|r| *r != Some(false)) {
                None => break,
                Some(p) if results[p] == Some(true) => break,
                Some(_) => {}
            }
            let before_hit = results.iter().position(|r| *r == Some(true)).unwrap_or(cands.len());
            let mut started = false;
            while self.running.len() < jobs {
                let next =
                    (0..before_hit).find(|&i| results[i].is_none() && !self.under_test.contains_key(&key(&cands[i])));
                let pick = match next {
                    Some(i) => Some((&cands[i], places[i].clone(), false)),
                    None => spares
                        .iter()
                        .find(|c| {
                            let k = key(c);
                            !cands.contains(c)
                                && !self.state.tested.contains_key(&k)
                                && !self.under_test.contains_key(&k)
                        })
                        .map(|c| (c, InRound::alone(), true)),
                };
                // Nothing else wants the place: a candidate's next try beside
                // the one under way (needed if that one misses).
                let beside = match (&pick, self.opts.speculate) {
                    (None, true) => self.another_try(cands, before_hit),
                    _ => None,
                };
                let next = match (self.wants_whole(), pick, beside) {
                    (true, _, _) => Next::Whole,
                    (false, Some((set, place, speculated)), _) => Next::Candidate(set, place, speculated),
                    (false, None, Some(k)) => Next::Try(k),
                    (false, None, None) => break,
                };
                if self.deadline.is_some_and(|d| Instant::now() > d) {
                    self.budget_exhausted = true;
                    return Ok(results);
                }
                if self.replay_cap.is_some_and(|cap| self.state.replays >= cap) {
                    self.capped = true;
                    return Ok(results);
                }
                match next {
                    Next::Whole => self.start_whole(),
                    Next::Candidate(set, place, speculated) => self.start(set, place, speculated, replays),
                    Next::Try(k) => self.start_try(&k),
                }
                started = true;
            }
            if started {
                let first = (0..cands.len()).find(|&i| results[i].is_none()).unwrap_or(0);
                self.engine.progress(Progress::Minimize {
                    inputs_left: self.curve.last().copied().unwrap_or(0),
                    original: self.trace.externals().len(),
                    trying: self.running.len(),
                    candidate_inputs: self.events_of(&cands[first]).len(),
                    tested: self.state.tested.len(),
                    replays: self.state.replays,
                    elapsed_s: self.started.elapsed().as_secs_f64(),
                });
            }
            let Some(ended) = self.running.next().await else { break };
            if let Err(e) = self.finish(ended, cands, &mut results) {
                self.settle().await;
                self.engine.progress(Progress::Done);
                return Err(e);
            }
            if self.whole.as_ref().is_some_and(|w| w.missed) {
                return Ok(results);
            }
            // What this verdict rules out is speculated on no more.
            spares = spare(&results, &self.state.tested);
            self.call_off_unwanted(cands, &spares);
        }
        let needed = results.iter().position(|r| *r == Some(true)).map_or(cands.len(), |p| p + 1);
        self.state.rounds[round][1] = needed;
        Ok(results)
    }

    /// Calls off the candidates under test ahead of their round that are
    /// neither among `cands` nor `spares` any more.
    fn call_off_unwanted(&self, cands: &[Vec<usize>], spares: &[Vec<usize>]) {
        let wanted: BTreeSet<String> = cands.iter().chain(spares).map(|c| key(c)).collect();
        for (k, t) in &self.under_test {
            if t.speculated && !wanted.contains(k) {
                t.place.call_off();
            }
        }
    }

    /// Puts unit set `set` under test in a place of its own.
    fn start(&mut self, set: &[usize], place: InRound, speculated: bool, replays: u32) {
        self.start_with(set, place, speculated, replays, self.opts.peek);
    }

    /// [`Search::start`] with `peek` (the empty and whole traces' replays
    /// have no use for it).
    fn start_with(&mut self, set: &[usize], place: InRound, speculated: bool, replays: u32, peek: PeekMode) {
        let k = key(set);
        let testing = Testing {
            set: set.to_vec(),
            place,
            speculated,
            trace: candidate(self.trace, &self.events_of(set), self.host_start),
            peek,
            per_try: if peek == PeekMode::Off { 1 } else { replays.max(1) },
            left: if peek == PeekMode::Off { replays.max(1) } else { 1 },
            running: 0,
        };
        self.under_test.insert(k.clone(), testing);
        self.start_try(&k);
    }

    /// Starts the next try of the candidate under test as `k`.
    fn start_try(&mut self, k: &str) {
        let Some(t) = self.under_test.get_mut(k) else { return };
        let replays = t.per_try;
        let first_run = self.run_no + 1;
        self.run_no += replays + u32::from(t.peek != PeekMode::Off);
        t.left -= 1;
        t.running += 1;
        let run = CandidateRun {
            trace: t.trace.clone(),
            mcs_dir: self.mcs_dir.to_path_buf(),
            first_run,
            replays,
            peek: t.peek,
            warm: self.opts.warm,
            in_round: Some(t.place.clone()),
        };
        let (engine, executor, config, key) = (self.engine, self.executor, self.config, k.to_string());
        self.running.push(Box::pin(async move {
            let verdict = executor.test(engine, config, vec![run]).await.pop().unwrap_or(Ok((false, 0)));
            Ended { key, verdict }
        }));
    }

    /// A candidate of `cands` (before `before_hit`) under test whose next
    /// try may start beside the one under way: the first in order.
    fn another_try(&self, cands: &[Vec<usize>], before_hit: usize) -> Option<String> {
        cands[..before_hit]
            .iter()
            .map(|c| key(c))
            .find(|k| self.under_test.get(k).is_some_and(|t| t.left > 0 && t.running > 0 && !t.place.moot()))
    }

    /// Takes in a try's end. A "yes" is the candidate's verdict; a "no" is,
    /// once it was its last try, and otherwise starts the next one (unless
    /// another is under way). The verdict is kept (and is `results`' when
    /// the candidate is one of `cands`), unless it is a "no" given after the
    /// candidate was called off (no verdict at all).
    fn finish(&mut self, ended: Ended, cands: &[Vec<usize>], results: &mut [Option<bool>]) -> Result<(), RunError> {
        let k = ended.key;
        let verdict = ended.verdict;
        let Some(t) = self.under_test.get_mut(&k) else {
            // A try that went on beside one that reproduced.
            self.state.replays += verdict.map_or(0, |(_, n)| n);
            return Ok(());
        };
        t.running -= 1;
        let (ok, n) = match verdict {
            Ok(v) => v,
            Err(e) => {
                // Its other tries are not waited for either.
                if let Some(t) = self.under_test.remove(&k) {
                    t.place.call_off();
                }
                return Err(e);
            }
        };
        self.state.replays += n;
        // The whole trace's "no" is not a verdict to keep: every chunk of
        // it would be presumed a miss.
        if let Some(whole) = self.whole.as_mut().filter(|w| w.key == k) {
            if !ok {
                self.under_test.remove(&k);
                whole.missed = true;
                let _ = experiment::write_json(self.state_path, &*self.state);
                return Ok(());
            }
            self.whole = None;
        } else if !ok {
            let t = &self.under_test[&k];
            if t.place.moot() {
                if t.running == 0 {
                    self.under_test.remove(&k);
                    self.state.called_off += 1;
                }
                return Ok(());
            }
            match (t.left, t.running) {
                // The next try, in the place this one freed.
                (1.., 0) => {
                    self.start_try(&k);
                    return Ok(());
                }
                // Another is under way: its end decides.
                (_, 1..) => return Ok(()),
                (0, 0) => {}
            }
        }
        let Some(t) = self.under_test.remove(&k) else { return Ok(()) };
        if ok {
            // The candidate's other tries are moot from now on.
            t.place.hit();
            // So is the whole trace's replay beside the search.
            if let Some(whole) = self.whole.take() {
                if let Some(w) = self.under_test.remove(&whole.key) {
                    w.place.call_off();
                }
            }
        }
        self.state.tested.insert(k, ok);
        if t.speculated {
            self.state.speculated += 1;
        }
        if let Some(i) = cands.iter().position(|c| *c == t.set) {
            results[i] = Some(ok);
        }
        let _ = experiment::write_json(self.state_path, &*self.state);
        Ok(())
    }

    /// Whether the empty sequence reproduces (known from a resumed search, or
    /// replayed; with two places, its tries side by side).
    async fn baseline(&mut self) -> Result<bool, RunError> {
        let empty = key(&[]);
        if let Some(&known) = self.state.tested.get(&empty) {
            return Ok(known);
        }
        self.start_with(&[], InRound::alone(), false, self.opts.replays.max(1), PeekMode::Off);
        if self.opts.speculate {
            while self.running.len() < self.opts.jobs.max(1) as usize
                && self.under_test.get(&empty).is_some_and(|t| t.left > 0)
            {
                self.start_try(&empty);
            }
        }
        self.state.rounds.push([1, 1]);
        while let Some(ended) = self.running.next().await {
            if let Err(e) = self.finish(ended, &[], &mut []) {
                self.settle().await;
                return Err(e);
            }
            if let Some(&known) = self.state.tested.get(&empty) {
                return Ok(known);
            }
        }
        Ok(false)
    }

    /// Waits for the whole trace's replay beside the search, if it is still
    /// under way ([`Search::whole`] is then gone, or missed).
    async fn whole_verdict(&mut self) -> Result<(), RunError> {
        while self.whole.as_ref().is_some_and(|w| !w.missed) {
            match self.running.next().await {
                Some(ended) => self.finish(ended, &[], &mut [])?,
                None => {
                    if let Some(w) = self.whole.as_mut() {
                        w.missed = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// Replays the whole trace alone until it reproduces, up to `--replays`
    /// tries in all but at least three, `tried` made already: an original that
    /// does not reproduce has nothing to minimize, and every candidate would
    /// fail. `identity` and `dir` name the violation and the experiment.
    async fn confirm_whole(&mut self, all: &[usize], tried: u32, identity: &str, dir: &Path) -> Result<(), RunError> {
        let tries = self.opts.replays.max(3);
        let (mut tried, mut reproduced) = (tried, false);
        while tried < tries && !reproduced {
            let n = if tried == 0 { 1 } else { tries - tried };
            let run = CandidateRun {
                trace: candidate(self.trace, &self.events_of(all), self.host_start),
                mcs_dir: self.mcs_dir.to_path_buf(),
                first_run: self.run_no + 1,
                replays: n,
                peek: PeekMode::Off,
                warm: self.opts.warm,
                in_round: None,
            };
            self.run_no += n;
            let verdict = self.executor.test(self.engine, self.config, vec![run]).await.pop().unwrap_or(Ok((false, 0)));
            let (ok, replays) = verdict?;
            self.state.replays += replays;
            self.state.rounds.push([1, 1]);
            tried += n;
            reproduced = ok;
        }
        if !reproduced {
            let _ = experiment::write_json(self.state_path, &*self.state);
            return Err(RunError::DoesNotReproduce(format!(
                "the original trace did not show its violation ({identity}) in {tried} replays: nothing to minimize. \
                 Is it timing-dependent? `sts replay {} --repeat 10` says how often it comes back",
                dir.display()
            )));
        }
        self.state.tested.insert(key(all), true);
        let _ = experiment::write_json(self.state_path, &*self.state);
        Ok(())
    }

    /// Calls off every candidate still under test and waits for them to
    /// end (what they reached is still kept): the search is over.
    async fn settle(&mut self) {
        for t in self.under_test.values() {
            t.place.call_off();
        }
        while let Some(ended) = self.running.next().await {
            let _ = self.finish(ended, &[], &mut []);
        }
    }

    /// Delta debugging over `units` (which must reproduce): a 1-minimal
    /// subset of them (all of them when the budget ran out first). With
    /// `curve` (the search over the whole trace), each reduction goes on the
    /// reduction curve and whole kinds of input are tried first; `replays`
    /// per candidate.
    async fn ddmin(&mut self, units: &[usize], curve: bool, replays: u32) -> Result<Vec<usize>, RunError> {
        let groups: Vec<Vec<usize>> = match curve {
            true => self
                .kinds
                .iter()
                .map(|g| units.iter().enumerate().filter(|(_, u)| g.contains(u)).map(|(i, _)| i).collect())
                .collect(),
            false => Vec::new(),
        };
        let mut dd = Ddmin::by_groups(units.len(), groups);
        let of = |c: &[usize]| -> Vec<usize> { c.iter().map(|&i| units[i]).collect() };
        while !dd.is_done() {
            let cands: Vec<Vec<usize>> = dd.candidates().iter().map(|c| of(c)).collect();
            let places = if self.opts.speculate { self.opts.jobs as usize } else { 0 };
            let misses = self.misses();
            let part_of_a_miss = |c: &[usize]| misses.iter().any(|m| c.iter().all(|u| m.contains(u)));
            let presumed: Vec<bool> =
                cands.iter().enumerate().map(|(i, c)| i < dd.presumable_chunks() && part_of_a_miss(c)).collect();
            // A chunk presumed a miss, or a candidate tested before, takes no
            // place: a round halving what reproduced, its first half presumed,
            // replays one candidate and leaves the other place to the next.
            let to_replay =
                cands.iter().zip(&presumed).filter(|(c, &p)| !p && !self.state.tested.contains_key(&key(c))).count();
            // What is known of a later round's candidates: their verdicts
            // from before, and the chunks that round would presume misses.
            let spare = |known: &[Option<bool>], tested: &BTreeMap<String, bool>| -> Vec<Vec<usize>> {
                let verdicts = |d: &Ddmin| -> Vec<Option<bool>> {
                    d.candidates()
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let c = of(c);
                            match tested.get(&key(&c)) {
                                Some(&v) => Some(v),
                                None if i < d.presumable_chunks() && part_of_a_miss(&c) => Some(false),
                                None => None,
                            }
                        })
                        .collect()
                };
                speculation(&dd, places, to_replay, known, verdicts).iter().map(|c| of(c)).collect()
            };
            let results = self.test(&cands, &presumed, &spare, replays).await?;
            if self.budget_exhausted || self.capped || self.whole.as_ref().is_some_and(|w| w.missed) {
                break;
            }
            let verdicts: Vec<bool> = results.into_iter().map(|r| r.unwrap_or(false)).collect();
            if dd.advance(&verdicts) && curve {
                self.curve.push(self.events_of(&of(dd.kept())).len());
            }
        }
        Ok(of(dd.kept()))
    }

    /// Past ddmin's local minimum `best`: ddmin keeps the first half that
    /// reproduces, so when a trace holds its bug twice (a longer cause in
    /// the half it tries first, a shorter one split across the halves) it
    /// ends on the longer. This tries what `best` leaves out: the trace
    /// without `best`'s units, then without all but one of them (the other
    /// cause may share an input), one replay each, in that order; the first
    /// that reproduces is minimized in turn (one replay per candidate: a
    /// miss only ends the search), and a smaller result replaces `best`. A
    /// start holding a sequence found before is skipped (ddmin would find
    /// that one again). At most [`BEYOND_ROUNDS`] rounds, within
    /// `replay_cap`; when nothing else reproduces it costs `best.len() + 1`
    /// replays.
    async fn beyond(&mut self, mut best: Vec<usize>) -> Result<Vec<usize>, RunError> {
        let mut found_before = vec![best.clone()];
        for _ in 0..BEYOND_ROUNDS {
            let rest: Vec<usize> = (0..self.groups.len()).filter(|u| !best.contains(u)).collect();
            let mut starts = vec![rest.clone()];
            for &u in &best {
                let mut s = rest.clone();
                s.push(u);
                s.sort_unstable();
                starts.push(s);
            }
            let mut found = None;
            let fresh = |s: &Vec<usize>| !found_before.iter().any(|f| f.iter().all(|u| s.contains(u)));
            for s in starts.into_iter().filter(|s| s.len() >= best.len() && fresh(s)) {
                let verdict = self.test(std::slice::from_ref(&s), &[], &|_, _| Vec::new(), 1).await?;
                if self.budget_exhausted || self.capped {
                    return Ok(best);
                }
                if verdict[0] == Some(true) {
                    found = Some(s);
                    break;
                }
            }
            let Some(start) = found else { break };
            let other = self.ddmin(&start, false, 1).await?;
            found_before.push(other.clone());
            if other.len() >= best.len() || self.budget_exhausted || self.capped {
                break;
            }
            self.curve.push(self.events_of(&other).len());
            self.engine.notice(
                NoticeKind::Info,
                format!(
                    "past ddmin's result: {} inputs where it stopped at {}",
                    self.events_of(&other).len(),
                    self.events_of(&best).len()
                ),
            );
            best = other;
        }
        Ok(best)
    }
}

/// `mcs/lock`: one minimization of a directory at a time. Holds this
/// process's pid; removed when dropped. A lock whose process is gone (a
/// killed sts) is taken over.
struct Lock(PathBuf);

impl Lock {
    fn take(path: &Path) -> Result<Lock, RunError> {
        let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", path.display()));
        let me = std::process::id();
        // The lock appears whole, pid inside, or not at all: written beside,
        // then hard-linked into place (which fails if one is there). A lock
        // created empty and filled after would let another sts read it
        // between the two and take it for a dead one's.
        let tmp = path.with_file_name(format!(".lock.{me}"));
        std::fs::write(&tmp, format!("{me}\n")).map_err(env)?;
        let _cleanup = RemoveOnDrop(tmp.clone());
        for _ in 0..20 {
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => return Ok(Lock(path.to_owned())),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<i32>().ok());
                    match holder {
                        Some(pid) if pid as u32 != me && is_running(pid) => {
                            return Err(RunError::BadInput(format!(
                                "{}: this directory is being minimized by another sts (pid {pid}); wait for it, or stop it",
                                path.parent().and_then(Path::parent).unwrap_or(path).display()
                            )));
                        }
                        // Left by a process that is gone: take it over (one
                        // taker wins the link; another sees it held).
                        Some(_) => {
                            let _ = std::fs::remove_file(path);
                        }
                        // Gone between the link and the read: look again.
                        None => std::thread::sleep(std::time::Duration::from_millis(5)),
                    }
                }
                Err(e) => return Err(env(e)),
            }
        }
        Err(RunError::Environment(format!("{}: cannot take the lock", path.display())))
    }
}

/// The longest minimization budget, in seconds (ten years): a deadline
/// beyond it is no deadline. The command line and the API refuse more.
pub const MAX_BUDGET_S: u64 = 10 * 365 * 24 * 3600;

/// A file removed when this is dropped.
pub(crate) struct RemoveOnDrop(pub(crate) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// True if process `pid` exists and is not a zombie (a killed sts whose
/// parent has not reaped it yet, or never will in a container without an
/// init, holds nothing).
fn is_running(pid: i32) -> bool {
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
        return false;
    }
    // /proc/PID/stat: "PID (COMM) STATE ...", COMM may hold spaces and parentheses.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X"))
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Replays `cand` up to `replays` times (run directories numbered from
/// `first`), stopping at the first reproduction: (reproduced, replays used).
pub async fn reproduces(engine: &Engine, config: &Config, run: CandidateRun) -> Verdict {
    reproduces_on(engine, config, run, None).await
}

/// [`reproduces`], its replays on `warm` places when given.
pub(crate) async fn reproduces_on(
    engine: &Engine,
    config: &Config,
    run: CandidateRun,
    warm: Option<&crate::warm::Places>,
) -> Verdict {
    let CandidateRun { trace: mut cand, mcs_dir, first_run: first, replays, peek, in_round, .. } = run;
    let call_off: Option<replay::CallOff> = in_round.clone().map(|p| Arc::new(move || p.moot()) as replay::CallOff);
    let moot = || call_off.as_ref().is_some_and(|off| off());
    let mcs_dir = mcs_dir.as_path();
    let mut used = 0u64;
    let out = mcs_dir.join("runs").join(format!("{first}-peek"));
    match peek {
        PeekMode::Off => {}
        PeekMode::Dry => {
            // PEEK by a dry run: replay the candidate's inputs alone (no waits),
            // and wait in the real replays for what they caused, not for what the
            // original run's other inputs caused.
            let _ = std::fs::remove_dir_all(&out);
            let dry = Trace {
                header: cand.header.clone(),
                records: cand.records.iter().filter(|r| r.internal().is_none()).cloned().collect(),
            };
            let Some(r) = replay_on(engine, config, warm, &dry, &out, first, call_off.clone()).await? else {
                let _ = std::fs::remove_dir_all(&out);
                return Ok((false, used));
            };
            used += 1;
            let observed = Trace::load(&r.trace).map_err(|e| RunError::Environment(e.to_string()))?;
            let _ = std::fs::remove_dir_all(&out);
            if r.reproduced {
                return Ok((true, used));
            }
            cand = peeked(&cand, &observed);
        }
        PeekMode::Prefix | PeekMode::Checkpoints => {
            let p = peek_once(engine, config, &cand, &out, peek).await?;
            let _ = std::fs::remove_dir_all(&out);
            used += u64::from(p.runs);
            cand = peeked(&cand, &p.observed);
        }
    }
    for k in 0..replays {
        if moot() {
            return Ok((false, used + k as u64));
        }
        let n = first + k;
        let out = mcs_dir.join("runs").join(n.to_string());
        let _ = std::fs::remove_dir_all(&out);
        let r = replay_on(engine, config, warm, &cand, &out, n, call_off.clone()).await?;
        let _ = std::fs::remove_dir_all(&out);
        match r {
            Some(r) if r.reproduced => {
                if let Some(p) = &in_round {
                    p.hit();
                }
                return Ok((true, used + k as u64 + 1));
            }
            Some(_) => {}
            // Called off mid-replay: not counted.
            None => return Ok((false, used + k as u64)),
        }
    }
    Ok((false, used + replays as u64))
}

/// One replay of a candidate: on a warm place when there are some.
async fn replay_on(
    engine: &Engine,
    config: &Config,
    warm: Option<&crate::warm::Places>,
    trace: &Trace,
    out: &Path,
    run: u32,
    call_off: Option<replay::CallOff>,
) -> Result<Option<replay::ReplayResult>, RunError> {
    let t0 = Instant::now();
    let r = match warm {
        Some(w) => w.replay(engine, config, trace, out, run, call_off).await,
        None => replay::replay_unless(engine, config, trace, out, run, call_off).await,
    };
    if let Ok(r) = &r {
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let inputs = trace.externals().len();
        match r {
            Some(r) => tracing::debug!(
                "replay {run} of a candidate of {inputs} inputs: {ms:.1} ms, reproduced {}",
                r.reproduced
            ),
            None => tracing::debug!("replay {run} of a candidate of {inputs} inputs: called off after {ms:.1} ms"),
        }
    }
    r
}

/// PEEK by prefix replay or with checkpoints, falling back from the latter
/// to the former (saying why, once per engine).
async fn peek_once(
    engine: &Engine,
    config: &Config,
    cand: &Trace,
    out: &Path,
    mode: PeekMode,
) -> Result<crate::peek::Peek, RunError> {
    if mode == PeekMode::Checkpoints {
        match crate::peek::by_checkpoints(engine, config, cand, out).await {
            Ok(p) => return Ok(p),
            Err(crate::peek::PeekError::Run(e)) => return Err(e),
            Err(crate::peek::PeekError::Refused(why)) => {
                engine.notice_once(NoticeKind::PeekFallback, format!("PEEK falls back to prefix replay: {why}"))
            }
        }
    }
    crate::peek::by_prefix(engine, config, cand, out).await
}

/// The candidate with, after each input, the internal events a PEEK of it
/// (a dry run, or `crate::peek`) observed after that input, instead of the
/// original run's.
fn peeked(cand: &Trace, dry: &Trace) -> Trace {
    // The dry run's internal events, by how many inputs preceded them.
    let mut segments: Vec<Vec<sts_trace::Record>> = vec![Vec::new()];
    for r in &dry.records {
        if r.external().is_some() {
            segments.push(Vec::new());
        } else if r.internal().is_some() {
            segments.last_mut().expect("never empty").push(r.clone());
        }
    }
    let mut records = Vec::new();
    let mut seg = segments.into_iter();
    records.extend(seg.next().unwrap_or_default());
    for r in &cand.records {
        if r.external().is_some() {
            records.push(r.clone());
            records.extend(seg.next().unwrap_or_default());
        } else if r.violation().is_some() {
            records.push(r.clone());
        }
    }
    Trace { header: cand.header.clone(), records }
}

#[cfg(test)]
mod tests {
    #[test]
    fn culprits_agree_at_the_level_used() {
        let (s1, s2) = ("s1 table 0: a rule of priority 10 on eth_dst", "s2 table 0: a rule of priority 10 on eth_dst");
        assert!(culprits_agree(s1, s2, Same::Culprit), "the same rule on another switch");
        assert!(!culprits_agree(s1, s2, Same::Switch));
        assert!(!culprits_agree(s1, s2, Same::Exact));
        assert!(culprits_agree(s1, s1, Same::Switch));
        assert!(!culprits_agree(s1, "s1 table 0: no rule matches", Same::Culprit));
    }

    use super::*;
    use sts_trace::Port;

    #[test]
    fn one_minimization_of_a_directory_at_a_time() {
        let dir = std::env::temp_dir().join(format!("sts-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lock");
        let first = Lock::take(&path).unwrap();
        // Another live process holds it (pid 1 is always there).
        drop(first);
        std::fs::write(&path, "1\n").unwrap();
        let e = Lock::take(&path).err().expect("in use").to_string();
        assert!(e.contains("being minimized by another sts (pid 1)"), "{e}");
        // A lock left by a process that is gone is taken over.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        gone.wait().unwrap();
        std::fs::write(&path, format!("{gone_pid}\n")).unwrap();
        let taken = Lock::take(&path).expect("a stale lock is taken over");
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), std::process::id().to_string());
        drop(taken);
        assert!(!path.exists(), "released");
        // So is one held by a zombie: a killed sts nobody reaped yet.
        let mut zombie = std::process::Command::new("true").spawn().unwrap();
        while !std::fs::read_to_string(format!("/proc/{}/stat", zombie.id())).unwrap().contains(") Z ") {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::write(&path, format!("{}\n", zombie.id())).unwrap();
        drop(Lock::take(&path).expect("a zombie's lock is taken over"));
        zombie.wait().unwrap();
    }

    #[test]
    fn ddmin_finds_a_one_minimal_subset() {
        // Fails when units 3 and 7 are both present.
        let mut tests = 0;
        let kept = ddmin(
            10,
            |cands| {
                tests += cands.len();
                cands.iter().map(|c| c.contains(&3) && c.contains(&7)).collect()
            },
            |_| {},
        );
        assert_eq!(kept, vec![3, 7]);
        assert!(tests < 60, "{tests} tests");
        let kept = ddmin(8, |cands| cands.iter().map(|c| c.contains(&5)).collect(), |_| {});
        assert_eq!(kept, vec![5]);
        let kept = ddmin(6, |cands| cands.iter().map(|c| c.len() == 6).collect(), |_| {});
        assert_eq!(kept.len(), 6, "nothing can go");
    }

    #[test]
    fn the_rounds_that_may_follow_are_those_the_known_verdicts_allow() {
        // Eight units at granularity 4: four chunks and their complements.
        let mut d = Ddmin::new(8);
        d.advance(&[false, false]);
        let n = d.candidates().len();
        assert_eq!(n, 8);
        // Each outcome's round, from the verdicts that make it.
        let after = |verdicts: Vec<bool>| {
            let mut next = d.clone();
            next.advance(&verdicts);
            next.candidates().to_vec()
        };
        let first = |i: usize| after((0..n).map(|j| j == i).collect());
        let none = after(vec![false; n]);
        let rounds = |known: &[Option<bool>]| -> Vec<Vec<Vec<usize>>> {
            d.next_rounds_given(known).iter().map(|r| r.candidates().to_vec()).collect()
        };
        assert_eq!(rounds(&[]).len(), n + 1, "nothing known: every outcome");
        assert_eq!(rounds(&[]), d.next_rounds().iter().map(|r| r.candidates().to_vec()).collect::<Vec<_>>());
        // The first candidate failed: it cannot be the first success.
        let known = [Some(false)];
        let expected: Vec<_> = (1..n).map(first).chain([none.clone()]).collect();
        assert_eq!(rounds(&known), expected);
        // The third succeeded, the second is not known: the second or the third is first.
        let known = [Some(false), None, Some(true)];
        assert_eq!(rounds(&known), vec![first(1), first(2)]);
        // Every verdict known: the one outcome they make.
        let mut known = vec![Some(false); n];
        assert_eq!(rounds(&known), vec![none]);
        known[5] = Some(true);
        known[6] = Some(true);
        assert_eq!(rounds(&known), vec![first(5)]);
    }

    #[test]
    fn a_round_that_replays_fewer_candidates_than_places_guesses_what_follows_its_open_ones() {
        // Eight units, halves [0..4) and [4..8): the first half presumed a
        // miss (part of a set seen not to reproduce), the second to replay.
        let d = Ddmin::new(8);
        let miss: Vec<usize> = (0..4).collect();
        let known = [Some(false), None];
        let presumed = |d: &Ddmin| -> Vec<Option<bool>> {
            d.candidates()
                .iter()
                .enumerate()
                .map(|(i, c)| (i < d.presumable_chunks() && c.iter().all(|u| miss.contains(u))).then_some(false))
                .collect()
        };
        // One place left: the first half of [4..8), which follows its
        // success; the round after "none" would replay it first too (its
        // chunks of [0..4) presumed).
        assert_eq!(speculation(&d, 2, 1, &known, presumed), vec![vec![4, 5]]);
        // Both halves to replay fill both places; one place, no guess.
        assert_eq!(speculation(&d, 2, 2, &[None, None], presumed), Vec::<Vec<usize>>::new());
        assert_eq!(speculation(&d, 1, 1, &known, presumed), Vec::<Vec<usize>>::new());
        // [4, 5] known to reproduce (tested before): no guess, and the
        // rounds that follow it are looked at instead.
        let tested = |d: &Ddmin| -> Vec<Option<bool>> {
            let mut v = presumed(d);
            for (i, c) in d.candidates().iter().enumerate() {
                if *c == [4, 5] {
                    v[i] = Some(true);
                }
            }
            v
        };
        assert_eq!(speculation(&d, 2, 1, &known, tested), vec![vec![4]]);
    }

    /// [`Ddmin::by_groups`] driven by a synchronous test; the kept units and
    /// how many candidates were tested.
    fn ddmin_by_groups(n: usize, groups: Vec<Vec<usize>>, holds: impl Fn(&[usize]) -> bool) -> (Vec<usize>, usize) {
        ddmin_presuming(n, groups, holds, false)
    }

    /// [`ddmin_by_groups`] where a chunk ([`Ddmin::presumable_chunks`]) that
    /// is part of a set already seen to miss is presumed a miss (`--monotone`).
    fn ddmin_monotone(n: usize, groups: Vec<Vec<usize>>, holds: impl Fn(&[usize]) -> bool) -> (Vec<usize>, usize) {
        ddmin_presuming(n, groups, holds, true)
    }

    fn ddmin_presuming(
        n: usize,
        groups: Vec<Vec<usize>>,
        holds: impl Fn(&[usize]) -> bool,
        presume: bool,
    ) -> (Vec<usize>, usize) {
        let mut d = Ddmin::by_groups(n, groups);
        let mut misses: Vec<Vec<usize>> = Vec::new();
        let mut tests = 0;
        while !d.is_done() {
            let chunks = if presume { d.presumable_chunks() } else { 0 };
            let verdicts: Vec<bool> = d
                .candidates()
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i < chunks && misses.iter().any(|m| c.iter().all(|u| m.contains(u))) {
                        return false;
                    }
                    tests += 1;
                    let ok = holds(c);
                    if !ok {
                        misses.push(c.clone());
                    }
                    ok
                })
                .collect();
            d.advance(&verdicts);
        }
        (d.kept().to_vec(), tests)
    }

    #[test]
    fn chunks_within_a_miss_are_presumed_and_the_result_stays_one_minimal() {
        let mut seed = 11u64;
        let mut next = |m: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % m
        };
        let (mut plain_tests, mut monotone_tests) = (0, 0);
        for round in 0..300 {
            let n = 5 + next(80);
            let cause: Vec<usize> = (0..1 + next(3)).map(|_| next(n)).collect();
            // A third of the bugs are not monotone: an input that heals them.
            let heal = (round % 3 == 0).then(|| next(n)).filter(|h| !cause.contains(h));
            let holds = |c: &[usize]| cause.iter().all(|u| c.contains(u)) && heal.is_none_or(|h| !c.contains(&h));
            if !holds(&(0..n).collect::<Vec<_>>()) {
                continue;
            }
            let (plain, p) = ddmin_by_groups(n, Vec::new(), holds);
            let (monotone, m) = ddmin_monotone(n, Vec::new(), holds);
            assert!(one_minimal(&monotone, &holds), "{monotone:?} for {cause:?} healed by {heal:?}");
            if heal.is_none() {
                assert_eq!(monotone, plain, "a monotone bug: the same result");
            }
            assert!(m <= p, "{m} tests presuming, {p} without, for {cause:?}");
            plain_tests += p;
            monotone_tests += m;
        }
        eprintln!("candidates tested: {plain_tests} replaying every chunk, {monotone_tests} presuming");
        assert!(monotone_tests * 10 < plain_tests * 8, "{monotone_tests} against {plain_tests}");
    }

    /// True if no single unit of `kept` can go (what ddmin promises).
    fn one_minimal(kept: &[usize], holds: &impl Fn(&[usize]) -> bool) -> bool {
        holds(kept)
            && (0..kept.len()).all(|i| {
                let less: Vec<usize> = kept.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &u)| u).collect();
                !holds(&less)
            })
    }

    #[test]
    fn whole_kinds_go_first_and_the_result_stays_one_minimal() {
        // 60 units: even ones are "traffic", 3 and 41 "faults", the rest "other".
        let traffic: Vec<usize> = (0..60).step_by(2).collect();
        let faults = vec![3, 41];
        let other: Vec<usize> = (0..60).filter(|u| u % 2 == 1 && !faults.contains(u)).collect();
        let groups = vec![traffic.clone(), other.clone(), faults.clone()];
        // A bug that needs both faults and no traffic.
        let needs_faults = |c: &[usize]| c.contains(&3) && c.contains(&41);
        let (kept, with_kinds) = ddmin_by_groups(60, groups.clone(), needs_faults);
        assert_eq!(kept, vec![3, 41]);
        let (plain, without) = ddmin_by_groups(60, Vec::new(), needs_faults);
        assert_eq!(plain, vec![3, 41]);
        assert!(with_kinds * 2 < without, "{with_kinds} candidates with kinds, {without} without");
        // A bug that needs a ping: the traffic stays, the rest still goes.
        let needs_ping = |c: &[usize]| c.contains(&3) && c.contains(&10);
        let (kept, _) = ddmin_by_groups(60, groups.clone(), needs_ping);
        assert_eq!(kept, vec![3, 10]);
        // Against brute force: random two- and three-unit causes, always a
        // 1-minimal set that holds.
        let mut seed = 7u64;
        let mut next = |m: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % m
        };
        for _ in 0..200 {
            let cause: Vec<usize> = (0..2 + next(2)).map(|_| next(60)).collect();
            let alt: Vec<usize> = (0..2).map(|_| next(60)).collect();
            let holds = |c: &[usize]| cause.iter().all(|u| c.contains(u)) || alt.iter().all(|u| c.contains(u));
            let (kept, _) = ddmin_by_groups(60, groups.clone(), holds);
            assert!(one_minimal(&kept, &holds), "{kept:?} for {cause:?} or {alt:?}");
        }
        // One kind only: nothing to try whole.
        let pings = [External::Ping { src: "h1".into(), dst: "h2".into() }];
        let refs: Vec<&External> = vec![&pings[0], &pings[0]];
        assert!(kinds(&refs, &[vec![0], vec![1]]).is_empty());
    }

    #[test]
    fn kinds_group_units_by_their_first_input_largest_first() {
        let e = [
            External::Ping { src: "h1".into(), dst: "h2".into() },
            External::SwitchDown { switch: 1 },
            External::Ping { src: "h2".into(), dst: "h1".into() },
            External::SwitchUp { switch: 1 },
            External::Ping { src: "h1".into(), dst: "h3".into() },
            External::LinkDown { a: Port { switch: 1, port: 2 }, b: Port { switch: 2, port: 2 } },
        ];
        let refs: Vec<&External> = e.iter().collect();
        let u = units(&refs);
        assert_eq!(u, vec![vec![0], vec![1, 3], vec![2], vec![4], vec![5]]);
        assert_eq!(
            kinds(&refs, &u),
            vec![vec![0, 2, 3], vec![4], vec![1]],
            "traffic, then link before switch (by name)"
        );
    }

    #[test]
    fn peek_puts_what_the_dry_run_saw_after_each_input() {
        use sts_trace::{Header, Internal, Record};
        let rec = |seq, external: Option<External>, internal: Option<&str>| Record {
            seq,
            t_ms: seq,
            event: match (external, internal) {
                (Some(e), _) => sts_trace::Event::External(e),
                (None, l) => {
                    let l = l.unwrap_or_default();
                    sts_trace::Event::Internal(Internal::Log { controller: "c0".into(), line: l.into(), fp: l.into() })
                }
            },
            line: 0,
        };
        let ping = |s: &str| Some(External::Ping { src: s.into(), dst: "h9".into() });
        let cand = Trace {
            header: Header::new(None),
            records: vec![
                rec(1, None, Some("orig-start")),
                rec(2, ping("h1"), None),
                rec(3, None, Some("orig-after-1")),
                rec(4, ping("h2"), None),
            ],
        };
        let dry = Trace {
            header: Header::new(None),
            records: vec![
                rec(1, None, Some("hello")),
                rec(2, ping("h1"), None),
                rec(3, None, Some("a")),
                rec(4, None, Some("b")),
                rec(5, ping("h2"), None),
                rec(6, None, Some("c")),
            ],
        };
        let lines: Vec<String> = peeked(&cand, &dry)
            .records
            .iter()
            .map(|r| match (r.external(), r.internal()) {
                (Some(e), _) => e.describe(),
                (_, Some(Internal::Log { line, .. })) => line.clone(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(lines, ["hello", "ping h1 -> h9", "a", "b", "ping h2 -> h9", "c"]);
    }

    #[test]
    fn failures_go_with_their_recoveries() {
        let p = |s, n| Port { switch: s, port: n };
        let es = [
            External::LinkDown { a: p(1, 2), b: p(2, 2) },
            External::Ping { src: "h1".into(), dst: "h2".into() },
            External::LinkUp { a: p(1, 2), b: p(2, 2) },
            External::DataplaneDrop { a: p(2, 3), b: p(3, 2) },
            External::DataplaneDropEnd { a: p(2, 3), b: p(3, 2) },
        ];
        let refs: Vec<&External> = es.iter().collect();
        assert_eq!(units(&refs), vec![vec![0, 2], vec![1], vec![3, 4]]);
    }

    #[test]
    fn removed_migrations_never_make_a_host_jump() {
        let t = Trace {
            header: sts_trace::Header::new(None),
            records: [(1, 3, 1), (2, 1, 2), (3, 2, 3)]
                .iter()
                .map(|&(seq, from, to)| sts_trace::Record {
                    seq,
                    t_ms: seq,
                    event: sts_trace::Event::External(External::HostMigrate { host: "h3".into(), from, to }),
                    line: 0,
                })
                .collect(),
        };
        let start = BTreeMap::from([("h3".to_string(), 3u64)]);
        let c = candidate(&t, &BTreeSet::from([0, 2]), &start);
        let moves: Vec<(u64, u64)> = c
            .externals()
            .iter()
            .map(|(_, e)| match e {
                External::HostMigrate { from, to, .. } => (*from, *to),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(moves, vec![(3, 1), (1, 3)], "the third move starts where the first left h3");
        let c = candidate(&t, &BTreeSet::from([1, 2]), &start);
        let times: Vec<u64> = c.externals().iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![1, 2], "the pause before the first kept input is the original's");
    }
}

#[cfg(test)]
mod beyond_tests {
    use super::*;

    #[test]
    fn a_candidate_is_moot_once_it_or_an_earlier_one_of_its_round_reproduced() {
        let round = InRound::round(4);
        assert!(round.iter().all(|p| !p.moot()), "nothing known yet");
        round[2].hit();
        let moot: Vec<bool> = round.iter().map(InRound::moot).collect();
        // The one that reproduced needs no other try either.
        assert_eq!(moot, [false, false, true, true], "those from the first success on");
        round[1].hit();
        let moot: Vec<bool> = round.iter().map(InRound::moot).collect();
        assert_eq!(moot, [false, true, true, true]);
        round[3].hit();
        assert!(!round[0].moot() && round[1].moot(), "a later success moves nothing back");
    }

    /// Decides a candidate by the inputs it keeps: it reproduces when it
    /// holds every input of one of `causes` (pings named by their source; a
    /// name after `!` is one the cause needs absent: a ping that heals).
    /// Each replay takes [`REPLAY`] of (paused, virtual) time; a candidate
    /// called off stops within a tenth of that, as a replay on this machine
    /// does.
    struct Oracle {
        causes: Vec<Vec<&'static str>>,
        /// How many of the whole trace's replays miss before it reproduces
        /// (a timing-dependent original), and how much longer than
        /// [`REPLAY`] each takes (a long trace).
        whole_misses: std::sync::atomic::AtomicU32,
        whole_slower: u32,
        /// A replay takes a tenth of [`REPLAY`] per ping kept (at least
        /// one), as a real candidate's time grows with its inputs; else
        /// each takes [`REPLAY`].
        by_length: bool,
        /// Each test's start and end, in order: (start, pings kept, their
        /// names joined).
        log: std::sync::Mutex<Vec<(bool, usize, String)>>,
    }

    impl Oracle {
        fn of(causes: Vec<Vec<&'static str>>) -> Oracle {
            Oracle { causes, whole_misses: 0.into(), whole_slower: 1, by_length: false, log: Default::default() }
        }
    }

    /// Whether a candidate that keeps the pings `kept` says yes reproduces
    /// one of `causes` (see [`Oracle`]).
    fn reproduces(causes: &[Vec<&str>], kept: impl Fn(&str) -> bool) -> bool {
        causes.iter().any(|cause| {
            cause.iter().all(|h| match h.strip_prefix('!') {
                Some(healer) => !kept(healer),
                None => kept(h),
            })
        })
    }

    /// The pings of [`minimize_opts`]'s trace, by source.
    const PINGS: [&str; 10] = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8", "h9", "h10"];

    const REPLAY: std::time::Duration = std::time::Duration::from_millis(10);

    impl Executor for Oracle {
        fn test<'a>(
            &'a self,
            _engine: &'a Engine,
            _config: &'a Config,
            batch: Vec<CandidateRun>,
        ) -> BoxFuture<'a, Vec<Verdict>> {
            Box::pin(futures::future::join_all(batch.into_iter().map(|c| async move {
                let kept: BTreeSet<String> = c
                    .trace
                    .externals()
                    .iter()
                    .filter_map(|(_, e)| match e {
                        External::Ping { src, .. } => Some(src.clone()),
                        _ => None,
                    })
                    .collect();
                let whole = kept.len() == PINGS.len();
                let moot = || c.in_round.as_ref().is_some_and(InRound::moot);
                let names = kept.iter().cloned().collect::<Vec<_>>().join(",");
                let note = |start: bool| self.log.lock().unwrap().push((start, kept.len(), names.clone()));
                note(true);
                for k in 0..c.replays {
                    let slices = match self.by_length {
                        true => kept.len().max(1),
                        false => 10 * if whole { self.whole_slower as usize } else { 1 },
                    };
                    for _ in 0..slices {
                        if moot() {
                            note(false);
                            return Ok((false, u64::from(k)));
                        }
                        tokio::time::sleep(REPLAY / 10).await;
                    }
                    let missed = whole
                        && self
                            .whole_misses
                            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                            .is_ok();
                    if !missed && reproduces(&self.causes, |h| kept.contains(h)) {
                        note(false);
                        return Ok((true, u64::from(k) + 1));
                    }
                }
                note(false);
                Ok((false, u64::from(c.replays)))
            })))
        }
    }

    /// Ten pings, from h1 ... h10; the bug comes from h2, h3 and h4 (all in
    /// the first half, which ddmin tries first) or from h5 and h9 (split
    /// across the halves).
    fn minimize(dir: &Path, beyond: bool) -> Report {
        minimize_with(dir, beyond, vec![vec!["h2", "h3", "h4"], vec!["h5", "h9"]])
    }

    fn minimize_with(dir: &Path, beyond: bool, causes: Vec<Vec<&'static str>>) -> Report {
        minimize_jobs(dir, beyond, causes, 1, 1).0
    }

    /// The report, and how long the search took in the oracle's time.
    fn minimize_jobs(
        dir: &Path,
        beyond: bool,
        causes: Vec<Vec<&'static str>>,
        jobs: u32,
        replays: u32,
    ) -> (Report, std::time::Duration) {
        let opts = Options { final_replays: 0, beyond, jobs, replays, ..Options::default() };
        minimize_opts(dir, causes, opts)
    }

    /// [`minimize_jobs`] with any options.
    fn minimize_opts(dir: &Path, causes: Vec<Vec<&'static str>>, opts: Options) -> (Report, std::time::Duration) {
        let (report, took) = minimize_by(dir, &Oracle::of(causes), opts);
        (report.unwrap(), took)
    }

    /// [`minimize_opts`] with a given oracle; the search's result as it is.
    fn minimize_by(dir: &Path, oracle: &Oracle, opts: Options) -> (Result<Report, RunError>, std::time::Duration) {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let config = "[network]\ntopology = \"linear\"\nsize = 11\n\n[[controllers]]\nkind = \"command\"\ncommand = [\"true\"]\n";
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let mut text = String::from("{\"format\":\"sts-trace\",\"version\":2}\n");
        for i in 1..=10 {
            text.push_str(&format!(
                "{{\"seq\":{i},\"t_ms\":{},\"external\":{{\"type\":\"ping\",\"src\":\"h{i}\",\"dst\":\"h11\"}}}}\n",
                i * 100
            ));
        }
        text.push_str("{\"seq\":11,\"t_ms\":2000,\"violation\":{\"invariant\":\"blackhole\",\"elements\":[\"h2\",\"h11\"],\"summary\":\"x\"}}\n");
        std::fs::write(dir.join("trace.jsonl"), text).unwrap();
        let engine = Engine::new(std::sync::Arc::new(crate::observer::Silent));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let t0 = tokio::time::Instant::now();
            let report = run_on(&engine, oracle, dir, &opts).await;
            (report, t0.elapsed())
        })
    }

    #[test]
    fn more_places_take_less_time_and_the_mcs_stays_the_same() {
        let base = std::env::temp_dir().join(format!("sts-speculate-{}", std::process::id()));
        let (mut time_one, mut time_two, mut time_eight) =
            (std::time::Duration::ZERO, std::time::Duration::ZERO, std::time::Duration::ZERO);
        let (mut speculated, mut called_off) = (0, 0);
        let mut causes: Vec<Vec<&'static str>> = Vec::new();
        for (i, a) in PINGS.iter().enumerate() {
            causes.push(vec![*a]);
            for b in &PINGS[i + 1..] {
                causes.push(vec![*a, *b]);
            }
        }
        causes.push(vec!["h1", "h5", "h10"]);
        causes.push(vec!["h2", "h3", "h4", "h8"]);
        for cause in causes {
            // Two replays per candidate (a "no" costs twice a "yes"), as scripts/evaluate minimizes.
            let (one, t1) = minimize_jobs(&base.join("one"), true, vec![cause.clone()], 1, 2);
            let (two, t2) = minimize_jobs(&base.join("two"), true, vec![cause.clone()], 2, 2);
            let (eight, t8) = minimize_jobs(&base.join("eight"), true, vec![cause.clone()], 8, 2);
            assert_eq!(one.mcs, eight.mcs, "{cause:?}");
            assert_eq!(two.mcs, eight.mcs, "{cause:?}");
            assert_eq!((one.speculated, one.called_off), (0, 0), "one place: one candidate at a time, in order");
            assert!(t2 <= t1, "{cause:?}: {t2:?} with two places, {t1:?} with one");
            time_one += t1;
            time_two += t2;
            time_eight += t8;
            speculated += two.speculated + eight.speculated;
            called_off += two.called_off + eight.called_off;
        }
        assert!(speculated > 0, "later rounds' candidates filled free places");
        // A "no" after its round's first "yes" (a replay called off) is not
        // kept as a verdict, and the MCS is the same.
        assert!(called_off > 0, "some rounds were decided before their last candidate");
        eprintln!("search time, all causes: {time_one:?} one place, {time_two:?} two, {time_eight:?} eight");
        assert!(time_two * 10 < time_one * 7, "{time_two:?} with two places, {time_one:?} with one");
        assert!(time_eight < time_two, "{time_eight:?} with eight places, {time_two:?} with two");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// With two places the whole trace (here replayed five times as long as
    /// a candidate) is replayed only when the search's first candidates all
    /// miss, and the MCS is the one of a search that replayed it first
    /// (one place). A candidate that reproduces early leaves it out; three
    /// misses before any hit put it beside the search (a hit then calls it
    /// off); one that misses there is tried again alone and the search goes
    /// on to the same MCS;
    /// one that never reproduces ends the search after three tries of it,
    /// not after a search.
    #[test]
    fn the_whole_trace_is_replayed_beside_the_search_only_when_its_first_candidates_miss() {
        let base = std::env::temp_dir().join(format!("sts-whole-{}", std::process::id()));
        let opts = |jobs| Options { final_replays: 0, jobs, replays: 1, ..Options::default() };
        let oracle = |cause: Vec<&'static str>, misses: u32| Oracle {
            whole_misses: misses.into(),
            // As long as a candidate: a miss beside the search comes before the first hit.
            whole_slower: if misses > 0 { 1 } else { 5 },
            ..Oracle::of(vec![cause])
        };
        let wholes =
            |o: &Oracle| o.log.lock().unwrap().iter().filter(|&&(start, kept, _)| start && kept == PINGS.len()).count();
        // In the first half, which reproduces at once.
        let early = vec!["h2", "h4"];
        let (alone, _) = minimize_by(&base.join("one"), &oracle(early.clone(), 0), opts(1));
        let two = oracle(early, 0);
        let (report, _) = minimize_by(&base.join("two"), &two, opts(2));
        assert_eq!(report.unwrap().mcs, alone.unwrap().mcs);
        assert_eq!(wholes(&two), 0, "a candidate reproduced first: {:?}", two.log.lock().unwrap());
        // Split across the halves: both miss, and a guess after them.
        let late = vec!["h1", "h10"];
        let (alone, _) = minimize_by(&base.join("one"), &oracle(late.clone(), 0), opts(1));
        let alone = alone.unwrap();
        let two = oracle(late.clone(), 0);
        let (report, _) = minimize_by(&base.join("two"), &two, opts(2));
        assert_eq!(report.unwrap().mcs, alone.mcs);
        let log = two.log.lock().unwrap().clone();
        let whole_starts =
            log.iter().position(|&(start, kept, _)| start && kept == PINGS.len()).expect("the whole trace beside");
        let ended_before = log[..whole_starts].iter().filter(|&&(start, kept, _)| !start && kept > 0).count();
        assert!(ended_before >= WHOLE_AFTER_MISSES, "{log:?}");
        let whole_ends = log.iter().position(|&(start, kept, _)| !start && kept == PINGS.len()).unwrap();
        assert!(log[whole_starts..whole_ends].iter().any(|&(start, kept, _)| start && kept < PINGS.len()), "{log:?}");
        // Flaky: the replay beside the search misses, the next alone reproduces.
        let flaky = oracle(late, 1);
        let (report, _) = minimize_by(&base.join("flaky"), &flaky, opts(2));
        assert_eq!(report.unwrap().mcs, alone.mcs);
        assert_eq!(wholes(&flaky), 2, "beside the search, then alone");
        // Never (nor any candidate): three tries in all, and few candidates.
        let never = oracle(vec!["h11"], u32::MAX);
        let (report, _) = minimize_by(&base.join("never"), &never, opts(2));
        assert!(matches!(report, Err(RunError::DoesNotReproduce(_))), "{:?}", report.map(|r| r.mcs));
        let log = never.log.lock().unwrap().clone();
        let candidates = log.iter().filter(|&&(start, kept, _)| start && kept > 0 && kept < PINGS.len()).count();
        assert!(candidates <= 8, "{candidates} candidates replayed for a trace that does not reproduce");
        assert_eq!(wholes(&never), 2, "beside the search, then alone (its last two replays): {log:?}");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// How often a candidate started while another try of it was under
    /// way, in an oracle's log.
    fn tries_beside(log: &[(bool, usize, String)]) -> usize {
        let mut under_way: BTreeMap<&str, usize> = BTreeMap::new();
        let mut beside = 0;
        for (start, _, names) in log {
            let n = under_way.entry(names).or_default();
            if *start {
                beside += usize::from(*n > 0);
                *n += 1;
            } else {
                *n -= 1;
            }
        }
        beside
    }

    /// With two places, a place nothing else wants (no other candidate of
    /// the round, no guess) takes a candidate's next replay beside the one
    /// under way. On every one- and two-input cause of ten pings (a "no"
    /// replayed twice, a replay's time growing with its pings), the MCS is
    /// the same as without testing ahead (`speculate: false`), no search
    /// takes longer, and all of them take less time.
    #[test]
    fn a_place_nothing_else_wants_takes_a_candidates_next_replay() {
        let base = std::env::temp_dir().join(format!("sts-tries-{}", std::process::id()));
        let (mut ahead_time, mut waiting_time) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        let mut beside = 0;
        for (i, a) in PINGS.iter().enumerate() {
            for b in &PINGS[i..] {
                let cause: Vec<&'static str> = if a == b { vec![*a] } else { vec![*a, *b] };
                let opts =
                    |speculate| Options { final_replays: 0, jobs: 2, replays: 2, speculate, ..Options::default() };
                let oracle = || Oracle { by_length: true, ..Oracle::of(vec![cause.clone()]) };
                let ahead = oracle();
                let (on, t_on) = minimize_by(&base.join("on"), &ahead, opts(true));
                let waiting = oracle();
                let (off, t_off) = minimize_by(&base.join("off"), &waiting, opts(false));
                assert_eq!(on.unwrap().mcs, off.unwrap().mcs, "{cause:?}");
                assert_eq!(tries_beside(&waiting.log.lock().unwrap()), 0, "{cause:?}: nothing ahead of need");
                assert!(t_on <= t_off, "{cause:?}: {t_on:?} testing ahead, {t_off:?} not");
                beside += tries_beside(&ahead.log.lock().unwrap());
                ahead_time += t_on;
                waiting_time += t_off;
            }
        }
        eprintln!("{beside} tries beside another; {ahead_time:?} against {waiting_time:?}");
        assert!(beside > 0, "some candidate's replays went side by side");
        assert!(ahead_time < waiting_time, "{ahead_time:?} testing ahead, {waiting_time:?} not");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn presumed_misses_save_replays_and_keep_the_mcs() {
        let base = std::env::temp_dir().join(format!("sts-monotone-{}", std::process::id()));
        let (mut with, mut without) = (0, 0);
        for (i, a) in PINGS.iter().enumerate() {
            for b in &PINGS[i..] {
                let cause: Vec<&'static str> = if a == b { vec![*a] } else { vec![*a, *b] };
                for jobs in [1, 2] {
                    let opts =
                        |monotone| Options { final_replays: 0, jobs, replays: 2, monotone, ..Options::default() };
                    let (on, _) = minimize_opts(&base.join("on"), vec![cause.clone()], opts(true));
                    let (off, _) = minimize_opts(&base.join("off"), vec![cause.clone()], opts(false));
                    // The oracle's bugs are monotone: what is presumed is what a replay would say.
                    assert_eq!(on.mcs, off.mcs, "{cause:?}, {jobs} places");
                    assert_eq!(off.presumed, 0);
                    assert!(
                        on.replays <= off.replays,
                        "{cause:?}: {} replays presuming, {} not",
                        on.replays,
                        off.replays
                    );
                    with += on.replays;
                    without += off.replays;
                }
            }
        }
        eprintln!("one- and two-input causes among ten pings: {with} replays presuming, {without} not");
        assert!(with * 10 < without * 9, "{with} replays presuming, {without} not");
        // Bugs that are not monotone: h3 (or h6) alone, unless a healer is
        // there too, which an unhealer undoes. Where a set reproduces inside
        // one that did not, presuming stops; every result is 1-minimal.
        let mut stopped = 0;
        for culprit in ["h3", "h6"] {
            for healer in PINGS.iter().filter(|&&h| h != culprit) {
                for unhealer in PINGS.iter().filter(|&&h| h != culprit && h != *healer) {
                    let not = format!("!{healer}").leak() as &'static str;
                    let causes = vec![vec![culprit, not], vec![culprit, *healer, *unhealer]];
                    let opts = Options { final_replays: 0, replays: 2, ..Options::default() };
                    let (report, _) = minimize_opts(&base.join("healed"), causes.clone(), opts);
                    let kept: Vec<&str> = PINGS
                        .iter()
                        .copied()
                        .filter(|h| report.mcs.iter().any(|m| m.contains(&format!("ping {h} "))))
                        .collect();
                    let holds = |c: &[&str]| reproduces(&causes, |h| c.contains(&h));
                    assert!(holds(&kept), "{kept:?} for {causes:?}");
                    for i in 0..kept.len() {
                        let less: Vec<&str> =
                            kept.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, h)| *h).collect();
                        assert!(!holds(&less), "{kept:?} is not 1-minimal for {causes:?}");
                    }
                    stopped += usize::from(report.not_monotone);
                }
            }
        }
        eprintln!("presuming stopped in {stopped} of 144 searches");
        assert!(stopped > 0, "some search saw a set reproduce inside one that did not");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn past_ddmins_local_minimum_the_smaller_cause_is_found() {
        let base = std::env::temp_dir().join(format!("sts-beyond-{}", std::process::id()));
        let plain = minimize(&base.join("off"), false);
        assert_eq!(plain.mcs_inputs, 3, "ddmin alone keeps the first half's cause: {:?}", plain.mcs);
        let past = minimize(&base.join("on"), true);
        assert_eq!(past.mcs_inputs, 2, "{:?}", past.mcs);
        assert!(past.mcs.iter().any(|m| m.contains("ping h5 ")) && past.mcs.iter().any(|m| m.contains("ping h9 ")));
        let b = past.beyond.as_ref().expect("the search ran");
        assert_eq!((b.from, b.to), (3, 2));
        assert!(past.replays > plain.replays, "it costs replays: {} vs {}", past.replays, plain.replays);
        assert_eq!(past.curve.last(), Some(&2), "{:?}", past.curve);
        // The smaller cause shares an input with the longer one (h4): the
        // trace without the three fails, with h4 back it reproduces.
        let shared = minimize_with(&base.join("shared"), true, vec![vec!["h2", "h3", "h4"], vec!["h4", "h9"]]);
        assert_eq!(shared.mcs_inputs, 2, "{:?}", shared.mcs);
        assert!(shared.mcs.iter().any(|m| m.contains("ping h4 ")) && shared.mcs.iter().any(|m| m.contains("ping h9 ")));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn with_one_cause_the_search_costs_one_replay_per_input_and_one() {
        let base = std::env::temp_dir().join(format!("sts-beyond-one-{}", std::process::id()));
        let (on, off) = (base.join("on"), base.join("off"));
        let two = || vec![vec!["h3", "h7"]];
        let (with, without) = (minimize_with(&on, true, two()), minimize_with(&off, false, two()));
        assert_eq!(with.mcs_inputs, 2);
        assert_eq!(with.replays, without.replays, "a result of two: nothing past it is tried");
        assert!(with.beyond.is_none());
        // A result of three: the trace without them, then with each one back (four replays).
        let three = || vec![vec!["h3", "h5", "h7"]];
        let (with, without) = (minimize_with(&on, true, three()), minimize_with(&off, false, three()));
        assert_eq!(with.mcs_inputs, 3);
        assert_eq!(with.beyond.as_ref().map(|b| (b.from, b.to, b.replays, b.capped)), Some((3, 3, 4, false)));
        assert_eq!(with.replays, without.replays + 4);
        let _ = std::fs::remove_dir_all(&base);
    }
}
