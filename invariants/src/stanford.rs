//! Real router networks in the format of the data-plane verification
//! literature's shared benchmark (the Stanford backbone as APKeep packages
//! it), loaded as a mock [`Network`] the invariant checker reads unchanged.
//!
//! The format (`topo.txt`, `vlan.txt`, `updates`, `acls/`) is described in
//! `docs/invariants.md`. How its elements become switches:
//!
//! - a **router** is a switch with one flow table: a forwarding rule
//!   `PREFIX/LEN → PORT` is an IPv4 entry on `ipv4_dst` at priority LEN
//!   (longest prefix wins) that outputs to every port behind PORT;
//! - an **ACL** applied to an interface is its own element (as in APKeep's
//!   model: `ROUTER_ACL_PORT_in|out`, ports `inport` and `permit`): a switch
//!   whose entries are the ACL's lines in order (priority as given), `permit`
//!   out of its permit side, `deny` without outputs; a packet no line matches
//!   is dropped (Cisco's implicit deny). Protocol, source and destination with
//!   Cisco wildcard masks and port ranges (split into masked port values)
//!   become OpenFlow matches;
//! - every directed link `A P → B Q` gets its own port at each end (A's port
//!   `P` towards B, B's port `Q` from A), so a router can send a packet back
//!   out of the interface it came in on, as a real router does (an OpenFlow
//!   switch never outputs to the ingress port) and a port shared by several
//!   neighbours (a LAN segment) reaches them all;
//! - a VLAN interface outputs to every port it spans; a port no link leaves
//!   from is an edge port (a switch port with nothing behind it);
//! - `self` (delivered to the router itself) is a host per router, named
//!   after it, on port 1.
//!
//! Updates are applied as FLOW_MOD messages (add, strict delete) through
//! [`Network::handle_controller`], as a controller would install them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use sts_mocknet::flow::full_mask;
use sts_mocknet::network::{Endpoint, Network};
use sts_mocknet::topology::HostSpec;
use sts_mocknet::Topology;
use sts_proxy::wire::v13::{self, Action, BasicOxm, Field, Instruction};
use sts_proxy::wire::Mac;
use sts_proxy::wire::{Body, Message, OFP13};

use crate::header::{slot, Ternary};

/// Why a data set could not be loaded: the file, the line, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub file: PathBuf,
    /// 1-based; 0 when the error is about the file as a whole.
    pub line: usize,
    pub what: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.what)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.what)
        }
    }
}

impl std::error::Error for LoadError {}

/// An inclusive range of values of one header field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub lo: u32,
    pub hi: u32,
}

/// An address with a Cisco wildcard mask (set bits are "any").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wild {
    pub addr: u32,
    pub wildcard: u32,
}

/// One line of an access list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclLine {
    pub permit: bool,
    /// `None`: any protocol.
    pub proto: Option<u8>,
    pub src: Option<Wild>,
    pub src_port: Option<Range>,
    pub dst: Option<Wild>,
    pub dst_port: Option<Range>,
    pub priority: u16,
    /// The line as written (for witnesses).
    pub text: String,
}

/// What an update changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// A longest-prefix forwarding rule on a router.
    Forward { router: String, prefix: u32, len: u8, port: String },
    /// A line of an access list (every interface it is applied to).
    Acl { acl: String, line: AclLine },
}

/// One rule update of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub insert: bool,
    pub rule: Rule,
    /// Its line in `updates` (1-based).
    pub line: usize,
}

impl fmt::Display for Update {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.insert { "+" } else { "-" };
        match &self.rule {
            Rule::Forward { router, prefix, len, port } => {
                write!(f, "{sign} {router}: {}/{len} → {port}", Ipv4Addr::from(*prefix))
            }
            Rule::Acl { acl, line } => write!(f, "{sign} {acl}: {}", line.text),
        }
    }
}

/// A loaded network: the mock network, the names behind its numbers, and
/// the update stream.
pub struct RouterNet {
    pub net: Network,
    /// With ACL elements: the same network with every ACL permitting all
    /// (forwarding only). Filters only take paths away, so its loops are
    /// the candidates [`crate::verify`] confirms on `net`; its header
    /// classes are those of the forwarding rules alone.
    pub unfiltered: Option<Network>,
    pub updates: Vec<Update>,
    /// Element names by dpid (routers and ACL elements).
    pub names: BTreeMap<u64, String>,
    /// Port names by (dpid, port): the interface, with the neighbour it
    /// leads to or comes from.
    pub port_names: HashMap<(u64, u32), String>,
    routers: HashMap<String, u64>,
    /// Per (element, port) a link arrives on: the element and interface it
    /// comes from, and the interface it arrives on.
    arrivals: HashMap<(u64, u32), Arrival>,
    /// Per router and interface name (physical, VLAN or `self`): its ports.
    outputs: HashMap<(u64, String), Vec<u32>>,
    /// Per ACL name: its elements and each one's permit ports.
    acl_elements: HashMap<String, Vec<(u64, Vec<u32>)>>,
}

/// Where a directed link arrives: from which element's interface, onto
/// which interface.
#[derive(Debug, Clone)]
struct Arrival {
    from: u64,
    from_interface: String,
    interface: String,
}

/// A directed link: (device, port) to (device, port).
type Link = ((String, String), (String, String));

fn err(file: &Path, line: usize, what: impl Into<String>) -> LoadError {
    LoadError { file: file.to_path_buf(), line, what: what.into() }
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|e| err(path, 0, format!("cannot read: {e}")))
}

/// An ACL element's name split: `ROUTER_ACL_PORT_in` → (`ROUTER_ACL`, PORT, inbound).
fn acl_element(name: &str) -> Option<(&str, &str, bool)> {
    let mut parts = name.rsplitn(3, '_');
    let dir = parts.next()?;
    let port = parts.next()?;
    let acl = parts.next()?;
    match dir {
        "in" => Some((acl, port, true)),
        "out" => Some((acl, port, false)),
        _ => None,
    }
}

fn parse_ip(s: &str) -> Option<u32> {
    s.parse::<Ipv4Addr>().ok().map(u32::from)
}

/// Parses the ACL fields after `access-list ID`: `permit|deny PROTO_LO
/// PROTO_HI SRC SRCWILD SPORT_LO SPORT_HI DST DSTWILD DPORT_LO DPORT_HI
/// [-1] PRIORITY`.
fn parse_acl_line(t: &[&str]) -> Result<AclLine, String> {
    if t.len() != 12 && t.len() != 13 {
        return Err(format!("an ACL line has 12 fields after its list id, not {}", t.len()));
    }
    let permit = match t[0] {
        "permit" => true,
        "deny" => false,
        x => return Err(format!("'{x}' is neither permit nor deny")),
    };
    let num = |s: &str, what: &str, max: u32| -> Result<Option<u32>, String> {
        if s == "null" || s == "any" {
            return Ok(None);
        }
        match s.parse::<u32>() {
            Ok(v) if v <= max => Ok(Some(v)),
            _ => Err(format!("{what} '{s}' is not a number up to {max}")),
        }
    };
    let range = |lo: &str, hi: &str, what: &str, max: u32| -> Result<Option<Range>, String> {
        // As APKeep reads it: no lower bound is any value, no upper bound the maximum.
        let Some(lo_v) = num(lo, what, max)? else { return Ok(None) };
        let hi_v = num(hi, what, max)?.unwrap_or(max);
        if hi_v < lo_v {
            return Err(format!("{what} range {lo_v}-{hi_v} is empty"));
        }
        Ok(if lo_v == 0 && hi_v == max { None } else { Some(Range { lo: lo_v, hi: hi_v }) })
    };
    let wild = |a: &str, w: &str, what: &str| -> Result<Option<Wild>, String> {
        if a == "any" || a == "null" {
            return Ok(None);
        }
        let addr = parse_ip(a).ok_or_else(|| format!("{what} '{a}' is not an IPv4 address"))?;
        let wildcard = if w == "null" {
            0
        } else {
            parse_ip(w).ok_or_else(|| format!("{what} wildcard '{w}' is not an IPv4 mask"))?
        };
        Ok(if wildcard == u32::MAX { None } else { Some(Wild { addr, wildcard }) })
    };
    let proto = match range(t[1], t[2], "protocol", 255)? {
        None => None,
        Some(r) if r.lo == r.hi => Some(r.lo as u8),
        Some(r) => return Err(format!("protocol range {}-{} (only one protocol or any)", r.lo, r.hi)),
    };
    let src = wild(t[3], t[4], "source")?;
    let src_port = range(t[5], t[6], "source port", 65535)?;
    let dst = wild(t[7], t[8], "destination")?;
    let dst_port = range(t[9], t[10], "destination port", 65535)?;
    if (src_port.is_some() || dst_port.is_some()) && !matches!(proto, Some(6) | Some(17)) {
        return Err("a port range needs protocol 6 (TCP) or 17 (UDP)".into());
    }
    let prio = t[t.len() - 1];
    let priority = prio.parse::<u16>().map_err(|_| format!("priority '{prio}' is not a number up to 65535"))?;
    Ok(AclLine { permit, proto, src, src_port, dst, dst_port, priority, text: t[..11].join(" ") })
}

/// The ternary values (value, mask) whose union is `r` (a minimal prefix cover).
pub fn range_cover(r: Range, bits: u32) -> Vec<(u32, u32)> {
    let full = if bits == 32 { u32::MAX } else { (1u32 << bits) - 1 };
    let mut out = Vec::new();
    let (mut lo, hi) = (r.lo as u64, r.hi as u64);
    while lo <= hi {
        // The largest aligned block starting at lo that fits.
        let mut size = if lo == 0 { 1u64 << bits } else { 1u64 << lo.trailing_zeros().min(bits) };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        let mask = full & !((size - 1) as u32);
        out.push((lo as u32, mask));
        lo += size;
    }
    out
}

impl AclLine {
    /// The OpenFlow matches whose union is this line's header set.
    pub fn matches(&self) -> Vec<Vec<BasicOxm>> {
        let mut base = vec![BasicOxm::exact(Field::EthType, 0x0800)];
        if let Some(p) = self.proto {
            base.push(BasicOxm::exact(Field::IpProto, p as u128));
        }
        for (w, f) in [(self.src, Field::Ipv4Src), (self.dst, Field::Ipv4Dst)] {
            if let Some(w) = w {
                let mask = !w.wildcard;
                base.push(BasicOxm::masked(f, (w.addr & mask) as u128, mask as u128));
            }
        }
        let (sf, df) = match self.proto {
            Some(17) => (Field::UdpSrc, Field::UdpDst),
            _ => (Field::TcpSrc, Field::TcpDst),
        };
        let mut out = vec![base];
        for (r, f) in [(self.src_port, sf), (self.dst_port, df)] {
            let Some(r) = r else { continue };
            out = out
                .into_iter()
                .flat_map(|m| {
                    range_cover(r, 16).into_iter().map(move |(v, mask)| {
                        let mut m = m.clone();
                        m.push(if mask == 0xffff {
                            BasicOxm::exact(f, v as u128)
                        } else {
                            BasicOxm::masked(f, v as u128, mask as u128)
                        });
                        m
                    })
                })
                .collect();
        }
        out
    }
}

fn prefix_match(prefix: u32, len: u8) -> Vec<BasicOxm> {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len as u32) };
    let mut m = vec![BasicOxm::exact(Field::EthType, 0x0800)];
    if len > 0 {
        m.push(BasicOxm::masked(Field::Ipv4Dst, (prefix & mask) as u128, mask as u128));
    }
    m
}

fn parse_update(file: &Path, n: usize, line: &str) -> Result<Update, LoadError> {
    let t: Vec<&str> = line.split_whitespace().collect();
    let insert = match t.first() {
        Some(&"+") => true,
        Some(&"-") => false,
        _ => return Err(err(file, n, "an update starts with + or -")),
    };
    match t.get(1) {
        Some(&"fwd") => {
            if t.len() != 7 {
                return Err(err(file, n, "a forwarding update is `± fwd ROUTER PREFIX LEN PORT PRIORITY`"));
            }
            let prefix = t[3].parse::<u32>().map_err(|_| err(file, n, format!("prefix '{}' is not a u32", t[3])))?;
            let len = match t[4].parse::<u8>() {
                Ok(l) if l <= 32 => l,
                _ => return Err(err(file, n, format!("prefix length '{}' is not 0-32", t[4]))),
            };
            Ok(Update { insert, rule: Rule::Forward { router: t[2].into(), prefix, len, port: t[5].into() }, line: n })
        }
        Some(&"acl") => {
            if t.len() < 5 || t[3] != "access-list" {
                return Err(err(file, n, "an ACL update is `± acl NAME access-list ID ...`"));
            }
            let line = parse_acl_line(&t[5..]).map_err(|w| err(file, n, w))?;
            Ok(Update { insert, rule: Rule::Acl { acl: t[2].into(), line }, line: n })
        }
        _ => Err(err(file, n, "an update is `± fwd ...` or `± acl ...`")),
    }
}

impl RouterNet {
    /// Loads a data set directory: `topo.txt`, `vlan.txt` (optional) and
    /// `updates`. The network starts with empty tables; [`RouterNet::apply`]
    /// installs the updates one at a time.
    pub fn load(dir: &Path) -> Result<RouterNet, LoadError> {
        let topo_path = dir.join("topo.txt");
        let topo_text = read(&topo_path)?;
        // Directed links, in file order.
        let mut links: Vec<Link> = Vec::new();
        for (i, line) in topo_text.lines().enumerate() {
            let t: Vec<&str> = line.split_whitespace().collect();
            match t.len() {
                0 => continue,
                4 => links.push(((t[0].into(), t[1].into()), (t[2].into(), t[3].into()))),
                _ => return Err(err(&topo_path, i + 1, "a link is `DEVICE PORT DEVICE PORT`")),
            }
        }
        let updates_path = dir.join("updates");
        let updates_text = read(&updates_path)?;
        let mut updates = Vec::new();
        for (i, line) in updates_text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            updates.push(parse_update(&updates_path, i + 1, line)?);
        }
        let vlan_path = dir.join("vlan.txt");
        let mut vlans: HashMap<(String, String), Vec<String>> = HashMap::new();
        if vlan_path.exists() {
            for (i, line) in read(&vlan_path)?.lines().enumerate() {
                let t: Vec<&str> = line.split_whitespace().collect();
                if t.is_empty() {
                    continue;
                }
                if t.len() < 3 {
                    return Err(err(&vlan_path, i + 1, "a VLAN is `DEVICE VLAN PORT [PORT ...]`"));
                }
                vlans.insert((t[0].into(), t[1].into()), t[2..].iter().map(|s| s.to_string()).collect());
            }
        }

        // Elements: routers (anything not named as an ACL element) and ACL elements.
        let mut elements: BTreeSet<String> = BTreeSet::new();
        for ((a, _), (b, _)) in &links {
            elements.insert(a.clone());
            elements.insert(b.clone());
        }
        for u in &updates {
            if let Rule::Forward { router, .. } = &u.rule {
                elements.insert(router.clone());
            }
        }
        let is_acl = |name: &str, links: &[Link]| {
            links.iter().any(|((a, pa), (b, pb))| (a == name && pa == "permit") || (b == name && pb == "inport"))
        };
        let mut routers: Vec<String> = Vec::new();
        let mut acls: Vec<String> = Vec::new();
        for e in &elements {
            if is_acl(e, &links) {
                if acl_element(e).is_none() {
                    return Err(err(
                        &topo_path,
                        0,
                        format!("'{e}' has permit/inport ports but is not named ROUTER_ACL_PORT_in|out"),
                    ));
                }
                acls.push(e.clone());
            } else {
                routers.push(e.clone());
            }
        }
        // Routers first (dpid 1..), then ACL elements, each in name order.
        let mut dpid_of: HashMap<String, u64> = HashMap::new();
        let mut names = BTreeMap::new();
        for (i, e) in routers.iter().chain(acls.iter()).enumerate() {
            dpid_of.insert(e.clone(), i as u64 + 1);
            names.insert(i as u64 + 1, e.clone());
        }
        let mut topo = Topology { switches: names.keys().copied().collect(), ..Topology::default() };
        for (i, r) in routers.iter().enumerate() {
            let n = i as u32 + 1;
            let b = n.to_be_bytes();
            topo.hosts.push(HostSpec {
                name: r.clone(),
                mac: Mac([0x02, 0x00, b[0], b[1], b[2], b[3]]),
                // Addresses in 127/8: the checks here are about loops, not about these hosts.
                ip: Ipv4Addr::from(0x7f00_0000u32 + n),
                switch: dpid_of[r],
            });
        }
        for ((a, _), (b, _)) in &links {
            topo.links.push((dpid_of[a], dpid_of[b]));
        }
        let mut net = Network::new(&topo, OFP13);
        // Network::new numbers ports in order: hosts, then each link's two ends.
        let mut next: HashMap<u64, u32> = HashMap::new();
        let mut take = |d: u64| {
            let p = next.entry(d).or_insert(1);
            *p += 1;
            *p - 1
        };
        let mut port_names: HashMap<(u64, u32), String> = HashMap::new();
        let mut arrivals: HashMap<(u64, u32), Arrival> = HashMap::new();
        let mut outputs: HashMap<(u64, String), Vec<u32>> = HashMap::new();
        for r in &routers {
            let d = dpid_of[r];
            let p = take(d);
            port_names.insert((d, p), "self".into());
            outputs.insert((d, "self".into()), vec![p]);
        }
        for ((a, pa), (b, pb)) in &links {
            let (da, db) = (dpid_of[a], dpid_of[b]);
            let (ea, eb) = (take(da), take(db));
            if net.peer(Endpoint::Switch { dpid: da, port: ea }) != Some(Endpoint::Switch { dpid: db, port: eb }) {
                return Err(err(&topo_path, 0, "internal: the mock network numbered ports unexpectedly"));
            }
            port_names.insert((da, ea), format!("{pa} (to {b} {pb})"));
            port_names.insert((db, eb), format!("{pb} (from {a} {pa})"));
            arrivals.insert((db, eb), Arrival { from: da, from_interface: pa.clone(), interface: pb.clone() });
            outputs.entry((da, pa.clone())).or_default().push(ea);
        }
        for ((d, p), name) in &port_names {
            if let Some(port) = net.switches.get_mut(d).and_then(|s| s.ports.get_mut(p)) {
                port.name = name.clone();
            }
        }
        let mut acl_elements: HashMap<String, Vec<(u64, Vec<u32>)>> = HashMap::new();
        for e in &acls {
            let d = dpid_of[e];
            let (acl, _, _) = acl_element(e).expect("checked above");
            let permit = outputs.get(&(d, "permit".to_string())).cloned().unwrap_or_default();
            acl_elements.entry(acl.to_string()).or_default().push((d, permit));
        }
        let mut rn = RouterNet {
            net,
            unfiltered: None,
            updates: Vec::new(),
            names,
            port_names,
            routers: routers.iter().map(|r| (r.clone(), dpid_of[r])).collect(),
            arrivals,
            outputs,
            acl_elements,
        };
        // Every interface a forwarding rule names must resolve now, so that
        // applying an update cannot fail half-way.
        for u in &updates {
            if let Rule::Forward { router, port, .. } = &u.rule {
                let d = rn.routers[router];
                if rn.outputs.contains_key(&(d, port.clone())) {
                    continue;
                }
                let phys: Vec<String> = match vlans.get(&(router.clone(), port.clone())) {
                    Some(ps) => ps.clone(),
                    None => vec![port.clone()],
                };
                let mut ports = Vec::new();
                for p in &phys {
                    if let Some(ps) = rn.outputs.get(&(d, p.clone())) {
                        ports.extend(ps.iter().copied());
                    } else {
                        // An edge port: an interface no link leaves from.
                        let sw = rn.net.switches.get_mut(&d).expect("router switch");
                        let (no, _) = sw.add_port();
                        if let Some(port) = sw.ports.get_mut(&no) {
                            port.name = p.clone();
                        }
                        rn.port_names.insert((d, no), p.clone());
                        rn.outputs.insert((d, p.clone()), vec![no]);
                        ports.push(no);
                    }
                }
                ports.sort_unstable();
                ports.dedup();
                rn.outputs.insert((d, port.clone()), ports);
            }
        }
        rn.updates = updates;
        if !rn.acl_elements.is_empty() {
            let mut unfiltered = rn.net.clone();
            let mut elements: Vec<(u64, Vec<u32>)> = rn.acl_elements.values().flatten().cloned().collect();
            elements.sort_unstable();
            for (d, permit) in elements {
                let actions = permit.iter().map(|&p| Action::Output { port: p, max_len: 0xffff }).collect();
                flow_mod(&mut unfiltered, d, v13::flow_mod_command::ADD, 0, vec![], actions)
                    .map_err(|e| err(&topo_path, 0, e))?;
            }
            rn.unfiltered = Some(unfiltered);
        }
        Ok(rn)
    }

    /// Every match value (header slot, ternary) the update stream uses in
    /// the network the class engine follows ([`RouterNet::unfiltered`] when
    /// there is one): the header classes to cut up front
    /// ([`crate::Incremental::cut_for`]).
    pub fn values(&self) -> Vec<(usize, Ternary)> {
        let mut out = Vec::new();
        let mut add = |m: &[BasicOxm]| {
            for f in m {
                let Some(sl) = slot(f.field) else { continue };
                let mask = f.mask.map_or(full_mask(f.field), |m| m.to_u128());
                out.push((sl, Ternary::present((f.value.to_u128() & mask) as u64, mask as u64)));
            }
        };
        for u in &self.updates {
            match &u.rule {
                Rule::Forward { prefix, len, .. } => add(&prefix_match(*prefix, *len)),
                // The class engine follows the unfiltered network when there is one.
                Rule::Acl { line, .. } if self.unfiltered.is_none() => line.matches().iter().for_each(|m| add(m)),
                Rule::Acl { .. } => {}
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// How many routers (dpids 1 to this; ACL elements follow).
    pub fn routers(&self) -> usize {
        self.routers.len()
    }

    /// The element name of a dpid (`s7` if unknown).
    pub fn name(&self, dpid: u64) -> String {
        self.names.get(&dpid).cloned().unwrap_or_else(|| format!("s{dpid}"))
    }

    /// Applies one update as FLOW_MOD messages (forwarding rules to
    /// [`RouterNet::unfiltered`] too); returns the switches whose tables
    /// changed in `net` (for [`crate::Incremental::recheck`]), or why not.
    pub fn apply(&mut self, u: &Update) -> Result<Vec<u64>, String> {
        let command = if u.insert { v13::flow_mod_command::ADD } else { v13::flow_mod_command::DELETE_STRICT };
        match &u.rule {
            Rule::Forward { router, prefix, len, port } => {
                let d = *self.routers.get(router).ok_or_else(|| format!("no router '{router}'"))?;
                let ports =
                    self.outputs.get(&(d, port.clone())).ok_or_else(|| format!("no port {port} on {router}"))?;
                let actions: Vec<Action> = ports.iter().map(|&p| Action::Output { port: p, max_len: 0xffff }).collect();
                let m = prefix_match(*prefix, *len);
                if let Some(unfiltered) = &mut self.unfiltered {
                    flow_mod(unfiltered, d, command, *len as u16, m.clone(), actions.clone())?;
                }
                flow_mod(&mut self.net, d, command, *len as u16, m, actions)?;
                Ok(vec![d])
            }
            Rule::Acl { acl, line } => {
                let Some(elements) = self.acl_elements.get(acl) else {
                    // An ACL applied to no interface: nothing forwards through it.
                    return Ok(vec![]);
                };
                let elements = elements.clone();
                let mut changed = Vec::new();
                for (d, permit) in elements {
                    let actions: Vec<Action> = if line.permit {
                        permit.iter().map(|&p| Action::Output { port: p, max_len: 0xffff }).collect()
                    } else {
                        vec![]
                    };
                    for m in line.matches() {
                        flow_mod(&mut self.net, d, command, line.priority, m, actions.clone())?;
                    }
                    changed.push(d);
                }
                Ok(changed)
            }
        }
    }

    /// Where a loop's cycle turns back: each (router, interface) where the
    /// witness `path` (hops as the checker writes them, `s3 in 2: ...`)
    /// arrives on an interface and leaves through the same one. A real
    /// router does forward a packet back out of the interface it came in on
    /// (towards another router on the same segment, or back to the sender);
    /// APKeep's model never does, so loops that turn back are ones it cannot
    /// report. Only the cycle is looked at, not the way into it.
    pub fn turns_back(&self, path: &[String]) -> Vec<(String, String)> {
        let hops: Vec<(u64, u32)> = path.iter().filter_map(|h| hop_at(h)).collect();
        let Some(&last) = hops.last() else { return Vec::new() };
        // The walker stops at the first switch visited again: the cycle runs
        // from that switch's first visit, and closes by leaving it again as
        // it left the first time (a router's choice does not depend on the
        // ingress port).
        let Some(start) = hops[..hops.len() - 1].iter().position(|h| h.0 == last.0) else { return Vec::new() };
        let mut steps: Vec<((u64, u32), (u64, u32))> = hops[start..].windows(2).map(|w| (w[0], w[1])).collect();
        if let Some(&again) = hops.get(start + 1) {
            steps.push((last, again));
        }
        let mut out = Vec::new();
        for (here, next) in steps {
            if !self.names.get(&here.0).is_some_and(|n| self.routers.contains_key(n)) {
                continue;
            }
            let (Some(came), Some(went)) = (self.arrivals.get(&here), self.arrivals.get(&next)) else { continue };
            if went.from == here.0 && went.from_interface == came.interface {
                out.push((self.name(here.0), came.interface.clone()));
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// A witness hop (`s3 in 2: table 0 #5 (priority 24)`) or element
    /// (`s3`) in the data set's names.
    pub fn rename(&self, text: &str) -> String {
        let mut out = String::new();
        let mut words = text.split(' ').peekable();
        let mut first = true;
        let mut current: Option<u64> = None;
        while let Some(w) = words.next() {
            if !first {
                out.push(' ');
            }
            first = false;
            let bare = w.trim_end_matches([':', ',']);
            let tail = &w[bare.len()..];
            if let Some(d) = bare.strip_prefix('s').and_then(|n| n.parse::<u64>().ok()) {
                if self.names.contains_key(&d) {
                    current = Some(d);
                    out.push_str(&self.name(d));
                    out.push_str(tail);
                    continue;
                }
            }
            if bare == "in" {
                if let (Some(d), Some(next)) = (current, words.peek()) {
                    let pb = next.trim_end_matches([':', ',']);
                    if let Ok(p) = pb.parse::<u32>() {
                        if let Some(n) = self.port_names.get(&(d, p)) {
                            let t = &next[pb.len()..];
                            out.push_str("in ");
                            out.push_str(n);
                            out.push_str(t);
                            words.next();
                            continue;
                        }
                    }
                }
            }
            out.push_str(w);
        }
        out
    }
}

/// The (switch, ingress port) of a witness hop `s3 in 2: ...`.
fn hop_at(hop: &str) -> Option<(u64, u32)> {
    let mut words = hop.split(' ');
    let dpid = words.next()?.strip_prefix('s')?.parse().ok()?;
    (words.next()? == "in").then_some(())?;
    let port = words.next()?.trim_end_matches(':').parse().ok()?;
    Some((dpid, port))
}

fn flow_mod(
    net: &mut Network,
    dpid: u64,
    command: u8,
    priority: u16,
    fields: Vec<BasicOxm>,
    actions: Vec<Action>,
) -> Result<(), String> {
    let instructions = if actions.is_empty() { vec![] } else { vec![Instruction::ApplyActions(actions)] };
    let fm = v13::FlowMod { command, ..v13::FlowMod::add(0, priority, v13::Match::new(fields), instructions) };
    let msg = Message::new(0, Body::V13(v13::Msg::FlowMod(fm)));
    let raw = msg.emit().map_err(|e| format!("cannot encode the FLOW_MOD: {e}"))?;
    let replies = net.handle_controller(dpid, &raw, &msg, 0);
    if replies.is_empty() {
        Ok(())
    } else {
        Err(format!("switch s{dpid} refused the FLOW_MOD: {replies:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_range_is_covered_exactly_by_its_masked_values() {
        for (lo, hi) in [(137, 139), (0, 65535), (27000, 65535), (500, 65535), (7000, 7010), (5, 5), (0, 0)] {
            let cover = range_cover(Range { lo, hi }, 16);
            for v in 0..=65535u32 {
                let n = cover.iter().filter(|&&(val, mask)| v & mask == val).count();
                assert_eq!(n, usize::from((lo..=hi).contains(&v)), "{lo}-{hi} at {v}: {cover:?}");
            }
        }
        assert_eq!(range_cover(Range { lo: 137, hi: 139 }, 16).len(), 2);
    }

    #[test]
    fn acl_lines_read_as_apkeep_reads_them() {
        let t: Vec<&str> = "deny 6 6 any null null null any null 137 139 65532".split(' ').collect();
        let l = parse_acl_line(&t).unwrap();
        assert!(!l.permit);
        assert_eq!((l.proto, l.dst_port, l.priority), (Some(6), Some(Range { lo: 137, hi: 139 }), 65532));
        let t: Vec<&str> = "permit 6 6 any null null null any null 27000 null -1 65499".split(' ').collect();
        assert_eq!(parse_acl_line(&t).unwrap().dst_port, Some(Range { lo: 27000, hi: 65535 }));
        let t: Vec<&str> = "permit 0 255 128.12.1.0 0.0.0.255 null null any null null null 7".split(' ').collect();
        let l = parse_acl_line(&t).unwrap();
        assert_eq!((l.proto, l.src), (None, Some(Wild { addr: 0x800c_0100, wildcard: 0xff })));
        let t: Vec<&str> = "permit 1 1 any null 80 80 any null null null 7".split(' ').collect();
        assert!(parse_acl_line(&t).unwrap_err().contains("needs protocol 6"));
    }
}
