//! Symbolic forwarding: where every header a host can send ends up.
//!
//! [`Walker::from_host`] injects whole header-space cubes at a host's port and
//! follows them through the mock network's flow tables, groups, ports and
//! links, exactly as `sts_mocknet`'s dataplane would forward each concrete
//! frame, splitting a cube wherever rules treat its headers differently. Every
//! copy ends in a [`Terminal`]: delivered to a host, sent to a controller,
//! dropped (and why), or caught in a loop.
//!
//! Rewrites are tracked as constant overrides on top of the *origin* cube (the
//! headers as the host sent them), so each terminal says which original headers
//! reach it, and a loop is recognised exactly: a copy arriving again at the
//! same port with the same overrides carries, for every header in its cube, the
//! same header it had the first time, so it cycles forever. Paths longer than
//! the dataplane's hop limit count as loops too, as they do in the dataplane.

use std::rc::Rc;
use std::sync::OnceLock;

use sts_mocknet::flow::{Action, ActionSet, FlowEntry};
use sts_mocknet::network::{Endpoint, LinkFault, Network, HOP_LIMIT};
use sts_mocknet::switch::Switch;
use sts_proxy::wire::v13::oxm::VID_PRESENT;
use sts_proxy::wire::v13::{self, Field};
use sts_proxy::wire::OFP10;

use crate::header::{s, slot, Cube, Ternary, N, PRESENT};

use sts_mocknet::switch::WORK_BUDGET;

/// How deep group actions may chain (the mock switch's limit).
const MAX_GROUP_DEPTH: u8 = 8;

/// Branch steps one walk may take before it gives up (a flood storm in a
/// large mesh has factorially many simple paths).
pub const STEP_BUDGET: usize = 2_000_000;

/// A flow entry compiled for symbolic matching.
pub(crate) struct Rule<'n> {
    pub(crate) header: Vec<(usize, Ternary)>,
    pub(crate) in_port: Option<(u32, u32)>,
    pub(crate) metadata: Option<(u64, u64)>,
    /// Matches a field the dataplane never parses (IPv6, MPLS ...).
    pub(crate) never: bool,
    pub(crate) entry: &'n FlowEntry,
    index: usize,
}

/// An action that changes a header field (set-field, VLAN push, pop or set).
fn rewrites(a: &Action) -> bool {
    !matches!(a, Action::Output { .. } | Action::Group(_) | Action::Ignored)
}

impl<'n> Rule<'n> {
    /// Some action of the rule rewrites a header field.
    pub(crate) fn rewrites(&self) -> bool {
        let ins = &self.entry.instructions;
        ins.apply.iter().chain(ins.write.iter().flatten()).any(rewrites)
    }

    /// `entry`, the `index`-th of its table, compiled.
    pub(crate) fn compile(entry: &'n FlowEntry, index: usize) -> Rule<'n> {
        let header = Vec::with_capacity(entry.r#match.fields.len());
        let mut r = Rule { header, in_port: None, metadata: None, never: false, entry, index };
        for f in &entry.r#match.fields {
            match f.field {
                Field::InPort | Field::InPhyPort => {
                    let (v, m) = (f.value as u32, f.mask as u32);
                    r.in_port = match r.in_port {
                        Some((v0, m0)) if (v0 ^ v) & m0 & m != 0 => {
                            r.never = true;
                            None
                        }
                        Some((v0, m0)) => Some((v0 | v, m0 | m)),
                        None => Some((v, m)),
                    };
                }
                Field::Metadata => r.metadata = Some((f.value as u64, f.mask as u64)),
                other => match slot(other) {
                    Some(sl) => r.header.push((sl, Ternary::present(f.value as u64, f.mask as u64))),
                    None => r.never = true,
                },
            }
        }
        r
    }
}

/// One flow table, each entry compiled the first time it is looked at: a
/// re-check after one rule changed looks at a few entries of a table of
/// thousands.
pub(crate) struct Table<'n> {
    entries: &'n [Box<FlowEntry>],
    rules: Box<[OnceLock<Rule<'n>>]>,
}

impl<'n> Table<'n> {
    fn new(entries: &'n [Box<FlowEntry>]) -> Table<'n> {
        Table { entries, rules: (0..entries.len()).map(|_| OnceLock::new()).collect() }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `i`-th entry, compiled.
    pub(crate) fn get(&self, i: usize) -> &Rule<'n> {
        self.rules[i].get_or_init(|| Rule::compile(&self.entries[i], i))
    }

    /// The entries from the `from`-th on, compiled as they are reached.
    pub(crate) fn iter_from(&self, from: usize) -> impl Iterator<Item = &Rule<'n>> {
        (from.min(self.len())..self.len()).map(|i| self.get(i))
    }

    /// Every entry, compiled.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Rule<'n>> {
        self.iter_from(0)
    }
}

/// The flow tables of every switch, each entry compiled the first time it is needed.
pub struct Model<'n> {
    pub net: &'n Network,
    /// Datapath ids in order, and each switch's compiled tables at the same
    /// index: cheap to make (an incremental re-check makes one per change and
    /// compiles only the switches it visits).
    dpids: std::sync::Arc<[u64]>,
    tables: Vec<OnceLock<Vec<Table<'n>>>>,
}

impl<'n> Model<'n> {
    /// A model of the network's current forwarding state (nothing compiled yet).
    pub fn new(net: &'n Network) -> Model<'n> {
        Model::with_switches(net, net.switches.keys().copied().collect())
    }

    /// [`Model::new`] for a network whose switches are `dpids` (sorted, as
    /// [`Model::switches`] gives them): a re-check knows them already, and
    /// walking a large network's switch map again costs more than the
    /// re-check itself when it has left the caches.
    pub(crate) fn with_switches(net: &'n Network, dpids: std::sync::Arc<[u64]>) -> Model<'n> {
        debug_assert!(dpids.len() == net.switches.len());
        let mut tables = Vec::with_capacity(dpids.len());
        tables.resize_with(dpids.len(), OnceLock::new);
        Model { net, dpids, tables }
    }

    /// The network's switches, sorted (shared).
    pub(crate) fn switches(&self) -> std::sync::Arc<[u64]> {
        self.dpids.clone()
    }

    /// The compiled tables of a switch (none if it does not exist).
    pub(crate) fn tables_of(&self, dpid: u64) -> &[Table<'n>] {
        let Ok(i) = self.dpids.binary_search(&dpid) else { return &[] };
        let cell = &self.tables[i];
        cell.get_or_init(|| self.net.switches[&dpid].tables.iter().map(|t| Table::new(t.entries())).collect())
    }

    /// How many entries table 0 of a switch holds (`None`: no such switch
    /// or table); nothing is compiled.
    pub fn table0_len(&self, dpid: u64) -> Option<usize> {
        self.net.switches.get(&dpid)?.tables.first().map(|t| t.len())
    }

    /// Every switch's compiled tables, by datapath id.
    fn all_tables(&self) -> impl Iterator<Item = (u64, &[Table<'n>])> {
        self.dpids.iter().map(|&d| (d, self.tables_of(d)))
    }

    /// The header fields (a bit per slot) some rule matches or some action
    /// rewrites, plus those the checks themselves constrain. Fields outside
    /// it never influence forwarding, so their presence need not be tracked.
    pub fn used_slots(&self) -> u32 {
        let bit = |sl: usize| 1u32 << sl;
        let mut used = [s::ETH_TYPE, s::ETH_SRC, s::ETH_DST, s::IPV4_SRC, s::IPV4_DST, s::ARP_SPA, s::ARP_TPA]
            .iter()
            .fold(0, |m, &sl| m | bit(sl));
        let mut action = |a: &Action| match a {
            Action::SetField(f, _) => used |= slot(*f).map_or(0, bit),
            Action::PushVlan(_) | Action::PopVlan | Action::SetVlanVid10(_) | Action::SetVlanPcp10(_) => {
                used |= bit(s::VLAN_VID)
            }
            _ => {}
        };
        for (dpid, tables) in self.all_tables() {
            for r in tables.iter().flat_map(Table::iter) {
                let ins = &r.entry.instructions;
                ins.apply.iter().chain(ins.write.iter().flatten()).for_each(&mut action);
            }
            for g in self.net.switches[&dpid].groups.values() {
                g.buckets.iter().flat_map(|(_, a)| a).for_each(&mut action);
            }
        }
        for r in self.rules() {
            for (sl, _) in &r.header {
                used |= bit(*sl);
            }
        }
        // Fields whose presence depends on each other go together.
        let groups: [&[usize]; 2] = [
            &[s::VLAN_VID, s::VLAN_PCP],
            &[s::IP_PROTO, s::TCP_SRC, s::TCP_DST, s::UDP_SRC, s::UDP_DST, s::ICMP_TYPE, s::ICMP_CODE],
        ];
        for g in groups {
            if g.iter().any(|&sl| used & bit(sl) != 0) {
                used |= g.iter().fold(0, |m, &sl| m | bit(sl));
            }
        }
        used
    }

    /// Total rules (compiling nothing).
    pub fn rule_count(&self) -> usize {
        self.net.switches.values().flat_map(|s| &s.tables).map(|t| t.len()).sum()
    }

    /// Every compiled rule.
    pub(crate) fn rules(&self) -> impl Iterator<Item = &Rule<'n>> {
        self.all_tables().flat_map(|(_, t)| t.iter().flat_map(Table::iter))
    }

    /// True if some action rewrites a header field (set-field, VLAN push,
    /// pop or set). Without rewrites a frame keeps its headers end to end.
    pub fn rewrites(&self) -> bool {
        self.net.switches.keys().any(|&d| self.rewrites_at(d))
    }

    /// [`Model::rewrites`] for one switch's rules and groups.
    pub(crate) fn rewrites_at(&self, dpid: u64) -> bool {
        self.tables_of(dpid).iter().flat_map(Table::iter).any(Rule::rewrites) || self.groups_rewrite_at(dpid)
    }

    /// Some group bucket of the switch rewrites a header field.
    pub(crate) fn groups_rewrite_at(&self, dpid: u64) -> bool {
        self.net
            .switches
            .get(&dpid)
            .is_some_and(|s| s.groups.values().flat_map(|g| g.buckets.iter().flat_map(|(_, a)| a)).any(rewrites))
    }
}

/// Header fields rewritten so far, as constants over the origin cube.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Overrides {
    set: u32,
    vals: [u64; N],
}

impl Overrides {
    fn none() -> Overrides {
        Overrides { set: 0, vals: [0; N] }
    }

    fn get(&self, slot: usize) -> Option<u64> {
        (self.set & (1 << slot) != 0).then_some(self.vals[slot])
    }

    fn put(&mut self, slot: usize, v: u64) {
        self.set |= 1 << slot;
        self.vals[slot] = v;
    }

    /// True if no field was rewritten.
    pub fn is_empty(&self) -> bool {
        self.set == 0
    }
}

/// A set of packets in flight: origin headers plus the rewrites applied.
#[derive(Clone)]
struct Pkt {
    origin: Cube,
    over: Overrides,
}

impl Pkt {
    /// The current value constraint of a field.
    fn cur(&self, slot: usize) -> Ternary {
        match self.over.get(slot) {
            Some(v) => Ternary::exact(v),
            None => self.origin.pos[slot],
        }
    }

    fn is_exactly(&self, slot: usize, v: u64) -> bool {
        self.cur(slot) == Ternary::exact(PRESENT | v)
    }

    fn tagged(&self) -> bool {
        let t = self.cur(s::VLAN_VID);
        let bit = VID_PRESENT as u64;
        t.mask & bit != 0 && t.value & bit != 0
    }

    /// Whether a rule's header constraint plainly misses every header (some
    /// field's values are disjoint from it): a rule scan's common case,
    /// answered without building anything. `false` says nothing.
    fn plainly_misses(&self, c: &[(usize, Ternary)]) -> bool {
        c.iter().any(|&(sl, t)| !self.cur(sl).meets(t))
    }

    /// Splits by a rule's header constraint: returns the headers it
    /// matches and puts the rest into `rest` (the copy itself, not a clone of
    /// it, when the rule misses it whole: the common case of a rule scan).
    fn split_into(self, c: &[(usize, Ternary)], rest: &mut Vec<Pkt>) -> Option<Pkt> {
        let mut part = [(0, Ternary { value: 0, mask: 0 }); crate::header::N];
        let mut k = 0;
        for &(sl, t) in c {
            match self.over.get(sl) {
                Some(v) if !t.contains(v) => {
                    rest.push(self);
                    return None;
                }
                Some(_) => {}
                None if k < part.len() => {
                    part[k] = (sl, t);
                    k += 1;
                }
                // More constraints than fields: not a rule's header.
                None => {
                    let all: Vec<(usize, Ternary)> =
                        c.iter().copied().filter(|&(sl, _)| self.over.get(sl).is_none()).collect();
                    return self.split_by(&all, rest);
                }
            }
        }
        self.split_by(&part[..k], rest)
    }

    /// [`Pkt::split_into`] by the constraints on the fields the copy has not
    /// rewritten: what [`Cube::and`] and [`Cube::minus`] give, the pieces
    /// cut from the copy itself rather than from a clone of it.
    fn split_by(self, origin_part: &[(usize, Ternary)], rest: &mut Vec<Pkt>) -> Option<Pkt> {
        // All of it matches (a header class's cube against the rules it
        // was cut by, mostly): no piece to cut off.
        if origin_part.iter().all(|&(sl, t)| self.origin.pos[sl].within(t)) {
            return Some(self);
        }
        // A copy always holds some header: only the fields cut can empty a piece.
        let Some(hit) = self.origin.and_of_nonempty(origin_part) else {
            rest.push(self);
            return None;
        };
        let over = self.over;
        self.origin.cut_outside(origin_part, 0, |origin| {
            rest.push(Pkt { origin, over });
            true
        });
        Some(Pkt { origin: hit, over })
    }
}

/// A flow entry a path went through: switch, table and position in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleRef {
    pub dpid: u64,
    pub table: u8,
    pub index: usize,
    pub priority: u16,
    /// The entry is a table-miss entry (priority 0, empty match).
    pub table_miss: bool,
}

/// One switch on a path (a persistent list: copies share their prefix).
pub struct Node {
    pub dpid: u64,
    pub in_port: u32,
    pub rules: Vec<RuleRef>,
    over: Overrides,
    pub parent: Option<Rc<Node>>,
}

/// The switches a copy crossed, first to last.
pub fn hops(last: &Option<Rc<Node>>) -> Vec<Rc<Node>> {
    let mut out = Vec::new();
    let mut at = last.clone();
    while let Some(n) = at {
        at = n.parent.clone();
        out.push(n);
    }
    out.reverse();
    out
}

/// Per (switch, ingress port): the headers, with their rewrites, a pruned
/// walk has followed from there to every end.
type Explored = std::collections::HashMap<(u64, u32), Vec<(Overrides, Cube)>>;

/// Why a copy was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// No entry matched in this table (1.3: no table-miss entry).
    TableMiss { table: u8 },
    /// The matched entries output nothing.
    NoOutput,
    /// Output to a port that is down, missing, or configured not to forward.
    PortDown { port: u32 },
    /// Output to a port whose link is failed or unwired.
    LinkDown { port: u32 },
    /// Arrived on a port that is down or configured not to receive.
    NotReceived,
    /// Lost to a dataplane drop fault on the link.
    LinkFault { port: u32 },
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropReason::TableMiss { table } => write!(f, "no entry matches in table {table}"),
            DropReason::NoOutput => f.write_str("the matching entry outputs nothing"),
            DropReason::PortDown { port } => write!(f, "output port {port} is down"),
            DropReason::LinkDown { port } => write!(f, "the link on port {port} is down"),
            DropReason::NotReceived => f.write_str("the ingress port does not receive"),
            DropReason::LinkFault { port } => write!(f, "a drop fault on the link at port {port}"),
        }
    }
}

/// Where a copy ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered {
        host: usize,
    },
    Punted {
        dpid: u64,
    },
    Dropped {
        dpid: u64,
        reason: DropReason,
    },
    /// The copy cycles (or exceeds the hop limit); `cycle` lists the switches
    /// of the cycle.
    Looped {
        cycle: Vec<u64>,
    },
    /// Forwarding the analysis does not model (e.g. double VLAN tagging): no
    /// conclusion is drawn about these headers.
    Unmodelled {
        what: &'static str,
    },
}

/// One copy's fate, for the origin headers in `origin`.
pub struct Terminal {
    pub origin: Cube,
    pub outcome: Outcome,
    /// The last switch crossed (`None` if the copy never reached a switch).
    pub path: Option<Rc<Node>>,
}

/// Follows header sets through a [`Model`].
pub struct Walker<'m, 'n> {
    model: &'m Model<'n>,
    pub terminals: Vec<Terminal>,
    /// Copies ended or handed on so far (terminals plus one-hop forwards).
    ends: usize,
    steps: usize,
    /// True if the walk stopped at [`STEP_BUDGET`].
    pub truncated: bool,
    hop: Option<Hop>,
    /// The (port, rewrites) copies sent out by the rules being applied, the
    /// innermost from `marks.last()` on. The same copy sent twice ends the
    /// same way twice, so it is followed once (an entry with 4,000 FLOOD
    /// outputs is one FLOOD to the analysis).
    sent: Vec<(u32, Overrides)>,
    marks: Vec<usize>,
    /// Stop the walk at the first copy that loops through exactly these
    /// switches, or (with `.1`) through some of them (a witness needs one
    /// path, not all of them).
    stop_at: Option<(Vec<u64>, bool)>,
    stopped: bool,
    /// With [`Walker::confined`]: copies leaving the switches of `stop_at`
    /// are not followed.
    confined: bool,
    /// With [`Walker::pruned`]: per (switch, ingress port), the headers
    /// (with their rewrites) already followed from there to every end.
    explored: Option<Explored>,
    /// With [`Walker::starting_at`]: per switch (sorted), table 0's first
    /// rule that may hold an unrewritten header of the walk.
    table0_starts: Vec<(u64, usize)>,
}

/// What one switch does with a set of packets that every rule treats alike
/// (see [`Walker::hop`]).
#[derive(Debug, Default)]
pub(crate) struct Hop {
    /// Per table, the first rule to try (earlier ones are known not to match).
    start: Vec<usize>,
    /// The ingress port decided something (an in-port match, IN_PORT, FLOOD,
    /// ALL, NO_PACKET_IN, or an output to the ingress port itself).
    pub(crate) consulted_in_port: bool,
    /// Copies sent on to another switch: (switch, ingress port there).
    pub(crate) forwards: Vec<(u64, u32)>,
    /// Every port a copy was sent out of.
    pub(crate) outputs: Vec<u32>,
}

struct At<'a> {
    sw: &'a Switch,
    dpid: u64,
    in_port: u32,
    arrival: Overrides,
    parent: &'a Option<Rc<Node>>,
    depth: u32,
}

impl At<'_> {
    fn no_packet_in(&self) -> bool {
        self.sw.ports.get(&self.in_port).is_some_and(|p| p.config & v13::port_config::NO_PACKET_IN != 0)
    }
}

impl<'m, 'n> Walker<'m, 'n> {
    pub fn new(model: &'m Model<'n>) -> Walker<'m, 'n> {
        Walker {
            model,
            terminals: Vec::new(),
            ends: 0,
            steps: 0,
            truncated: false,
            hop: None,
            sent: Vec::new(),
            marks: Vec::new(),
            stop_at: None,
            stopped: false,
            confined: false,
            explored: None,
            table0_starts: Vec::new(),
        }
    }

    /// Follows copies only while they stay among the switches
    /// [`Walker::until_loop`] waits on: a copy sent to any other switch is
    /// handed away unfollowed. For asking whether a loop exists among those
    /// switches when every loop there has an entry from inside (the walk
    /// starts on one of them and a copy reaches the loop without leaving).
    pub fn confined(mut self) -> Walker<'m, 'n> {
        self.confined = true;
        self
    }

    /// Follows headers arriving where the same or more headers were already
    /// followed to every end no further: linear in (port, header set) pairs
    /// instead of exponential in paths. Every header that loops still has a
    /// loop found (a depth-first search that skips finished nodes finds a
    /// back edge iff there is a cycle), but not every path is listed: for
    /// [`Walker::until_loop`] walks that ask whether a loop exists.
    pub fn pruned(mut self) -> Walker<'m, 'n> {
        self.explored = Some(std::collections::HashMap::new());
        self
    }

    /// Begins table 0's scan at switch `d` at position `p` for every `(d, p)`
    /// of `starts`, for copies no rewrite has touched: the caller knows the
    /// rules before it hold none of the headers the walk is given (a header
    /// class's first rule there, from the class engine). A big router's
    /// longest-prefix table is thousands of rules a class's walk would
    /// otherwise look at, and compile, one by one.
    pub fn starting_at(mut self, mut starts: Vec<(u64, usize)>) -> Walker<'m, 'n> {
        starts.sort_unstable();
        self.table0_starts = starts;
        self
    }

    /// A walker that stops at the first copy looping through `cycle` (with
    /// `within`, through any of its switches: `cycle` is then a strongly
    /// connected set of switches rather than one cycle).
    pub fn until_loop(model: &'m Model<'n>, cycle: Vec<u64>, within: bool) -> Walker<'m, 'n> {
        Walker { stop_at: Some((cycle, within)), ..Walker::new(model) }
    }

    /// Whether a copy looping through `cycle` is what [`Walker::until_loop`] waits for.
    pub fn awaited(&self, cycle: &[u64]) -> bool {
        self.stop_at.as_ref().is_some_and(|(want, within)| {
            want == cycle || (*within && cycle.iter().all(|d| want.binary_search(d).is_ok()))
        })
    }

    /// Runs one switch only: `cube` arrives at `dpid` on `in_port`, and
    /// starts `start[t]` say where each table's search begins (the caller
    /// knows the earlier rules miss every header of the cube, which holds
    /// some header: an atom's). Copies leaving
    /// for another switch are recorded in the returned [`Hop`] instead of
    /// followed; copies ending here are in `terminals`.
    pub(crate) fn hop(&mut self, dpid: u64, in_port: u32, cube: Cube, start: Vec<usize>) -> Hop {
        self.terminals.clear();
        self.ends = 0;
        self.hop = Some(Hop { start, ..Hop::default() });
        self.arrive(Pkt { origin: cube, over: Overrides::none() }, dpid, in_port, &None, 0);
        self.hop.take().unwrap_or_default()
    }

    fn consult_in_port(&mut self) {
        if let Some(h) = &mut self.hop {
            h.consulted_in_port = true;
        }
    }

    /// Gives the walk a fresh [`STEP_BUDGET`] for what follows (a walk from
    /// several hosts in turn, each with its own budget).
    pub fn restart_budget(&mut self) {
        self.steps = 0;
    }

    /// Injects `cubes` as frames host `host` sends.
    pub fn from_host(&mut self, host: usize, cubes: &[Cube]) {
        // A copy holds some header (the splits ask only the fields they cut).
        for c in cubes.iter().filter(|c| !c.is_empty()) {
            let pkt = Pkt { origin: c.clone(), over: Overrides::none() };
            self.transmit(Endpoint::Host(host), pkt, &None, 0);
        }
    }

    fn end(&mut self, pkt: Pkt, outcome: Outcome, path: Option<Rc<Node>>) {
        if let Outcome::Looped { cycle } = &outcome {
            self.stopped |= self.awaited(cycle);
        }
        self.ends += 1;
        self.terminals.push(Terminal { origin: pkt.origin, outcome, path });
    }

    fn node(at: &At, rules: &[RuleRef]) -> Rc<Node> {
        Rc::new(Node {
            dpid: at.dpid,
            in_port: at.in_port,
            rules: rules.to_vec(),
            over: at.arrival,
            parent: at.parent.clone(),
        })
    }

    /// A copy leaves `from`: across the link to its peer, if live.
    fn transmit(&mut self, from: Endpoint, pkt: Pkt, path: &Option<Rc<Node>>, depth: u32) {
        let net = self.model.net;
        let port = match from {
            Endpoint::Switch { port, .. } => port,
            Endpoint::Host(_) => 0,
        };
        let dpid = path.as_ref().map_or(0, |n| n.dpid);
        let Some(to) = net.live_peer(from) else {
            return self.end(pkt, Outcome::Dropped { dpid, reason: DropReason::LinkDown { port } }, path.clone());
        };
        if net.link_fault(from) == Some(LinkFault::Drop) {
            return self.end(pkt, Outcome::Dropped { dpid, reason: DropReason::LinkFault { port } }, path.clone());
        }
        match to {
            Endpoint::Host(i) => self.end(pkt, Outcome::Delivered { host: i }, path.clone()),
            Endpoint::Switch { dpid, port } => match &mut self.hop {
                // As `arrive` does, a copy for a switch that does not exist just vanishes.
                Some(h) => {
                    if net.switches.contains_key(&dpid) {
                        h.forwards.push((dpid, port));
                        self.ends += 1;
                    }
                }
                _ if self.confined && self.stop_at.as_ref().is_none_or(|(s, _)| s.binary_search(&dpid).is_err()) => {
                    self.ends += 1;
                }
                _ => self.arrive(pkt, dpid, port, path, depth),
            },
        }
    }

    fn arrive(&mut self, pkt: Pkt, dpid: u64, in_port: u32, parent: &Option<Rc<Node>>, depth: u32) {
        if self.stopped {
            return;
        }
        self.steps += 1;
        if self.steps > STEP_BUDGET {
            self.truncated = true;
            return;
        }
        // Back at a port with the same rewrites: every header here cycles.
        let mut cycle = vec![dpid];
        let mut at = parent.clone();
        while let Some(n) = at {
            cycle.push(n.dpid);
            if n.dpid == dpid && n.in_port == in_port && n.over == pkt.over {
                cycle.pop();
                cycle.sort_unstable();
                cycle.dedup();
                return self.end(pkt, Outcome::Looped { cycle }, parent.clone());
            }
            at = n.parent.clone();
        }
        if depth >= HOP_LIMIT {
            cycle.sort_unstable();
            cycle.dedup();
            return self.end(pkt, Outcome::Looped { cycle }, parent.clone());
        }
        if let Some(explored) = &self.explored {
            let done = explored.get(&(dpid, in_port)).is_some_and(|seen| {
                seen.iter().any(|(over, c)| *over == pkt.over && (*c == pkt.origin || pkt.origin.within_cube(c)))
            });
            if done {
                return;
            }
        }
        let Some(sw) = self.model.net.switches.get(&dpid) else { return };
        let at = At { sw, dpid, in_port, arrival: pkt.over, parent, depth };
        let receives = sw.ports.get(&in_port).is_some_and(|p| p.is_live() && p.config & v13::port_config::NO_RECV == 0);
        if !receives {
            let node = Self::node(&at, &[]);
            return self.end(pkt, Outcome::Dropped { dpid, reason: DropReason::NotReceived }, Some(node));
        }
        let key = self.explored.as_ref().map(|_| (pkt.over, pkt.origin.clone()));
        self.pipeline(&at, pkt, 0, 0, ActionSet::default(), Vec::new());
        if let (Some(explored), Some(k)) = (&mut self.explored, key) {
            explored.entry((dpid, in_port)).or_default().push(k);
        }
    }

    fn pipeline(&mut self, at: &At, pkt: Pkt, table: u8, metadata: u64, set: ActionSet, rules: Vec<RuleRef>) {
        let Some(compiled) = self.model.tables_of(at.dpid).get(table as usize) else {
            let node = Self::node(at, &rules);
            return self.end(
                pkt,
                Outcome::Dropped { dpid: at.dpid, reason: DropReason::TableMiss { table } },
                Some(node),
            );
        };
        let start = match &self.hop {
            Some(h) => h.start.get(table as usize).copied().unwrap_or(0),
            None if table == 0 && pkt.over.is_empty() => {
                self.table0_starts.binary_search_by_key(&at.dpid, |&(d, _)| d).map_or(0, |i| self.table0_starts[i].1)
            }
            None => 0,
        };
        let mut rest = vec![pkt];
        // The copies left for the next rule, swapped with `rest` (one
        // allocation per table, not per rule that cuts).
        let mut next = Vec::new();
        for rule in compiled.iter_from(start) {
            if rest.is_empty() {
                break;
            }
            if rule.never || rule.metadata.is_some_and(|(v, m)| (metadata ^ v) & m != 0) {
                continue;
            }
            if let Some((v, m)) = rule.in_port {
                self.consult_in_port();
                if (at.in_port ^ v) & m != 0 {
                    continue;
                }
            }
            if rest.iter().all(|p| p.plainly_misses(&rule.header)) {
                continue;
            }
            for p in rest.drain(..) {
                if let Some(h) = p.split_into(&rule.header, &mut next) {
                    let mut r = rules.clone();
                    let table_miss = rule.entry.priority == 0 && rule.entry.r#match.fields.is_empty();
                    r.push(RuleRef {
                        dpid: at.dpid,
                        table,
                        index: rule.index,
                        priority: rule.entry.priority,
                        table_miss,
                    });
                    self.instructions(at, h, table, metadata, set.clone(), r, rule.entry);
                }
            }
            std::mem::swap(&mut rest, &mut next);
        }
        for p in rest {
            let node = Self::node(at, &rules);
            // 1.0 sends a miss to the controller (unless the port says
            // NO_PACKET_IN); 1.3 drops it (a table-miss entry is a rule).
            if at.sw.version == OFP10 {
                self.consult_in_port();
            }
            if at.sw.version == OFP10 && !at.no_packet_in() {
                self.end(p, Outcome::Punted { dpid: at.dpid }, Some(node));
            } else {
                self.end(p, Outcome::Dropped { dpid: at.dpid, reason: DropReason::TableMiss { table } }, Some(node));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn instructions(
        &mut self,
        at: &At,
        pkt: Pkt,
        table: u8,
        metadata: u64,
        mut set: ActionSet,
        rules: Vec<RuleRef>,
        entry: &FlowEntry,
    ) {
        let before = self.ends;
        let ins = &entry.instructions;
        let mut pkt = pkt;
        if !ins.apply.is_empty() {
            match self.actions(at, pkt, &ins.apply, &rules, 0) {
                Some(p) => pkt = p,
                None => return,
            }
        }
        if ins.clear {
            set.clear();
        }
        if let Some(w) = &ins.write {
            set.write(w);
        }
        let metadata = match ins.write_metadata {
            Some((v, m)) => (metadata & !m) | (v & m),
            None => metadata,
        };
        match ins.goto {
            Some(next) if next > table => self.pipeline(at, pkt, next, metadata, set, rules),
            _ => {
                let actions = set.into_ordered();
                let mut out = Some(pkt.clone());
                if !actions.is_empty() {
                    out = self.actions(at, pkt, &actions, &rules, 0);
                }
                if let Some(p) = out {
                    if self.ends == before {
                        let node = Self::node(at, &rules);
                        self.end(p, Outcome::Dropped { dpid: at.dpid, reason: DropReason::NoOutput }, Some(node));
                    }
                }
            }
        }
    }

    /// Runs actions in order; returns the packets after the last rewrite, or
    /// `None` if the walk ended them (an unmodelled action).
    fn actions(&mut self, at: &At, pkt: Pkt, actions: &[Action], rules: &[RuleRef], group_depth: u8) -> Option<Pkt> {
        if group_depth > 0 {
            return self.run_actions(at, pkt, actions, rules, group_depth);
        }
        let mark = self.sent.len();
        self.marks.push(mark);
        let out = self.run_actions(at, pkt, actions, rules, group_depth);
        self.marks.pop();
        self.sent.truncate(mark);
        out
    }

    fn run_actions(
        &mut self,
        at: &At,
        mut pkt: Pkt,
        actions: &[Action],
        rules: &[RuleRef],
        group_depth: u8,
    ) -> Option<Pkt> {
        for a in actions {
            match a {
                Action::Output { port, .. } => {
                    let copy = (*port, pkt.over);
                    let mark = self.marks.last().copied().unwrap_or(0);
                    if self.sent[mark..].contains(&copy) {
                        continue;
                    }
                    if self.sent.len() - mark >= WORK_BUDGET {
                        // The switch drops the rest of such a frame's work.
                        let node = Self::node(at, rules);
                        self.end(
                            pkt,
                            Outcome::Unmodelled { what: "more copies than a switch makes of one frame" },
                            Some(node),
                        );
                        return None;
                    }
                    self.sent.push(copy);
                    self.output(at, pkt.clone(), *port, rules)
                }
                Action::SetField(f, v) => {
                    if let Err(what) = set_field(&mut pkt, *f, *v) {
                        let node = Self::node(at, rules);
                        self.end(pkt, Outcome::Unmodelled { what }, Some(node));
                        return None;
                    }
                }
                Action::SetVlanVid10(vid) => {
                    if !pkt.tagged() {
                        push_tag(&mut pkt);
                    }
                    pkt.over.put(s::VLAN_VID, PRESENT | VID_PRESENT as u64 | (*vid as u64 & 0x0fff));
                }
                Action::SetVlanPcp10(pcp) => {
                    if !pkt.tagged() {
                        push_tag(&mut pkt);
                    }
                    pkt.over.put(s::VLAN_PCP, PRESENT | (*pcp as u64 & 7));
                }
                Action::PushVlan(tpid) => {
                    let what = if *tpid != sts_mocknet::packet::ETH_VLAN {
                        Some("push_vlan with a TPID other than 0x8100")
                    } else if pkt.tagged() {
                        Some("a second VLAN tag")
                    } else {
                        None
                    };
                    if let Some(what) = what {
                        let node = Self::node(at, rules);
                        self.end(pkt, Outcome::Unmodelled { what }, Some(node));
                        return None;
                    }
                    push_tag(&mut pkt);
                }
                Action::PopVlan => {
                    if pkt.tagged() {
                        pkt.over.put(s::VLAN_VID, PRESENT);
                        pkt.over.put(s::VLAN_PCP, 0);
                    }
                }
                Action::Group(g) => self.group(at, pkt.clone(), *g, rules, group_depth),
                Action::Ignored => {}
            }
        }
        Some(pkt)
    }

    fn group(&mut self, at: &At, pkt: Pkt, id: u32, rules: &[RuleRef], depth: u8) {
        if depth >= MAX_GROUP_DEPTH {
            return;
        }
        let Some(g) = at.sw.groups.get(&id) else { return };
        let live = |b: &v13::Bucket| {
            b.watch_port == v13::port::ANY || at.sw.ports.get(&b.watch_port).is_some_and(|p| p.is_live())
        };
        let chosen: Vec<&Vec<Action>> = match g.group_type {
            v13::group_type::ALL => g.buckets.iter().map(|(_, a)| a).collect(),
            v13::group_type::INDIRECT => g.buckets.iter().take(1).map(|(_, a)| a).collect(),
            v13::group_type::FF => g.buckets.iter().find(|(b, _)| live(b)).map(|(_, a)| a).into_iter().collect(),
            // SELECT picks a bucket by a hash of the frame's bytes: every
            // bucket may be taken, so every bucket is followed.
            _ => g.buckets.iter().map(|(_, a)| a).collect(),
        };
        for actions in chosen {
            // Each bucket entered is a step: a group fanning out to itself
            // multiplies buckets, not hops.
            self.steps += 1;
            if self.steps > STEP_BUDGET {
                self.truncated = true;
                return;
            }
            self.actions(at, pkt.clone(), actions, rules, depth + 1);
        }
    }

    fn output(&mut self, at: &At, pkt: Pkt, port: u32, rules: &[RuleRef]) {
        use v13::port as P;
        if matches!(port, P::IN_PORT | P::FLOOD | P::ALL | P::NORMAL) || port == at.in_port {
            self.consult_in_port();
        }
        match port {
            P::IN_PORT => self.emit(at, pkt, at.in_port, rules),
            P::FLOOD | P::ALL | P::NORMAL => {
                // NORMAL is judged as the flood it is for an unknown
                // destination: what the switch learned is not flow-table
                // state, and a header class holds many destinations (so the
                // class engine's memoised fates stay valid as it learns).
                let ports = at.sw.flood_ports(if port == P::NORMAL { P::FLOOD } else { port }, at.in_port);
                if ports.is_empty() {
                    let node = Self::node(at, rules);
                    return self.end(pkt, Outcome::Dropped { dpid: at.dpid, reason: DropReason::NoOutput }, Some(node));
                }
                for p in ports {
                    self.emit(at, pkt.clone(), p, rules);
                }
            }
            P::CONTROLLER => {
                let node = Self::node(at, rules);
                // A 1.3 table-miss entry's PACKET_IN has reason NO_MATCH, which
                // the port's NO_PACKET_IN suppresses.
                let miss = at.sw.version != OFP10 && rules.last().is_some_and(|r| r.table_miss);
                if miss {
                    self.consult_in_port();
                }
                if miss && at.no_packet_in() {
                    self.end(pkt, Outcome::Dropped { dpid: at.dpid, reason: DropReason::NoOutput }, Some(node));
                } else {
                    self.end(pkt, Outcome::Punted { dpid: at.dpid }, Some(node));
                }
            }
            P::TABLE | P::LOCAL | P::ANY => {
                let node = Self::node(at, rules);
                self.end(pkt, Outcome::Dropped { dpid: at.dpid, reason: DropReason::NoOutput }, Some(node));
            }
            p if p == at.in_port => {
                let node = Self::node(at, rules);
                self.end(pkt, Outcome::Dropped { dpid: at.dpid, reason: DropReason::NoOutput }, Some(node));
            }
            p => self.emit(at, pkt, p, rules),
        }
    }

    fn emit(&mut self, at: &At, pkt: Pkt, port: u32, rules: &[RuleRef]) {
        if let Some(h) = &mut self.hop {
            h.outputs.push(port);
        }
        let node = Self::node(at, rules);
        let forwards = at.sw.ports.get(&port).is_some_and(|p| p.is_live() && p.config & v13::port_config::NO_FWD == 0);
        if !forwards {
            return self.end(
                pkt,
                Outcome::Dropped { dpid: at.dpid, reason: DropReason::PortDown { port } },
                Some(node),
            );
        }
        self.transmit(Endpoint::Switch { dpid: at.dpid, port }, pkt, &Some(node), at.depth + 1);
    }
}

fn push_tag(pkt: &mut Pkt) {
    pkt.over.put(s::VLAN_VID, PRESENT | VID_PRESENT as u64);
    pkt.over.put(s::VLAN_PCP, PRESENT);
}

/// A set-field action, as `sts_mocknet::packet::set_field` applies it: fields
/// the frame lacks are left alone.
fn set_field(pkt: &mut Pkt, f: Field, v: u128) -> Result<(), &'static str> {
    let v = v as u64;
    let ipv4 = pkt.is_exactly(s::ETH_TYPE, sts_mocknet::packet::ETH_IPV4 as u64);
    match f {
        Field::EthDst => pkt.over.put(s::ETH_DST, PRESENT | (v & 0xffff_ffff_ffff)),
        Field::EthSrc => pkt.over.put(s::ETH_SRC, PRESENT | (v & 0xffff_ffff_ffff)),
        Field::EthType if !pkt.is_exactly(s::ETH_TYPE, v & 0xffff) => return Err("an eth_type rewrite"),
        Field::VlanVid if pkt.tagged() => pkt.over.put(s::VLAN_VID, PRESENT | VID_PRESENT as u64 | (v & 0x0fff)),
        Field::VlanPcp if pkt.tagged() => pkt.over.put(s::VLAN_PCP, PRESENT | (v & 7)),
        Field::Ipv4Src if ipv4 => pkt.over.put(s::IPV4_SRC, PRESENT | (v & 0xffff_ffff)),
        Field::Ipv4Dst if ipv4 => pkt.over.put(s::IPV4_DST, PRESENT | (v & 0xffff_ffff)),
        Field::IpDscp if ipv4 => pkt.over.put(s::IP_DSCP, PRESENT | (v & 0x3f)),
        Field::TcpSrc if ipv4 && pkt.is_exactly(s::IP_PROTO, 6) => pkt.over.put(s::TCP_SRC, PRESENT | (v & 0xffff)),
        Field::TcpDst if ipv4 && pkt.is_exactly(s::IP_PROTO, 6) => pkt.over.put(s::TCP_DST, PRESENT | (v & 0xffff)),
        Field::UdpSrc if ipv4 && pkt.is_exactly(s::IP_PROTO, 17) => pkt.over.put(s::UDP_SRC, PRESENT | (v & 0xffff)),
        Field::UdpDst if ipv4 && pkt.is_exactly(s::IP_PROTO, 17) => pkt.over.put(s::UDP_DST, PRESENT | (v & 0xffff)),
        _ => {}
    }
    Ok(())
}
