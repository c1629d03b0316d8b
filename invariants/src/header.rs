//! Header space: sets of packet headers as wildcard cubes.
//!
//! A [`Cube`] constrains every header field the mock dataplane parses (the
//! [`SLOTS`]) with a ternary value (`value`, `mask`: the bits of `mask` are
//! fixed to those of `value`) and may exclude further ternaries per field
//! ("lazy subtraction"). Because a cube is a product of per-field sets, it is
//! empty exactly when one field's set is empty, and that one-dimensional
//! question is cheap to answer exactly ([`point`]).
//!
//! Field *presence* is part of the value: bit 63 ([`PRESENT`]) is set when the
//! frame has the field (an ARP frame has no IPv4 source). A rule constraining a
//! field always requires the bit, so rules never match absent fields, as
//! OpenFlow prerequisites say. Which fields are present follows from the
//! frame's [`Shape`]; the analysis starts from one cube per shape.

use std::fmt;

use sts_mocknet::packet::{ETH_ARP, ETH_IPV4, ETH_VLAN};
use sts_proxy::wire::v13::oxm::VID_PRESENT;
use sts_proxy::wire::v13::Field;

/// Set in a field's value when the frame has the field.
pub const PRESENT: u64 = 1 << 63;

/// The header fields the analysis tracks, in slot order: every field
/// `sts_mocknet::packet::Fields::extract` parses except the pipeline's own
/// (`in_port`, `in_phy_port`, `metadata`: those are known exactly at every
/// hop and handled by the traversal).
pub const SLOTS: [Field; 21] = [
    Field::EthDst,
    Field::EthSrc,
    Field::VlanVid,
    Field::VlanPcp,
    Field::EthType,
    Field::ArpOp,
    Field::ArpSpa,
    Field::ArpTpa,
    Field::ArpSha,
    Field::ArpTha,
    Field::IpDscp,
    Field::IpEcn,
    Field::IpProto,
    Field::Ipv4Src,
    Field::Ipv4Dst,
    Field::TcpSrc,
    Field::TcpDst,
    Field::UdpSrc,
    Field::UdpDst,
    Field::Icmpv4Type,
    Field::Icmpv4Code,
];

/// Number of tracked fields.
pub const N: usize = SLOTS.len();

/// A field's index in [`SLOTS`], if tracked.
pub fn slot(f: Field) -> Option<usize> {
    SLOTS.iter().position(|&s| s == f)
}

/// Named slot indices, for the code that builds shapes and rewrites.
pub mod s {
    pub const ETH_DST: usize = 0;
    pub const ETH_SRC: usize = 1;
    pub const VLAN_VID: usize = 2;
    pub const VLAN_PCP: usize = 3;
    pub const ETH_TYPE: usize = 4;
    pub const ARP_OP: usize = 5;
    pub const ARP_SPA: usize = 6;
    pub const ARP_TPA: usize = 7;
    pub const ARP_SHA: usize = 8;
    pub const ARP_THA: usize = 9;
    pub const IP_DSCP: usize = 10;
    pub const IP_ECN: usize = 11;
    pub const IP_PROTO: usize = 12;
    pub const IPV4_SRC: usize = 13;
    pub const IPV4_DST: usize = 14;
    pub const TCP_SRC: usize = 15;
    pub const TCP_DST: usize = 16;
    pub const UDP_SRC: usize = 17;
    pub const UDP_DST: usize = 18;
    pub const ICMP_TYPE: usize = 19;
    pub const ICMP_CODE: usize = 20;
}

/// Bits a present field's value can use (narrower than the OXM width for
/// VLAN, DSCP and ECN).
pub fn value_bits(slot: usize) -> u64 {
    let bits = match SLOTS[slot] {
        Field::VlanVid => 13,
        Field::VlanPcp => 3,
        Field::IpDscp => 6,
        Field::IpEcn => 2,
        f => f.width() as u32 * 8,
    };
    (1u64 << bits) - 1
}

/// Every bit of a slot: fixing all of them pins one value (or absence).
pub const ALL: u64 = u64::MAX;

/// One ternary: the bits in `mask` equal those of `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ternary {
    pub value: u64,
    pub mask: u64,
}

impl Ternary {
    /// Exactly `value`.
    pub const fn exact(value: u64) -> Ternary {
        Ternary { value, mask: ALL }
    }

    /// A present field with `value` under `mask` (a rule's constraint).
    pub fn present(value: u64, mask: u64) -> Ternary {
        Ternary { value: (value & mask) | PRESENT, mask: mask | PRESENT }
    }

    /// True if some value satisfies both.
    pub fn meets(self, o: Ternary) -> bool {
        (self.value ^ o.value) & self.mask & o.mask == 0
    }

    /// The values satisfying both (call only when they meet).
    pub fn and(self, o: Ternary) -> Ternary {
        Ternary { value: (self.value & self.mask) | (o.value & o.mask), mask: self.mask | o.mask }
    }

    /// True if every value of `self` satisfies `o`.
    pub fn within(self, o: Ternary) -> bool {
        o.mask & !self.mask == 0 && (self.value ^ o.value) & o.mask == 0
    }

    /// True if `v` satisfies the ternary.
    pub fn contains(self, v: u64) -> bool {
        (v ^ self.value) & self.mask == 0
    }
}

/// Some value in `pos` outside every ternary of `neg`, if one exists.
///
/// Exact: a branch-and-bound over the bits the exclusions fix. Each step
/// either drops an exclusion (taking the half of `pos` it does not cover) or
/// finds the other half; in practice exclusions are few and exact, and the
/// first branch succeeds.
pub fn point(pos: Ternary, neg: &[Ternary]) -> Option<u64> {
    with_scratch(|buf| {
        let base = buf.len();
        buf.extend(neg.iter().copied().filter(|n| n.meets(pos)));
        let found = point_at(pos, buf, base);
        buf.truncate(base);
        found
    })
}

/// [`point`] for the exclusions `buf[start..]`, each of which meets `pos`.
/// Each branch pushes the exclusions its half meets onto `buf` (in their
/// order) and takes them off again: no allocation per step, which a walk
/// cutting pieces with dozens of exclusions on one field made a fifth of
/// `sts verify`'s time.
fn point_at(pos: Ternary, buf: &mut Vec<Ternary>, start: usize) -> Option<u64> {
    let end = buf.len();
    if start == end {
        return Some(pos.value & pos.mask);
    }
    let first = buf[start];
    if pos.within(first) {
        return None;
    }
    // `first` fixes a bit `pos` leaves free: split on it, trying the half that
    // escapes `first` before the half that stays inside it.
    let free = first.mask & !pos.mask;
    let bit = free & free.wrapping_neg();
    let escape = Ternary { value: (pos.value & pos.mask) | (!first.value & bit), mask: pos.mask | bit };
    let inside = Ternary { value: (pos.value & pos.mask) | (first.value & bit), mask: pos.mask | bit };
    // The escaping half is outside `first`: only the rest can cover it.
    for (half, from) in [(escape, start + 1), (inside, start)] {
        for i in from..end {
            let n = buf[i];
            if n.meets(half) {
                buf.push(n);
            }
        }
        let found = point_at(half, buf, end);
        buf.truncate(end);
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Runs `f` with this thread's scratch stack for [`point_at`] (a fresh one
/// if it is in use further up the stack).
fn with_scratch<R>(f: impl FnOnce(&mut Vec<Ternary>) -> R) -> R {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<Ternary>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => f(&mut buf),
        Err(_) => f(&mut Vec::new()),
    })
}

/// A set of headers: per field, a ternary minus some excluded ternaries.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Cube {
    pub pos: [Ternary; N],
    /// Excluded ternaries: (slot, ternary). Kept short: only subtraction adds.
    pub neg: Vec<(u8, Ternary)>,
}

/// Every slot, as a bit set.
const ALL_SLOTS: u32 = u32::MAX;

/// A rule's match restricted to header fields: (slot, ternary) pairs.
pub type Constraint = [(usize, Ternary)];

impl Cube {
    /// Every header of `shape`.
    pub fn of_shape(shape: Shape) -> Cube {
        let absent = Ternary::exact(0);
        let free = |slot: usize| Ternary { value: PRESENT, mask: !value_bits(slot) };
        let fixed = |v: u64| Ternary::exact(PRESENT | v);
        let mut pos = [absent; N];
        let mut neg = Vec::new();
        pos[s::ETH_DST] = free(s::ETH_DST);
        pos[s::ETH_SRC] = free(s::ETH_SRC);
        if shape.tagged {
            pos[s::VLAN_VID] = Ternary { value: PRESENT | VID_PRESENT as u64, mask: !0x0fff };
            pos[s::VLAN_PCP] = free(s::VLAN_PCP);
        } else {
            pos[s::VLAN_VID] = fixed(0);
        }
        match shape.l3 {
            L3::Arp => {
                pos[s::ETH_TYPE] = fixed(ETH_ARP as u64);
                for f in [s::ARP_OP, s::ARP_SPA, s::ARP_TPA, s::ARP_SHA, s::ARP_THA] {
                    pos[f] = free(f);
                }
            }
            L3::Ipv4(l4) => {
                pos[s::ETH_TYPE] = fixed(ETH_IPV4 as u64);
                for f in [s::IP_DSCP, s::IP_ECN, s::IPV4_SRC, s::IPV4_DST] {
                    pos[f] = free(f);
                }
                let (proto, ports) = match l4 {
                    L4::Tcp => (Some(6), [s::TCP_SRC, s::TCP_DST]),
                    L4::Udp => (Some(17), [s::UDP_SRC, s::UDP_DST]),
                    L4::Icmp => (Some(1), [s::ICMP_TYPE, s::ICMP_CODE]),
                    L4::Other => (None, [usize::MAX; 2]),
                };
                match proto {
                    Some(p) => {
                        pos[s::IP_PROTO] = fixed(p);
                        for f in ports {
                            pos[f] = free(f);
                        }
                    }
                    None => {
                        pos[s::IP_PROTO] = free(s::IP_PROTO);
                        for p in [1, 6, 17] {
                            neg.push((s::IP_PROTO as u8, Ternary::exact(PRESENT | p)));
                        }
                    }
                }
            }
            L3::Other => {
                pos[s::ETH_TYPE] = free(s::ETH_TYPE);
                for t in [ETH_ARP, ETH_IPV4, ETH_VLAN] {
                    neg.push((s::ETH_TYPE as u8, Ternary::exact(PRESENT | t as u64)));
                }
            }
        }
        Cube { pos, neg }
    }

    /// The headers of `self` that also satisfy `c`, or `None` if none can.
    pub fn and(&self, c: &Constraint) -> Option<Cube> {
        self.and_asking(c, ALL_SLOTS)
    }

    /// [`Cube::and`] of a cube that holds some header: only the fields `c`
    /// constrains can be left without a value, so only they are asked.
    pub(crate) fn and_of_nonempty(&self, c: &Constraint) -> Option<Cube> {
        self.and_asking(c, 0)
    }

    /// [`Cube::and`], asking whether the fields in `ask` and those `c`
    /// constrains still hold a value.
    fn and_asking(&self, c: &Constraint, mut ask: u32) -> Option<Cube> {
        let mut out = self.clone();
        for &(slot, t) in c {
            if !out.pos[slot].meets(t) {
                return None;
            }
            out.pos[slot] = out.pos[slot].and(t);
            ask |= 1 << slot;
        }
        out.prune();
        (!out.empty_on(ask)).then_some(out)
    }

    /// The headers of `self` outside `c`, as disjoint non-empty cubes.
    pub fn minus(&self, c: &Constraint) -> Vec<Cube> {
        if c.iter().any(|&(slot, t)| !self.pos[slot].meets(t)) {
            return vec![self.clone()];
        }
        let mut out = Vec::new();
        self.clone().cut_outside(c, ALL_SLOTS, |piece| {
            out.push(piece);
            true
        });
        out
    }

    /// [`Cube::minus`] for a cube `c` meets, consuming it: each piece is
    /// handed to `piece` (a walk's rule scan cuts pieces from the copy it
    /// holds, without a clone of it), which says whether to go on. Whether
    /// a piece holds a header is asked of the fields in `ask` and those `c`
    /// constrains: with `ask` 0, for a cube that holds some header (no
    /// other field can be emptied). Returns what is left inside `c` (before
    /// its exclusions are asked), or `None` if `piece` stopped the cut.
    pub(crate) fn cut_outside(
        mut self,
        c: &Constraint,
        mut ask: u32,
        mut piece: impl FnMut(Cube) -> bool,
    ) -> Option<Cube> {
        for &(slot, t) in c {
            ask |= 1 << slot;
            if self.pos[slot].within(t) {
                continue;
            }
            // Built at its size: a clone and a push would allocate twice.
            let mut neg = Vec::with_capacity(self.neg.len() + 1);
            neg.extend_from_slice(&self.neg);
            neg.push((slot as u8, t));
            let outside = Cube { pos: self.pos, neg };
            if !outside.empty_on(ask) && !piece(outside) {
                return None;
            }
            self.pos[slot] = self.pos[slot].and(t);
            self.prune();
        }
        Some(self)
    }

    /// The headers of `self` outside the cube `g` (possibly overlapping cubes).
    pub fn subtract(&self, g: &Cube) -> Vec<Cube> {
        let pos: Vec<(usize, Ternary)> = g.pos.iter().copied().enumerate().collect();
        let mut out = self.minus(&pos);
        // Headers inside g's ternaries but excluded by g's exclusions are not in g.
        if let Some(inside) = self.and(&pos) {
            out.extend(g.neg.iter().filter_map(|(slot, t)| inside.with(*slot as usize, *t)));
        }
        out
    }

    /// Frees the fields in the `slots` bit set entirely (presence included):
    /// shapes that differ only there become equal.
    pub fn relax(&self, slots: u32) -> Cube {
        let mut out = self.clone();
        for (i, t) in out.pos.iter_mut().enumerate() {
            if slots & (1 << i) != 0 {
                *t = Ternary { value: 0, mask: 0 };
            }
        }
        out.neg.retain(|(sl, _)| slots & (1 << sl) == 0);
        out
    }

    /// Drops exclusions that no longer meet their field.
    fn prune(&mut self) {
        let pos = &self.pos;
        self.neg.retain(|(slot, t)| t.meets(pos[*slot as usize]));
    }

    fn excluded(&self, slot: usize) -> Vec<Ternary> {
        self.neg.iter().filter(|(s, _)| *s as usize == slot).map(|(_, t)| *t).collect()
    }

    /// True if no header satisfies the cube.
    pub fn is_empty(&self) -> bool {
        self.empty_on(ALL_SLOTS)
    }

    /// Whether some field among `slots` (a bit per slot) is left without a
    /// value: [`Cube::is_empty`] asked of those fields only, for a cube
    /// whose other fields are known to hold one.
    fn empty_on(&self, slots: u32) -> bool {
        // Ternaries alone are never empty: only exclusions can empty a field.
        if self.neg.is_empty() {
            return false;
        }
        // Each field asked once (at its first exclusion); this runs for
        // every piece a walk cuts.
        let mut done = !slots;
        with_scratch(|buf| {
            self.neg.iter().enumerate().any(|(i, &(slot, _))| {
                let bit = 1u32 << slot;
                if done & bit != 0 {
                    return false;
                }
                done |= bit;
                let pos = self.pos[slot as usize];
                let base = buf.len();
                buf.extend(self.neg[i..].iter().filter(|&&(s, t)| s == slot && t.meets(pos)).map(|&(_, t)| t));
                let empty = point_at(pos, buf, base).is_none();
                buf.truncate(base);
                empty
            })
        })
    }

    /// Whether every header of `self` is in `g`: [`Cube::subtract`] is
    /// empty, found without making its pieces (the first that holds a
    /// header answers).
    pub fn within_cube(&self, g: &Cube) -> bool {
        if self.pos.iter().zip(&g.pos).any(|(a, b)| !a.meets(*b)) {
            return false;
        }
        let mut all = [(0, Ternary { value: 0, mask: 0 }); N];
        for (slot, (a, &t)) in all.iter_mut().zip(&g.pos).enumerate() {
            *a = (slot, t);
        }
        // The first piece outside `g`'s ternaries that holds a header stops the cut.
        let Some(inside) = self.clone().cut_outside(&all, ALL_SLOTS, |_| false) else { return false };
        inside.is_empty() || g.neg.iter().all(|&(slot, t)| inside.with(slot as usize, t).is_none())
    }

    /// One concrete header in the cube (`None` if it is empty). Fields the
    /// cube leaves entirely free (see [`Cube::relax`]) get the values of a
    /// plain ping, so witnesses read naturally.
    pub fn witness(&self) -> Option<Header> {
        let mut values = [0u64; N];
        for (slot, v) in values.iter_mut().enumerate() {
            *v = point(self.pos[slot], &self.excluded(slot))?;
        }
        let free = |slot: usize| self.pos[slot].mask == 0;
        let eth_type = values[s::ETH_TYPE] & !PRESENT;
        let mut natural = |slot: usize, v: u64| {
            if free(slot) {
                values[slot] = v;
            }
        };
        natural(s::VLAN_VID, PRESENT);
        natural(s::VLAN_PCP, 0);
        if eth_type == ETH_IPV4 as u64 && free(s::IP_PROTO) {
            natural(s::IP_PROTO, PRESENT | 1);
            natural(s::ICMP_TYPE, PRESENT | 8);
            natural(s::ICMP_CODE, PRESENT);
            for slot in [s::TCP_SRC, s::TCP_DST, s::UDP_SRC, s::UDP_DST] {
                natural(slot, 0);
            }
        }
        if eth_type == ETH_IPV4 as u64 {
            natural(s::IP_DSCP, PRESENT);
            natural(s::IP_ECN, PRESENT);
        }
        if eth_type == ETH_ARP as u64 {
            natural(s::ARP_OP, PRESENT | 1);
        }
        Some(Header { values })
    }

    /// True if the concrete header is in the cube.
    pub fn contains(&self, h: &Header) -> bool {
        self.pos.iter().zip(h.values).all(|(t, v)| t.contains(v))
            && self.neg.iter().all(|(s, t)| !t.contains(h.values[*s as usize]))
    }

    /// Narrows one field to a ternary (used to restrict a cube to one source
    /// or destination address).
    pub fn with(&self, slot: usize, t: Ternary) -> Option<Cube> {
        self.and(&[(slot, t)])
    }
}

impl fmt::Debug for Cube {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_map();
        for (slot, t) in self.pos.iter().enumerate() {
            if t.mask & PRESENT == 0 {
                continue;
            }
            if t.value & PRESENT == 0 {
                continue;
            }
            let m = t.mask & value_bits(slot);
            if m != 0 {
                d.entry(&SLOTS[slot].name(), &format_args!("{:#x}/{:#x}", t.value & value_bits(slot), m));
            }
        }
        for (slot, t) in &self.neg {
            d.entry(
                &format_args!("not {}", SLOTS[*slot as usize].name()),
                &format_args!("{:#x}/{:#x}", t.value, t.mask),
            );
        }
        d.finish()
    }
}

/// The layer-3 part of a frame's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3 {
    Arp,
    Ipv4(L4),
    /// Any other ethertype (LLDP, IPv6 ...): no layer-3 fields are parsed.
    Other,
}

/// The layer-4 part of an IPv4 frame's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4 {
    Tcp,
    Udp,
    Icmp,
    Other,
}

/// Which fields a frame has: whether it carries a VLAN tag, and its protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub tagged: bool,
    pub l3: L3,
}

impl Shape {
    /// Every shape.
    pub fn all() -> Vec<Shape> {
        // ICMP first: witnesses come from the first shape that shows a
        // violation, and a ping is the easiest to read and to repeat.
        let l3 = [L3::Ipv4(L4::Icmp), L3::Ipv4(L4::Tcp), L3::Ipv4(L4::Udp), L3::Arp, L3::Ipv4(L4::Other), L3::Other];
        [false, true].iter().flat_map(|&tagged| l3.iter().map(move |&l3| Shape { tagged, l3 })).collect()
    }

    /// Untagged ARP and IPv4: the traffic hosts send each other, over which
    /// reachability and blackholes are judged.
    pub fn host_traffic() -> Vec<Shape> {
        Shape::all().into_iter().filter(|s| !s.tagged && s.l3 != L3::Other).collect()
    }
}

/// One concrete header: a value (or absence) for every slot.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    pub values: [u64; N],
}

impl Header {
    /// The value of a present field.
    pub fn get(&self, slot: usize) -> Option<u64> {
        let v = self.values[slot];
        (v & PRESENT != 0).then_some(v & !PRESENT)
    }

    /// An Ethernet frame with exactly these header fields (payloads zeroed),
    /// for injecting a witness into the mock dataplane.
    pub fn to_frame(&self) -> Vec<u8> {
        let g = |slot| self.get(slot).unwrap_or(0);
        let mut f = Vec::with_capacity(64);
        f.extend_from_slice(&g(s::ETH_DST).to_be_bytes()[2..]);
        f.extend_from_slice(&g(s::ETH_SRC).to_be_bytes()[2..]);
        let vid = g(s::VLAN_VID);
        if vid & VID_PRESENT as u64 != 0 {
            f.extend_from_slice(&ETH_VLAN.to_be_bytes());
            let tci = ((g(s::VLAN_PCP) as u16) << 13) | (vid as u16 & 0x0fff);
            f.extend_from_slice(&tci.to_be_bytes());
        }
        let eth_type = g(s::ETH_TYPE) as u16;
        f.extend_from_slice(&eth_type.to_be_bytes());
        match eth_type {
            ETH_ARP => {
                f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4]);
                f.extend_from_slice(&(g(s::ARP_OP) as u16).to_be_bytes());
                f.extend_from_slice(&g(s::ARP_SHA).to_be_bytes()[2..]);
                f.extend_from_slice(&(g(s::ARP_SPA) as u32).to_be_bytes());
                f.extend_from_slice(&g(s::ARP_THA).to_be_bytes()[2..]);
                f.extend_from_slice(&(g(s::ARP_TPA) as u32).to_be_bytes());
            }
            ETH_IPV4 => {
                let proto = g(s::IP_PROTO) as u8;
                let l4: Vec<u8> = match proto {
                    6 => {
                        let mut t = vec![0u8; 20];
                        t[0..2].copy_from_slice(&(g(s::TCP_SRC) as u16).to_be_bytes());
                        t[2..4].copy_from_slice(&(g(s::TCP_DST) as u16).to_be_bytes());
                        t[12] = 5 << 4;
                        t
                    }
                    17 => {
                        let mut u = vec![0u8; 8];
                        u[0..2].copy_from_slice(&(g(s::UDP_SRC) as u16).to_be_bytes());
                        u[2..4].copy_from_slice(&(g(s::UDP_DST) as u16).to_be_bytes());
                        u[4..6].copy_from_slice(&8u16.to_be_bytes());
                        u
                    }
                    1 => vec![g(s::ICMP_TYPE) as u8, g(s::ICMP_CODE) as u8, 0, 0, 0, 0, 0, 0],
                    _ => vec![0u8; 8],
                };
                let mut ip = vec![0u8; 20];
                ip[0] = 0x45;
                ip[1] = ((g(s::IP_DSCP) as u8) << 2) | (g(s::IP_ECN) as u8 & 3);
                ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
                ip[8] = 64;
                ip[9] = proto;
                ip[12..16].copy_from_slice(&(g(s::IPV4_SRC) as u32).to_be_bytes());
                ip[16..20].copy_from_slice(&(g(s::IPV4_DST) as u32).to_be_bytes());
                let c = sts_mocknet::packet::checksum(&ip);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                f.extend_from_slice(&ip);
                f.extend_from_slice(&l4);
            }
            _ => f.extend_from_slice(&[0u8; 46]),
        }
        f
    }
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string())
    }
}

impl fmt::Display for Header {
    /// Compact and readable: `eth 00:00:00:00:00:01 > 00:00:00:00:00:02 ipv4 10.0.0.1 > 10.0.0.2 icmp 8/0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mac = |v: u64| {
            let b = v.to_be_bytes();
            format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[2], b[3], b[4], b[5], b[6], b[7])
        };
        let ip = |v: u64| std::net::Ipv4Addr::from(v as u32).to_string();
        let g = |slot| self.get(slot).unwrap_or(0);
        write!(f, "eth {} > {}", mac(g(s::ETH_SRC)), mac(g(s::ETH_DST)))?;
        if let Some(v) = self.get(s::VLAN_VID).filter(|v| v & VID_PRESENT as u64 != 0) {
            write!(f, " vlan {}", v & 0x0fff)?;
        }
        match g(s::ETH_TYPE) as u16 {
            ETH_ARP => write!(f, " arp op {} {} > {}", g(s::ARP_OP), ip(g(s::ARP_SPA)), ip(g(s::ARP_TPA))),
            ETH_IPV4 => {
                write!(f, " ipv4 {} > {}", ip(g(s::IPV4_SRC)), ip(g(s::IPV4_DST)))?;
                match g(s::IP_PROTO) {
                    6 => write!(f, " tcp {} > {}", g(s::TCP_SRC), g(s::TCP_DST)),
                    17 => write!(f, " udp {} > {}", g(s::UDP_SRC), g(s::UDP_DST)),
                    1 => write!(f, " icmp {}/{}", g(s::ICMP_TYPE), g(s::ICMP_CODE)),
                    p => write!(f, " proto {p}"),
                }
            }
            t => write!(f, " type {t:#06x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_mocknet::packet::Fields;

    #[test]
    fn point_escapes_exclusions_or_proves_cover() {
        let pos = Ternary { value: 0, mask: !0b11 }; // four values 0..3
        let ex = |v| Ternary::exact(v);
        assert_eq!(point(pos, &[ex(0), ex(1), ex(2)]), Some(3));
        assert_eq!(point(pos, &[ex(0), ex(1), ex(2), ex(3)]), None);
        let half = Ternary { value: 0b10, mask: !0b01 }; // {2, 3}
        assert_eq!(point(pos, &[half, ex(0), ex(1)]), None);
        assert!(point(pos, &[half, ex(1)]).is_some_and(|v| v == 0));
    }

    proptest::proptest! {
        /// Emptiness against enumeration: two fields of eight values each,
        /// some excluded by ternaries (more than the stack holds, at times).
        #[test]
        fn a_cube_is_empty_exactly_when_no_header_is_left(
            neg in proptest::collection::vec((0..2usize, 0u64..8, 0u64..8), 0..40)
        ) {
            let slots = [s::IP_DSCP, s::IP_ECN];
            let eight = Ternary { value: PRESENT, mask: !0b111 };
            let mut cube = Cube { pos: [Ternary::exact(0); N], neg: Vec::new() };
            for sl in slots {
                cube.pos[sl] = eight;
            }
            // (field, value, bits left free): values v with v & !free == value & !free.
            let ex: Vec<(usize, Ternary)> = neg
                .iter()
                .map(|&(f, v, free)| (slots[f], Ternary { value: PRESENT | (v & !free), mask: !free }))
                .collect();
            cube.neg = ex.iter().map(|&(sl, t)| (sl as u8, t)).collect();
            let left = (0..8u64).any(|a| {
                (0..8u64).any(|b| {
                    let (a, b) = (PRESENT | a, PRESENT | b);
                    !ex.iter().any(|&(sl, t)| t.contains(if sl == slots[0] { a } else { b }))
                })
            });
            proptest::prop_assert_eq!(cube.is_empty(), !left);
        }
    }

    /// Three fields of eight values each: a cube from ternaries per field
    /// ((value, bits left free)) and exclusions ((field, value, free)), and
    /// every header of those fields (the others absent).
    fn small_cube(pos: &[(u64, u64); 3], neg: &[(usize, u64, u64)]) -> Cube {
        const SLOTS3: [usize; 3] = [s::IP_DSCP, s::IP_ECN, s::IP_PROTO];
        let t = |v: u64, free: u64| Ternary { value: PRESENT | (v & !free), mask: !free };
        let mut cube = Cube { pos: [Ternary::exact(0); N], neg: Vec::new() };
        for (sl, &(v, free)) in SLOTS3.iter().zip(pos) {
            cube.pos[*sl] = t(v, free);
        }
        cube.neg = neg.iter().map(|&(f, v, free)| (SLOTS3[f] as u8, t(v, free))).collect();
        cube
    }

    fn small_headers() -> impl Iterator<Item = Header> {
        (0..512u64).map(|i| {
            let mut h = Header { values: [0; N] };
            h.values[s::IP_DSCP] = PRESENT | (i & 7);
            h.values[s::IP_ECN] = PRESENT | ((i >> 3) & 7);
            h.values[s::IP_PROTO] = PRESENT | (i >> 6);
            h
        })
    }

    fn ternary3() -> impl proptest::strategy::Strategy<Value = (u64, u64)> {
        (0u64..8, 0u64..8)
    }

    proptest::proptest! {
        /// `within_cube` against enumeration (for a cube that holds a
        /// header), and against `subtract` (always).
        #[test]
        fn within_cube_is_containment(
            a in [ternary3(), ternary3(), ternary3()],
            a_neg in proptest::collection::vec((0..3usize, 0u64..8, 0u64..8), 0..8),
            b in [ternary3(), ternary3(), ternary3()],
            b_neg in proptest::collection::vec((0..3usize, 0u64..8, 0u64..8), 0..8),
        ) {
            let (a, b) = (small_cube(&a, &a_neg), small_cube(&b, &b_neg));
            let within = small_headers().all(|h| !a.contains(&h) || b.contains(&h));
            if !a.is_empty() {
                proptest::prop_assert_eq!(a.within_cube(&b), within);
            }
            proptest::prop_assert_eq!(a.within_cube(&b), a.subtract(&b).is_empty());
        }

        /// For a cube that holds a header, the walk's cuts (asking only the
        /// fields cut) give what `and` and `minus` give.
        #[test]
        fn cuts_of_a_nonempty_cube_ask_only_the_fields_cut(
            a in [ternary3(), ternary3(), ternary3()],
            a_neg in proptest::collection::vec((0..3usize, 0u64..8, 0u64..8), 0..8),
            c in proptest::collection::vec((0..3usize, ternary3()), 1..3),
        ) {
            let a = small_cube(&a, &a_neg);
            proptest::prop_assume!(!a.is_empty());
            let slots3 = [s::IP_DSCP, s::IP_ECN, s::IP_PROTO];
            let c: Vec<(usize, Ternary)> = c
                .iter()
                .map(|&(f, (v, free))| (slots3[f], Ternary { value: PRESENT | (v & !free), mask: !free }))
                .collect();
            proptest::prop_assert_eq!(a.and_of_nonempty(&c), a.and(&c));
            if c.iter().all(|&(sl, t)| a.pos[sl].meets(t)) {
                let mut pieces = Vec::new();
                a.clone().cut_outside(&c, 0, |p| {
                    pieces.push(p);
                    true
                });
                proptest::prop_assert_eq!(pieces, a.minus(&c));
            }
        }
    }

    #[test]
    fn minus_is_a_disjoint_cover_of_the_rest() {
        let all = Cube::of_shape(Shape { tagged: false, l3: L3::Ipv4(L4::Tcp) });
        let c = [(s::ETH_DST, Ternary::present(2, 0xffff_ffff_ffff)), (s::TCP_DST, Ternary::present(80, 0xffff))];
        let rest = all.minus(&c);
        assert_eq!(rest.len(), 2);
        let inside = all.and(&c).unwrap();
        let h = inside.witness().unwrap();
        assert!(rest.iter().all(|r| !r.contains(&h)));
        assert!(rest.iter().all(|r| r.witness().is_some_and(|w| !inside.contains(&w))));
    }

    #[test]
    fn shapes_agree_with_the_dataplane_parser() {
        for shape in Shape::all() {
            let cube = Cube::of_shape(shape);
            let h = cube.witness().expect("every shape is inhabited");
            let parsed = Fields::extract(&h.to_frame(), 1, 0);
            for (slot, f) in SLOTS.iter().enumerate() {
                assert_eq!(parsed.get(*f).map(|v| v as u64), h.get(slot), "{shape:?} {}", f.name());
            }
        }
    }

    #[test]
    fn other_ip_protocols_exclude_the_parsed_ones() {
        let other = Cube::of_shape(Shape { tagged: false, l3: L3::Ipv4(L4::Other) });
        assert!(other.with(s::IP_PROTO, Ternary::exact(PRESENT | 6)).is_none());
        assert!(other.with(s::IP_PROTO, Ternary::exact(PRESENT | 89)).is_some());
    }
}
