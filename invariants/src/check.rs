//! The invariants, checked over a [`Network`] snapshot plus a few facts only
//! the orchestrator knows (controller processes, connections, logs).
//!
//! Definitions (`docs/invariants.md` says the same at more length):
//!
//! - **loop**: some header a host can send comes back to a switch port it
//!   already crossed with the same header (it would cycle forever), or crosses
//!   more than the dataplane's hop limit of switches. Loops the dataplane saw
//!   happen (including storms through a controller, which no flow table shows)
//!   are loops too.
//! - **blackhole**: hosts A and B are connected by live links, and some
//!   untagged ARP or IPv4 frame A sends to B (A's MAC and IPv4 address as
//!   source, B's as destination, any other field values) is
//!   neither delivered to B nor sent to a controller by any of its copies: it is
//!   dropped (table miss without a table-miss entry, a rule without outputs, a
//!   down port, a failed link) or misdelivered. Frames sent to a controller are
//!   not blackholed: the controller may still forward them.
//! - **reachability**: every pair of hosts is connected by live links and none
//!   of its traffic is blackholed. A blackholed pair is reported once, as a
//!   blackhole, when both checks are on.
//! - **isolation**: for each configured pair, no frame from A reaches B through
//!   the flow tables.
//! - **liveness**: every controller process is alive and every switch has a
//!   controller connection.
//! - **controller-errors**: no controller log line matches an error pattern.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use sts_mocknet::network::{DataplaneEvent, Endpoint, Network};
use sts_mocknet::packet::{mac_int, ETH_ARP, ETH_IPV4};

use crate::by_class::ByClass;
use crate::header::{s, Cube, Shape, Ternary, PRESENT};
use crate::identity::{error_culprit, rule_signature};
use crate::walk::{hops, DropReason, Model, Node, Outcome, Terminal, Walker};

/// Header classes the class engine holds at most before the check falls
/// back to per-source walks (it also stops at 2^28 classes × switches).
pub const CLASS_LIMIT: usize = 1 << 20;

/// Header classes × switches from which the class engine uses every core.
const PARALLEL_WORK: usize = 16_384;

/// One invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    Loop,
    Blackhole,
    Reachability,
    Isolation,
    Liveness,
    ControllerErrors,
}

impl Invariant {
    /// Every invariant, in report order.
    pub const ALL: [Invariant; 6] = [
        Invariant::Loop,
        Invariant::Blackhole,
        Invariant::Reachability,
        Invariant::Isolation,
        Invariant::Liveness,
        Invariant::ControllerErrors,
    ];

    /// The name used in configs, traces and fingerprints.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::Loop => "loop",
            Invariant::Blackhole => "blackhole",
            Invariant::Reachability => "reachability",
            Invariant::Isolation => "isolation",
            Invariant::Liveness => "liveness",
            Invariant::ControllerErrors => "controller-errors",
        }
    }

    /// Parses a name as [`Invariant::name`] spells it.
    pub fn from_name(s: &str) -> Option<Invariant> {
        Invariant::ALL.into_iter().find(|i| i.name() == s)
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A concrete example of a violation: a header, where it entered, the switches
/// and rules it crossed, and where it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Witness {
    pub header: String,
    /// The frame itself, hex, for injecting it again.
    pub frame: String,
    pub from: String,
    /// One entry per switch: `s2 in 1: table 0 #3 (priority 1)`.
    pub path: Vec<String>,
    pub end: String,
}

/// A violated invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: Invariant,
    /// The network elements involved (switches `s<dpid>`, hosts by name,
    /// controllers by name), sorted.
    pub elements: Vec<String>,
    /// One line for humans.
    pub summary: String,
    /// Shared: a report cloned per re-check (standing loops) copies no
    /// strings of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<std::sync::Arc<Witness>>,
    /// What causes it, where that can be found (see [`crate::identity`]):
    /// `s3 table 0: a match-all rule of priority 100`,
    /// `KeyError at app.py:42 in port_status`. Older traces have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub culprit: Option<String>,
}

impl Violation {
    /// A loop the dataplane saw happen (a frame over the hop limit, a storm)
    /// rather than one found in the flow tables. Only the hop limit ended it:
    /// in a real network it would go on forever, so it counts as persistent
    /// at once.
    pub fn is_observed_loop(&self) -> bool {
        self.invariant == Invariant::Loop && self.witness.is_none()
    }

    /// Something that happened rather than a state that may heal: a loop the
    /// dataplane saw, or a controller logging an error. Persistence counts
    /// these at once.
    pub fn is_event(&self) -> bool {
        self.is_observed_loop() || self.invariant == Invariant::ControllerErrors
    }

    /// What decides whether a replay "found the same bug": the invariant and
    /// its stable elements. Loops match on the invariant alone (which cycle a
    /// storm takes depends on timing); blackholes and reachability on the
    /// destination host; isolation on the pair; liveness and controller errors
    /// on the element.
    pub fn fingerprint(&self) -> String {
        match self.invariant {
            Invariant::Loop => "loop".into(),
            Invariant::Blackhole | Invariant::Reachability => {
                format!("{}:{}", self.invariant, self.elements.last().map_or("", String::as_str))
            }
            _ => format!("{}:{}", self.invariant, self.elements.join(",")),
        }
    }
}

/// A pair of hosts that must not communicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolationRule {
    pub from: String,
    pub to: String,
}

/// A controller process, as the orchestrator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerState {
    pub name: String,
    pub alive: bool,
}

/// What the orchestrator knows beyond the network's forwarding state.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub controllers: Vec<ControllerState>,
    /// Switches with no controller connection.
    pub disconnected: Vec<u64>,
    /// What the dataplane reported since the last check.
    pub dataplane: Vec<DataplaneEvent>,
    /// Controller log lines since the last check: (controller, line).
    pub log_lines: Vec<(String, String)>,
}

/// The result of one check.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Things the analysis could not conclude about (unmodelled actions, a
    /// walk stopped by its step budget).
    pub notes: Vec<String>,
    pub rules: usize,
    /// Terminals of the per-source walks (only the pairs to explain, when
    /// the class engine ran).
    pub terminals: usize,
    /// Header classes the class engine followed (0: per-source walks).
    pub classes: usize,
    /// Why the class engine did not run, if it did not.
    pub per_source_because: Option<String>,
}

/// What a check knows of the network besides its flow tables.
struct Context {
    /// Hosts with a live link to a switch, and that switch.
    attached: Vec<(usize, u64)>,
    /// The switch each host is attached to (by host index), if any.
    switch_of: Vec<Option<u64>>,
    /// Every host attached, all in one component: no reachability violation.
    all_together: bool,
    comps: Components,
    hosts: HostIndex,
    /// The disjoint cubes every walk starts from: one per frame shape, with
    /// the fields no rule reads or writes left free (shapes that differ only
    /// there travel as one).
    shapes: Vec<Cube>,
}

impl Context {
    fn of(net: &Network, model: &Model, values: &[(usize, Ternary)]) -> Context {
        let attached: Vec<(usize, u64)> = (0..net.hosts.len())
            .filter_map(|i| match net.live_peer(Endpoint::Host(i)) {
                Some(Endpoint::Switch { dpid, .. }) => Some((i, dpid)),
                _ => None,
            })
            .collect();
        let mut shapes: Vec<Cube> = Vec::new();
        let used = values.iter().fold(model.used_slots(), |m, &(slot, _)| m | 1 << slot);
        for c in Shape::all().into_iter().map(|sh| Cube::of_shape(sh).relax(!used)) {
            if !shapes.contains(&c) {
                shapes.push(c);
            }
        }
        let mut switch_of = vec![None; net.hosts.len()];
        for &(i, d) in &attached {
            switch_of[i] = Some(d);
        }
        let comps = Components::of(net);
        let one = attached.first().map(|&(_, d)| comps.root(d));
        let all_together =
            attached.len() == net.hosts.len() && attached.iter().all(|&(_, d)| Some(comps.root(d)) == one);
        Context { attached, switch_of, all_together, comps, hosts: HostIndex::of(net), shapes }
    }
}

/// The pairs the class engine reported, walked per source.
#[derive(Default)]
struct Explained {
    /// The violations of each pair reported (blackholes, isolation), in pair order.
    explained: BTreeMap<(usize, usize), Vec<Violation>>,
    notes: BTreeSet<String>,
    terminals: usize,
    /// Ticks whenever `explained` changes.
    generation: u64,
}

/// What the class engine keeps between checks (see [`Incremental`]).
struct ClassState {
    engine: ByClass,
    /// The network's switches, sorted ([`Model::switches`]).
    switches: std::sync::Arc<[u64]>,
    ctx: Context,
    found: Explained,
    /// Flow entries per switch and in all, kept up to date by each re-check
    /// (counting every table of every switch again costs more than the
    /// re-check itself on a large network).
    rules_at: HashMap<u64, usize>,
    rules: usize,
    /// The loops reported, per cycle: the (source, atom) that explains it
    /// and its violation (see [`explain_loop`]).
    loops: BTreeMap<Vec<u64>, ((usize, usize), Violation)>,
    /// The engine's [`ByClass::loop_clock`] when `loops` was made from its
    /// loops: while it stays, they are the engine's loops still.
    loops_at: u64,
    /// Ticks whenever `loops` is made again.
    loops_generation: u64,
}

/// A loop the class engine found, explained by walking its first (source,
/// atom) alone; with the walk's terminal count.
fn explain_loop(
    net: &Network,
    model: &Model,
    engine: &ByClass,
    cycle: &[u64],
    (a, x): (usize, usize),
) -> (Option<Violation>, usize) {
    let Some(cube) = engine.atom_cube(x) else { return (None, 0) };
    let mut w = Walker::until_loop(model, cycle.to_vec(), engine.by_components(x));
    w.from_host(a, &[cube]);
    let first = w.terminals.iter().find(|t| matches!(&t.outcome, Outcome::Looped { cycle: c } if w.awaited(c)));
    (first.and_then(|t| loop_violation(net, a, t, cycle)), w.terminals.len())
}

/// A checker that keeps what it learnt between checks: after a few
/// switches' flow tables change, [`Incremental::recheck`] follows again only
/// the header classes the added or removed rules hold, and explains again
/// only the pairs those touch, and keeps the loops of the classes it did not
/// follow. Whenever it cannot (a header rewrite, a match value no class was
/// cut for, the per-source walks were needed), it runs a full check instead
/// (counted in [`Incremental::fallbacks`]); the report is the one a full
/// check would give.
pub struct Incremental {
    pub checker: Checker,
    state: Option<ClassState>,
    /// Re-checks that ran a full check instead, by reason (for reports and
    /// benchmarks: how incremental a stream of changes was).
    pub fallbacks: BTreeMap<String, usize>,
    /// Header classes re-checks followed again, and how many of those took
    /// the walk of another class that does the same at every switch.
    pub followed: (u64, u64),
    /// Match values to cut header classes for beyond the current rules'
    /// (see [`Incremental::cut_for`]).
    values: Vec<(usize, Ternary)>,
    /// Explain a loop again when its witness crosses a changed switch (its
    /// rule positions may have moved). Off, a loop is explained when it
    /// appears and when the header class explaining it changes, and its
    /// witness may name rules by positions they have since left: a stream
    /// verifier that reports each loop as it appears does not need more.
    pub refresh_loop_witnesses: bool,
    /// Explain the class engine's loops on re-checks (walk each new one for
    /// a witness: [`Incremental::standing`]). Off, they are only found
    /// ([`Incremental::loop_cycles`]) and none stands: for a caller that
    /// takes them as candidates to confirm elsewhere (`sts verify` with
    /// filters confirms each on the filtered network, with its own witness).
    pub explain_loops: bool,
    /// Full checks so far: each starts the class engine's state anew.
    full_checks: u64,
    /// The header classes the last re-check followed again, sorted; `None`
    /// after a full check (any class may have changed).
    last_followed: Option<Vec<usize>>,
}

impl Incremental {
    /// An incremental checker with no state yet.
    pub fn new(checker: Checker) -> Incremental {
        Incremental {
            checker,
            full_checks: 0,
            state: None,
            fallbacks: BTreeMap::new(),
            followed: (0, 0),
            values: Vec::new(),
            refresh_loop_witnesses: true,
            explain_loops: true,
            last_followed: None,
        }
    }

    /// Cuts header classes, from the next full check on, for these match
    /// values (header slot, ternary) too, as if some rule used them: a
    /// stream of updates known in advance (`sts verify`) then never adds a
    /// value no class was cut for, which would make a re-check a full check.
    /// The verdicts are the same; only the classes are finer.
    pub fn cut_for(&mut self, values: impl IntoIterator<Item = (usize, Ternary)>) {
        self.values.extend(values);
        self.values.sort_unstable();
        self.values.dedup();
        self.state = None;
    }

    /// The loops (their switches) the class engine found in the last check
    /// (none when it did not run).
    pub fn loop_cycles(&self) -> Vec<Vec<u64>> {
        self.state.as_ref().map_or_else(Vec::new, |st| st.engine.loop_cycles().cloned().collect())
    }

    /// The header classes (by number, stable while the classes are not cut
    /// again) taking the loop through `cycle`, in order.
    pub fn loop_classes_of(&self, cycle: &[u64]) -> Vec<usize> {
        self.state.as_ref().map_or_else(Vec::new, |st| st.engine.cycle_atoms(cycle).collect())
    }

    /// Changes whenever the classes taking the loop through `cycle` may have
    /// changed (and the class engine's state with them): while it stays, so
    /// does [`Incremental::loop_classes_of`]. `None` without class state.
    pub fn loop_stamp(&self, cycle: &[u64]) -> Option<(u64, u64)> {
        let st = self.state.as_ref()?;
        Some((self.full_checks, st.engine.loop_stamp(cycle)))
    }

    /// Changes whenever the loops the class engine found, or the classes
    /// taking one, may have changed: while it stays, so do
    /// [`Incremental::loop_cycles`] and every [`Incremental::loop_stamp`].
    /// `None` without class state.
    pub fn loop_clock(&self) -> Option<(u64, u64)> {
        let st = self.state.as_ref()?;
        Some((self.full_checks, st.engine.loop_clock()))
    }

    /// Whether the last check may have changed how the network treats header
    /// class `x`: the last re-check followed it again, or the last check was
    /// a full one.
    pub fn may_have_changed(&self, x: usize) -> bool {
        self.last_followed.as_ref().is_none_or(|f| f.binary_search(&x).is_ok())
    }

    /// A cube of headers of class `x` (all of the class behaves like it).
    pub fn class_cube(&self, x: usize) -> Option<Cube> {
        self.state.as_ref()?.engine.atom_cube(x)
    }

    /// Where table 0 of switch `dpid` begins to matter for class `x` on the
    /// network last checked: the position of the first rule holding the
    /// class (the table's length if none does) and the table's length;
    /// the rules before it hold none of its headers.
    pub fn class_table0_start(&self, x: usize, dpid: u64) -> Option<(usize, usize)> {
        self.state.as_ref()?.engine.table0_start(x, dpid)
    }

    /// A full check, keeping what later rechecks need.
    pub fn check(&mut self, net: &Network, facts: &Facts) -> Report {
        let (report, state) = self.checker.full_with(net, facts, true, &self.values, self.explain_loops);
        self.state = state;
        self.full_checks += 1;
        self.last_followed = None;
        report
    }

    /// A full check whose report leaves out what [`Incremental::standing`]
    /// holds (a full check's report begins with exactly those).
    fn check_lean(&mut self, net: &Network, facts: &Facts) -> Report {
        let mut report = self.check(net, facts);
        let kept = self.standing().count().min(report.violations.len());
        report.violations.drain(..kept);
        report
    }

    /// A check after only the flow tables of the `changed` switches changed
    /// since the last check or recheck (rules added, modified or removed; no
    /// port, link, group or host change: for those call [`Incremental::check`]).
    pub fn recheck(&mut self, net: &Network, facts: &Facts, changed: &[u64]) -> Report {
        let mut report = self.recheck_lean(net, facts, changed);
        let mut all: Vec<Violation> = self.standing().cloned().collect();
        all.append(&mut report.violations);
        report.violations = all;
        report
    }

    /// Changes whenever what [`Incremental::standing`] yields may have
    /// changed; `None` when nothing stands kept (no class engine state).
    pub fn standing_version(&self) -> Option<(u64, u64, u64)> {
        let st = self.state.as_ref()?;
        Some((self.full_checks, st.found.generation, st.loops_generation))
    }

    /// The violations found in the flow tables that the class engine keeps
    /// between checks (pairs explained, then loops), as the last check or
    /// re-check reports them; none when its state is gone (a per-source check).
    pub fn standing(&self) -> impl Iterator<Item = &Violation> + '_ {
        self.state.iter().flat_map(|st| st.found.explained.values().flatten().chain(st.loops.values().map(|(_, v)| v)))
    }

    /// [`Incremental::recheck`] without copying what the engine keeps: the
    /// report's violations are only those of the checks that read no flow
    /// table (liveness, controller errors, loops the dataplane saw,
    /// reachability over live links); the others are
    /// [`Incremental::standing`]. For a caller re-checking thousands of
    /// times that looks at what changed (`sts verify`): a network with many
    /// standing loops would copy every one of them at every update.
    pub fn recheck_lean(&mut self, net: &Network, facts: &Facts, changed: &[u64]) -> Report {
        let Some(mut st) = self.state.take() else {
            *self.fallbacks.entry("no class engine state".into()).or_default() += 1;
            return self.check_lean(net, facts);
        };
        let model = Model::with_switches(net, st.switches.clone());
        let mut touched = match st.engine.update(&model, changed) {
            Ok((t, followed, shared)) => {
                self.followed.0 += followed.len() as u64;
                self.followed.1 += shared as u64;
                self.last_followed = Some(followed);
                t
            }
            Err(why) => {
                *self.fallbacks.entry(why.to_string()).or_default() += 1;
                return self.check_lean(net, facts);
            }
        };
        for d in changed {
            let now = net.switches.get(d).map_or(0, |s| s.tables.iter().map(|t| t.len()).sum());
            let before = st.rules_at.insert(*d, now).unwrap_or(0);
            st.rules = st.rules + now - before;
        }
        // Witnesses name rules by their position, which shifts when a rule
        // is added or removed before them: explain again the pairs whose
        // witness crosses a changed switch.
        let changed_names: BTreeSet<String> = changed.iter().map(|&d| sw(d)).collect();
        let crosses = |v: &Violation| {
            v.witness.as_ref().is_some_and(|w| {
                w.path.iter().any(|hop| hop.split(' ').next().is_some_and(|n| changed_names.contains(n)))
            })
        };
        touched.extend(st.found.explained.iter().filter(|(_, vs)| vs.iter().any(crosses)).map(|(p, _)| *p));
        st.found.terminals = 0;
        self.checker.explain(net, &model, &st.ctx, &st.engine, &mut st.found, touched);
        let mut report = Report {
            rules: st.rules,
            classes: st.engine.classes(),
            terminals: st.found.terminals,
            ..Report::default()
        };
        // The engine's loops as they were when last explained (each one
        // explained), and witnesses kept as they are: nothing to do.
        let loops_stand = !self.refresh_loop_witnesses
            && st.loops_at == st.engine.loop_clock()
            && st.loops.len() == st.engine.loop_count();
        if !self.explain_loops {
            if !st.loops.is_empty() {
                st.loops.clear();
                st.loops_generation += 1;
            }
        } else if self.checker.enabled.contains(&Invariant::Loop) && !loops_stand {
            // Loops: explained again when new, when their explaining (source,
            // atom) changed, or when their witness crosses a changed switch.
            // Both sorted by cycle: one merge, moving what stays.
            let mut before = std::mem::take(&mut st.loops).into_iter().peekable();
            let mut loops = Vec::new();
            for (cycle, first) in st.engine.loops() {
                while before.next_if(|(c, _)| c < cycle).is_some() {}
                let kept = before
                    .next_if(|(c, _)| c == cycle)
                    .filter(|(_, (f, v))| *f == first && !(self.refresh_loop_witnesses && crosses(v)));
                match kept {
                    Some(e) => loops.push(e),
                    None => {
                        let (v, terminals) = explain_loop(net, &model, &st.engine, cycle, first);
                        report.terminals += terminals;
                        if let Some(v) = v {
                            loops.push((cycle.clone(), (first, v)));
                        }
                    }
                }
            }
            st.loops = loops.into_iter().collect();
            st.loops_at = st.engine.loop_clock();
            st.loops_generation += 1;
        }
        self.checker.tail(net, facts, &st.ctx, &mut report);
        report.notes = st.found.notes.iter().cloned().collect();
        self.state = Some(st);
        report
    }
}

/// How the header-space checks are computed. Both are exact; they differ
/// in speed and in what they apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// By header class (see [`crate::classes`] and `by_class.rs`) when the
    /// network has no header rewrites (looping classes are walked per source,
    /// alone), else per source.
    #[default]
    Auto,
    /// Walk every header from every source host ([`crate::walk`]).
    PerSource,
}

/// Which invariants to check, and their parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checker {
    pub enabled: BTreeSet<Invariant>,
    pub isolation: Vec<IsolationRule>,
    /// Substrings that make a controller log line an error.
    pub error_patterns: Vec<String>,
    pub engine: Engine,
}

impl Default for Checker {
    fn default() -> Self {
        Checker {
            enabled: [Invariant::Loop, Invariant::Blackhole, Invariant::Liveness].into_iter().collect(),
            isolation: Vec::new(),
            error_patterns: vec!["Traceback".into(), "Exception".into(), "ERROR".into()],
            engine: Engine::Auto,
        }
    }
}

fn sw(dpid: u64) -> String {
    format!("s{dpid}")
}

/// Which switches are connected by live links: each switch's component root
/// (found by union-find once, then looked up in O(1)), and each switch's
/// neighbours over those links (for a frame's wrong turn).
struct Components {
    root: HashMap<u64, u64>,
    /// Switches numbered densely, and each one's neighbours by number.
    number: HashMap<u64, usize>,
    adjacent: Vec<Vec<usize>>,
    /// Per destination switch (by number): every switch's distance to it in
    /// live links (`u32::MAX`: none), made the first time it is asked for
    /// (a host cut off makes thousands of blackholes towards one switch).
    distances: std::sync::Mutex<HashMap<usize, std::sync::Arc<Vec<u32>>>>,
}

impl Components {
    fn of(net: &Network) -> Components {
        let mut parent: BTreeMap<u64, u64> = net.switches.keys().map(|&d| (d, d)).collect();
        fn find(p: &mut BTreeMap<u64, u64>, x: u64) -> u64 {
            let mut r = x;
            while p[&r] != r {
                r = p[&r];
            }
            p.insert(x, r);
            r
        }
        let number: HashMap<u64, usize> = net.switches.keys().enumerate().map(|(i, &d)| (d, i)).collect();
        let mut adjacent: Vec<Vec<usize>> = vec![Vec::new(); number.len()];
        for ((a, pa), (b, _)) in net.switch_links() {
            let live = net.live_peer(Endpoint::Switch { dpid: a, port: pa }).is_some();
            let ports_up =
                |d: u64, p: u32| net.switches.get(&d).and_then(|s| s.ports.get(&p)).is_some_and(|p| p.is_live());
            if live && ports_up(a, pa) {
                let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                parent.insert(ra, rb);
                if let (Some(&i), Some(&j)) = (number.get(&a), number.get(&b)) {
                    adjacent[i].push(j);
                    adjacent[j].push(i);
                }
            }
        }
        for n in &mut adjacent {
            n.sort_unstable();
            n.dedup();
        }
        let keys: Vec<u64> = parent.keys().copied().collect();
        Components {
            root: keys.into_iter().map(|k| (k, find(&mut parent, k))).collect(),
            number,
            adjacent,
            distances: Default::default(),
        }
    }

    fn same(&self, a: u64, b: u64) -> bool {
        self.root.contains_key(&a) && self.root.get(&a) == self.root.get(&b)
    }

    /// Every switch's distance in live links to switch number `to`.
    fn distances_to(&self, to: usize) -> std::sync::Arc<Vec<u32>> {
        let mut known = self.distances.lock().unwrap_or_else(|e| e.into_inner());
        known
            .entry(to)
            .or_insert_with(|| {
                let mut d = vec![u32::MAX; self.adjacent.len()];
                let mut queue = std::collections::VecDeque::from([to]);
                d[to] = 0;
                while let Some(x) = queue.pop_front() {
                    for &n in &self.adjacent[x] {
                        if d[n] == u32::MAX {
                            d[n] = d[x] + 1;
                            queue.push_back(n);
                        }
                    }
                }
                std::sync::Arc::new(d)
            })
            .clone()
    }

    /// Whether a path of live links leads from switch `from` to `to`
    /// without crossing a switch in `avoid`. Searched depth first, nearest
    /// to `to` first, never into a switch from which `to` cannot be reached
    /// at all: where a way exists it is usually found straight away.
    fn reaches(&self, from: u64, to: u64, avoid: &BTreeSet<u64>) -> bool {
        let (Some(&f), Some(&t)) = (self.number.get(&from), self.number.get(&to)) else { return from == to };
        let distance = self.distances_to(t);
        if distance[f] == u32::MAX {
            return false;
        }
        let mut seen = vec![false; self.adjacent.len()];
        for d in avoid {
            if let Some(&i) = self.number.get(d) {
                seen[i] = true;
            }
        }
        seen[f] = true;
        let mut todo = vec![f];
        let mut next = Vec::new();
        while let Some(x) = todo.pop() {
            if x == t {
                return true;
            }
            next.clear();
            next.extend(self.adjacent[x].iter().copied().filter(|&n| !seen[n] && distance[n] != u32::MAX));
            // Farthest pushed first: the nearest is taken next.
            next.sort_unstable_by_key(|&n| std::cmp::Reverse(distance[n]));
            for &n in &next {
                seen[n] = true;
                todo.push(n);
            }
        }
        false
    }

    fn root(&self, a: u64) -> Option<u64> {
        self.root.get(&a).copied()
    }
}

/// Hosts by address, to find which destinations a header set can be for.
struct HostIndex {
    by_mac: HashMap<u64, usize>,
    by_ip: HashMap<u64, usize>,
    addrs: Vec<(u64, u64)>,
}

impl HostIndex {
    fn of(net: &Network) -> HostIndex {
        let addrs: Vec<(u64, u64)> =
            net.hosts.iter().map(|h| (PRESENT | mac_int(&h.mac.0) as u64, PRESENT | u32::from(h.ip) as u64)).collect();
        HostIndex {
            by_mac: addrs.iter().enumerate().map(|(i, a)| (a.0, i)).collect(),
            by_ip: addrs.iter().enumerate().map(|(i, a)| (a.1, i)).collect(),
            addrs,
        }
    }

    /// Hosts whose MAC and IPv4 (or ARP target) address the cube admits.
    fn destinations(&self, c: &Cube) -> Vec<usize> {
        let et = c.pos[s::ETH_TYPE];
        let ip = if et == Ternary::exact(PRESENT | ETH_IPV4 as u64) {
            c.pos[s::IPV4_DST]
        } else if et == Ternary::exact(PRESENT | ETH_ARP as u64) {
            c.pos[s::ARP_TPA]
        } else {
            return vec![];
        };
        let mac = c.pos[s::ETH_DST];
        if mac.mask == u64::MAX {
            return self
                .by_mac
                .get(&mac.value)
                .into_iter()
                .copied()
                .filter(|&i| ip.contains(self.addrs[i].1))
                .collect();
        }
        if ip.mask == u64::MAX {
            return self.by_ip.get(&ip.value).into_iter().copied().filter(|&i| mac.contains(self.addrs[i].0)).collect();
        }
        (0..self.addrs.len()).filter(|&i| mac.contains(self.addrs[i].0) && ip.contains(self.addrs[i].1)).collect()
    }
}

impl Checker {
    /// Checks every enabled invariant.
    pub fn check(&self, net: &Network, facts: &Facts) -> Report {
        self.full_with(net, facts, false, &[], true).0
    }

    /// A full check; with `keep`, also what [`Incremental::recheck`] needs
    /// (when the class engine ran); without `explain_loops`, the class
    /// engine's loops are found but not reported ([`Incremental::explain_loops`]).
    fn full_with(
        &self,
        net: &Network,
        facts: &Facts,
        keep: bool,
        values: &[(usize, Ternary)],
        explain_loops: bool,
    ) -> (Report, Option<ClassState>) {
        let mut report = Report::default();
        let on = |i| self.enabled.contains(&i);
        let model = Model::new(net);
        report.rules = model.rule_count();
        let ctx = Context::of(net, &model, values);
        let Context { attached, comps, hosts, shapes, .. } = &ctx;
        let mut loops: BTreeMap<Vec<u64>, ((usize, usize), Violation)> = BTreeMap::new();
        let mut notes = BTreeSet::new();
        let pairs_needed = on(Invariant::Blackhole) || on(Invariant::Reachability) || on(Invariant::Isolation);
        let mut by_class = None;
        if (on(Invariant::Loop) || pairs_needed) && self.engine == Engine::Auto {
            match self.by_class(net, &model, &ctx, keep, values) {
                Ok((engine, found)) => {
                    report.classes = engine.classes();
                    report.terminals = found.terminals;
                    report.violations.extend(found.explained.values().flatten().cloned());
                    notes.extend(found.notes.iter().cloned());
                    if on(Invariant::Loop) && explain_loops {
                        for (cycle, first) in engine.loops() {
                            let (v, terminals) = explain_loop(net, &model, &engine, cycle, first);
                            report.terminals += terminals;
                            if let Some(v) = v {
                                loops.insert(cycle.clone(), (first, v));
                            }
                        }
                    }
                    by_class = Some((engine, found));
                }
                Err(why) => report.per_source_because = Some(why),
            }
        }
        if (on(Invariant::Loop) || pairs_needed) && by_class.is_none() {
            for &(a, a_sw) in attached {
                let mut w = Walker::new(&model);
                w.from_host(a, shapes);
                if w.truncated {
                    notes.insert(format!(
                        "the walk from {} stopped at its step budget; results from it are partial",
                        net.hosts[a].name
                    ));
                }
                report.terminals += w.terminals.len();
                for t in &w.terminals {
                    match &t.outcome {
                        Outcome::Looped { cycle } if on(Invariant::Loop) && !loops.contains_key(cycle) => {
                            if let Some(v) = loop_violation(net, a, t, cycle) {
                                loops.insert(cycle.clone(), ((a, 0), v));
                            }
                        }
                        Outcome::Unmodelled { what } => {
                            notes.insert(format!(
                                "not analysed: {what} at {}",
                                t.path.as_ref().map_or("a host".into(), |n| sw(n.dpid))
                            ));
                        }
                        _ => {}
                    }
                }
                if pairs_needed {
                    self.pairs(net, hosts, comps, attached, a, a_sw, &w.terminals, &mut report.violations);
                }
            }
        }
        report.violations.extend(loops.values().map(|(_, v)| v.clone()));
        self.tail(net, facts, &ctx, &mut report);
        report.notes = notes.into_iter().collect();
        let state = by_class.filter(|_| keep).map(|(engine, found)| {
            let rules_at: HashMap<u64, usize> =
                net.switches.iter().map(|(&d, s)| (d, s.tables.iter().map(|t| t.len()).sum())).collect();
            let loops_at = engine.loop_clock();
            ClassState {
                engine,
                switches: model.switches(),
                ctx,
                found,
                rules: report.rules,
                rules_at,
                loops,
                loops_at,
                loops_generation: 0,
            }
        });
        (report, state)
    }

    /// The checks that read no flow table: loops the dataplane saw,
    /// reachability over live links, liveness, controller errors.
    fn tail(&self, net: &Network, facts: &Facts, ctx: &Context, report: &mut Report) {
        let on = |i| self.enabled.contains(&i);
        if on(Invariant::Loop) {
            report.violations.extend(observed_loop(&facts.dataplane));
        }
        if on(Invariant::Reachability) {
            let (switch_of, comps) = (&ctx.switch_of, &ctx.comps);
            // Everyone attached, all in one component: nothing to report.
            for &(a, a_sw) in if ctx.all_together { &[][..] } else { &ctx.attached[..] } {
                for (b, _) in net.hosts.iter().enumerate().filter(|(b, _)| *b != a) {
                    if !switch_of[b].is_some_and(|d| comps.same(a_sw, d)) {
                        let (na, nb) = (net.hosts[a].name.clone(), net.hosts[b].name.clone());
                        let summary = format!("{na} cannot reach {nb}: no live path");
                        report.violations.push(Violation {
                            invariant: Invariant::Reachability,
                            elements: vec![na, nb],
                            summary,
                            witness: None,
                            culprit: Some("no live path".into()),
                        });
                    }
                }
            }
        }
        if on(Invariant::Liveness) {
            for c in facts.controllers.iter().filter(|c| !c.alive) {
                let summary = format!("controller {} is not running", c.name);
                report.violations.push(Violation {
                    invariant: Invariant::Liveness,
                    elements: vec![c.name.clone()],
                    culprit: Some(format!("{} is not running", c.name)),
                    summary,
                    witness: None,
                });
            }
            for &d in &facts.disconnected {
                let summary = format!("switch {} has no controller connection", sw(d));
                report.violations.push(Violation {
                    invariant: Invariant::Liveness,
                    elements: vec![sw(d)],
                    culprit: Some(format!("{} has no controller connection", sw(d))),
                    summary,
                    witness: None,
                });
            }
        }
        if on(Invariant::ControllerErrors) {
            let mut seen = BTreeSet::new();
            for (i, (name, line)) in facts.log_lines.iter().enumerate() {
                if self.error_patterns.iter().any(|p| line.contains(p.as_str())) && seen.insert(name.clone()) {
                    let summary = format!("controller {name} logged an error: {}", line.trim());
                    // The traceback follows the first error line.
                    let own: Vec<&str> =
                        facts.log_lines[i..].iter().filter(|(n, _)| n == name).map(|(_, l)| l.as_str()).collect();
                    report.violations.push(Violation {
                        invariant: Invariant::ControllerErrors,
                        elements: vec![name.clone()],
                        summary,
                        witness: None,
                        culprit: error_culprit(&own),
                    });
                }
            }
        }
    }

    /// Blackholes, reachability and isolation by header class: the class
    /// engine finds the blackholed pairs and the cycles looping classes take;
    /// each pair to report, and each isolation pair, is then walked per source
    /// for its witness. `Err` says why the engine could not run.
    fn by_class(
        &self,
        net: &Network,
        model: &Model,
        ctx: &Context,
        keep: bool,
        values: &[(usize, Ternary)],
    ) -> Result<(ByClass, Explained), String> {
        // Threads only pay off beyond a few milliseconds of work.
        let threads = |work: usize| {
            if work < PARALLEL_WORK {
                1
            } else {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            }
        };
        let engine = ByClass::new(model, &ctx.shapes, values, CLASS_LIMIT, |d| ctx.comps.root(d), keep, threads)
            .map_err(|e| e.to_string())?;
        let mut found = Explained::default();
        self.explain(net, model, ctx, &engine, &mut found, engine.blackholes());
        Ok((engine, found))
    }

    /// Walks each pair per source (and every isolation pair) and files its
    /// violations, with witnesses, in `found.explained`.
    fn explain(
        &self,
        net: &Network,
        model: &Model,
        ctx: &Context,
        engine: &ByClass,
        found: &mut Explained,
        pairs: impl IntoIterator<Item = (usize, usize)>,
    ) {
        let on = |i| self.enabled.contains(&i);
        let holes = on(Invariant::Blackhole) || on(Invariant::Reachability);
        // Pairs no longer blackholed have nothing left to explain.
        let mut todo = BTreeSet::new();
        for p in pairs {
            if holes && engine.blackholed(p) {
                todo.insert(p);
            } else if found.explained.remove(&p).is_some() {
                found.generation += 1;
            }
        }
        if on(Invariant::Isolation) {
            let index = |name: &str| net.hosts.iter().position(|h| h.name == name);
            todo.extend(self.isolation.iter().filter_map(|r| Some((index(&r.from)?, index(&r.to)?))));
        }
        found.generation += !todo.is_empty() as u64;
        for (a, b) in todo {
            found.explained.remove(&(a, b));
            let (Some(a_sw), Some(b_sw)) = (ctx.switch_of[a], ctx.switch_of[b]) else { continue };
            if a == b {
                continue;
            }
            let mut w = Walker::new(model);
            w.from_host(a, &pair_cubes(net, &ctx.shapes, a, b));
            if w.truncated {
                found.notes.insert(format!(
                    "the walk from {} stopped at its step budget; results from it are partial",
                    net.hosts[a].name
                ));
            }
            found.terminals += w.terminals.len();
            let mut violations = Vec::new();
            self.pairs(net, &ctx.hosts, &ctx.comps, &[(b, b_sw)], a, a_sw, &w.terminals, &mut violations);
            let hole_found =
                violations.iter().any(|v| matches!(v.invariant, Invariant::Blackhole | Invariant::Reachability));
            let isolated = self.isolation.iter().any(|r| r.from == net.hosts[a].name && r.to == net.hosts[b].name);
            if holes && engine.blackholed((a, b)) && !hole_found && !w.truncated && !isolated {
                debug_assert!(false, "class engine and per-source walk disagree on {a} -> {b}");
                found.notes.insert(format!(
                    "internal: the class engine reports {} -> {} blackholed, the per-source walk does not",
                    net.hosts[a].name, net.hosts[b].name
                ));
            }
            if !violations.is_empty() {
                found.explained.insert((a, b), violations);
            }
        }
    }

    /// Blackholes, reachability and isolation for traffic from host `a`.
    #[allow(clippy::too_many_arguments)]
    fn pairs(
        &self,
        net: &Network,
        hosts: &HostIndex,
        comps: &Components,
        attached: &[(usize, u64)],
        a: usize,
        a_sw: u64,
        terminals: &[Terminal],
        out: &mut Vec<Violation>,
    ) {
        let on = |i| self.enabled.contains(&i);
        // The terminals each destination host must be judged on.
        let mut by_dst: BTreeMap<usize, Vec<&Terminal>> = BTreeMap::new();
        for t in terminals {
            for b in hosts.destinations(&t.origin) {
                by_dst.entry(b).or_default().push(t);
            }
        }
        for &(b, b_sw) in attached.iter().filter(|(b, _)| *b != a) {
            let [ipv4, arp] = pair_class(net, a, b);
            let class = |t: &Terminal| -> Option<Cube> {
                let et = t.origin.pos[s::ETH_TYPE];
                if et == Ternary::exact(PRESENT | ETH_IPV4 as u64) {
                    t.origin.and(&ipv4)
                } else if et == Ternary::exact(PRESENT | ETH_ARP as u64) {
                    t.origin.and(&arp)
                } else {
                    None
                }
            };
            let relevant: &[&Terminal] = by_dst.get(&b).map_or(&[], Vec::as_slice);
            let names = || vec![net.hosts[a].name.clone(), net.hosts[b].name.clone()];
            let isolated = self.isolation.iter().any(|r| r.from == net.hosts[a].name && r.to == net.hosts[b].name);
            if on(Invariant::Isolation) && isolated {
                if let Some((t, h)) = relevant
                    .iter()
                    .filter(|t| t.outcome == Outcome::Delivered { host: b })
                    .find_map(|t| Some((*t, class(t)?.witness()?)))
                {
                    let summary = format!(
                        "{} reaches {} despite the isolation policy: {}",
                        net.hosts[a].name, net.hosts[b].name, h
                    );
                    out.push(Violation {
                        invariant: Invariant::Isolation,
                        elements: names(),
                        summary,
                        witness: Some(std::sync::Arc::new(witness(net, a, &h, t))),
                        culprit: forwarding_culprit(net, t),
                    });
                }
            }
            let check_hole = on(Invariant::Blackhole) || on(Invariant::Reachability);
            // A pair that must not communicate is meant to be dropped.
            if !check_hole || isolated || !comps.same(a_sw, b_sw) {
                continue;
            }
            let good = |t: &Terminal| {
                matches!(t.outcome, Outcome::Punted { .. } | Outcome::Looped { .. } | Outcome::Unmodelled { .. })
                    || t.outcome == Outcome::Delivered { host: b }
            };
            let goods: Vec<&Terminal> = relevant.iter().filter(|t| good(t)).copied().collect();
            // A copy that is dropped names the fault better than one that
            // reaches another host (a flood's copies reach everyone): those last.
            let mut bad: Vec<&Terminal> = relevant.iter().filter(|t| !good(t)).copied().collect();
            bad.sort_by_key(|t| matches!(t.outcome, Outcome::Delivered { .. }));
            let found = bad.into_iter().find_map(|t| {
                let start = class(t)?;
                let mut left = vec![start];
                for g in &goods {
                    left = left.iter().flat_map(|c| c.subtract(&g.origin)).collect();
                    if left.is_empty() {
                        return None;
                    }
                }
                left.iter().find_map(Cube::witness).map(|h| (t, h))
            });
            if let Some((t, h)) = found {
                let invariant = if on(Invariant::Blackhole) { Invariant::Blackhole } else { Invariant::Reachability };
                let end = describe_end(net, t);
                let summary = format!("{} -> {}: {} {}", net.hosts[a].name, net.hosts[b].name, h, end);
                out.push(Violation {
                    invariant,
                    elements: names(),
                    summary,
                    witness: Some(std::sync::Arc::new(witness(net, a, &h, t))),
                    culprit: blackhole_culprit(net, comps, t, b_sw),
                });
            }
        }
    }
}

/// What host `a` sends host `b`, which blackholes and isolation are judged
/// on: a's addresses to b's, untagged; as IPv4, and as ARP.
fn pair_class(net: &Network, a: usize, b: usize) -> [Vec<(usize, Ternary)>; 2] {
    let mac = |i: usize| Ternary::exact(PRESENT | mac_int(&net.hosts[i].mac.0) as u64);
    let ip = |i: usize| Ternary::exact(PRESENT | u32::from(net.hosts[i].ip) as u64);
    let l2 = [(s::ETH_SRC, mac(a)), (s::ETH_DST, mac(b)), (s::VLAN_VID, Ternary::exact(PRESENT))];
    let ipv4 = [(s::ETH_TYPE, Ternary::exact(PRESENT | ETH_IPV4 as u64)), (s::IPV4_SRC, ip(a)), (s::IPV4_DST, ip(b))];
    let arp = [(s::ETH_TYPE, Ternary::exact(PRESENT | ETH_ARP as u64)), (s::ARP_SPA, ip(a)), (s::ARP_TPA, ip(b))];
    [l2.iter().chain(&ipv4).copied().collect(), l2.iter().chain(&arp).copied().collect()]
}

/// Where a ping from host `a` to host `b` goes through the flow tables as
/// they stand: the ICMP echo request `a` would send, walked as the checks
/// walk it, one witness per distinct end (headers the tables treat alike go
/// as one). The console's `path`.
pub fn ping_paths(net: &Network, a: usize, b: usize) -> Vec<Witness> {
    let model = Model::new(net);
    let shape = Shape { tagged: false, l3: crate::header::L3::Ipv4(crate::header::L4::Icmp) };
    let [ipv4, _] = pair_class(net, a, b);
    let Some(cube) = Cube::of_shape(shape).relax(!model.used_slots()).and(&ipv4) else { return Vec::new() };
    let mut w = Walker::new(&model);
    w.from_host(a, &[cube]);
    w.terminals
        .iter()
        .filter_map(|t| {
            let h = t.origin.witness()?;
            let mut found = witness(net, a, &h, t);
            if matches!(t.outcome, Outcome::Delivered { host } if host == b) {
                found.end = format!("is delivered to {}", net.hosts[b].name);
            }
            Some(found)
        })
        .collect()
}

/// The cubes of what host `a` sends host `b` ([`pair_class`]), one per shape
/// that can hold it.
fn pair_cubes(net: &Network, shapes: &[Cube], a: usize, b: usize) -> Vec<Cube> {
    let [ipv4, arp] = pair_class(net, a, b);
    shapes.iter().flat_map(|c| [c.and(&ipv4), c.and(&arp)]).flatten().collect()
}

/// Looks on `net` for a forwarding loop among some of `switches` taken by
/// a header of `cube`, sent by the hosts attached to those switches (in host
/// order): the first copy found looping, as a loop violation with its
/// witness. Copies that leave those switches are not followed: a loop among
/// them is reached from the host of one of its own routers without leaving
/// (true of router networks, where forwarding ignores the ingress port;
/// see `verify::Confirmed`). Used to confirm, on a network with filters, a
/// loop found on the same network without them (filters only take paths
/// away).
pub fn loop_within(net: &Network, switches: &[u64], cube: &Cube) -> Option<Violation> {
    loop_within_in(&Model::new(net), switches, cube, &[])
}

/// [`loop_within`] on a model of the network made before: the flow
/// entries it compiled on the way are reused (a model lives while its
/// network does not change; several confirmations after one update share one).
/// `starts` may say, per switch, where table 0's rules begin to hold some
/// header of `cube` (see [`Walker::starting_at`]).
pub fn loop_within_in(model: &Model, switches: &[u64], cube: &Cube, starts: &[(u64, usize)]) -> Option<Violation> {
    let net = model.net;
    let mut sorted = switches.to_vec();
    sorted.sort_unstable();
    // One walk for every host: what one host's headers were followed to
    // every end without a loop holds none for the next host's either (a
    // depth-first search from several roots that skips finished nodes
    // still finds a cycle iff one is reachable), so each host after the
    // first follows only what the earlier ones did not reach. A walk cut
    // short by its step budget proves nothing: the next host starts afresh.
    let fresh = || Walker::until_loop(model, sorted.clone(), true).pruned().confined().starting_at(starts.to_vec());
    let mut w = fresh();
    for (a, _) in (0..net.hosts.len()).filter_map(|i| match net.live_peer(Endpoint::Host(i)) {
        Some(Endpoint::Switch { dpid, .. }) if sorted.binary_search(&dpid).is_ok() => Some((i, dpid)),
        _ => None,
    }) {
        if w.truncated {
            w = fresh();
        }
        w.restart_budget();
        w.terminals.clear();
        w.from_host(a, std::slice::from_ref(cube));
        let found = w.terminals.iter().find_map(|t| match &t.outcome {
            Outcome::Looped { cycle } if w.awaited(cycle) => Some((t, cycle.clone())),
            _ => None,
        });
        if let Some((t, cycle)) = found {
            return loop_violation(net, a, t, &cycle);
        }
    }
    None
}

/// The loop violation a looping terminal from host `a` shows.
fn loop_violation(net: &Network, a: usize, t: &Terminal, cycle: &[u64]) -> Option<Violation> {
    let h = t.origin.witness()?;
    let names: Vec<String> = cycle.iter().map(|&d| sw(d)).collect();
    let summary = format!("forwarding loop through {} for {}", names.join(", "), h);
    Some(Violation {
        invariant: Invariant::Loop,
        elements: names,
        summary,
        witness: Some(std::sync::Arc::new(witness(net, a, &h, t))),
        culprit: loop_culprit(net, t, cycle),
    })
}

/// A loop's culprit: the signatures of the rules that send the frame round
/// its cycle, as a set (sorted, each once; switch-free: the same rules make
/// the same loop whichever switches they sit on this time), `loop of table
/// 0: a rule of priority 1 on eth_dst; table 0: the table-miss entry`.
fn loop_culprit(net: &Network, t: &Terminal, cycle: &[u64]) -> Option<String> {
    let mut signatures: Vec<String> = hops(&t.path)
        .iter()
        .filter(|n| cycle.contains(&n.dpid))
        .filter_map(|n| {
            let r = n.rules.last()?;
            let entry = net.switches.get(&r.dpid)?.tables.get(r.table as usize)?.entries().get(r.index)?;
            Some(format!("table {}: {}", r.table, rule_signature(entry)))
        })
        .collect();
    signatures.sort();
    signatures.dedup();
    (!signatures.is_empty()).then(|| format!("loop of {}", signatures.join("; ")))
}

/// The hop of `t`'s path that made its fate inevitable: the first switch
/// that sends the frame on to a switch from which no path of live links
/// leads to `dst` (the destination host's switch) without going back
/// through a switch the frame already crossed. A detour that can still
/// arrive (a spanning tree's long way round) is not a wrong turn; leaving
/// the destination's own switch is. `None` when every turn could still
/// arrive (the fate was decided where the frame ended).
fn wrong_turn(comps: &Components, t: &Terminal, dst: u64) -> Option<Rc<Node>> {
    let path = hops(&t.path);
    let mut crossed = BTreeSet::new();
    for (i, n) in path.iter().enumerate() {
        crossed.insert(n.dpid);
        let next = path.get(i + 1)?;
        if next.dpid != dst && !comps.reaches(next.dpid, dst, &crossed) {
            return Some(n.clone());
        }
    }
    None
}

/// A blackhole's culprit: the rule at its first wrong turn ([`wrong_turn`])
/// when the frame took one before it ended, else what decided its fate where
/// it ended ([`forwarding_culprit`]). Two bugs on one path (a pinned rule
/// that sends a moved host's traffic the wrong way, and a stale rule that
/// drops it later) are told apart by the first, not merged on the second.
fn blackhole_culprit(net: &Network, comps: &Components, t: &Terminal, dst: u64) -> Option<String> {
    let turn = wrong_turn(comps, t, dst).and_then(|n| {
        let r = n.rules.last()?;
        let entry = net.switches.get(&r.dpid)?.tables.get(r.table as usize)?.entries().get(r.index)?;
        Some(format!("{} table {}: {}", sw(n.dpid), r.table, rule_signature(entry)))
    });
    turn.or_else(|| forwarding_culprit(net, t))
}

fn describe_end(net: &Network, t: &Terminal) -> String {
    match &t.outcome {
        Outcome::Delivered { host } => format!("is delivered to {} instead", net.hosts[*host].name),
        Outcome::Punted { dpid } => format!("goes to the controller at {}", sw(*dpid)),
        Outcome::Dropped { dpid, reason } => format!("is dropped at {}: {reason}", sw(*dpid)),
        Outcome::Looped { cycle } => {
            format!("loops through {}", cycle.iter().map(|&d| sw(d)).collect::<Vec<_>>().join(", "))
        }
        Outcome::Unmodelled { what } => format!("meets {what}"),
    }
}

/// What made a copy end where it should not: the switch, the table and the
/// rule that decided its fate ([`rule_signature`]), or, where no rule did,
/// that fate (no rule matched, the port does not receive, a link fault).
/// Not the fate a rule gave it: one stale rule drops one host's traffic and
/// sends another's back out of its ingress port, and it is one bug. `None`
/// for a copy that never reached a switch.
fn forwarding_culprit(net: &Network, t: &Terminal) -> Option<String> {
    let last = t.path.as_ref()?;
    let at = sw(last.dpid);
    let rule = last.rules.last().and_then(|r| {
        let entry = net.switches.get(&r.dpid)?.tables.get(r.table as usize)?.entries().get(r.index)?;
        Some(format!("{at} table {}: {}", r.table, rule_signature(entry)))
    });
    Some(match (&t.outcome, rule) {
        (Outcome::Dropped { reason: DropReason::TableMiss { table }, .. }, _) => {
            format!("{at} table {table}: no rule matches")
        }
        (Outcome::Dropped { reason: DropReason::NotReceived, .. }, _) => {
            format!("{at} port {} does not receive", last.in_port)
        }
        (Outcome::Dropped { reason: DropReason::LinkFault { port }, .. }, _) => {
            format!("{at} port {port}: a link drop fault")
        }
        (_, Some(rule)) => rule,
        (_, None) => format!("{at}: {}", describe_end(net, t)),
    })
}

fn witness(net: &Network, from: usize, h: &crate::header::Header, t: &Terminal) -> Witness {
    let path = hops(&t.path)
        .iter()
        .map(|n: &Rc<Node>| {
            let rules: Vec<String> =
                n.rules.iter().map(|r| format!("table {} #{} (priority {})", r.table, r.index, r.priority)).collect();
            format!(
                "{} in {}: {}",
                sw(n.dpid),
                n.in_port,
                if rules.is_empty() { "no rule".into() } else { rules.join(", ") }
            )
        })
        .collect();
    let frame = h.to_frame().iter().map(|b| format!("{b:02x}")).collect();
    Witness { header: h.to_string(), frame, from: net.hosts[from].name.clone(), path, end: describe_end(net, t) }
}

fn observed_loop(events: &[DataplaneEvent]) -> Option<Violation> {
    events.iter().find_map(|e| match e {
        DataplaneEvent::HopLimit { dpid, summary, .. } => Some(Violation {
            invariant: Invariant::Loop,
            elements: vec![sw(*dpid)],
            summary: format!("the dataplane saw a frame exceed the hop limit at {}: {summary}", sw(*dpid)),
            witness: None,
            culprit: None,
        }),
        DataplaneEvent::StepBudget { deliveries } => Some(Violation {
            invariant: Invariant::Loop,
            elements: vec![],
            summary: format!("a packet storm: one injection caused more than {deliveries} deliveries"),
            witness: None,
            culprit: None,
        }),
        DataplaneEvent::FaultDrop { .. } | DataplaneEvent::WorkBudget { .. } => None,
    })
}
