//! The fast path of the pair checks: one walk per header class, shared by
//! every source.
//!
//! With no header rewrites in the network, a frame keeps its headers end to
//! end, so every header of one [atom](crate::classes) takes the same path from
//! a given port. [`ByClass`] therefore follows each atom once through the
//! network, from every host at once: at each switch it finds the atom's rule
//! in each table from a per-table array (no scanning), asks the exact
//! [`Walker`] once per distinct rule chain what the switch does (so the
//! forwarding semantics live in one place), and memoises the atom's fate per
//! switch, or per (switch, port) where the ingress port matters. A switch's
//! work is then shared by every source behind it, and the cost is about
//! atoms × switches instead of hosts² × path length.
//!
//! It answers one question, exactly: which (source, destination) host pairs
//! have some untagged ARP or IPv4 traffic that no copy delivers to the
//! destination or hands to a controller (see [`crate::check`] for the
//! definition). Loops make per-switch fates depend on the path, so an atom
//! that cycles, or takes a path longer than the hop limit, is judged the
//! exact way instead: followed alone from every source along every path, a
//! switch at a time from the cached steps, as the per-source walker would
//! (or, past [`PATH_BUDGET`], by the strongly connected sets it reaches),
//! and the cycles found are reported as loops.
//!
//! The index owns everything it needs (rules are named by ids that outlive
//! their position in a table), so it can be kept between checks: after some
//! switches' flow tables change, [`ByClass::update`] re-indexes those
//! switches and follows again only the atoms the added or removed rules
//! hold. Steps are keyed by rule ids, so every other cached step stays valid.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use sts_mocknet::network::{Endpoint, HOP_LIMIT};
use sts_mocknet::packet::mac_int;

use crate::classes::Classes;
use crate::header::{s, Cube, Ternary, PRESENT};
use crate::walk::{Model, Outcome, Rule, Table, Walker};
use sts_proxy::wire::v13::port_config;

/// What every switch does with an atom ([`walk_key`]).
type WalkKey = Box<[u64]>;

/// A hash map whose order never shows (looked up, not iterated), with a
/// fast hash instead of the DoS-resistant default (keys are the engine's own).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

const NONE: u32 = u32::MAX;
/// The memo key of a fate that holds for any ingress port.
const ANY_PORT: u32 = u32::MAX;

/// A cycle (its switches) and the sources an atom was found taking it from.
type CycleSources = (Vec<u64>, Vec<usize>);

/// Why the fast path cannot answer; the caller uses the exact walk instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Irregular {
    /// Some action rewrites headers.
    Rewrites,
    /// More header classes than the fast path would hold.
    TooManyClasses,
    /// Some header class cycles or exceeds the hop limit.
    Loop,
    /// The walker reported something one switch should not produce.
    Unexpected(&'static str),
    /// A changed rule matches a value no header class was cut for.
    NewValues,
    /// An atom's paths are too many to list one by one ([`PATH_BUDGET`]).
    TooManyPaths,
}

/// Switch visits the exact judgement of one looping atom spends listing its
/// paths one by one (as the per-source walker does) before it judges it by
/// strongly connected sets instead: where every path is listed, each
/// elementary cycle is a loop of its own, as the walker reports them; beyond
/// (a VLAN or LAN segment fanning a loop out to many routers makes the
/// paths exponentially many), each strongly connected set of (switch,
/// ingress port) states the atom reaches is one loop, named by its switches.
pub(crate) const PATH_BUDGET: usize = 4096;

impl std::fmt::Display for Irregular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Irregular::Rewrites => f.write_str("some action rewrites headers"),
            Irregular::TooManyClasses => f.write_str("too many header classes"),
            Irregular::Loop => f.write_str("some header loops"),
            Irregular::Unexpected(what) => write!(f, "the class engine met {what}"),
            Irregular::NewValues => f.write_str("a rule matches a value no header class was cut for"),
            Irregular::TooManyPaths => f.write_str("a looping header class has too many paths to list"),
        }
    }
}

/// Hosts a set of copies is delivered to: none, one, or a set interned in
/// [`DestSets`] (floods).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
enum Dests {
    #[default]
    None,
    One(u32),
    Many(u32),
}

/// The sets of more than one host that copies were delivered to, interned.
#[derive(Default, Clone)]
struct DestSets {
    sets: Vec<Box<[u32]>>,
    ids: HashMap<Box<[u32]>, u32>,
}

impl DestSets {
    fn slice<'a>(&'a self, d: &'a Dests) -> &'a [u32] {
        match d {
            Dests::None => &[],
            Dests::One(x) => std::slice::from_ref(x),
            Dests::Many(i) => &self.sets[*i as usize],
        }
    }

    fn intern(&mut self, mut hosts: Vec<u32>) -> Dests {
        hosts.sort_unstable();
        hosts.dedup();
        match hosts.as_slice() {
            [] => Dests::None,
            [one] => Dests::One(*one),
            _ => {
                let next = self.sets.len() as u32;
                let id = *self.ids.entry(hosts.clone().into()).or_insert(next);
                if id == next {
                    self.sets.push(hosts.into());
                }
                Dests::Many(id)
            }
        }
    }

    fn union(&mut self, a: Dests, b: Dests) -> Dests {
        match (a, b) {
            (Dests::None, x) | (x, Dests::None) => x,
            (a, b) if a == b => a,
            (a, b) => {
                let v = self.slice(&a).iter().chain(self.slice(&b)).copied().collect();
                self.intern(v)
            }
        }
    }

    /// Traffic with this fate is blackholed for destination `b`: no copy
    /// reaches `b` or a controller, and some copy ends elsewhere.
    fn blackholes(&self, f: &Fate, b: u32) -> bool {
        let dests = self.slice(&f.dests);
        !f.punt && !dests.contains(&b) && (f.drop || dests.iter().any(|&x| x != b))
    }
}

/// What becomes of an atom's copies from some point on.
#[derive(Clone, Copy, Debug, Default)]
struct Fate {
    /// Some copy reaches a controller.
    punt: bool,
    /// Some copy is dropped.
    drop: bool,
    /// The most switches a copy crosses.
    height: u32,
    /// Hosts some copy is delivered to.
    dests: Dests,
}

impl Fate {
    const DROPPED: Fate = Fate { punt: false, drop: true, height: 1, dests: Dests::None };
}

/// What every path of an atom from one source comes to (see
/// `Traversal::paths`).
#[derive(Default)]
struct Paths {
    /// Some copy reaches a controller or loops: nothing is blackholed.
    good: bool,
    /// Hosts some copy is delivered to.
    dests: Vec<u32>,
    /// The switches of each cycle found (sorted), each once.
    cycles: Vec<Vec<u64>>,
    /// With at most 64 switches: each cycle's switches as a bit set by
    /// switch index, at the same index as `cycles` (a cycle met again is
    /// recognised without building it).
    masks: Vec<u64>,
    /// Switches visited, against [`crate::walk::STEP_BUDGET`].
    steps: usize,
}

/// What one switch does with an atom arriving on some port.
#[derive(Clone)]
struct Step {
    /// Copies that end at this switch.
    local: Fate,
    /// Copies sent on: `ByClass::forwards[forwards.0..forwards.1]`, each
    /// (switch index, ingress port there).
    forwards: (u32, u32),
    /// Ports copies leave by: `ByClass::outputs[outputs.0..outputs.1]`.
    outputs: (u32, u32),
    /// The ingress port played no part, so the step holds for any ingress
    /// port that is not one of the outputs.
    any_port: bool,
}

/// What the engine keeps of one compiled rule.
#[derive(Clone)]
struct RuleMeta {
    /// The rule's name in its table, kept while the rule stays.
    id: u32,
    /// The header constraint (kept for updates and conditional tables only).
    header: Vec<(usize, Ternary)>,
    in_port: Option<(u32, u32)>,
    metadata: Option<(u64, u64)>,
    never: bool,
    goto: Option<u8>,
    write_metadata: Option<(u64, u64)>,
}

impl RuleMeta {
    fn of(r: &Rule, id: u32, keep: bool, conditional: bool) -> RuleMeta {
        let ins = &r.entry.instructions;
        RuleMeta {
            id,
            header: if keep || conditional { r.header.clone() } else { Vec::new() },
            in_port: r.in_port,
            metadata: r.metadata,
            never: r.never,
            goto: ins.goto,
            write_metadata: ins.write_metadata,
        }
    }
}

/// The id of the first rule holding each atom (`NONE` where none does).
fn first_holding<'r>(classes: &Classes, rules: impl Iterator<Item = (u32, bool, &'r [(usize, Ternary)])>) -> Vec<u32> {
    let mut at = vec![NONE; classes.count];
    for (id, never, header) in rules {
        if !never {
            classes.for_each_atom(header, &[], |x| {
                if at[x] == NONE {
                    at[x] = id;
                }
            });
        }
    }
    at
}

/// One table of one switch.
struct TableIndex {
    rules: Vec<RuleMeta>,
    /// The flow table's serial of each rule, at the same index
    /// ([`sts_mocknet::flow::FlowTable::serials`]; kept for updates only).
    serials: Vec<u64>,
    /// The largest serial indexed so far: a larger one is a new entry.
    max_serial: u64,
    /// Current position of each rule id in `rules` (`NONE`: removed).
    position: Vec<u32>,
    /// Some rule also matches the ingress port or metadata.
    conditional: bool,
    /// Tables after the first: per atom, the id of the first rule holding it
    /// (empty for an empty table; table 0 is in [`Index::table0`]).
    first: Vec<u32>,
}

impl TableIndex {
    /// `serials`: the flow table's ([`sts_mocknet::flow::FlowTable::serials`]).
    fn new(table: &Table, serials: &[u64], keep: bool) -> TableIndex {
        let conditional = table.iter().any(|r| r.in_port.is_some() || r.metadata.is_some());
        let rules: Vec<RuleMeta> =
            table.iter().enumerate().map(|(i, r)| RuleMeta::of(r, i as u32, keep, conditional)).collect();
        let position = (0..rules.len() as u32).collect();
        let serials = if keep { serials.to_vec() } else { Vec::new() };
        let max_serial = serials.iter().copied().max().unwrap_or(0);
        TableIndex { rules, serials, max_serial, position, conditional, first: Vec::new() }
    }

    fn rule(&self, id: u32) -> &RuleMeta {
        &self.rules[self.position[id as usize] as usize]
    }

    /// The first rule after the one with id `after` whose header holds atom `x`.
    fn next_holding(&self, classes: &Classes, after: u32, x: usize) -> u32 {
        let from = self.position[after as usize] as usize + 1;
        self.rules[from..].iter().find(|r| !r.never && classes.atom_within(x, &r.header)).map_or(NONE, |r| r.id)
    }

    /// The first rule at or after position `from` holding atom `x`, by scanning.
    fn first_by_scan_from(&self, classes: &Classes, x: usize, from: usize) -> u32 {
        let reps = classes.reps(x);
        self.rules[from.min(self.rules.len())..]
            .iter()
            .find(|r| !r.never && reps.within(&r.header))
            .map_or(NONE, |r| r.id)
    }
}

/// Per switch: what the hot path does not need.
struct SwitchIndex {
    dpid: u64,
    tables: Vec<TableIndex>,
    /// Ports that receive frames, sorted.
    receiving: Vec<u32>,
}

/// Hosts attached to one switch.
struct Ingress {
    switch: u32,
    /// (port, host), by port, for the ports that receive.
    live: Vec<(u32, u32)>,
    /// Hosts whose port does not receive: all they send is dropped.
    dead: Vec<u32>,
}

/// The read-only part of the index, shared by the threads that follow atoms.
struct Index {
    classes: Classes,
    switches: Vec<SwitchIndex>,
    by_dpid: HashMap<u64, u32>,
    /// Table 0's rule id for each (atom, switch), atom-major, so following
    /// one atom through every switch reads one contiguous row.
    table0: Vec<u32>,
    /// Per switch: table 0 has no in-port or metadata matches.
    plain0: Vec<bool>,
    /// Switches that are not plain ([`Index::plain_switch`]): while none
    /// is, [`plain_walks`] holds (kept up to date by [`Index::reindex`],
    /// so that no update looks at every switch to know it).
    not_plain: usize,
    /// Each switch's slots in [`Caches::single`]: `capacity` slots by
    /// table-0 rule id from `base`, then one for no match.
    single_base: Vec<usize>,
    single_capacity: Vec<usize>,
    /// Per switch: which of ports 0..64 receive (ports beyond: `receiving`).
    receive_mask: Vec<u64>,
}

/// Slots per switch beyond its table-0 rules, for rules added later.
fn single_capacity(rules: usize) -> usize {
    rules + rules / 4 + 16
}

impl Index {
    /// Switch `s` has one plain table: no ingress port or metadata matched
    /// in table 0, no rules in later tables.
    fn plain_switch(&self, s: usize) -> bool {
        self.plain0[s] && self.switches[s].tables.iter().skip(1).all(|t| t.rules.is_empty())
    }

    fn single_slot(&self, s: usize, id: u32) -> usize {
        if id == NONE {
            self.single_base[s] + self.single_capacity[s]
        } else {
            self.single_base[s] + id as usize
        }
    }

    fn single_len(&self) -> usize {
        self.single_base.last().map_or(0, |b| b + self.single_capacity.last().copied().unwrap_or(0) + 1)
    }

    fn first_rule(&self, s: usize, table: usize, x: usize) -> u32 {
        if table == 0 {
            self.table0[x * self.switches.len() + s]
        } else {
            self.switches[s].tables[table].first.get(x).copied().unwrap_or(NONE)
        }
    }

    fn receives(&self, s: usize, port: u32) -> bool {
        if port < 64 {
            self.receive_mask[s] & 1 << port != 0
        } else {
            self.switches[s].receiving.binary_search(&port).is_ok()
        }
    }
}

/// Steps computed so far, shared by every atom.
#[derive(Default, Clone)]
struct Caches {
    /// Steps that hold for any port, for chains of one table-0 rule without
    /// goto, by [`Index::single_slot`]: a step id.
    single: Vec<u32>,
    /// Other steps, by (switch, rule-id chain, ingress port or [`ANY_PORT`]).
    chains: HashMap<(u32, Vec<u32>, u32), u32>,
    steps: Vec<Step>,
    forwards: Vec<(u32, u32)>,
    outputs: Vec<u32>,
    dests: DestSets,
    /// Per step: the first step that does the same (local fate, forwards,
    /// outputs, whether the port matters), whichever rule it was made for.
    /// Atoms whose rules differ but do the same everywhere share one walk.
    same_as: Vec<u32>,
    by_content: HashMap<StepContent, u32>,
}

/// What a step does, as a key: local punt, drop and destinations, forwards,
/// outputs, and whether it holds for any port.
type StepContent = (bool, bool, Dests, Box<[(u32, u32)]>, Box<[u32]>, bool);

impl Caches {
    fn new(ix: &Index) -> Caches {
        Caches { single: vec![NONE; ix.single_len()], ..Caches::default() }
    }

    /// Adds a step whose forwards and outputs were just appended; its id.
    fn push(&mut self, step: Step) -> u32 {
        let id = self.steps.len() as u32;
        let (f0, f1) = step.forwards;
        let (o0, o1) = step.outputs;
        let content: StepContent = (
            step.local.punt,
            step.local.drop,
            step.local.dests,
            self.forwards[f0 as usize..f1 as usize].into(),
            self.outputs[o0 as usize..o1 as usize].into(),
            step.any_port,
        );
        let same = *self.by_content.entry(content).or_insert(id);
        self.same_as.push(same);
        self.steps.push(step);
        id
    }

    /// Adds the steps of `other` this cache lacks.
    fn merge(&mut self, other: Caches) {
        let base = self.steps.len() as u32;
        for st in &other.steps {
            let (f0, f1) = st.forwards;
            let fb = self.forwards.len() as u32;
            self.forwards.extend_from_slice(&other.forwards[f0 as usize..f1 as usize]);
            let (o0, o1) = st.outputs;
            let ob = self.outputs.len() as u32;
            self.outputs.extend_from_slice(&other.outputs[o0 as usize..o1 as usize]);
            let mut local = st.local;
            local.dests = self.dests.intern(other.dests.slice(&st.local.dests).to_vec());
            self.push(Step { local, forwards: (fb, fb + f1 - f0), outputs: (ob, ob + o1 - o0), any_port: st.any_port });
        }
        for (mine, theirs) in self.single.iter_mut().zip(&other.single) {
            if *mine == NONE && *theirs != NONE {
                *mine = base + theirs;
            }
        }
        for (k, id) in other.chains {
            self.chains.entry(k).or_insert(base + id);
        }
    }
}

/// What the pair judgement needs besides the index (fixed between checks:
/// hosts and links do not change in an update).
struct Hosts {
    ingress: Vec<Ingress>,
    group_comp: Vec<Option<u64>>,
    host_comp: Vec<Option<u64>>,
    /// Per atom: the destinations whose traffic from some source falls in it.
    dests_of: Vec<Vec<u32>>,
    /// Source fields rules read: (slot, atom field).
    src_fields: Vec<(usize, usize)>,
    /// Per host: its class on each source field.
    host_src: Vec<Vec<u32>>,
    ipv4: Ternary,
}

/// The class engine: an index of a model, the steps computed, and which
/// pairs each atom blackholes. Built by [`ByClass::new`], kept between
/// checks and brought up to date by [`ByClass::update`].
pub(crate) struct ByClass {
    ix: Index,
    cache: Caches,
    hosts: Hosts,
    /// Per atom that blackholes some pair: those (source, destination) pairs.
    atom_pairs: HashMap<usize, Vec<(u32, u32)>>,
    /// Per blackholed pair: how many atoms blackhole it.
    pair_count: BTreeMap<(usize, usize), u32>,
    /// Rules keep what updates need (headers, fingerprints).
    keep: bool,
    /// The cycles looping atoms take: per cycle (its switches), the atoms
    /// taking it and when they last changed.
    loops: BTreeMap<Vec<u64>, Takers>,
    /// Per looping atom: the judgement it was noted from, whose `taken` are
    /// the cycles it takes (to forget them when the atom is followed again
    /// after an update, and to see that a new judgement takes the same).
    atom_loops: HashMap<usize, Arc<Exact>>,
    /// Ticks whenever some cycle's takers change (see [`Takers::stamp`]).
    loop_clock: u64,
    /// Per atom judged by strongly connected sets (see [`PATH_BUDGET`]).
    by_components: BTreeSet<usize>,
    /// Exact judgements of looping atoms, by what every switch does with
    /// the atom ([`walk_key`]): an atom that comes back to a walk judged
    /// before (a route removed restores what an earlier update changed)
    /// reuses it instead of listing its paths again. At most
    /// [`EXACT_KEPT`] are kept.
    exact_by_walk: FastMap<WalkKey, Arc<Exact>>,
    /// Threads the whole check was given: also those of an update's exact
    /// judgements, when there are [`PARALLEL_GROUPS`] of them.
    threads: usize,
}

/// Looping groups an update must judge exactly before they are shared out
/// to threads (each judgement takes some 50–100 µs on the Stanford
/// backbone; a thread some 20 µs to start).
const PARALLEL_GROUPS: usize = 8;

/// The atoms taking one cycle.
#[derive(Default)]
struct Takers {
    /// When they last changed (a tick of `loop_clock`), so that what is
    /// derived from them can be kept while they stay.
    stamp: u64,
    /// Per atom, the first source found taking the cycle with it.
    atoms: BTreeMap<usize, usize>,
    /// The same pairs as (source, atom): the first is the loop's explaining
    /// (source, atom), the least of every (source, atom) taking the cycle.
    firsts: BTreeSet<(usize, usize)>,
}

/// Exact judgements [`ByClass`] keeps for reuse; past it they are
/// forgotten all at once (each is a few kilobytes).
const EXACT_KEPT: usize = 4096;

/// Atoms × switches the table-0 index may hold (1 GiB of rule ids); beyond,
/// the check falls back to per-source walks.
const INDEX_LIMIT: usize = 1 << 28;

/// Switches whose table-0 arrays are built before being copied atom-major.
const TRANSPOSE_BLOCK: usize = 16;

/// What the exact judgement of a looping atom found (the same for every
/// atom that does the same at every switch): per source (host, ingress
/// group) what its paths come to; whether by strongly connected sets; each
/// cycle taken, with the sources taking it.
struct Exact {
    found: Vec<(u32, usize, Paths)>,
    components: bool,
    taken: Vec<CycleSources>,
}

/// What [`ByClass::update`] returns: the pairs a change may concern, the
/// atoms followed again (sorted), and how many of them took another's walk.
pub(crate) type Update = (BTreeSet<(usize, usize)>, Vec<usize>, usize);

/// Per ingress group: the fate its members share (if the switch ignores
/// the ingress port), and the members with a fate of their own.
type Fates = (Vec<Option<Fate>>, Vec<Vec<(u32, Fate)>>);

/// What one thread found: per atom, the pairs it blackholes; or the first
/// atom it could not follow and why.
type Share = Result<(Vec<(usize, Vec<(u32, u32)>)>, Vec<usize>, Caches), (usize, Irregular)>;

impl ByClass {
    /// Indexes the model and judges every attached pair. `shapes` are the
    /// disjoint cubes every walk starts from; `limit` caps the number of
    /// atoms; `component` gives each switch's live-link component (pairs in
    /// different components are not judged); `keep` makes the engine ready
    /// for [`ByClass::update`]; `threads` share out the atoms.
    pub(crate) fn new(
        model: &Model,
        shapes: &[Cube],
        values: &[(usize, Ternary)],
        limit: usize,
        component: impl Fn(u64) -> Option<u64>,
        keep: bool,
        threads: impl FnOnce(usize) -> usize,
    ) -> Result<ByClass, Irregular> {
        if model.rewrites() {
            return Err(Irregular::Rewrites);
        }
        let constraints = model.rules().filter(|r| !r.never).map(|r| r.header.as_slice()).chain(values.chunks(1));
        let classes = Classes::new(shapes, constraints, limit).ok_or(Irregular::TooManyClasses)?;
        // The table-0 index holds one rule id per (atom, switch).
        if classes.count.saturating_mul(model.net.switches.len()) > INDEX_LIMIT {
            return Err(Irregular::TooManyClasses);
        }
        let ix = Index::new(model, classes, keep);
        let hosts = Hosts::new(&ix, model, component);
        let mut engine = ByClass {
            cache: Caches::new(&ix),
            ix,
            hosts,
            atom_pairs: HashMap::new(),
            pair_count: BTreeMap::new(),
            keep,
            loops: BTreeMap::new(),
            atom_loops: HashMap::new(),
            loop_clock: 0,
            by_components: BTreeSet::new(),
            exact_by_walk: FastMap::default(),
            threads: 1,
        };
        let threads =
            threads(engine.ix.classes.count * engine.ix.switches.len()).clamp(1, engine.ix.classes.count.max(1));
        engine.threads = threads;
        let shares: Vec<Share> = if threads == 1 {
            vec![engine.judge_share(model, 0, 1)]
        } else {
            let me = &engine;
            std::thread::scope(|scope| {
                let handles: Vec<_> =
                    (0..threads).map(|k| scope.spawn(move || me.judge_share(model, k, threads))).collect();
                handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
            })
        };
        let mut first_error: Option<(usize, Irregular)> = None;
        let mut found = Vec::new();
        let mut looping = Vec::new();
        let mut caches = Vec::new();
        for share in shares {
            match share {
                Ok((pairs, loops, cache)) => {
                    found.extend(pairs);
                    looping.extend(loops);
                    caches.push(cache);
                }
                // The same answer whatever the threads' timing: the error of the lowest atom.
                Err(e) if first_error.as_ref().is_none_or(|f| e.0 < f.0) => first_error = Some(e),
                Err(_) => {}
            }
        }
        if let Some((_, e)) = first_error {
            return Err(e);
        }
        // Kept for updates: one cache holding every thread's steps.
        for c in caches.into_iter().filter(|_| keep) {
            if engine.cache.steps.is_empty() {
                engine.cache = c;
            } else {
                engine.cache.merge(c);
            }
        }
        for (x, pairs) in found {
            engine.record(x, pairs);
        }
        looping.sort_unstable();
        // Looping atoms that do the same at every switch: their paths listed once.
        let groups = alike(&engine.ix, &engine.cache, &looping);
        let firsts: Vec<usize> = groups.iter().map(|g| g[0]).collect();
        let exacts = engine.groups_exactly(model, &firsts, threads)?;
        for (group, exact) in groups.into_iter().zip(exacts) {
            let exact = Arc::new(exact);
            for x in group {
                let pairs = engine.note_exactly(x, &exact);
                engine.note_cycles(x, &exact);
                engine.record(x, pairs);
            }
        }
        Ok(engine)
    }

    /// Number of header classes.
    pub(crate) fn classes(&self) -> usize {
        self.ix.classes.count
    }

    /// The blackholed (source, destination) pairs.
    pub(crate) fn blackholes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.pair_count.keys().copied()
    }

    /// Whether the (source, destination) pair is blackholed.
    pub(crate) fn blackholed(&self, pair: (usize, usize)) -> bool {
        self.pair_count.contains_key(&pair)
    }

    /// Notes that atom `x` blackholes `pairs`, replacing what it did before.
    fn record(&mut self, x: usize, pairs: Vec<(u32, u32)>) {
        for (a, b) in self.atom_pairs.remove(&x).unwrap_or_default() {
            let key = (a as usize, b as usize);
            if let Some(n) = self.pair_count.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.pair_count.remove(&key);
                }
            }
        }
        for &(a, b) in &pairs {
            *self.pair_count.entry((a as usize, b as usize)).or_insert(0) += 1;
        }
        if !pairs.is_empty() {
            self.atom_pairs.insert(x, pairs);
        }
    }

    /// Follows atoms `k`, `k + step`, ... and judges them, with a cache of
    /// this thread's own.
    fn judge_share(&self, model: &Model, k: usize, step: usize) -> Share {
        let mut cache = Caches::new(&self.ix);
        let mut t = Traversal::new(&self.ix, &mut cache, model);
        let mut found = Vec::new();
        let mut looping = Vec::new();
        let mut buffers = (Vec::new(), Vec::new());
        for x in (k..self.ix.classes.count).step_by(step) {
            match self.hosts.judge(&mut t, x, &mut buffers) {
                Ok(pairs) if !pairs.is_empty() => found.push((x, pairs)),
                Ok(_) => {}
                Err(Irregular::Loop) => looping.push(x),
                Err(e) => return Err((x, e)),
            }
        }
        drop(t);
        Ok((found, looping, cache))
    }

    /// Judges a looping atom the exact way: follows it from every source
    /// along every path, as the per-source walker does (a loop makes
    /// per-switch fates depend on the path), but a switch at a time from the
    /// cached steps instead of scanning flow tables. Returns what every path
    /// from every source comes to, and the cycles taken: the same for every
    /// atom that does the same at every switch ([`alike`]); each atom's own
    /// verdict is then noted by [`ByClass::note_exactly`].
    fn paths_exactly(&mut self, model: &Model, x: usize) -> Result<Exact, Irregular> {
        exact_paths(&self.ix, &self.hosts, &mut self.cache, model, x)
    }

    /// [`ByClass::paths_exactly`] for each of `atoms`, on `threads` threads
    /// (each but the first on a copy of the steps known so far; what the
    /// copies gain is not kept). The judgements in the atoms' order, or the
    /// error of the first atom that has one.
    fn groups_exactly(&mut self, model: &Model, atoms: &[usize], threads: usize) -> Result<Vec<Exact>, Irregular> {
        let threads = threads.min(atoms.len()).max(1);
        if threads == 1 {
            return atoms.iter().map(|&x| self.paths_exactly(model, x)).collect();
        }
        let mut copies: Vec<Caches> = (1..threads).map(|_| self.cache.clone()).collect();
        let (ix, hosts) = (&self.ix, &self.hosts);
        let caches: Vec<&mut Caches> = std::iter::once(&mut self.cache).chain(copies.iter_mut()).collect();
        // Groups are taken one at a time by whichever thread is free.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let next = &next;
        let shares: Vec<Vec<(usize, Result<Exact, Irregular>)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = caches
                .into_iter()
                .map(|cache| {
                    scope.spawn(move || {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(&x) = atoms.get(i) else { break };
                            done.push((i, exact_paths(ix, hosts, cache, model, x)));
                        }
                        done
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        let mut judged: Vec<Option<Result<Exact, Irregular>>> = (0..atoms.len()).map(|_| None).collect();
        for (i, r) in shares.into_iter().flatten() {
            judged[i] = Some(r);
        }
        judged.into_iter().flatten().collect()
    }

    /// The exact judgement of each group's walk ([`ByClass::paths_exactly`]
    /// of its first atom): one made before for the same walk where kept
    /// (see `exact_by_walk`), the others made at once, on the engine's
    /// threads when there are enough of them to pay for the threads.
    fn groups_judged(&mut self, model: &Model, groups: &[Vec<usize>]) -> Result<Vec<Arc<Exact>>, Irregular> {
        let plain = plain_walks(&self.ix);
        let mut judged: Vec<Option<Arc<Exact>>> = Vec::with_capacity(groups.len());
        // The groups not judged before: where they go, their first atom, their key.
        let mut missing: Vec<(usize, usize, Option<WalkKey>)> = Vec::new();
        let mut key = Vec::with_capacity(self.ix.switches.len());
        for (i, g) in groups.iter().enumerate() {
            if plain {
                walk_key(&self.ix, &self.cache, g[0], &mut key);
                if let Some(exact) = self.exact_by_walk.get(key.as_slice()) {
                    judged.push(Some(exact.clone()));
                    continue;
                }
            }
            judged.push(None);
            missing.push((i, g[0], plain.then(|| key.as_slice().into())));
        }
        let firsts: Vec<usize> = missing.iter().map(|m| m.1).collect();
        let threads = if firsts.len() >= PARALLEL_GROUPS { self.threads } else { 1 };
        let made = self.groups_exactly(model, &firsts, threads)?;
        for ((i, _, key), exact) in missing.into_iter().zip(made) {
            let exact = Arc::new(exact);
            if let Some(key) = key {
                if self.exact_by_walk.len() >= EXACT_KEPT {
                    self.exact_by_walk.clear();
                }
                self.exact_by_walk.insert(key, exact.clone());
            }
            judged[i] = Some(exact);
        }
        Ok(judged.into_iter().flatten().collect())
    }

    /// Notes what atom `x`'s paths from every source (`found`, by
    /// [`ByClass::paths_exactly`]) come to; returns the pairs it blackholes.
    /// The cycles it takes are noted by [`ByClass::note_cycles`].
    fn note_exactly(&mut self, x: usize, exact: &Exact) -> Vec<(u32, u32)> {
        let Exact { found, components, .. } = exact;
        let h = &self.hosts;
        let src_ok = h.source_filter(&self.ix, x);
        let mut pairs = Vec::new();
        for (a, gi, paths) in found {
            if paths.good {
                continue;
            }
            for &b in &h.dests_of[x] {
                if b != *a
                    && h.host_comp[b as usize] == h.group_comp[*gi]
                    && !paths.dests.contains(&b)
                    && src_ok(*a as usize)
                {
                    pairs.push((*a, b));
                }
            }
        }
        drop(src_ok);
        if *components {
            self.by_components.insert(x);
        } else {
            self.by_components.remove(&x);
        }
        pairs
    }

    /// Notes the cycles atom `x` takes (those of `exact`), each with the
    /// first source taking it (its earlier ones forgotten first:
    /// [`ByClass::forget_loops`]).
    fn note_cycles(&mut self, x: usize, exact: &Arc<Exact>) {
        for (cycle, sources) in &exact.taken {
            let Some(&first) = sources.iter().min() else { continue };
            let takers = match self.loops.get_mut(cycle) {
                Some(t) => t,
                None => self.loops.entry(cycle.clone()).or_default(),
            };
            if let Some(was) = takers.atoms.insert(x, first) {
                takers.firsts.remove(&(was, x));
            }
            takers.firsts.insert((first, x));
            self.loop_clock += 1;
            takers.stamp = self.loop_clock;
        }
        if !exact.taken.is_empty() {
            self.atom_loops.insert(x, exact.clone());
        }
    }

    /// Whether atom `x` was noted taking exactly the cycles of `exact`, from
    /// the same sources.
    fn takes_as(&self, x: usize, exact: &Arc<Exact>) -> bool {
        match self.atom_loops.get(&x) {
            Some(noted) => Arc::ptr_eq(noted, exact) || noted.taken == exact.taken,
            None => exact.taken.is_empty(),
        }
    }

    /// The cycles some atom takes, each with the first (source, atom) found
    /// taking it.
    pub(crate) fn loops(&self) -> impl Iterator<Item = (&Vec<u64>, (usize, usize))> + '_ {
        self.loops.iter().filter_map(|(c, takers)| takers.firsts.first().map(|&first| (c, first)))
    }

    /// The cycles some atom takes, in order.
    pub(crate) fn loop_cycles(&self) -> impl Iterator<Item = &Vec<u64>> + '_ {
        self.loops.keys()
    }

    /// How many cycles some atom takes.
    pub(crate) fn loop_count(&self) -> usize {
        self.loops.len()
    }

    /// Ticks whenever the cycles taken, or the atoms taking one, change:
    /// while it stays, so does [`ByClass::loops`].
    pub(crate) fn loop_clock(&self) -> u64 {
        self.loop_clock
    }

    /// Forgets the cycles atom `x` was found taking (it is about to be followed again).
    fn forget_loops(&mut self, x: usize) {
        let Some(exact) = self.atom_loops.remove(&x) else { return };
        for (cycle, _) in &exact.taken {
            let Some(takers) = self.loops.get_mut(cycle) else { continue };
            if let Some(first) = takers.atoms.remove(&x) {
                takers.firsts.remove(&(first, x));
            }
            self.loop_clock += 1;
            if takers.atoms.is_empty() {
                self.loops.remove(cycle);
            } else {
                takers.stamp = self.loop_clock;
            }
        }
    }

    /// When the takers of `cycle` last changed: equal stamps, same takers.
    pub(crate) fn loop_stamp(&self, cycle: &[u64]) -> u64 {
        self.loops.get(cycle).map_or(0, |t| t.stamp)
    }

    /// The atoms taking `cycle`, in order.
    pub(crate) fn cycle_atoms(&self, cycle: &[u64]) -> impl Iterator<Item = usize> + '_ {
        self.loops.get(cycle).into_iter().flat_map(|t| t.atoms.keys().copied())
    }

    /// Whether atom `x`'s loops are strongly connected sets of switches
    /// rather than single cycles (see [`PATH_BUDGET`]).
    pub(crate) fn by_components(&self, x: usize) -> bool {
        self.by_components.contains(&x)
    }

    /// A cube of headers of atom `x` (all of the atom behaves like it).
    pub(crate) fn atom_cube(&self, x: usize) -> Option<Cube> {
        self.ix.classes.cube(x)
    }

    /// Where table 0 of switch `dpid` begins to matter for atom `x`: the
    /// position of the first rule holding it (the table's length if none
    /// does), and the table's length. The rules before it hold no header of
    /// the atom. `None` where in-port or metadata matches make a rule's
    /// hold depend on more than the headers.
    pub(crate) fn table0_start(&self, x: usize, dpid: u64) -> Option<(usize, usize)> {
        let ix = &self.ix;
        let s = *ix.by_dpid.get(&dpid)? as usize;
        let table = ix.switches[s].tables.first()?;
        if !ix.plain0[s] || x >= ix.table0.len() / ix.switches.len().max(1) {
            return None;
        }
        let id = ix.table0[x * ix.switches.len() + s];
        let at = if id == NONE { table.rules.len() } else { table.position[id as usize] as usize };
        Some((at, table.rules.len()))
    }

    /// Brings the engine up to date after the flow tables of `changed`
    /// switches changed (and nothing else: ports, links, groups and hosts
    /// are as they were). Returns the pairs the change may concern: those
    /// the re-followed atoms blackholed before or blackhole now; the atoms
    /// followed again (every atom whose treatment at some changed switch
    /// changed), and how many of them took another atom's walk ([`alike`]).
    /// An error says the engine cannot absorb the change; it must then be
    /// rebuilt.
    pub(crate) fn update(&mut self, model: &Model, changed: &[u64]) -> Result<Update, Irregular> {
        if !self.keep {
            return Err(Irregular::Unexpected("an engine built without update data"));
        }
        let mut affected = Vec::new();
        // Per atom, the (switch, old table-0 rule) pairs a change may have
        // left forwarding it as before; atoms also changed in a way that
        // cannot be compared so are in `must`.
        let mut before: Vec<(usize, usize, u32)> = Vec::new();
        let mut must = BTreeSet::new();
        for &dpid in changed {
            let Some(&s) = self.ix.by_dpid.get(&dpid) else {
                return Err(Irregular::Unexpected("a switch the engine does not know"));
            };
            // New rules are checked as they are indexed.
            if model.groups_rewrite_at(dpid) {
                return Err(Irregular::Rewrites);
            }
            let s = s as usize;
            let plain_before = self.ix.plain0[s];
            let mut mine = Vec::new();
            let olds = self.ix.reindex(model, s, &mut mine)?;
            match olds.filter(|_| plain_before && self.ix.plain0[s]) {
                Some(olds) => {
                    before.extend(olds.into_iter().map(|(x, old)| (x, s, old)));
                }
                None => must.extend(mine.iter().copied()),
            }
            affected.extend(mine);
            if self.ix.switches[s].tables.first().map_or(0, |t| t.position.len()) > self.ix.single_capacity[s] {
                self.relayout();
            }
        }
        affected.sort_unstable();
        affected.dedup();
        let mut touched = BTreeSet::new();
        let mut t = Traversal::new(&self.ix, &mut self.cache, model);
        let mut follow = Vec::with_capacity(affected.len());
        // By atom (then switch), read alongside the atoms in order.
        before.sort_unstable();
        let mut at = 0;
        for &x in &affected {
            while before.get(at).is_some_and(|b| b.0 < x) {
                at += 1;
            }
            let from = at;
            while before.get(at).is_some_and(|b| b.0 == x) {
                at += 1;
            }
            // A changed switch that still does exactly what it did with the
            // atom (the same outputs, forwards and local fate, for any
            // ingress port) changes no fate anywhere: nothing to follow.
            if !must.contains(&x) {
                let mut same = true;
                for &(_, s, old) in &before[from..at] {
                    if !t.same_step_as(s, x, old)? {
                        same = false;
                        break;
                    }
                }
                if same {
                    continue;
                }
            }
            follow.push(x);
        }
        // Atoms that do the same at every switch are followed once.
        let groups = alike(t.ix, t.cache, &follow);
        let shared = follow.len() - groups.len();
        let mut judged = Vec::with_capacity(follow.len());
        let mut looping = Vec::new();
        let mut buffers = (Vec::new(), Vec::new());
        for group in groups {
            // A group that loops now is judged the exact way below.
            match self.hosts.follow(&mut t, group[0], &mut buffers) {
                Ok(()) => {
                    judged.extend(group.iter().map(|&x| (x, self.hosts.pairs(t.ix, &t.cache.dests, x, &buffers))))
                }
                Err(Irregular::Loop) => looping.push(group),
                Err(e) => return Err(e),
            }
        }
        drop(t);
        for &(x, _) in &judged {
            self.forget_loops(x);
        }
        let exacts = self.groups_judged(model, &looping)?;
        for (group, exact) in looping.into_iter().zip(exacts) {
            for x in group {
                // The same cycles from the same sources: what is noted of
                // them stays (and so does their stamp).
                if !self.takes_as(x, &exact) {
                    self.forget_loops(x);
                    self.note_cycles(x, &exact);
                }
                let pairs = self.note_exactly(x, &exact);
                judged.push((x, pairs));
            }
        }
        for (x, pairs) in judged {
            let before = self.atom_pairs.get(&x);
            touched.extend(before.into_iter().flatten().chain(&pairs).map(|&(a, b)| (a as usize, b as usize)));
            // The same pairs as before: nothing to count again.
            if before.map_or(!pairs.is_empty(), |before| *before != pairs) {
                self.record(x, pairs);
            }
        }
        Ok((touched, follow, shared))
    }

    /// Gives every switch room for its rule ids again, moving the cached
    /// single-rule steps along.
    fn relayout(&mut self) {
        let ix = &mut self.ix;
        let old: Vec<(usize, usize)> = ix.single_base.iter().copied().zip(ix.single_capacity.iter().copied()).collect();
        let mut base = 0;
        for (s, sw) in ix.switches.iter().enumerate() {
            ix.single_base[s] = base;
            ix.single_capacity[s] = single_capacity(sw.tables.first().map_or(0, |t| t.position.len()));
            base += ix.single_capacity[s] + 1;
        }
        let mut single = vec![NONE; base];
        for (s, (ob, oc)) in old.into_iter().enumerate() {
            let nb = ix.single_base[s];
            single[nb..nb + oc].copy_from_slice(&self.cache.single[ob..ob + oc]);
            single[nb + ix.single_capacity[s]] = self.cache.single[ob + oc];
        }
        self.cache.single = single;
    }
}

impl Index {
    fn new(model: &Model, classes: Classes, keep: bool) -> Index {
        let net = model.net;
        let n = net.switches.len();
        let atoms = classes.count;
        let mut table0 = vec![NONE; atoms * n];
        let dpids: Vec<u64> = net.switches.keys().copied().collect();
        for (block, chunk) in dpids.chunks(TRANSPOSE_BLOCK).enumerate() {
            let rows: Vec<Vec<u32>> = chunk
                .iter()
                .map(|&d| match model.tables_of(d).first() {
                    Some(t) if !t.is_empty() => first_holding(
                        &classes,
                        t.iter().enumerate().map(|(i, r)| (i as u32, r.never, r.header.as_slice())),
                    ),
                    _ => Vec::new(),
                })
                .collect();
            let s0 = block * TRANSPOSE_BLOCK;
            for x in 0..atoms {
                let row = &mut table0[x * n + s0..x * n + s0 + chunk.len()];
                for (slot, r) in row.iter_mut().zip(&rows) {
                    *slot = r.get(x).copied().unwrap_or(NONE);
                }
            }
        }
        let mut switches = Vec::with_capacity(n);
        let mut by_dpid = HashMap::with_capacity(n);
        let (mut plain0, mut single_base, mut single_cap, mut receive_mask) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut base = 0;
        for (&dpid, sw) in &net.switches {
            let compiled = model.tables_of(dpid);
            let mut tables: Vec<TableIndex> =
                compiled.iter().zip(&sw.tables).map(|(t, ft)| TableIndex::new(t, ft.serials(), keep)).collect();
            for (t, rules) in tables.iter_mut().zip(compiled).skip(1).filter(|(_, r)| !r.is_empty()) {
                t.first = first_holding(
                    &classes,
                    rules.iter().enumerate().map(|(i, r)| (i as u32, r.never, r.header.as_slice())),
                );
            }
            let receiving: Vec<u32> = sw
                .ports
                .values()
                .filter(|p| p.is_live() && p.config & port_config::NO_RECV == 0)
                .map(|p| p.no)
                .collect();
            receive_mask.push(receiving.iter().filter(|&&p| p < 64).fold(0u64, |m, &p| m | 1 << p));
            plain0.push(!tables.first().is_some_and(|t| t.conditional));
            single_base.push(base);
            single_cap.push(single_capacity(compiled.first().map_or(0, |t| t.len())));
            base += single_cap.last().copied().unwrap_or(0) + 1;
            by_dpid.insert(dpid, switches.len() as u32);
            switches.push(SwitchIndex { dpid, tables, receiving });
        }
        let mut ix = Index {
            classes,
            switches,
            by_dpid,
            table0,
            plain0,
            not_plain: 0,
            single_base,
            single_capacity: single_cap,
            receive_mask,
        };
        ix.not_plain = (0..ix.switches.len()).filter(|&s| !ix.plain_switch(s)).count();
        ix
    }

    /// Re-reads switch `s`'s tables from `model`, keeping the ids of rules
    /// that did not change, and adds to `affected` the atoms held by rules
    /// that appeared or went. Returns, when only table 0 changed, each such
    /// atom with the id of the table-0 rule that held it before (`NONE`: a
    /// miss); `None` when a later table changed too.
    ///
    /// What changed is read from the flow table's serials (an entry keeps
    /// its serial while it stays unchanged, and stays in order; a new or
    /// modified one has a serial larger than any indexed): one pass over the
    /// serials, no entry compared or compiled but the new ones. Table 0's
    /// first rule per atom is then updated from the change alone: a new rule
    /// takes the atoms it holds from any rule after it; an atom whose first
    /// rule went is looked for again from where that rule stood.
    fn reindex(
        &mut self,
        model: &Model,
        s: usize,
        affected: &mut Vec<usize>,
    ) -> Result<Option<Vec<(usize, u32)>>, Irregular> {
        let switch_plain_before = self.plain_switch(s);
        let classes = &self.classes;
        let dpid = self.switches[s].dpid;
        let Some(flow_tables) = model.net.switches.get(&dpid).map(|sw| &sw.tables) else {
            return Err(Irregular::Unexpected("a switch that left the network"));
        };
        if flow_tables.len() != self.switches[s].tables.len() {
            return Err(Irregular::Unexpected("a change in the number of tables"));
        }
        // Atoms the added and removed rules hold (sorted once, below).
        let mut mine = Vec::new();
        let mut changed_tables = Vec::new();
        // Table 0's change: the new rules' ids, and per removed rule id the
        // position in the new table where its successors begin.
        let mut added0: Vec<u32> = Vec::new();
        let mut removed0: HashMap<u32, usize> = HashMap::new();
        for (t, (table, ft)) in self.switches[s].tables.iter_mut().zip(flow_tables).enumerate() {
            let serials = ft.serials();
            // Entries that stay keep their serials and order: only the span
            // between the common beginning and end changed (one entry, for
            // one update), and the index is patched there in place.
            let pre = table.serials.iter().zip(serials).take_while(|(a, b)| a == b).count();
            if pre == serials.len() && pre == table.serials.len() {
                continue;
            }
            let room = table.serials.len().min(serials.len()) - pre;
            let suf =
                table.serials.iter().rev().zip(serials.iter().rev()).take(room).take_while(|(a, b)| a == b).count();
            let (old_end, new_end) = (table.serials.len() - suf, serials.len() - suf);
            let entries = ft.entries();
            let old_rules: Vec<RuleMeta> = table.rules.drain(pre..old_end).collect();
            let mut old = old_rules.into_iter().zip(table.serials[pre..old_end].iter().copied());
            let mut metas = Vec::new();
            let mut next = table.position.len() as u32;
            let mut conditional_went = false;
            for (j, (&serial, entry)) in serials.iter().zip(entries).enumerate().take(new_end).skip(pre) {
                if serial <= table.max_serial {
                    // An entry indexed before: the old ones before it went.
                    loop {
                        match old.next() {
                            Some((meta, was)) if was == serial => {
                                metas.push(meta);
                                break;
                            }
                            Some((meta, _)) => {
                                classes.for_each_atom(&meta.header, &[], |x| mine.push(x));
                                conditional_went |= meta.in_port.is_some() || meta.metadata.is_some();
                                table.position[meta.id as usize] = NONE;
                                if t == 0 {
                                    removed0.insert(meta.id, j);
                                }
                            }
                            None => return Err(Irregular::Unexpected("a flow entry the index never saw")),
                        }
                    }
                    continue;
                }
                let rule = Rule::compile(entry, j);
                if rule.rewrites() {
                    return Err(Irregular::Rewrites);
                }
                if !rule.never {
                    // Every match value must be one the classes were cut for.
                    for &(slot, v) in &rule.header {
                        if classes.field_of(slot).and_then(|f| classes.fields[f].within(v)).is_none() {
                            return Err(Irregular::NewValues);
                        }
                    }
                }
                classes.for_each_atom(&rule.header, &[], |x| mine.push(x));
                if t == 0 {
                    added0.push(next);
                }
                let meta = RuleMeta::of(&rule, next, true, true);
                table.conditional |= meta.in_port.is_some() || meta.metadata.is_some();
                metas.push(meta);
                next += 1;
            }
            for (meta, _) in old {
                classes.for_each_atom(&meta.header, &[], |x| mine.push(x));
                conditional_went |= meta.in_port.is_some() || meta.metadata.is_some();
                table.position[meta.id as usize] = NONE;
                if t == 0 {
                    removed0.insert(meta.id, pre + metas.len());
                }
            }
            table.max_serial = table.max_serial.max(serials[pre..new_end].iter().copied().max().unwrap_or(0));
            table.rules.splice(pre..pre, metas);
            table.serials.splice(pre..old_end, serials[pre..new_end].iter().copied());
            if conditional_went {
                table.conditional = table.rules.iter().any(|m| m.in_port.is_some() || m.metadata.is_some());
            }
            table.position.resize(next as usize, NONE);
            for (i, m) in table.rules.iter().enumerate().skip(pre) {
                table.position[m.id as usize] = i as u32;
            }
            changed_tables.push(t);
        }
        mine.sort_unstable();
        mine.dedup();
        let n = self.switches.len();
        let mut olds = changed_tables.iter().all(|&t| t == 0).then(Vec::new);
        for &t in &changed_tables {
            let table = &mut self.switches[s].tables[t];
            if t == 0 {
                // Atoms whose first rule went: looked for again after it.
                for &x in &mine {
                    let slot = &mut self.table0[x * n + s];
                    if let Some(olds) = olds.as_mut() {
                        olds.push((x, *slot));
                    }
                    if let Some(&from) = removed0.get(slot) {
                        *slot = table.first_by_scan_from(classes, x, from);
                    }
                }
                // New rules take the atoms they hold from rules after them.
                for &id in &added0 {
                    let at = table.position[id as usize];
                    let rule = &table.rules[at as usize];
                    if rule.never {
                        continue;
                    }
                    let table0 = &mut self.table0;
                    let position = &table.position;
                    classes.for_each_atom(&rule.header, &[], |x| {
                        let slot = &mut table0[x * n + s];
                        if *slot == NONE || position[*slot as usize] > at {
                            *slot = id;
                        }
                    });
                }
            } else if table.rules.is_empty() {
                table.first = Vec::new();
            } else {
                table.first = first_holding(classes, table.rules.iter().map(|r| (r.id, r.never, r.header.as_slice())));
            }
        }
        let plain_before = self.plain0[s];
        self.plain0[s] = !self.switches[s].tables.first().is_some_and(|t| t.conditional);
        match (switch_plain_before, self.plain_switch(s)) {
            (true, false) => self.not_plain += 1,
            (false, true) => self.not_plain -= 1,
            _ => {}
        }
        if let Some(olds) = olds.as_mut().filter(|_| plain_before && self.plain0[s]) {
            // Only table 0 changed and it reads no ingress port or metadata:
            // an atom still held first by the same rule is treated as before
            // (rule ids name unchanged rules), so only atoms whose first
            // rule moved are the change's.
            let table0 = &self.table0;
            olds.retain(|&(x, old)| table0[x * n + s] != old);
            mine = olds.iter().map(|&(x, _)| x).collect();
        }
        affected.extend(mine);
        Ok(olds)
    }
}

impl Hosts {
    fn new(ix: &Index, model: &Model, component: impl Fn(u64) -> Option<u64>) -> Hosts {
        let net = model.net;
        let classes = &ix.classes;
        // Sources, grouped by the switch they are attached to.
        let mut ingress: Vec<Ingress> = Vec::new();
        let mut host_comp: Vec<Option<u64>> = vec![None; net.hosts.len()];
        let mut group_of: HashMap<u32, usize> = HashMap::new();
        for (h, comp) in host_comp.iter_mut().enumerate() {
            let Some(Endpoint::Switch { dpid, port }) = net.live_peer(Endpoint::Host(h)) else { continue };
            let Some(&s) = ix.by_dpid.get(&dpid) else { continue };
            *comp = component(dpid);
            let g = *group_of.entry(s).or_insert_with(|| {
                ingress.push(Ingress { switch: s, live: Vec::new(), dead: Vec::new() });
                ingress.len() - 1
            });
            if ix.receives(s as usize, port) {
                ingress[g].live.push((port, h as u32));
            } else {
                ingress[g].dead.push(h as u32);
            }
        }
        for g in &mut ingress {
            g.live.sort_unstable();
        }
        let group_comp = ingress.iter().map(|g| component(ix.switches[g.switch as usize].dpid)).collect();
        // Which atoms each destination's traffic falls in.
        let mac = |h: usize| PRESENT | mac_int(&net.hosts[h].mac.0) as u64;
        let ip = |h: usize| PRESENT | u32::from(net.hosts[h].ip) as u64;
        let ipv4 = Ternary::exact(PRESENT | sts_mocknet::packet::ETH_IPV4 as u64);
        let arp = Ternary::exact(PRESENT | sts_mocknet::packet::ETH_ARP as u64);
        let class_of = |slot: usize, v: u64| classes.field_of(slot).map(|f| (f, classes.fields[f].class_of(v)));
        let mut dests_of: Vec<Vec<u32>> = vec![Vec::new(); classes.count];
        for (i, shape) in classes.shapes.iter().enumerate() {
            let c = &shape.cube;
            let untagged = c.pos[s::VLAN_VID].meets(Ternary::exact(PRESENT));
            if !untagged || (c.pos[s::ETH_TYPE] != ipv4 && c.pos[s::ETH_TYPE] != arp) {
                continue;
            }
            let dst_ip = if c.pos[s::ETH_TYPE] == ipv4 { s::IPV4_DST } else { s::ARP_TPA };
            for b in (0..net.hosts.len()).filter(|&b| host_comp[b].is_some()) {
                let narrow: Vec<(usize, [u32; 1])> = [(s::ETH_DST, mac(b)), (dst_ip, ip(b)), (s::VLAN_VID, PRESENT)]
                    .into_iter()
                    .filter_map(|(slot, v)| class_of(slot, v))
                    .map(|(f, c)| (f, [c]))
                    .collect();
                let narrow: Vec<(usize, &[u32])> = narrow.iter().map(|(f, c)| (*f, c.as_slice())).collect();
                classes.atoms_in_shape(i, &[], &narrow, |x| dests_of[x].push(b as u32));
            }
        }
        // Source fields some rule reads: a source's traffic is only in the
        // atoms holding its own addresses there.
        let src_fields: Vec<(usize, usize)> = [s::ETH_SRC, s::IPV4_SRC, s::ARP_SPA]
            .iter()
            .filter_map(|&sl| classes.field_of(sl).map(|f| (sl, f)))
            .collect();
        let host_src = (0..net.hosts.len())
            .map(|h| {
                src_fields
                    .iter()
                    .map(|&(sl, f)| classes.fields[f].class_of(if sl == s::ETH_SRC { mac(h) } else { ip(h) }))
                    .collect()
            })
            .collect();
        Hosts { ingress, group_comp, host_comp, dests_of, src_fields, host_src, ipv4 }
    }

    /// Which sources' traffic can fall in atom `x`: those whose addresses it
    /// holds, on the source fields rules read.
    fn source_filter(&self, ix: &Index, x: usize) -> impl Fn(usize) -> bool + '_ {
        let is_ip = ix.classes.shapes[ix.classes.shape_of(x)].cube.pos[s::ETH_TYPE] == self.ipv4;
        let atom_src: Vec<Option<u32>> = self
            .src_fields
            .iter()
            .map(|&(sl, f)| (sl == s::ETH_SRC || (sl == s::IPV4_SRC) == is_ip).then(|| ix.classes.class(x, f)))
            .collect();
        move |a: usize| atom_src.iter().zip(&self.host_src[a]).all(|(want, have)| want.is_none_or(|w| w == *have))
    }

    /// Follows atom `x` from every source and returns the pairs it
    /// blackholes. `buffers` are reused from atom to atom.
    fn judge(&self, t: &mut Traversal, x: usize, buffers: &mut Fates) -> Result<Vec<(u32, u32)>, Irregular> {
        self.follow(t, x, buffers)?;
        Ok(self.pairs(t.ix, &t.cache.dests, x, buffers))
    }

    /// Follows atom `x` from every source: into `buffers`, per ingress
    /// group, the fate its members share and the members with one of their
    /// own (the same for every atom that does the same at every switch).
    fn follow(&self, t: &mut Traversal, x: usize, buffers: &mut Fates) -> Result<(), Irregular> {
        t.next_atom();
        // Per ingress group: the fate shared by its members, and the members
        // whose own port changes it.
        let (shared, own) = buffers;
        shared.clear();
        own.clear();
        for g in &self.ingress {
            let (common, mine) = t.ingress(g, x)?;
            shared.push(common);
            own.push(mine);
        }
        Ok(())
    }

    /// The pairs atom `x` blackholes, given its fates from every source
    /// ([`Hosts::follow`]).
    fn pairs(&self, ix: &Index, dest_sets: &DestSets, x: usize, (shared, own): &Fates) -> Vec<(u32, u32)> {
        let mut blackholed = Vec::new();
        if self.dests_of[x].is_empty() {
            return blackholed;
        }
        let src_ok = self.source_filter(ix, x);
        for &b in &self.dests_of[x] {
            let b_comp = self.host_comp[b as usize];
            for (gi, g) in self.ingress.iter().enumerate() {
                if self.group_comp[gi] != b_comp {
                    continue;
                }
                let mut judge = |a: u32, f: &Fate| {
                    if a != b && dest_sets.blackholes(f, b) && src_ok(a as usize) {
                        blackholed.push((a, b));
                    }
                };
                for (a, f) in &own[gi] {
                    judge(*a, f);
                }
                if let Some(f) = shared[gi].as_ref().filter(|f| dest_sets.blackholes(f, b)) {
                    for &(_, a) in g.live.iter().filter(|(_, a)| !own[gi].iter().any(|(x, _)| x == a)) {
                        judge(a, f);
                    }
                }
            }
        }
        blackholed.sort_unstable();
        blackholed.dedup();
        blackholed
    }
}

/// The work of [`ByClass::paths_exactly`], on any cache of steps.
fn exact_paths(ix: &Index, h: &Hosts, cache: &mut Caches, model: &Model, x: usize) -> Result<Exact, Irregular> {
    let mut sources: Vec<(u32, usize, Option<u32>)> = h
        .ingress
        .iter()
        .enumerate()
        .flat_map(|(gi, g)| {
            g.live.iter().map(move |&(p, a)| (a, gi, Some(p))).chain(g.dead.iter().map(move |&a| (a, gi, None)))
        })
        .collect();
    sources.sort_unstable();
    let mut t = Traversal::new(ix, cache, model);
    let mut found: Vec<(u32, usize, Paths)> = Vec::with_capacity(sources.len());
    let mut steps = 0;
    for &(a, gi, port) in &sources {
        let mut paths = Paths { steps, ..Paths::default() };
        if let Some(p) = port {
            let s = h.ingress[gi].switch as usize;
            match t.paths(x, s, p, &mut Vec::new(), &mut paths) {
                Ok(()) => {}
                Err(Irregular::TooManyPaths) => {
                    found.clear();
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        steps = paths.steps;
        found.push((a, gi, paths));
    }
    let components = found.len() < sources.len();
    if components {
        // Too many paths to list: the strongly connected sets instead.
        found =
            t.components(x, sources.iter().map(|&(a, gi, port)| (a, gi, port.map(|p| (h.ingress[gi].switch, p)))))?;
    }
    // Each cycle once, with the sources taking it (in source order).
    let mut taken: Vec<CycleSources> = Vec::new();
    for (a, _, paths) in &found {
        for c in &paths.cycles {
            match taken.iter_mut().find(|(t, _)| t == c) {
                Some((_, sources)) => sources.push(*a as usize),
                None => taken.push((c.clone(), vec![*a as usize])),
            }
        }
    }
    Ok(Exact { found, components, taken })
}

/// Sorts `atoms` into groups that do the same at every switch: there,
/// the same rule or steps of the same content (see [`Caches::same_as`]),
/// so one walk of the first atom of a group stands for all of them.
/// Only where no switch has rules beyond table 0 nor in-port or metadata
/// matches (one rule decides what a switch does with an atom, whatever
/// the port); elsewhere every atom is a group of its own. Groups in
/// the order of their first atom, atoms in the order given.
fn alike(ix: &Index, cache: &Caches, atoms: &[usize]) -> Vec<Vec<usize>> {
    if !plain_walks(ix) || atoms.len() < 2 {
        return atoms.iter().map(|&x| vec![x]).collect();
    }
    // Keys are looked up only, never iterated: a fast hash.
    let mut index: FastMap<Box<[u64]>, usize> = FastMap::with_capacity_and_hasher(atoms.len(), Default::default());
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut key: Vec<u64> = Vec::with_capacity(ix.switches.len());
    for &x in atoms {
        walk_key(ix, cache, x, &mut key);
        match index.get(key.as_slice()) {
            Some(&g) => groups[g].push(x),
            None => {
                index.insert(key.as_slice().into(), groups.len());
                groups.push(vec![x]);
            }
        }
    }
    groups
}

/// Every switch has one plain table (no ingress port or metadata matched,
/// no later tables): what a switch does with an atom is its first rule's
/// step, and [`walk_key`] names an atom's whole walk.
fn plain_walks(ix: &Index) -> bool {
    ix.not_plain == 0
}

/// What every switch does with atom `x`, as `key` (only where
/// [`plain_walks`]): per switch, its first rule's step (the first step
/// doing the same), or the rule itself where no step is known for it yet.
/// Equal keys, equal walks.
fn walk_key(ix: &Index, cache: &Caches, x: usize, key: &mut Vec<u64>) {
    let n = ix.switches.len();
    key.clear();
    key.extend(ix.table0[x * n..(x + 1) * n].iter().enumerate().map(|(s, &rule)| {
        match cache.single[ix.single_slot(s, rule)] {
            NONE => 1 << 32 | rule as u64,
            id => cache.same_as[id as usize] as u64,
        }
    }));
}

/// One walk through the atoms: the index, a cache of steps, and the
/// current atom's memo.
struct Traversal<'a, 'm, 'n> {
    ix: &'a Index,
    cache: &'a mut Caches,
    walker: Walker<'m, 'n>,
    /// The current atom's memo, per switch for fates that hold for any
    /// port: `2 * stamp` while being computed, `2 * stamp + 1` when done.
    stamp: u32,
    memo_stamp: Vec<u32>,
    memo_fate: Vec<Fate>,
    /// The current atom's memo for port-specific fates (`None`: being computed).
    memo_by_port: HashMap<(u32, u32), Option<Fate>>,
    chain: Vec<u32>,
    start: Vec<usize>,
}

impl<'a, 'm, 'n> Traversal<'a, 'm, 'n> {
    fn new(ix: &'a Index, cache: &'a mut Caches, model: &'m Model<'n>) -> Traversal<'a, 'm, 'n> {
        Traversal {
            ix,
            cache,
            walker: Walker::new(model),
            stamp: 0,
            // Made by the first `next_atom` (an update that follows no atom
            // needs none).
            memo_stamp: Vec::new(),
            memo_fate: Vec::new(),
            memo_by_port: HashMap::new(),
            chain: Vec::new(),
            start: Vec::new(),
        }
    }

    /// Forgets the previous atom's memo.
    fn next_atom(&mut self) {
        if self.memo_stamp.is_empty() {
            let n = self.ix.switches.len();
            self.memo_stamp = vec![0; n];
            self.memo_fate = vec![Fate::default(); n];
        }
        self.stamp += 1;
        if !self.memo_by_port.is_empty() {
            self.memo_by_port.clear();
        }
    }

    /// The fates of atom `x` sent by the hosts of one ingress group: the
    /// fate they share (if the switch ignores the ingress port), and the
    /// hosts with a fate of their own.
    #[allow(clippy::type_complexity)]
    fn ingress(&mut self, g: &Ingress, x: usize) -> Result<(Option<Fate>, Vec<(u32, Fate)>), Irregular> {
        let s = g.switch as usize;
        let mut mine: Vec<(u32, Fate)> = g.dead.iter().map(|&h| (h, Fate::DROPPED)).collect();
        let Some(&(p0, h0)) = g.live.first() else { return Ok((None, mine)) };
        let (f, id) = self.fate(s, x, p0)?;
        let id = id.expect("a receiving port");
        if !self.cache.steps[id as usize].any_port {
            mine.push((h0, f));
            for &(p, h) in &g.live[1..] {
                mine.push((h, self.fate(s, x, p)?.0));
            }
            return Ok((None, mine));
        }
        // Every other source here shares it, except those whose own port is
        // an output.
        let (o0, o1) = self.cache.steps[id as usize].outputs;
        for i in o0..o1 {
            let o = self.cache.outputs[i as usize];
            if let Ok(k) = g.live.binary_search_by_key(&o, |m| m.0) {
                mine.push((g.live[k].1, self.fate(s, x, o)?.0));
            }
        }
        Ok((Some(f), mine))
    }

    /// The rules atom `x` meets at switch `s` entering on `in_port`, into
    /// `self.chain` by id (`NONE` for a miss), with each table's rule
    /// position in `self.start`. True if an in-port match was consulted.
    fn resolve_chain(&mut self, s: usize, x: usize, in_port: u32) -> bool {
        let ix = self.ix;
        self.chain.clear();
        self.start.clear();
        let sw = &ix.switches[s];
        self.start.resize(sw.tables.len(), 0);
        let (mut table, mut metadata, mut consulted) = (0usize, 0u64, false);
        while let Some(t) = sw.tables.get(table) {
            let mut r = ix.first_rule(s, table, x);
            if t.conditional {
                while r != NONE {
                    let rule = t.rule(r);
                    let port_ok = rule.in_port.is_none_or(|(v, m)| {
                        consulted = true;
                        (in_port ^ v) & m == 0
                    });
                    if port_ok && rule.metadata.is_none_or(|(v, m)| (metadata ^ v) & m == 0) {
                        break;
                    }
                    r = t.next_holding(&ix.classes, r, x);
                }
            }
            self.chain.push(r);
            if r == NONE {
                self.start[table] = t.rules.len();
                return consulted;
            }
            self.start[table] = t.position[r as usize] as usize;
            let rule = t.rule(r);
            if let Some((v, m)) = rule.write_metadata {
                metadata = (metadata & !m) | (v & m);
            }
            match rule.goto {
                Some(next) if next as usize > table => table = next as usize,
                _ => return consulted,
            }
        }
        // A goto to a table the switch does not have.
        self.chain.push(NONE);
        consulted
    }

    /// True if step `id` sends a copy out of `port`.
    fn outputs_to(&self, id: u32, port: u32) -> bool {
        let (a, b) = self.cache.steps[id as usize].outputs;
        self.cache.outputs[a as usize..b as usize].contains(&port)
    }

    /// True if switch `s` (a plain table 0) now does with atom `x` exactly
    /// what its table-0 rule `old` did: both single-rule steps that hold for
    /// any ingress port, with the same local fate, forwards and outputs.
    /// False when that cannot be told (the old step was never computed).
    fn same_step_as(&mut self, s: usize, x: usize, old: u32) -> Result<bool, Irregular> {
        let ix = self.ix;
        let old_id = self.cache.single[ix.single_slot(s, old)];
        if old_id == NONE {
            return Ok(false);
        }
        // Asked for an ingress port the old step does not output to, the new
        // step is one that holds for any port if the new rule ignores it.
        let Some(&port) = ix.switches[s].receiving.iter().find(|&&p| !self.outputs_to(old_id, p)) else {
            return Ok(false);
        };
        let new_id = self.step(s, x, port)?;
        let (a, b) = (&self.cache.steps[old_id as usize], &self.cache.steps[new_id as usize]);
        let c = &*self.cache;
        Ok(a.any_port
            && b.any_port
            && a.local.punt == b.local.punt
            && a.local.drop == b.local.drop
            && c.dests.slice(&a.local.dests) == c.dests.slice(&b.local.dests)
            && c.forwards[a.forwards.0 as usize..a.forwards.1 as usize]
                == c.forwards[b.forwards.0 as usize..b.forwards.1 as usize]
            && c.outputs[a.outputs.0 as usize..a.outputs.1 as usize]
                == c.outputs[b.outputs.0 as usize..b.outputs.1 as usize])
    }

    /// What switch `s` does with atom `x` arriving on `in_port`: a step id.
    fn step(&mut self, s: usize, x: usize, in_port: u32) -> Result<u32, Irregular> {
        let ix = self.ix;
        // The hot path: one plain table-0 rule, no goto, a step cached for
        // any port (only such chains fill `single`).
        if ix.plain0[s] {
            let id = self.cache.single[ix.single_slot(s, ix.table0[x * ix.switches.len() + s])];
            if id != NONE && !self.outputs_to(id, in_port) {
                return Ok(id);
            }
        }
        let consulted = self.resolve_chain(s, x, in_port);
        let single = ix.plain0[s] && self.chain.len() == 1 && !ix.switches[s].tables.is_empty();
        if !consulted && !single {
            if let Some(&id) = self.cache.chains.get(&(s as u32, self.chain.clone(), ANY_PORT)) {
                if !self.outputs_to(id, in_port) {
                    return Ok(id);
                }
            }
        }
        let key = (s as u32, self.chain.clone(), in_port);
        if let Some(&id) = self.cache.chains.get(&key) {
            return Ok(id);
        }
        let cube = ix.classes.cube(x).ok_or(Irregular::Unexpected("an empty header class"))?;
        let hop = self.walker.hop(ix.switches[s].dpid, in_port, cube, self.start.clone());
        let mut local = Fate::default();
        let mut dests = Vec::new();
        for t in &self.walker.terminals {
            match t.outcome {
                Outcome::Delivered { host } => dests.push(host as u32),
                Outcome::Punted { .. } => local.punt = true,
                Outcome::Dropped { .. } => local.drop = true,
                Outcome::Looped { .. } => return Err(Irregular::Unexpected("a loop within one switch")),
                Outcome::Unmodelled { .. } => {
                    return Err(Irregular::Unexpected("an unmodelled action without rewrites"))
                }
            }
        }
        let c = &mut *self.cache;
        local.dests = c.dests.intern(dests);
        let f0 = c.forwards.len() as u32;
        c.forwards.extend(hop.forwards.iter().filter_map(|(d, p)| Some((*ix.by_dpid.get(d)?, *p))));
        let o0 = c.outputs.len() as u32;
        c.outputs.extend(&hop.outputs);
        let any_port = !consulted && !hop.consulted_in_port;
        let (forwards, outputs) = ((f0, c.forwards.len() as u32), (o0, c.outputs.len() as u32));
        let id = c.push(Step { local, forwards, outputs, any_port });
        if !any_port {
            c.chains.insert(key, id);
        } else if single {
            c.single[ix.single_slot(s, self.chain[0])] = id;
        } else {
            c.chains.insert((key.0, key.1, ANY_PORT), id);
        }
        Ok(id)
    }

    /// Follows atom `x` arriving at switch `s` on `in_port` along every
    /// path, as [`Walker`] does from a host: a path ends where it comes back
    /// to a (switch, ingress port) it crossed (a cycle: the switches since)
    /// or crosses [`HOP_LIMIT`] switches (a cycle: all of them). `path`
    /// holds the (switch, ingress port) pairs crossed so far.
    fn paths(
        &mut self,
        x: usize,
        s: usize,
        in_port: u32,
        path: &mut Vec<(u32, u32)>,
        out: &mut Paths,
    ) -> Result<(), Irregular> {
        out.steps += 1;
        if out.steps > PATH_BUDGET {
            return Err(Irregular::TooManyPaths);
        }
        if let Some(i) = path.iter().position(|&(q, p)| q == s as u32 && p == in_port) {
            out.good = true;
            self.note_cycle(&path[i..], s, out);
            return Ok(());
        }
        if path.len() as u32 >= HOP_LIMIT {
            out.good = true;
            self.note_cycle(path, s, out);
            return Ok(());
        }
        if !self.ix.receives(s, in_port) {
            return Ok(());
        }
        let id = self.step(s, x, in_port)?;
        let step = &self.cache.steps[id as usize];
        let (local, (f0, f1)) = (step.local, step.forwards);
        out.good |= local.punt;
        for &d in self.cache.dests.slice(&local.dests) {
            if !out.dests.contains(&d) {
                out.dests.push(d);
            }
        }
        path.push((s as u32, in_port));
        for i in f0..f1 {
            let (t, q) = self.cache.forwards[i as usize];
            self.paths(x, t as usize, q, path, out)?;
        }
        path.pop();
        Ok(())
    }

    /// Notes the cycle through the switches of `path` and switch `s`, once.
    fn note_cycle(&self, path: &[(u32, u32)], s: usize, out: &mut Paths) {
        let n = self.ix.switches.len();
        if n <= 64 {
            let mask = path.iter().fold(1u64 << s, |m, &(q, _)| m | 1 << q);
            if out.masks.contains(&mask) {
                return;
            }
            out.masks.push(mask);
        }
        let dpid = |s: u32| self.ix.switches[s as usize].dpid;
        let mut c: Vec<u64> = path.iter().map(|&(q, _)| dpid(q)).chain([dpid(s as u32)]).collect();
        c.sort_unstable();
        c.dedup();
        if n <= 64 || !out.cycles.contains(&c) {
            out.cycles.push(c);
        }
    }

    /// Judges atom `x` by the strongly connected sets of the (switch,
    /// ingress port) states it reaches from `sources` (host, ingress group,
    /// and its switch and port if that port receives): a source's traffic
    /// loops if it reaches a state of a set with a cycle, and is delivered
    /// to the hosts of every state it reaches. Linear in the states.
    fn components(
        &mut self,
        x: usize,
        sources: impl Iterator<Item = (u32, usize, Option<(u32, u32)>)>,
    ) -> Result<Vec<(u32, usize, Paths)>, Irregular> {
        // The states reached from every source, with their successors.
        let mut index: HashMap<(u32, u32), usize> = HashMap::new();
        let mut states: Vec<(u32, u32)> = Vec::new();
        let mut next: Vec<Vec<usize>> = Vec::new();
        let mut local: Vec<(bool, Vec<u32>)> = Vec::new();
        let sources: Vec<(u32, usize, Option<usize>)> = sources
            .map(|(a, gi, at)| {
                let start = at.map(|st| {
                    *index.entry(st).or_insert_with(|| {
                        states.push(st);
                        states.len() - 1
                    })
                });
                (a, gi, start)
            })
            .collect();
        let mut done = 0;
        while done < states.len() {
            let (s, p) = states[done];
            done += 1;
            let mut succ = Vec::new();
            let mut here = (false, Vec::new());
            if self.ix.receives(s as usize, p) {
                let id = self.step(s as usize, x, p)?;
                let step = &self.cache.steps[id as usize];
                let (punt, dests, (f0, f1)) = (step.local.punt, step.local.dests, step.forwards);
                here = (punt, self.cache.dests.slice(&dests).to_vec());
                for i in f0..f1 {
                    let st = self.cache.forwards[i as usize];
                    let k = *index.entry(st).or_insert_with(|| {
                        states.push(st);
                        states.len() - 1
                    });
                    succ.push(k);
                }
            }
            next.push(succ);
            local.push(here);
        }
        // Tarjan's strongly connected components, iteratively.
        let n = states.len();
        let (mut order, mut low, mut comp) = (vec![usize::MAX; n], vec![0; n], vec![usize::MAX; n]);
        let (mut stack, mut on_stack, mut counter, mut comps) = (Vec::new(), vec![false; n], 0, 0);
        for root in 0..n {
            if order[root] != usize::MAX {
                continue;
            }
            let mut call: Vec<(usize, usize)> = vec![(root, 0)];
            while let Some(&mut (v, ref mut i)) = call.last_mut() {
                if *i == 0 {
                    order[v] = counter;
                    low[v] = counter;
                    counter += 1;
                    stack.push(v);
                    on_stack[v] = true;
                }
                if let Some(&w) = next[v].get(*i) {
                    *i += 1;
                    if order[w] == usize::MAX {
                        call.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(order[w]);
                    }
                    continue;
                }
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == order[v] {
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp[w] = comps;
                        if w == v {
                            break;
                        }
                    }
                    comps += 1;
                }
            }
        }
        // The components with a cycle, and their switches.
        let mut size = vec![0usize; comps];
        for &c in &comp {
            size[c] += 1;
        }
        let mut cyclic: Vec<bool> = (0..comps).map(|c| size[c] > 1).collect();
        for v in 0..n {
            if next[v].contains(&v) {
                cyclic[comp[v]] = true;
            }
        }
        let mut switches: HashMap<usize, Vec<u64>> = HashMap::new();
        for v in (0..n).filter(|&v| cyclic[comp[v]]) {
            switches.entry(comp[v]).or_default().push(self.ix.switches[states[v].0 as usize].dpid);
        }
        for sw in switches.values_mut() {
            sw.sort_unstable();
            sw.dedup();
        }
        // Each source: what it reaches.
        let mut out = Vec::with_capacity(sources.len());
        let mut seen = vec![usize::MAX; n];
        for (k, (a, gi, start)) in sources.into_iter().enumerate() {
            let mut paths = Paths::default();
            let mut todo: Vec<usize> = start.into_iter().collect();
            for &v in &todo {
                seen[v] = k;
            }
            while let Some(v) = todo.pop() {
                paths.good |= local[v].0;
                for &d in &local[v].1 {
                    if !paths.dests.contains(&d) {
                        paths.dests.push(d);
                    }
                }
                if cyclic[comp[v]] {
                    paths.good = true;
                    let c = &switches[&comp[v]];
                    if !paths.cycles.contains(c) {
                        paths.cycles.push(c.clone());
                    }
                }
                for &w in &next[v] {
                    if seen[w] != k {
                        seen[w] = k;
                        todo.push(w);
                    }
                }
            }
            out.push((a, gi, paths));
        }
        Ok(out)
    }

    /// The memo of switch `s` (port [`ANY_PORT`] or a given one) for the
    /// current atom: `Some(None)` while being computed.
    fn memo(&self, s: usize, port: u32) -> Option<Option<Fate>> {
        if port == ANY_PORT {
            let st = self.memo_stamp[s];
            if st == 2 * self.stamp + 1 {
                Some(Some(self.memo_fate[s]))
            } else if st == 2 * self.stamp {
                Some(None)
            } else {
                None
            }
        } else {
            self.memo_by_port.get(&(s as u32, port)).copied()
        }
    }

    fn set_memo(&mut self, s: usize, port: u32, m: Option<Fate>) {
        if port == ANY_PORT {
            self.memo_stamp[s] = 2 * self.stamp + m.is_some() as u32;
            if let Some(f) = m {
                self.memo_fate[s] = f;
            }
        } else {
            self.memo_by_port.insert((s as u32, port), m);
        }
    }

    /// The fate of atom `x` arriving at switch `s` on `in_port`, and the
    /// step taken there (`None` if the port does not receive).
    fn fate(&mut self, s: usize, x: usize, in_port: u32) -> Result<(Fate, Option<u32>), Irregular> {
        if !self.ix.receives(s, in_port) {
            return Ok((Fate::DROPPED, None));
        }
        let id = self.step(s, x, in_port)?;
        let step = &self.cache.steps[id as usize];
        let key = if step.any_port { ANY_PORT } else { in_port };
        match self.memo(s, key) {
            Some(None) => return Err(Irregular::Loop),
            Some(Some(f)) => return Ok((f, Some(id))),
            None => {}
        }
        let (mut fate, (f0, f1)) = (step.local, step.forwards);
        fate.height = 1;
        self.set_memo(s, key, None);
        for i in f0..f1 {
            let (t, q) = self.cache.forwards[i as usize];
            let (next, _) = self.fate(t as usize, x, q)?;
            fate.punt |= next.punt;
            fate.drop |= next.drop;
            fate.dests = self.cache.dests.union(fate.dests, next.dests);
            fate.height = fate.height.max(next.height + 1);
        }
        if fate.height > HOP_LIMIT {
            return Err(Irregular::Loop);
        }
        self.set_memo(s, key, Some(fate));
        Ok((fate, Some(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Shape;
    use crate::testnet::{ipv4_dst, routed_fat_tree};
    use sts_proxy::wire::v13;
    use sts_proxy::wire::{Body, Message};

    fn shapes(model: &Model) -> Vec<Cube> {
        let mut shapes: Vec<Cube> = Vec::new();
        for c in Shape::all().into_iter().map(|sh| Cube::of_shape(sh).relax(!model.used_slots())) {
            if !shapes.contains(&c) {
                shapes.push(c);
            }
        }
        shapes
    }

    fn drop_at(net: &mut sts_mocknet::network::Network, dpid: u64, ip: u32) {
        let fm = v13::FlowMod::add(0, 500, v13::Match::new(ipv4_dst(ip, 32)), Vec::new());
        let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
        net.handle_controller(dpid, &msg.emit().expect("encodes"), &msg, 0);
    }

    #[test]
    fn threads_share_out_atoms_without_changing_the_answer() {
        let mut net = routed_fat_tree(4, false);
        // Drop rules at two cores: blackholes for two destinations.
        let ips: Vec<u32> = net.hosts.iter().map(|h| u32::from(h.ip)).collect();
        drop_at(&mut net, 1, ips[3]);
        drop_at(&mut net, 4, ips[9]);
        let model = Model::new(&net);
        let shapes = shapes(&model);
        let run = |threads: usize| -> Vec<(usize, usize)> {
            ByClass::new(&model, &shapes, &[], 1 << 20, |_| Some(0), false, |_| threads)
                .expect("no loop")
                .blackholes()
                .collect()
        };
        let one = run(1);
        assert!(!one.is_empty());
        for threads in [2, 3, 7] {
            assert_eq!(run(threads), one, "{threads} threads");
        }
    }

    #[test]
    fn looping_groups_judged_on_threads_give_what_one_thread_gives() {
        use crate::testnet::routing_loop;
        let k = 8;
        let loops_of =
            |e: &ByClass| -> Vec<(Vec<u64>, (usize, usize))> { e.loops().map(|(c, f)| (c.clone(), f)).collect() };
        let mut net = routed_fat_tree(k, false);
        let mut engine = {
            let model = Model::new(&net);
            ByClass::new(&model, &shapes(&model), &[], 1 << 20, |_| Some(0), true, |_| 2).expect("no loop")
        };
        assert_eq!(engine.loops().count(), 0);
        // Twelve hosts of pod 0 sent round loops through different pods:
        // as many looping groups, more than an update judges on one thread.
        let mut changed = BTreeSet::new();
        for host in 0..12 {
            let other_pod = 1 + host as u64 % (k - 1);
            routing_loop(&mut net, k, host, other_pod);
        }
        for d in net.switches.keys() {
            changed.insert(*d);
        }
        let model = Model::new(&net);
        let changed: Vec<u64> = changed.into_iter().collect();
        let (_, followed, _) = engine.update(&model, &changed).expect("absorbed");
        assert!(!followed.is_empty());
        let fresh = |threads: usize| {
            ByClass::new(&model, &shapes(&model), &[], 1 << 20, |_| Some(0), true, move |_| threads).expect("judged")
        };
        let one = fresh(1);
        let expected = loops_of(&one);
        assert!(expected.len() >= PARALLEL_GROUPS, "{} cycles", expected.len());
        assert_eq!(loops_of(&engine), expected, "updated on two threads");
        assert_eq!(engine.blackholes().collect::<Vec<_>>(), one.blackholes().collect::<Vec<_>>());
        for threads in [2, 3] {
            let many = fresh(threads);
            assert_eq!(loops_of(&many), expected, "{threads} threads");
            assert_eq!(many.blackholes().collect::<Vec<_>>(), one.blackholes().collect::<Vec<_>>());
        }
    }

    #[test]
    fn an_update_gives_what_a_fresh_engine_gives() {
        let mut net = routed_fat_tree(4, true);
        let ips: Vec<u32> = net.hosts.iter().map(|h| u32::from(h.ip)).collect();
        let mut engine = {
            let model = Model::new(&net);
            ByClass::new(&model, &shapes(&model), &[], 1 << 20, |_| Some(0), true, |_| 2).expect("no loop")
        };
        assert_eq!(engine.blackholes().count(), 0);
        // Break one route, then another, then mend the first.
        // Traffic for 10.0.1.2 crosses core 1, for 10.2.0.3 core 4.
        let (a, b) = (ips[2], ips[9]);
        let delete = |n: &mut sts_mocknet::network::Network, dpid: u64, ip: u32| {
            let fm = v13::FlowMod {
                command: v13::flow_mod_command::DELETE_STRICT,
                ..v13::FlowMod::add(0, 500, v13::Match::new(ipv4_dst(ip, 32)), Vec::new())
            };
            let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
            n.handle_controller(dpid, &msg.emit().expect("encodes"), &msg, 0);
        };
        for (dpid, ip, add) in [(1, a, true), (4, b, true), (1, a, false)] {
            if add {
                drop_at(&mut net, dpid, ip);
            } else {
                delete(&mut net, dpid, ip);
            }
            let model = Model::new(&net);
            let (touched, _, _) = engine.update(&model, &[dpid]).expect("absorbed");
            assert!(!touched.is_empty());
            let fresh: Vec<(usize, usize)> =
                ByClass::new(&model, &shapes(&model), &[], 1 << 20, |_| Some(0), false, |_| 1)
                    .expect("no loop")
                    .blackholes()
                    .collect();
            assert_eq!(engine.blackholes().collect::<Vec<_>>(), fresh);
        }
    }
}
