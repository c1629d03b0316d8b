//! Flow tables: matches, entries, and the FLOW_MOD semantics of OpenFlow 1.0
//! and 1.3 (priorities, strict and non-strict modify and delete, the overlap
//! check, cookie masks, out_port filters, idle and hard timeouts, capacity).
//!
//! Both versions share one model: a 1.0 match is translated into OXM field
//! matches ([`FlowMatch::from_v10`]) and 1.0 actions into [`Action`]s, so the
//! pipeline code exists once.

use sts_proxy::wire::v10;
use sts_proxy::wire::v13::{self, Field, Oxm};

use crate::packet::{mac_int, Fields, ETH_ARP, ETH_IPV4};

/// Milliseconds on the network's clock (given by the caller; the network never
/// reads a wall clock).
pub type Millis = u64;

/// One field constraint: `packet & mask == value & mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldMatch {
    pub field: Field,
    pub value: u128,
    pub mask: u128,
}

/// Every bit of `f` (its width in bytes, as an integer mask).
pub fn full_mask(f: Field) -> u128 {
    let bits = f.width() * 8;
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// A match: a set of field constraints, kept sorted by field so that equal
/// matches compare equal (strict operations need that).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FlowMatch {
    pub fields: Vec<FieldMatch>,
}

impl FlowMatch {
    fn push(&mut self, field: Field, value: u128, mask: u128) {
        let mask = mask & full_mask(field);
        if mask != 0 {
            self.fields.push(FieldMatch { field, value: value & mask, mask });
        }
    }

    fn normalise(mut self) -> Self {
        self.fields.sort();
        self.fields.dedup_by_key(|f| f.field);
        self
    }

    /// From a 1.3 OXM match. A field outside OPENFLOW_BASIC is refused (the
    /// switch answers BAD_MATCH) rather than silently ignored, which would make
    /// the match broader than the controller meant.
    pub fn from_v13(m: &v13::Match) -> Result<FlowMatch, UnsupportedField> {
        let mut out = FlowMatch::default();
        for o in &m.fields {
            match o {
                Oxm::Basic(b) => {
                    let mask = b.mask.map_or(full_mask(b.field), |m| m.to_u128());
                    out.push(b.field, b.value.to_u128(), mask);
                }
                Oxm::Other { class, field, .. } => return Err(UnsupportedField { class: *class, field: *field }),
            }
        }
        Ok(out.normalise())
    }

    /// From a 1.0 12-tuple match. Network and transport fields count only when
    /// their prerequisites are exact (dl_type IPv4 or ARP; nw_proto TCP, UDP,
    /// ICMP), as Open vSwitch normalises them; on ARP, nw_proto/nw_src/nw_dst
    /// are the ARP opcode and addresses.
    pub fn from_v10(m: &v10::Match) -> FlowMatch {
        use v10::wildcards as w;
        let exact = |bit| m.wildcards & bit == 0;
        let mut out = FlowMatch::default();
        if exact(w::IN_PORT) {
            out.push(Field::InPort, port10(m.in_port) as u128, u128::MAX);
        }
        if exact(w::DL_SRC) {
            out.push(Field::EthSrc, mac_int(&m.dl_src.0), u128::MAX);
        }
        if exact(w::DL_DST) {
            out.push(Field::EthDst, mac_int(&m.dl_dst.0), u128::MAX);
        }
        if exact(w::DL_VLAN) {
            let vid = if m.dl_vlan == 0xffff { 0 } else { (v13::oxm::VID_PRESENT | (m.dl_vlan & 0x0fff)) as u128 };
            out.push(Field::VlanVid, vid, u128::MAX);
            if exact(w::DL_VLAN_PCP) && m.dl_vlan != 0xffff {
                out.push(Field::VlanPcp, m.dl_vlan_pcp as u128, u128::MAX);
            }
        }
        if exact(w::DL_TYPE) {
            out.push(Field::EthType, m.dl_type as u128, u128::MAX);
            let prefix = |bits: u32| if bits == 0 { 0 } else { (u32::MAX << (32 - bits)) as u128 };
            if m.dl_type == ETH_IPV4 || m.dl_type == ETH_ARP {
                let arp = m.dl_type == ETH_ARP;
                if exact(w::NW_PROTO) {
                    out.push(if arp { Field::ArpOp } else { Field::IpProto }, m.nw_proto as u128, u128::MAX);
                }
                let (src, dst) = if arp { (Field::ArpSpa, Field::ArpTpa) } else { (Field::Ipv4Src, Field::Ipv4Dst) };
                out.push(src, m.nw_src as u128, prefix(m.nw_src_prefix()));
                out.push(dst, m.nw_dst as u128, prefix(m.nw_dst_prefix()));
                if !arp && exact(w::NW_TOS) {
                    out.push(Field::IpDscp, (m.nw_tos >> 2) as u128, u128::MAX);
                }
                if !arp && exact(w::NW_PROTO) {
                    let l4 = match m.nw_proto {
                        6 => Some((Field::TcpSrc, Field::TcpDst)),
                        17 => Some((Field::UdpSrc, Field::UdpDst)),
                        1 => Some((Field::Icmpv4Type, Field::Icmpv4Code)),
                        _ => None,
                    };
                    if let Some((s, d)) = l4 {
                        if exact(w::TP_SRC) {
                            out.push(s, m.tp_src as u128, u128::MAX);
                        }
                        if exact(w::TP_DST) {
                            out.push(d, m.tp_dst as u128, u128::MAX);
                        }
                    }
                }
            }
        }
        out.normalise()
    }

    /// True if a packet with `fields` satisfies every constraint.
    pub fn matches(&self, fields: &Fields) -> bool {
        self.fields.iter().all(|c| fields.get(c.field).is_some_and(|v| v & c.mask == c.value))
    }

    /// True if every packet this match accepts is also accepted by `general`
    /// (non-strict modify and delete select entries this way).
    pub fn is_within(&self, general: &FlowMatch) -> bool {
        general.fields.iter().all(|g| {
            self.fields.iter().any(|s| s.field == g.field && s.mask & g.mask == g.mask && s.value & g.mask == g.value)
        })
    }

    /// True if some packet could match both (the CHECK_OVERLAP test).
    pub fn overlaps(&self, other: &FlowMatch) -> bool {
        self.fields
            .iter()
            .all(|a| other.fields.iter().filter(|b| b.field == a.field).all(|b| a.value & b.mask == b.value & a.mask))
    }
}

/// An OXM field the mock switch does not match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unsupported match field: class {class:#06x}, field {field}")]
pub struct UnsupportedField {
    pub class: u16,
    pub field: u8,
}

/// A 1.0 port number in the 32-bit space of 1.3 (reserved ports keep their meaning).
pub fn port10(p: u16) -> u32 {
    if p >= 0xff00 {
        0xffff_0000 | p as u32
    } else {
        p as u32
    }
}

/// A 32-bit port number in 1.0's 16-bit space.
pub fn port_to10(p: u32) -> u16 {
    if p >= 0xffff_ff00 {
        (p & 0xffff) as u16
    } else {
        p as u16
    }
}

/// An action as the pipeline executes it (1.0 and 1.3 actions map onto these).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    Output {
        port: u32,
        max_len: u16,
    },
    SetField(Field, u128),
    /// 1.0 SET_VLAN_VID: sets the VID, adding a tag if the frame has none.
    SetVlanVid10(u16),
    /// 1.0 SET_VLAN_PCP: sets the priority, adding a tag if the frame has none.
    SetVlanPcp10(u8),
    PushVlan(u16),
    PopVlan,
    Group(u32),
    /// Accepted and ignored (queues, TTLs, MPLS, PBB, experimenter ...).
    Ignored,
}

impl Action {
    /// From a 1.3 action.
    pub fn from_v13(a: &v13::Action) -> Action {
        match a {
            v13::Action::Output { port, max_len } => Action::Output { port: *port, max_len: *max_len },
            v13::Action::SetField(Oxm::Basic(b)) => Action::SetField(b.field, b.value.to_u128()),
            v13::Action::PushVlan(t) => Action::PushVlan(*t),
            v13::Action::PopVlan => Action::PopVlan,
            v13::Action::Group(g) => Action::Group(*g),
            _ => Action::Ignored,
        }
    }

    /// From a 1.0 action.
    pub fn from_v10(a: &v10::Action) -> Action {
        match a {
            v10::Action::Output { port, max_len } => Action::Output { port: port10(*port), max_len: *max_len },
            v10::Action::SetVlanVid(v) => Action::SetVlanVid10(*v),
            v10::Action::SetVlanPcp(p) => Action::SetVlanPcp10(*p),
            v10::Action::StripVlan => Action::PopVlan,
            v10::Action::SetDlSrc(m) => Action::SetField(Field::EthSrc, mac_int(&m.0)),
            v10::Action::SetDlDst(m) => Action::SetField(Field::EthDst, mac_int(&m.0)),
            v10::Action::SetNwSrc(v) => Action::SetField(Field::Ipv4Src, *v as u128),
            v10::Action::SetNwDst(v) => Action::SetField(Field::Ipv4Dst, *v as u128),
            v10::Action::SetNwTos(t) => Action::SetField(Field::IpDscp, (*t >> 2) as u128),
            v10::Action::SetTpSrc(p) => Action::SetField(Field::TcpSrc, *p as u128),
            v10::Action::SetTpDst(p) => Action::SetField(Field::TcpDst, *p as u128),
            v10::Action::Enqueue { port, .. } => Action::Output { port: port10(*port), max_len: 0 },
            _ => Action::Ignored,
        }
    }
}

/// The 1.3 action set a packet accumulates through WRITE_ACTIONS: one action
/// per slot, executed at the end of the pipeline in the specification's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionSet(Vec<Action>);

impl ActionSet {
    /// CLEAR_ACTIONS.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// WRITE_ACTIONS: each action replaces the one in its slot.
    pub fn write(&mut self, actions: &[Action]) {
        for a in actions {
            self.0.retain(|x| slot(x) != slot(a));
            self.0.push(a.clone());
        }
    }

    /// The actions to execute, in order; a group action suppresses the output
    /// action, as the specification says.
    pub fn into_ordered(mut self) -> Vec<Action> {
        self.0.sort_by_key(order);
        if self.0.iter().any(|a| matches!(a, Action::Group(_))) {
            self.0.retain(|a| !matches!(a, Action::Output { .. }));
        }
        self.0
    }
}

/// Which slot of the action set an action occupies (one action per slot).
fn slot(a: &Action) -> (u8, Option<Field>) {
    match a {
        Action::SetField(f, _) => (order(a), Some(*f)),
        _ => (order(a), None),
    }
}

/// The order the 1.3 specification executes an action set in.
fn order(a: &Action) -> u8 {
    match a {
        Action::PopVlan => 1,
        Action::PushVlan(_) => 2,
        Action::SetField(..) | Action::SetVlanVid10(_) | Action::SetVlanPcp10(_) => 3,
        Action::Ignored => 4,
        Action::Group(_) => 5,
        Action::Output { .. } => 6,
    }
}

/// A flow entry's instructions, in the 1.3 sense (a 1.0 entry has only `apply`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Instructions {
    pub apply: Vec<Action>,
    pub clear: bool,
    pub write: Option<Vec<Action>>,
    pub write_metadata: Option<(u64, u64)>,
    pub goto: Option<u8>,
    pub meter: Option<u32>,
}

impl Instructions {
    /// From 1.3 instructions.
    pub fn from_v13(list: &[v13::Instruction]) -> Instructions {
        let mut out = Instructions::default();
        for i in list {
            match i {
                v13::Instruction::ApplyActions(a) => out.apply = a.iter().map(Action::from_v13).collect(),
                v13::Instruction::WriteActions(a) => out.write = Some(a.iter().map(Action::from_v13).collect()),
                v13::Instruction::ClearActions => out.clear = true,
                v13::Instruction::WriteMetadata { metadata, mask } => out.write_metadata = Some((*metadata, *mask)),
                v13::Instruction::GotoTable(t) => out.goto = Some(*t),
                v13::Instruction::Meter(m) => out.meter = Some(*m),
                _ => {}
            }
        }
        out
    }

    /// True if an action outputs to `port` (the out_port filter of delete and stats).
    pub fn outputs_to(&self, port: u32) -> bool {
        self.apply
            .iter()
            .chain(self.write.iter().flatten())
            .any(|a| matches!(a, Action::Output { port: p, .. } if *p == port))
    }

    /// True if an action sends to group `g` (the out_group filter).
    pub fn uses_group(&self, g: u32) -> bool {
        self.apply.iter().chain(self.write.iter().flatten()).any(|a| matches!(a, Action::Group(x) if *x == g))
    }
}

/// The entry's original wire form, for statistics replies and FLOW_REMOVED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireForm {
    V10 { r#match: v10::Match, actions: Vec<v10::Action> },
    V13 { r#match: v13::Match, instructions: Vec<v13::Instruction> },
}

/// One flow entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEntry {
    pub r#match: FlowMatch,
    pub priority: u16,
    pub cookie: u64,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub instructions: Instructions,
    pub wire: WireForm,
    pub installed_at: Millis,
    pub last_used: Millis,
    pub packet_count: u64,
    pub byte_count: u64,
}

/// Why an entry left its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedReason {
    IdleTimeout = 0,
    HardTimeout = 1,
    Delete = 2,
}

/// A flow table: entries ordered by descending priority, ties by insertion.
#[derive(Debug, Clone, Default)]
pub struct FlowTable {
    /// Boxed: adding or removing an entry among thousands moves the ones
    /// after it, a pointer each rather than a whole entry (which was half
    /// of a FLOW_MOD's cost on a router's table of thousands).
    #[allow(clippy::vec_box)]
    entries: Vec<Box<FlowEntry>>,
    /// Per entry, at the same index: its serial (see [`FlowTable::serials`]).
    serials: Vec<u64>,
    next_serial: u64,
    pub lookup_count: u64,
    pub matched_count: u64,
}

/// Selection criteria of modify, delete and statistics requests.
#[derive(Debug, Clone)]
pub struct Selector<'a> {
    pub r#match: &'a FlowMatch,
    pub strict: bool,
    pub priority: u16,
    pub cookie: u64,
    pub cookie_mask: u64,
    /// 1.3 OFPP_ANY / 1.0 OFPP_NONE (as 32-bit) mean no filter.
    pub out_port: u32,
    pub out_group: u32,
}

impl Selector<'_> {
    fn selects(&self, e: &FlowEntry) -> bool {
        let by_match = if self.strict {
            e.priority == self.priority && e.r#match == *self.r#match
        } else {
            e.r#match.is_within(self.r#match)
        };
        by_match
            && (e.cookie & self.cookie_mask) == (self.cookie & self.cookie_mask)
            && (self.out_port == v13::port::ANY || e.instructions.outputs_to(self.out_port))
            && (self.out_group == v13::GROUP_ANY || e.instructions.uses_group(self.out_group))
    }
}

impl FlowTable {
    /// The entries, highest priority first.
    pub fn entries(&self) -> &[Box<FlowEntry>] {
        &self.entries
    }

    /// Per entry (same order as [`FlowTable::entries`]), a number given when
    /// the entry was added or its instructions last changed, unique over the
    /// table's life and greater than every number given before: an entry
    /// with the serial it had earlier is that entry, unchanged, and entries
    /// that stay keep their order. Lets an index of the table follow its
    /// changes without comparing entries (`sts-invariants`).
    pub fn serials(&self) -> &[u64] {
        &self.serials
    }

    fn take_serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds an entry. An entry with the same match and priority is removed
    /// first (the specification: "cleared from the table, and the new flow entry
    /// added"), so the new one ranks as the latest among equal priorities.
    /// Fails with `Err(true)` on overlap (when checked), `Err(false)` when full.
    pub fn add(&mut self, entry: FlowEntry, check_overlap: bool, capacity: usize) -> Result<(), bool> {
        let band = self.band(entry.priority);
        let same = &self.entries[band.clone()];
        if let Some(i) = same.iter().position(|e| e.r#match == entry.r#match) {
            self.entries.remove(band.start + i);
            self.serials.remove(band.start + i);
        } else if check_overlap && same.iter().any(|e| e.r#match.overlaps(&entry.r#match)) {
            return Err(true);
        } else if self.entries.len() >= capacity {
            return Err(false);
        }
        let at = self.entries.partition_point(|e| e.priority >= entry.priority);
        self.entries.insert(at, Box::new(entry));
        let serial = self.take_serial();
        self.serials.insert(at, serial);
        Ok(())
    }

    /// Where the entries of one priority are (entries are kept sorted by
    /// priority, highest first, and a priority and match name at most one).
    fn band(&self, priority: u16) -> std::ops::Range<usize> {
        self.entries.partition_point(|e| e.priority > priority)
            ..self.entries.partition_point(|e| e.priority >= priority)
    }

    /// Replaces the instructions of the selected entries; returns how many.
    pub fn modify(
        &mut self,
        sel: &Selector,
        instructions: &Instructions,
        wire: &WireForm,
        reset_counts: bool,
    ) -> usize {
        let mut n = 0;
        for (i, e) in self.entries.iter_mut().enumerate() {
            if !sel.selects(e) {
                continue;
            }
            self.next_serial += 1;
            self.serials[i] = self.next_serial;
            e.instructions = instructions.clone();
            e.wire = match (&e.wire, wire) {
                (WireForm::V10 { r#match, .. }, WireForm::V10 { actions, .. }) => {
                    WireForm::V10 { r#match: r#match.clone(), actions: actions.clone() }
                }
                (WireForm::V13 { r#match, .. }, WireForm::V13 { instructions, .. }) => {
                    WireForm::V13 { r#match: r#match.clone(), instructions: instructions.clone() }
                }
                (_, w) => w.clone(),
            };
            if reset_counts {
                e.packet_count = 0;
                e.byte_count = 0;
            }
            n += 1;
        }
        n
    }

    /// Removes and returns the selected entries.
    pub fn delete(&mut self, sel: &Selector) -> Vec<FlowEntry> {
        if sel.strict {
            // At most one entry has the priority and match: looked for
            // among the entries of that priority only.
            let band = self.band(sel.priority);
            let Some(i) = self.entries[band.clone()].iter().position(|e| sel.selects(e)) else {
                return Vec::new();
            };
            self.serials.remove(band.start + i);
            return vec![*self.entries.remove(band.start + i)];
        }
        // In place: a strict delete of one entry among thousands moves the
        // entries after it, and allocates nothing.
        let selected: Vec<bool> = self.entries.iter().map(|e| sel.selects(e)).collect();
        if !selected.contains(&true) {
            return Vec::new();
        }
        let mut flags = selected.iter();
        self.serials.retain(|_| !flags.next().copied().unwrap_or(false));
        let mut flags = selected.iter();
        self.entries.extract_if(.., |_| flags.next().copied().unwrap_or(false)).map(|e| *e).collect()
    }

    /// The selected entries (statistics requests).
    pub fn select<'a>(&'a self, sel: &'a Selector) -> impl Iterator<Item = &'a FlowEntry> + 'a {
        self.entries.iter().map(|e| &**e).filter(move |e| sel.selects(e))
    }

    /// Finds the highest-priority entry matching `fields`, counts the lookup and
    /// the hit, and marks the entry used at `now`.
    pub fn lookup(&mut self, fields: &Fields, len: usize, now: Millis) -> Option<&FlowEntry> {
        self.lookup_count += 1;
        let e = self.entries.iter_mut().find(|e| e.r#match.matches(fields))?;
        self.matched_count += 1;
        e.packet_count += 1;
        e.byte_count += len as u64;
        e.last_used = now;
        Some(e)
    }

    /// When the first entry's idle or hard timeout will pass if no traffic
    /// refreshes it: nothing in this table expires before.
    pub fn next_expiry(&self) -> Option<Millis> {
        self.entries
            .iter()
            .flat_map(|e| {
                let hard = (e.hard_timeout > 0).then(|| e.installed_at + e.hard_timeout as u64 * 1000);
                let idle = (e.idle_timeout > 0).then(|| e.last_used + e.idle_timeout as u64 * 1000);
                hard.into_iter().chain(idle)
            })
            .min()
    }

    /// Removes entries whose idle or hard timeout has passed at `now`.
    pub fn expire(&mut self, now: Millis) -> Vec<(FlowEntry, RemovedReason)> {
        let mut out = Vec::new();
        let mut kept = Vec::with_capacity(self.entries.len());
        let mut serials = self.serials.iter();
        self.entries.retain(|e| {
            let serial = serials.next().copied().unwrap_or_default();
            let reason = if e.hard_timeout > 0 && now >= e.installed_at + e.hard_timeout as u64 * 1000 {
                Some(RemovedReason::HardTimeout)
            } else if e.idle_timeout > 0 && now >= e.last_used + e.idle_timeout as u64 * 1000 {
                Some(RemovedReason::IdleTimeout)
            } else {
                None
            };
            match reason {
                Some(r) => {
                    out.push((FlowEntry::clone(e), r));
                    false
                }
                None => {
                    kept.push(serial);
                    true
                }
            }
        });
        self.serials = kept;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_proxy::wire::v13::BasicOxm;

    fn m(fields: &[(Field, u128)]) -> FlowMatch {
        FlowMatch::from_v13(&v13::Match::new(fields.iter().map(|&(f, v)| BasicOxm::exact(f, v)))).unwrap()
    }

    fn entry(r#match: FlowMatch, priority: u16) -> FlowEntry {
        FlowEntry {
            r#match,
            priority,
            cookie: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: 0,
            instructions: Instructions::default(),
            wire: WireForm::V13 { r#match: v13::Match::default(), instructions: vec![] },
            installed_at: 0,
            last_used: 0,
            packet_count: 0,
            byte_count: 0,
        }
    }

    #[test]
    fn priority_decides_and_ties_keep_insertion_order() {
        let mut t = FlowTable::default();
        t.add(entry(m(&[]), 0), false, 10).unwrap();
        t.add(entry(m(&[(Field::InPort, 1)]), 5), false, 10).unwrap();
        t.add(entry(m(&[(Field::EthType, 0x800)]), 5), false, 10).unwrap();
        let pkt = crate::packet::build::icmp_echo(
            8,
            Default::default(),
            Default::default(),
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            1,
            1,
            b"",
        );
        let f = Fields::extract(&pkt, 1, 0);
        assert_eq!(t.lookup(&f, 1, 0).unwrap().r#match, m(&[(Field::InPort, 1)]));
        let f = Fields::extract(&pkt, 2, 0);
        assert_eq!(t.lookup(&f, 1, 0).unwrap().r#match, m(&[(Field::EthType, 0x800)]));
        assert_eq!(
            t.add(entry(m(&[(Field::InPort, 2)]), 5), true, 10),
            Err(true),
            "overlaps eth_type=0x800 at priority 5"
        );
        assert_eq!(t.add(entry(m(&[(Field::InPort, 3)]), 6), false, 3), Err(false), "table full");
    }

    #[test]
    fn serials_follow_entries_and_are_new_for_new_or_changed_ones() {
        let mut t = FlowTable::default();
        for (port, priority) in [(1, 1), (2, 3), (3, 2)] {
            t.add(entry(m(&[(Field::InPort, port)]), priority), false, 10).unwrap();
        }
        // Highest priority first: in_port 2 (serial 2), 3 (3), 1 (1).
        assert_eq!(t.serials(), &[2, 3, 1]);
        // Adding the same match and priority replaces the entry: a new serial.
        t.add(entry(m(&[(Field::InPort, 3)]), 2), false, 10).unwrap();
        assert_eq!(t.serials(), &[2, 4, 1]);
        let port1 = m(&[(Field::InPort, 1)]);
        let sel = Selector {
            r#match: &port1,
            strict: true,
            priority: 1,
            cookie: 0,
            cookie_mask: 0,
            out_port: v13::port::ANY,
            out_group: v13::GROUP_ANY,
        };
        let wire = WireForm::V13 { r#match: v13::Match::default(), instructions: vec![] };
        assert_eq!(t.modify(&sel, &Instructions::default(), &wire, false), 1);
        assert_eq!(t.serials(), &[2, 4, 5]);
        assert_eq!(t.delete(&Selector { priority: 3, r#match: &m(&[(Field::InPort, 2)]), ..sel.clone() }).len(), 1);
        assert_eq!(t.serials(), &[4, 5]);
        let mut timed = entry(m(&[(Field::InPort, 9)]), 9);
        timed.hard_timeout = 1;
        t.add(timed, false, 10).unwrap();
        assert_eq!(t.serials(), &[6, 4, 5]);
        assert_eq!(t.expire(1_000).len(), 1);
        assert_eq!(t.serials(), &[4, 5]);
        assert_eq!(t.serials().len(), t.len());
    }

    #[test]
    fn non_strict_delete_takes_more_specific_entries_only() {
        let mut t = FlowTable::default();
        t.add(entry(m(&[(Field::InPort, 1), (Field::EthDst, 2)]), 1), false, 10).unwrap();
        t.add(entry(m(&[(Field::InPort, 2)]), 1), false, 10).unwrap();
        let general = m(&[(Field::InPort, 1)]);
        let sel = Selector {
            r#match: &general,
            strict: false,
            priority: 0,
            cookie: 0,
            cookie_mask: 0,
            out_port: v13::port::ANY,
            out_group: v13::GROUP_ANY,
        };
        assert_eq!(t.delete(&sel).len(), 1);
        assert_eq!(t.len(), 1);
        let strict = Selector { strict: true, priority: 1, r#match: &m(&[(Field::InPort, 2)]), ..sel.clone() };
        assert_eq!(t.delete(&strict).len(), 1);
    }

    #[test]
    fn timeouts_expire_by_idle_and_hard() {
        let mut t = FlowTable::default();
        let mut a = entry(m(&[(Field::InPort, 1)]), 1);
        a.idle_timeout = 10;
        let mut b = entry(m(&[(Field::InPort, 2)]), 1);
        b.hard_timeout = 5;
        t.add(a, false, 10).unwrap();
        t.add(b, false, 10).unwrap();
        assert!(t.expire(4_999).is_empty());
        assert_eq!(t.expire(5_000)[0].1, RemovedReason::HardTimeout);
        assert_eq!(t.expire(10_000)[0].1, RemovedReason::IdleTimeout);
    }

    #[test]
    fn the_next_expiry_is_when_expire_first_removes_an_entry() {
        // Tables of entries with random timeouts, install and last-use times
        // (a small LCG: no dependency for a few numbers).
        let mut x: u64 = 7;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for _ in 0..500 {
            let mut t = FlowTable::default();
            for port in 0..next(5) {
                let mut e = entry(m(&[(Field::InPort, port as u128)]), 1);
                e.idle_timeout = next(4) as u16;
                e.hard_timeout = next(4) as u16;
                e.installed_at = next(3_000);
                t.add(e, false, 10).unwrap();
                t.entries.last_mut().unwrap().last_used = t.entries.last().unwrap().installed_at + next(2_000);
            }
            match t.next_expiry() {
                Some(at) => {
                    assert!(at == 0 || t.clone().expire(at - 1).is_empty(), "nothing before {at}");
                    assert!(!t.clone().expire(at).is_empty(), "something at {at}");
                }
                None => assert!(t.clone().expire(u64::MAX / 2).is_empty(), "no timeout, no expiry"),
            }
        }
    }

    #[test]
    fn v10_match_translation_respects_prerequisites() {
        let mut w = v10::Match {
            wildcards: v10::wildcards::ALL & !v10::wildcards::NW_PROTO,
            nw_proto: 6,
            ..Default::default()
        };
        assert!(FlowMatch::from_v10(&w).fields.is_empty(), "nw_proto without dl_type is ignored");
        w.wildcards &= !v10::wildcards::DL_TYPE;
        w.dl_type = ETH_ARP;
        w.nw_proto = 2;
        let f = FlowMatch::from_v10(&w);
        assert!(f.fields.iter().any(|c| c.field == Field::ArpOp && c.value == 2));
    }
}
