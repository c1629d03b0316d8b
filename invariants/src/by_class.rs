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
//! that cycles, or a path longer than the hop limit, stops the fast path
//! ([`Irregular`]) and the caller falls back to the exact per-source walk.

use std::collections::{BTreeSet, HashMap};

use sts_mocknet::network::{Endpoint, HOP_LIMIT};
use sts_mocknet::packet::mac_int;

use crate::classes::Classes;
use crate::header::{s, Cube, Ternary, PRESENT};
use crate::walk::{Model, Outcome, Rule, Walker};
use sts_proxy::wire::v13::port_config;

const NONE: u32 = u32::MAX;
/// The memo key of a fate that holds for any ingress port.
const ANY_PORT: u32 = u32::MAX;

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
}

/// Hosts a set of copies is delivered to: none, one, or a set interned in
/// [`DestSets`] (floods).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Dests {
    #[default]
    None,
    One(u32),
    Many(u32),
}

/// The sets of more than one host that copies were delivered to, interned.
#[derive(Default)]
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

/// What one switch does with an atom arriving on some port.
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

/// Per switch: what the hot path does not need.
struct SwitchIndex<'m, 'n> {
    dpid: u64,
    tables: &'m [Vec<Rule<'n>>],
    /// Per table after the first, per atom: the first rule whose match holds
    /// the atom (table 0 is in [`ByClass::table0`]; empty for an empty table).
    later: Vec<Vec<u32>>,
    /// Per table: some rule also matches the ingress port or metadata.
    conditional: Vec<bool>,
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

/// The class engine's index of a model: built once per check, then shared
/// read-only by the threads that follow the atoms.
pub(crate) struct ByClass<'m, 'n> {
    model: &'m Model<'n>,
    classes: Classes,
    switches: Vec<SwitchIndex<'m, 'n>>,
    by_dpid: HashMap<u64, u32>,
    /// Table 0's rule for each (atom, switch), atom-major, so following one
    /// atom through every switch reads one contiguous row.
    table0: Vec<u32>,
    /// Per switch: table 0 has no in-port or metadata matches.
    plain0: Vec<bool>,
    /// Where each switch's slots start in [`Traversal::single`] (one per
    /// table-0 rule, then one for no match).
    single_base: Vec<usize>,
    single_len: usize,
    /// Per switch: which of ports 0..64 receive (ports beyond: `receiving`).
    receive_mask: Vec<u64>,
}

/// The answer: blackholed (source, destination) pairs, and the work done.
pub(crate) struct PairVerdicts {
    pub(crate) blackholes: BTreeSet<(usize, usize)>,
    pub(crate) atoms: usize,
}

/// Switches whose table-0 arrays are built before being copied atom-major.
const TRANSPOSE_BLOCK: usize = 16;

impl<'m, 'n> ByClass<'m, 'n> {
    /// Indexes the model. `shapes` are the disjoint cubes every walk starts
    /// from; `limit` caps the number of atoms.
    pub(crate) fn new(model: &'m Model<'n>, shapes: &[Cube], limit: usize) -> Result<ByClass<'m, 'n>, Irregular> {
        if model.rewrites() {
            return Err(Irregular::Rewrites);
        }
        let constraints = model.rules().filter(|r| !r.never).map(|r| r.header.as_slice());
        let classes = Classes::new(shapes, constraints, limit).ok_or(Irregular::TooManyClasses)?;
        let net = model.net;
        let n = net.switches.len();
        let atoms = classes.count;
        // The first rule of a table holding each atom (empty: none).
        let first_rules = |rules: &[Rule]| -> Vec<u32> {
            if rules.is_empty() {
                return Vec::new();
            }
            let mut at = vec![NONE; atoms];
            for (i, r) in rules.iter().enumerate().filter(|(_, r)| !r.never) {
                classes.for_each_atom(&r.header, &[], |x| {
                    if at[x] == NONE {
                        at[x] = i as u32;
                    }
                });
            }
            at
        };
        let mut table0 = vec![NONE; atoms * n];
        let dpids: Vec<u64> = net.switches.keys().copied().collect();
        for (block, chunk) in dpids.chunks(TRANSPOSE_BLOCK).enumerate() {
            let rows: Vec<Vec<u32>> = chunk.iter().map(|&d| model.tables_of(d).first().map_or_else(Vec::new, |t| first_rules(t))).collect();
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
        let (mut plain0, mut single_base, mut receive_mask) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let mut single_len = 0;
        for (&dpid, sw) in &net.switches {
            let tables = model.tables_of(dpid);
            let later = tables.iter().skip(1).map(|t| first_rules(t)).collect();
            let conditional: Vec<bool> = tables.iter().map(|rules| rules.iter().any(|r| r.in_port.is_some() || r.metadata.is_some())).collect();
            let receiving: Vec<u32> = sw.ports.values().filter(|p| p.is_live() && p.config & port_config::NO_RECV == 0).map(|p| p.no).collect();
            receive_mask.push(receiving.iter().filter(|&&p| p < 64).fold(0u64, |m, &p| m | 1 << p));
            plain0.push(!conditional.first().copied().unwrap_or(false));
            single_base.push(single_len);
            single_len += tables.first().map_or(0, Vec::len) + 1;
            by_dpid.insert(dpid, switches.len() as u32);
            switches.push(SwitchIndex { dpid, tables, later, conditional, receiving });
        }
        Ok(ByClass { model, classes, switches, by_dpid, table0, plain0, single_base, single_len, receive_mask })
    }

    /// Number of header classes.
    pub(crate) fn classes(&self) -> usize {
        self.classes.count
    }

    /// The `single` slot of table-0 rule `r` (or of no match) at switch `s`.
    fn single_slot(&self, s: usize, r: u32) -> usize {
        let base = self.single_base[s];
        if r == NONE {
            self.single_base.get(s + 1).map_or(self.single_len, |&next| next) - 1
        } else {
            base + r as usize
        }
    }

    fn first_rule(&self, s: usize, table: usize, x: usize) -> u32 {
        if table == 0 {
            self.table0[x * self.switches.len() + s]
        } else {
            self.switches[s].later[table - 1].get(x).copied().unwrap_or(NONE)
        }
    }

    fn receives(&self, s: usize, port: u32) -> bool {
        if port < 64 {
            self.receive_mask[s] & 1 << port != 0
        } else {
            self.switches[s].receiving.binary_search(&port).is_ok()
        }
    }

    /// Judges every attached pair: `component` gives each switch's
    /// live-link component (pairs in different components are not judged).
    /// The atoms are shared out among `threads` threads.
    pub(crate) fn blackholes(&self, component: impl Fn(u64) -> Option<u64>, threads: usize) -> Result<PairVerdicts, Irregular> {
        let net = self.model.net;
        let classes = &self.classes;
        // Sources, grouped by the switch they are attached to.
        let mut ingress: Vec<Ingress> = Vec::new();
        let mut host_comp: Vec<Option<u64>> = vec![None; net.hosts.len()];
        let mut group_of: HashMap<u32, usize> = HashMap::new();
        for (h, comp) in host_comp.iter_mut().enumerate() {
            let Some(Endpoint::Switch { dpid, port }) = net.live_peer(Endpoint::Host(h)) else { continue };
            let Some(&s) = self.by_dpid.get(&dpid) else { continue };
            *comp = component(dpid);
            let g = *group_of.entry(s).or_insert_with(|| {
                ingress.push(Ingress { switch: s, live: Vec::new(), dead: Vec::new() });
                ingress.len() - 1
            });
            if self.receives(s as usize, port) {
                ingress[g].live.push((port, h as u32));
            } else {
                ingress[g].dead.push(h as u32);
            }
        }
        for g in &mut ingress {
            g.live.sort_unstable();
        }
        let group_comp: Vec<Option<u64>> = ingress.iter().map(|g| component(self.switches[g.switch as usize].dpid)).collect();
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
                let narrow: Vec<(usize, [u32; 1])> =
                    [(s::ETH_DST, mac(b)), (dst_ip, ip(b)), (s::VLAN_VID, PRESENT)].into_iter().filter_map(|(slot, v)| class_of(slot, v)).map(|(f, c)| (f, [c])).collect();
                let narrow: Vec<(usize, &[u32])> = narrow.iter().map(|(f, c)| (*f, c.as_slice())).collect();
                classes.atoms_in_shape(i, &[], &narrow, |x| dests_of[x].push(b as u32));
            }
        }
        // Source fields some rule reads: a source's traffic is only in the
        // atoms holding its own addresses there.
        let src_fields: Vec<(usize, usize)> = [s::ETH_SRC, s::IPV4_SRC, s::ARP_SPA].iter().filter_map(|&sl| classes.field_of(sl).map(|f| (sl, f))).collect();
        let host_src: Vec<Vec<u32>> = (0..net.hosts.len())
            .map(|h| src_fields.iter().map(|&(sl, f)| classes.fields[f].class_of(if sl == s::ETH_SRC { mac(h) } else { ip(h) })).collect())
            .collect();
        let job = Judge { ix: self, ingress: &ingress, group_comp: &group_comp, host_comp: &host_comp, dests_of: &dests_of, src_fields: &src_fields, host_src: &host_src, ipv4 };
        let threads = threads.clamp(1, classes.count.max(1));
        let results: Vec<Share> = if threads == 1 {
            vec![job.run(0, 1)]
        } else {
            std::thread::scope(|scope| {
                let job = &job;
                let handles: Vec<_> = (0..threads).map(|k| scope.spawn(move || job.run(k, threads))).collect();
                handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
            })
        };
        let mut blackholes = BTreeSet::new();
        let mut first_error: Option<(usize, Irregular)> = None;
        for r in results {
            match r {
                Ok(pairs) => blackholes.extend(pairs),
                // The same answer whatever the threads' timing: the error of the lowest atom.
                Err(e) if first_error.as_ref().is_none_or(|f| e.0 < f.0) => first_error = Some(e),
                Err(_) => {}
            }
        }
        match first_error {
            Some((_, e)) => Err(e),
            None => Ok(PairVerdicts { blackholes, atoms: classes.count }),
        }
    }
}

/// What one thread found: blackholed pairs, or the first atom it could not
/// follow and why.
type Share = Result<BTreeSet<(usize, usize)>, (usize, Irregular)>;

/// One thread's share of the pair judgement.
struct Judge<'a, 'm, 'n> {
    ix: &'a ByClass<'m, 'n>,
    ingress: &'a [Ingress],
    group_comp: &'a [Option<u64>],
    host_comp: &'a [Option<u64>],
    dests_of: &'a [Vec<u32>],
    src_fields: &'a [(usize, usize)],
    host_src: &'a [Vec<u32>],
    ipv4: Ternary,
}

impl Judge<'_, '_, '_> {
    /// Follows atoms `k`, `k + step`, ... from every source and judges them.
    fn run(&self, k: usize, step: usize) -> Share {
        let ix = self.ix;
        let mut t = Traversal::new(ix);
        let mut blackholed = BTreeSet::new();
        // Per ingress group: the fate shared by its members, and the members
        // whose own port changes it.
        let mut shared: Vec<Option<Fate>> = Vec::with_capacity(self.ingress.len());
        let mut own: Vec<Vec<(u32, Fate)>> = Vec::with_capacity(self.ingress.len());
        for x in (k..ix.classes.count).step_by(step) {
            t.next_atom();
            shared.clear();
            own.clear();
            for g in self.ingress {
                let (common, mine) = t.ingress(g, x).map_err(|e| (x, e))?;
                shared.push(common);
                own.push(mine);
            }
            if self.dests_of[x].is_empty() {
                continue;
            }
            let is_ip = ix.classes.shapes[ix.classes.shape_of(x)].cube.pos[s::ETH_TYPE] == self.ipv4;
            // The source addresses this atom holds, where rules read them.
            let atom_src: Vec<Option<u32>> = self
                .src_fields
                .iter()
                .map(|&(sl, f)| (sl == s::ETH_SRC || (sl == s::IPV4_SRC) == is_ip).then(|| ix.classes.class(x, f)))
                .collect();
            let src_ok = |a: usize| atom_src.iter().zip(&self.host_src[a]).all(|(want, have)| want.is_none_or(|w| w == *have));
            for &b in &self.dests_of[x] {
                let b_comp = self.host_comp[b as usize];
                for (gi, g) in self.ingress.iter().enumerate() {
                    if self.group_comp[gi] != b_comp {
                        continue;
                    }
                    let mut judge = |a: u32, f: &Fate| {
                        if a != b && t.dests.blackholes(f, b) && src_ok(a as usize) {
                            blackholed.insert((a as usize, b as usize));
                        }
                    };
                    for (a, f) in &own[gi] {
                        judge(*a, f);
                    }
                    if let Some(f) = shared[gi].as_ref().filter(|f| t.dests.blackholes(f, b)) {
                        for &(_, a) in g.live.iter().filter(|(_, a)| !own[gi].iter().any(|(x, _)| x == a)) {
                            judge(a, f);
                        }
                    }
                }
            }
        }
        Ok(blackholed)
    }
}

/// One thread's walk state: steps computed so far, and the current atom's memo.
struct Traversal<'a, 'm, 'n> {
    ix: &'a ByClass<'m, 'n>,
    walker: Walker<'m, 'n>,
    /// Steps that hold for any port, for chains of one table-0 rule without
    /// goto, by [`ByClass::single_slot`]: a step id.
    single: Vec<u32>,
    /// Other steps, by (switch, rule chain, ingress port or [`ANY_PORT`]).
    chains: HashMap<(u32, Vec<u32>, u32), u32>,
    steps: Vec<Step>,
    forwards: Vec<(u32, u32)>,
    outputs: Vec<u32>,
    dests: DestSets,
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
    fn new(ix: &'a ByClass<'m, 'n>) -> Traversal<'a, 'm, 'n> {
        let n = ix.switches.len();
        Traversal {
            ix,
            walker: Walker::new(ix.model),
            single: vec![NONE; ix.single_len],
            chains: HashMap::new(),
            steps: Vec::new(),
            forwards: Vec::new(),
            outputs: Vec::new(),
            dests: DestSets::default(),
            stamp: 0,
            memo_stamp: vec![0; n],
            memo_fate: vec![Fate::default(); n],
            memo_by_port: HashMap::new(),
            chain: Vec::new(),
            start: Vec::new(),
        }
    }

    /// Forgets the previous atom's memo.
    fn next_atom(&mut self) {
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
        if !self.steps[id as usize].any_port {
            mine.push((h0, f));
            for &(p, h) in &g.live[1..] {
                mine.push((h, self.fate(s, x, p)?.0));
            }
            return Ok((None, mine));
        }
        // Every other source here shares it, except those whose own port is
        // an output.
        let (o0, o1) = self.steps[id as usize].outputs;
        for i in o0..o1 {
            let o = self.outputs[i as usize];
            if let Ok(k) = g.live.binary_search_by_key(&o, |m| m.0) {
                mine.push((g.live[k].1, self.fate(s, x, o)?.0));
            }
        }
        Ok((Some(f), mine))
    }

    /// The rules atom `x` meets at switch `s` entering on `in_port`, into
    /// `self.chain` (`NONE` for a miss), with each table's rule in
    /// `self.start`. True if an in-port match was consulted.
    fn resolve_chain(&mut self, s: usize, x: usize, in_port: u32) -> bool {
        let ix = self.ix;
        self.chain.clear();
        self.start.clear();
        let sw = &ix.switches[s];
        self.start.resize(sw.tables.len(), 0);
        let (mut table, mut metadata, mut consulted) = (0usize, 0u64, false);
        while let Some(rules) = sw.tables.get(table) {
            let mut r = ix.first_rule(s, table, x);
            if sw.conditional[table] {
                while r != NONE {
                    let rule = &rules[r as usize];
                    let port_ok = rule.in_port.is_none_or(|(v, m)| {
                        consulted = true;
                        (in_port ^ v) & m == 0
                    });
                    if port_ok && rule.metadata.is_none_or(|(v, m)| (metadata ^ v) & m == 0) {
                        break;
                    }
                    r = (r as usize + 1..rules.len()).find(|&j| !rules[j].never && ix.classes.atom_within(x, &rules[j].header)).map_or(NONE, |j| j as u32);
                }
            }
            self.chain.push(r);
            if r == NONE {
                self.start[table] = rules.len();
                return consulted;
            }
            self.start[table] = r as usize;
            let ins = &rules[r as usize].entry.instructions;
            if let Some((v, m)) = ins.write_metadata {
                metadata = (metadata & !m) | (v & m);
            }
            match ins.goto {
                Some(next) if next as usize > table => table = next as usize,
                _ => return consulted,
            }
        }
        // A goto to a table the switch does not have.
        self.chain.push(NONE);
        consulted
    }

    /// The ports step `id` sends copies out of.
    fn outputs_to(&self, id: u32, port: u32) -> bool {
        let (a, b) = self.steps[id as usize].outputs;
        self.outputs[a as usize..b as usize].contains(&port)
    }

    /// What switch `s` does with atom `x` arriving on `in_port`: a step id.
    fn step(&mut self, s: usize, x: usize, in_port: u32) -> Result<u32, Irregular> {
        let ix = self.ix;
        // The hot path: one plain table-0 rule, no goto, a step cached for
        // any port (only such chains fill `single`).
        if ix.plain0[s] {
            let id = self.single[ix.single_slot(s, ix.table0[x * ix.switches.len() + s])];
            if id != NONE && !self.outputs_to(id, in_port) {
                return Ok(id);
            }
        }
        let consulted = self.resolve_chain(s, x, in_port);
        let single = ix.plain0[s] && self.chain.len() == 1 && !ix.switches[s].tables.is_empty();
        if !consulted && !single {
            if let Some(&id) = self.chains.get(&(s as u32, self.chain.clone(), ANY_PORT)) {
                if !self.outputs_to(id, in_port) {
                    return Ok(id);
                }
            }
        }
        let key = (s as u32, self.chain.clone(), in_port);
        if let Some(&id) = self.chains.get(&key) {
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
                Outcome::Unmodelled { .. } => return Err(Irregular::Unexpected("an unmodelled action without rewrites")),
            }
        }
        local.dests = self.dests.intern(dests);
        let f0 = self.forwards.len() as u32;
        self.forwards.extend(hop.forwards.iter().filter_map(|(d, p)| Some((*ix.by_dpid.get(d)?, *p))));
        let o0 = self.outputs.len() as u32;
        self.outputs.extend(&hop.outputs);
        let any_port = !consulted && !hop.consulted_in_port;
        let id = self.steps.len() as u32;
        let (forwards, outputs) = ((f0, self.forwards.len() as u32), (o0, self.outputs.len() as u32));
        self.steps.push(Step { local, forwards, outputs, any_port });
        if !any_port {
            self.chains.insert(key, id);
        } else if single {
            self.single[ix.single_slot(s, self.chain[0])] = id;
        } else {
            self.chains.insert((key.0, key.1, ANY_PORT), id);
        }
        Ok(id)
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
        let step = &self.steps[id as usize];
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
            let (t, q) = self.forwards[i as usize];
            let (next, _) = self.fate(t as usize, x, q)?;
            fate.punt |= next.punt;
            fate.drop |= next.drop;
            fate.dests = self.dests.union(fate.dests, next.dests);
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

    #[test]
    fn threads_share_out_atoms_without_changing_the_answer() {
        let mut net = routed_fat_tree(4, false);
        // Drop rules at two cores: blackholes for two destinations.
        let ips: Vec<u32> = net.hosts.iter().map(|h| u32::from(h.ip)).collect();
        for (core, ip) in [(1, ips[3]), (4, ips[9])] {
            let fm = v13::FlowMod::add(0, 500, v13::Match::new(ipv4_dst(ip, 32)), Vec::new());
            let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
            net.handle_controller(core, &msg.emit().expect("encodes"), &msg, 0);
        }
        let model = Model::new(&net);
        let mut shapes: Vec<Cube> = Vec::new();
        for c in Shape::all().into_iter().map(|sh| Cube::of_shape(sh).relax(!model.used_slots())) {
            if !shapes.contains(&c) {
                shapes.push(c);
            }
        }
        let ix = ByClass::new(&model, &shapes, 1 << 20).expect("no rewrites");
        let one = ix.blackholes(|_| Some(0), 1).expect("no loop").blackholes;
        assert!(!one.is_empty());
        for threads in [2, 3, 7] {
            assert_eq!(ix.blackholes(|_| Some(0), threads).expect("no loop").blackholes, one, "{threads} threads");
        }
    }
}
