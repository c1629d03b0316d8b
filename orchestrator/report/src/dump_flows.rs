//! Reading `ovs-ofctl dump-flows` text back into flow entries: the tables of
//! a real Open vSwitch bridge (a testbed's, `scripts/ovs-testbed dump`) made
//! OpenFlow 1.3 FLOW_MOD messages, so a mock switch installs them exactly as
//! it installs a controller's and the invariant checker reads them unchanged.
//! [`crate::flows`] writes the same words; a dump it writes reads back to the
//! same tables (tested).
//!
//! What is read: every line `[cookie=..., duration=..., table=N, n_packets=...,
//! ...] [priority=P,]MATCH actions=ACTIONS` (statistics ignored; `priority`
//! 32768 when absent, as Open vSwitch omits its default), the match in Open
//! vSwitch's words (`ip`, `arp`, `tcp`, ... shorthands; `in_port`, `dl_*`,
//! `nw_*`, `tp_*`, `icmp_*`, `arp_*`, `vlan_tci`, `metadata`, and OpenFlow
//! 1.3's own field names), the actions `output:N`, reserved ports by name
//! (`IN_PORT`, `FLOOD`, `ALL`, `CONTROLLER:LEN`, `LOCAL`), `drop`,
//! `set_field:V->FIELD`, `mod_dl_*`, `mod_nw_*`, `mod_vlan_vid`, `push_vlan`,
//! `pop_vlan`/`strip_vlan`, `group:N`, `write_actions(...)`, `clear_actions`,
//! `write_metadata:V/M` and `goto_table:N`, and `NORMAL` (the mock switch learns
//! addresses as Open vSwitch does). Anything else (port names instead
//! of numbers, Open vSwitch's own extensions such as `resubmit` or
//! `learn`) is an error naming the line and the word, never a silent skip.
//!
//! `ovs-ofctl dump-groups` listings are read the same way ([`read_groups`]:
//! `group_id=N,type=all|select|indirect|ff,bucket=[weight:W,][watch_port:P,]
//! [watch_group:G,]actions=...` per line) into GROUP_MODs, installed before
//! the flows that name them ([`install_dir`] takes a whole dump directory).

use std::net::{Ipv4Addr, Ipv6Addr};

use sts_proxy::wire::v13::oxm::{BasicOxm, Field, Match, Oxm, VID_PRESENT};
use sts_proxy::wire::v13::{self, port, Action, Instruction};
use sts_proxy::wire::{Body, Message};

/// Open vSwitch's priority when a flow names none (`OFP_DEFAULT_PRIORITY`).
pub const DEFAULT_PRIORITY: u16 = 32768;

/// A line that could not be read: its number (1-based) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub line: usize,
    pub what: String,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ReadError {}

/// One flow of a dump: the FLOW_MOD (ADD) that installs it, its line, and
/// the frames the bridge counted on it (`n_packets`; 0 in a listing without
/// statistics).
#[derive(Debug, Clone)]
pub struct Flow {
    pub line: usize,
    pub flow_mod: v13::FlowMod,
    pub packets: u64,
}

impl Flow {
    /// The FLOW_MOD as a message a switch handles.
    pub fn message(&self) -> Message {
        Message::new(0, Body::V13(v13::Msg::FlowMod(self.flow_mod.clone())))
    }
}

/// Every flow of a `dump-flows` listing, in its order. Blank lines and the
/// reply headers older versions print (`NXST_FLOW reply (xid=0x4):`) are
/// skipped.
pub fn read(text: &str) -> Result<Vec<Flow>, ReadError> {
    each_line(text, &["NXST_FLOW", "OFPST_FLOW"], |line, text| {
        let (flow_mod, packets) = flow(text)?;
        Ok(Flow { line, flow_mod, packets })
    })
}

/// `read` applied to every line of a listing but blanks and the reply
/// headers starting with one of `headers`, with its 1-based number; the
/// first error names its line.
fn each_line<T>(
    text: &str,
    headers: &[&str],
    read: impl Fn(usize, &str) -> Result<T, String>,
) -> Result<Vec<T>, ReadError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || headers.iter().any(|h| line.starts_with(h)) {
            continue;
        }
        out.push(read(i + 1, line).map_err(|what| ReadError { line: i + 1, what })?);
    }
    Ok(out)
}

/// Installs `flows` on switch `dpid` of `net`, each as the FLOW_MOD a
/// controller would send; the first one the switch refuses (an error reply:
/// a table it lacks, a group it does not hold) is an error naming its line.
pub fn install(net: &mut sts_mocknet::Network, dpid: u64, flows: &[Flow]) -> Result<(), ReadError> {
    flows.iter().try_for_each(|f| send(net, dpid, f.line, &f.message(), "FLOW_MOD"))
}

/// Hands `msg` (read from `line`) to switch `dpid` as a controller's
/// message; any reply is the switch refusing it.
fn send(net: &mut sts_mocknet::Network, dpid: u64, line: usize, msg: &Message, kind: &str) -> Result<(), ReadError> {
    let raw = msg.emit().map_err(|e| ReadError { line, what: format!("cannot encode its {kind}: {e}") })?;
    let replies = net.handle_controller(dpid, &raw, msg, 0);
    if replies.is_empty() {
        return Ok(());
    }
    let said: Vec<String> = replies.iter().map(|r| format!("{:?}", r.msg.body)).collect();
    Err(ReadError { line, what: format!("switch s{dpid} refuses it: {}", said.join("; ")) })
}

/// One group of a `dump-groups` listing: the GROUP_MOD (ADD) that installs
/// it, and its line.
#[derive(Debug, Clone)]
pub struct Group {
    pub line: usize,
    pub group_mod: v13::GroupMod,
}

/// Every group of a `dump-groups` listing, in its order (reply headers and
/// blank lines skipped).
pub fn read_groups(text: &str) -> Result<Vec<Group>, ReadError> {
    each_line(text, &["OFPST_GROUP", "NXST_GROUP"], |line, text| Ok(Group { line, group_mod: group(text)? }))
}

fn group(line: &str) -> Result<v13::GroupMod, String> {
    // Each bucket runs to the next `bucket=`; its actions come last in it.
    let mut parts = line.split("bucket=");
    let head = parts.next().unwrap_or_default();
    let (mut id, mut kind) = (None, None);
    for w in top_level(head) {
        match w.split_once('=') {
            Some(("group_id", v)) => {
                id = Some(u32::try_from(number(v)?).map_err(|_| format!("group_id={v} is out of range"))?)
            }
            Some(("type", v)) => {
                kind = Some(match v {
                    "all" => v13::group_type::ALL,
                    "select" => v13::group_type::SELECT,
                    "indirect" => v13::group_type::INDIRECT,
                    "ff" | "fast_failover" => v13::group_type::FF,
                    other => return Err(format!("unknown group type `{other}`")),
                })
            }
            _ => return Err(format!("unsupported group word `{w}`")),
        }
    }
    let group_id = id.ok_or("no `group_id=`")?;
    let group_type = kind.ok_or("no `type=`")?;
    let mut buckets = Vec::new();
    for body in parts {
        let body = body.trim().trim_end_matches(',');
        let (props, acts) = match body.split_once("actions=") {
            Some((p, a)) => (p, a),
            None => (body, ""),
        };
        let mut bucket =
            v13::Bucket { weight: 0, watch_port: port::ANY, watch_group: v13::GROUP_ANY, actions: Vec::new() };
        for w in top_level(props) {
            let (key, v) = w.split_once(':').ok_or_else(|| format!("unsupported bucket word `{w}`"))?;
            let n = number(v)?;
            match key {
                "weight" => bucket.weight = u16::try_from(n).map_err(|_| format!("weight:{v} is out of range"))?,
                "watch_port" => bucket.watch_port = port_number(v)?,
                "watch_group" => bucket.watch_group = n as u32,
                "bucket_id" => {}
                _ => return Err(format!("unsupported bucket word `{w}`")),
            }
        }
        for w in top_level(acts) {
            if w != "drop" {
                bucket.actions.push(action(w)?);
            }
        }
        buckets.push(bucket);
    }
    Ok(v13::GroupMod { command: 0, group_type, group_id, buckets })
}

/// Installs `groups` on switch `dpid` of `net`, each as the GROUP_MOD a
/// controller would send; the first one refused is an error naming its line.
pub fn install_groups(net: &mut sts_mocknet::Network, dpid: u64, groups: &[Group]) -> Result<(), ReadError> {
    groups.iter().try_for_each(|g| {
        let msg = Message::new(0, Body::V13(v13::Msg::GroupMod(g.group_mod.clone())));
        send(net, dpid, g.line, &msg, "GROUP_MOD")
    })
}

/// What [`install_dir`] installed on one switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Installed {
    pub flows: usize,
    pub groups: usize,
    /// The frames its flows counted (their `n_packets`, summed).
    pub packets: u64,
}

/// The `s<DPID>.flows` files of `dir` (a dump directory), by datapath id.
pub fn dumps_in(dir: &std::path::Path) -> std::collections::BTreeMap<u64, std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Default::default() };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let dpid = name.strip_suffix(".flows")?.strip_prefix('s')?.parse().ok()?;
            Some((dpid, p))
        })
        .collect()
}

/// The switches of `net`, their tables read from listings as OpenFlow 1.3
/// FLOW_MODs, made to judge frames as `version` does: an OpenFlow 1.0
/// bridge has one table and sends a frame no entry matches to its
/// controller (1.3 drops it).
pub fn judge_as(net: &mut sts_mocknet::Network, version: u8) {
    if version == sts_proxy::wire::OFP10 {
        for sw in net.switches.values_mut() {
            sw.version = version;
            sw.tables.truncate(1);
        }
    }
}

/// Installs every listing of a dump directory on `net`: for each
/// `s<DPID>.flows`, its `s<DPID>.groups` first (when there is one), then its
/// flows. The error names the file and line (`s2.flows:3: ...`), or a switch
/// the network lacks.
pub fn install_dir(
    dir: &std::path::Path,
    net: &mut sts_mocknet::Network,
) -> Result<std::collections::BTreeMap<u64, Installed>, String> {
    let mut out = std::collections::BTreeMap::new();
    for (dpid, flows_path) in dumps_in(dir) {
        if !net.switches.contains_key(&dpid) {
            return Err(format!("{}: the network has no switch s{dpid}", flows_path.display()));
        }
        let text_of = |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
        let at = |p: &std::path::Path, e: ReadError| format!("{}:{}: {}", p.display(), e.line, e.what);
        let groups_path = flows_path.with_extension("groups");
        let mut installed = Installed::default();
        if groups_path.exists() {
            let groups = read_groups(&text_of(&groups_path)?).map_err(|e| at(&groups_path, e))?;
            install_groups(net, dpid, &groups).map_err(|e| at(&groups_path, e))?;
            installed.groups = groups.len();
        }
        let flows = read(&text_of(&flows_path)?).map_err(|e| at(&flows_path, e))?;
        install(net, dpid, &flows).map_err(|e| at(&flows_path, e))?;
        installed.flows = flows.len();
        installed.packets = flows.iter().map(|f| f.packets).sum();
        out.insert(dpid, installed);
    }
    Ok(out)
}

/// Splits at the commas outside parentheses (`write_actions(a,b),goto_table:1`).
fn top_level(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|w| !w.is_empty()).collect()
}

fn number(s: &str) -> Result<u128, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u128::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("'{s}' is not a number"))
}

fn mac(s: &str) -> Result<u128, String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("'{s}' is not a MAC address"));
    }
    parts.iter().try_fold(0u128, |acc, p| {
        u8::from_str_radix(p, 16).map(|b| acc << 8 | u128::from(b)).map_err(|_| format!("'{s}' is not a MAC address"))
    })
}

/// A value of `field` as Open vSwitch writes it (MAC, dotted IPv4, IPv6,
/// or a number).
fn value_of(field: Field, s: &str) -> Result<u128, String> {
    match field {
        Field::EthSrc | Field::EthDst | Field::ArpSha | Field::ArpTha | Field::Ipv6NdSll | Field::Ipv6NdTll => mac(s),
        Field::Ipv4Src | Field::Ipv4Dst | Field::ArpSpa | Field::ArpTpa => {
            s.parse::<Ipv4Addr>().map(|a| u128::from(u32::from(a))).map_err(|_| format!("'{s}' is not an IPv4 address"))
        }
        Field::Ipv6Src | Field::Ipv6Dst | Field::Ipv6NdTarget => {
            s.parse::<Ipv6Addr>().map(u128::from).map_err(|_| format!("'{s}' is not an IPv6 address"))
        }
        _ => number(s),
    }
}

/// `value[/mask]` of `field`; a mask after an address may be a prefix length.
fn masked(field: Field, s: &str) -> Result<BasicOxm, String> {
    let full = sts_mocknet::flow::full_mask(field);
    let Some((v, m)) = s.split_once('/') else {
        let v = value_of(field, s)?;
        if v & !full != 0 {
            return Err(format!("{} is wider than {}", s, field.name()));
        }
        return Ok(BasicOxm::exact(field, v));
    };
    let value = value_of(field, v)?;
    let bits = field.width() as u32 * 8;
    let is_address = matches!(
        field,
        Field::Ipv4Src | Field::Ipv4Dst | Field::ArpSpa | Field::ArpTpa | Field::Ipv6Src | Field::Ipv6Dst
    );
    let mask = match m.parse::<u32>() {
        Ok(len) if is_address && len <= bits => {
            if len == 0 {
                0
            } else {
                (full >> (bits - len)) << (bits - len)
            }
        }
        _ => value_of(field, m)?,
    };
    if mask == full {
        Ok(BasicOxm::exact(field, value))
    } else {
        Ok(BasicOxm::masked(field, value & mask, mask))
    }
}

/// A port number or a reserved port's name.
fn port_number(s: &str) -> Result<u32, String> {
    Ok(match s {
        "IN_PORT" | "in_port" => port::IN_PORT,
        "TABLE" => port::TABLE,
        "FLOOD" | "flood" => port::FLOOD,
        "ALL" | "all" => port::ALL,
        "CONTROLLER" | "controller" => port::CONTROLLER,
        "LOCAL" | "local" => port::LOCAL,
        // The bridge's own MAC learning: the mock switch learns and forwards
        // as Open vSwitch does, and the checker judges it as a flood.
        "NORMAL" | "normal" => port::NORMAL,
        _ => s.trim_matches('"').parse().map_err(|_| {
            format!(
                "port '{s}' is a name, not a number: dump with `ovs-ofctl --no-names` (scripts/ovs-testbed dump does)"
            )
        })?,
    })
}

/// A field by Open vSwitch's name or OpenFlow 1.3's, for matches and
/// `set_field`; `tp_*`, `icmp_*` and `nw_src`/`nw_dst` depend on the
/// protocol and are resolved by the caller.
fn field_named(name: &str) -> Option<Field> {
    Some(match name {
        "dl_src" => Field::EthSrc,
        "dl_dst" => Field::EthDst,
        "dl_type" => Field::EthType,
        "dl_vlan_pcp" | "vlan_pcp" => Field::VlanPcp,
        "nw_proto" | "ip_proto" => Field::IpProto,
        "ip_src" => Field::Ipv4Src,
        "ip_dst" => Field::Ipv4Dst,
        "nw_ecn" | "ip_ecn" => Field::IpEcn,
        "ip_dscp" => Field::IpDscp,
        "ipv6_label" => Field::Ipv6Flabel,
        "nd_target" => Field::Ipv6NdTarget,
        "nd_sll" => Field::Ipv6NdSll,
        "nd_tll" => Field::Ipv6NdTll,
        other => return Field::ALL.iter().copied().find(|f| f.name() == other),
    })
}

/// The value after `key=`, which must be there.
fn needs<'a>(key: &str, v: Option<&'a str>) -> Result<&'a str, String> {
    v.ok_or_else(|| format!("`{key}` needs a value"))
}

/// A listing's line as the FLOW_MOD that installs it, and its `n_packets`.
fn flow(line: &str) -> Result<(v13::FlowMod, u64), String> {
    let Some((head, acts)) = line.rsplit_once("actions=") else {
        return Err("no `actions=`".into());
    };
    let (mut table, mut priority, mut idle, mut hard, mut cookie) = (0u8, DEFAULT_PRIORITY, 0u16, 0u16, 0u64);
    let mut packets = 0u64;
    // (field, value text) in order; protocol-dependent names resolved below.
    let mut words: Vec<(&str, &str)> = Vec::new();
    let (mut eth_type, mut proto): (Option<u16>, Option<u8>) = (None, None);
    for w in top_level(head) {
        let (key, val) = w.split_once('=').map_or((w, None), |(k, v)| (k.trim(), Some(v.trim())));
        let small = |v: Option<&str>, max: u128| -> Result<u128, String> {
            let n = number(needs(key, v)?)?;
            if n > max {
                return Err(format!("{key}={n} is out of range"));
            }
            Ok(n)
        };
        // A protocol word (`ip`, `tcp`, ...): its EtherType, and its IP protocol if it names one.
        if let (None, Some(&(_, t, p))) = (val, crate::flows::SHORTHANDS.iter().find(|&&(w, ..)| w == key)) {
            eth_type = Some(t);
            proto = p.or(proto);
            continue;
        }
        match key {
            "n_packets" => packets = small(val, u128::from(u64::MAX))? as u64,
            "duration" | "n_bytes" | "idle_age" | "hard_age" | "importance" | "reset_counts" | "send_flow_rem"
            | "check_overlap" | "no_packet_counts" | "no_byte_counts" => {}
            "cookie" => cookie = small(val, u128::from(u64::MAX))? as u64,
            "table" => table = small(val, 254)? as u8,
            "priority" => priority = small(val, 65535)? as u16,
            "idle_timeout" => idle = small(val, 65535)? as u16,
            "hard_timeout" => hard = small(val, 65535)? as u16,
            // Words sts never writes but Open vSwitch reads.
            "ip4" => eth_type = Some(0x0800),
            "rarp" => eth_type = Some(0x8035),
            "sctp" | "sctp6" => {
                eth_type = Some(if key == "sctp" { 0x0800 } else { 0x86dd });
                proto = Some(132);
            }
            "dl_type" | "eth_type" => eth_type = Some(small(val, 0xffff)? as u16),
            "nw_proto" | "ip_proto" => proto = Some(small(val, 0xff)? as u8),
            _ => words.push((key, needs(key, val)?)),
        }
    }
    let mut fields: Vec<BasicOxm> = Vec::new();
    if let Some(t) = eth_type {
        fields.push(BasicOxm::exact(Field::EthType, u128::from(t)));
    }
    if let Some(p) = proto {
        fields.push(BasicOxm::exact(Field::IpProto, u128::from(p)));
    }
    let arp = eth_type == Some(0x0806);
    let v6 = eth_type == Some(0x86dd);
    for (key, val) in words {
        let field = match key {
            "in_port" => {
                fields.push(BasicOxm::exact(Field::InPort, u128::from(port_number(val)?)));
                continue;
            }
            "dl_vlan" => {
                let vid = number(val)?;
                // 0xffff: no tag (OpenFlow 1.0's OFP_VLAN_NONE).
                let v = if vid == 0xffff { 0 } else { (vid & 0xfff) | u128::from(VID_PRESENT) };
                fields.push(BasicOxm::exact(Field::VlanVid, v));
                continue;
            }
            "vlan_tci" => {
                let (v, m) = match val.split_once('/') {
                    Some((v, m)) => (number(v)?, number(m)?),
                    None => (number(val)?, 0xffff),
                };
                if m & 0x1fff != 0 {
                    fields.push(if m & 0x1fff == 0x1fff {
                        BasicOxm::exact(Field::VlanVid, v & 0x1fff)
                    } else {
                        BasicOxm::masked(Field::VlanVid, v & m & 0x1fff, m & 0x1fff)
                    });
                }
                if m & 0xe000 == 0xe000 {
                    fields.push(BasicOxm::exact(Field::VlanPcp, (v >> 13) & 7));
                } else if m & 0xe000 != 0 {
                    return Err(format!("vlan_tci={val}: a partial mask of the priority bits"));
                }
                continue;
            }
            "nw_tos" => {
                fields.push(BasicOxm::exact(Field::IpDscp, number(val)? >> 2));
                continue;
            }
            "nw_src" if arp => Field::ArpSpa,
            "nw_dst" if arp => Field::ArpTpa,
            "nw_src" => Field::Ipv4Src,
            "nw_dst" => Field::Ipv4Dst,
            "tp_src" | "tp_dst" => {
                let src = key == "tp_src";
                match proto {
                    Some(6) if src => Field::TcpSrc,
                    Some(6) => Field::TcpDst,
                    Some(17) if src => Field::UdpSrc,
                    Some(17) => Field::UdpDst,
                    Some(132) if src => Field::SctpSrc,
                    Some(132) => Field::SctpDst,
                    _ => return Err(format!("`{key}` without tcp, udp or sctp")),
                }
            }
            "icmp_type" if v6 => Field::Icmpv6Type,
            "icmp_code" if v6 => Field::Icmpv6Code,
            "icmp_type" => Field::Icmpv4Type,
            "icmp_code" => Field::Icmpv4Code,
            other => field_named(other).ok_or_else(|| format!("unknown or unsupported match field `{other}`"))?,
        };
        fields.push(masked(field, val)?);
    }
    let instructions = instructions(acts.trim())?;
    let flow_mod = v13::FlowMod {
        cookie,
        idle_timeout: idle,
        hard_timeout: hard,
        ..v13::FlowMod::add(table, priority, Match::new(fields), instructions)
    };
    Ok((flow_mod, packets))
}

fn instructions(text: &str) -> Result<Vec<Instruction>, String> {
    let mut apply = Vec::new();
    let mut out = Vec::new();
    for w in top_level(text) {
        if w == "drop" {
            continue;
        }
        if w == "clear_actions" {
            out.push(Instruction::ClearActions);
        } else if let Some(t) = w.strip_prefix("goto_table:") {
            let t = number(t)?;
            out.push(Instruction::GotoTable(u8::try_from(t).map_err(|_| format!("goto_table:{t} is out of range"))?));
        } else if let Some(vm) = w.strip_prefix("write_metadata:") {
            let (v, m) = vm.split_once('/').map_or((vm, None), |(v, m)| (v, Some(m)));
            let metadata = number(v)? as u64;
            let mask = m.map_or(Ok(u128::from(u64::MAX)), number)? as u64;
            out.push(Instruction::WriteMetadata { metadata, mask });
        } else if let Some(inner) = w.strip_prefix("write_actions(").and_then(|r| r.strip_suffix(')')) {
            out.push(Instruction::WriteActions(top_level(inner).into_iter().map(action).collect::<Result<_, _>>()?));
        } else if let Some(m) = w.strip_prefix("meter:") {
            out.push(Instruction::Meter(number(m)? as u32));
        } else {
            apply.push(action(w)?);
        }
    }
    if !apply.is_empty() {
        out.insert(0, Instruction::ApplyActions(apply));
    }
    Ok(out)
}

fn set_field(field: Field, v: u128) -> Action {
    Action::SetField(Oxm::Basic(BasicOxm::exact(field, v)))
}

fn action(w: &str) -> Result<Action, String> {
    let (name, arg) = w.split_once(':').map_or((w, None), |(n, a)| (n, Some(a)));
    let need = || arg.ok_or_else(|| format!("`{name}` needs an argument"));
    Ok(match name {
        "output" => Action::Output { port: port_number(need()?)?, max_len: 0 },
        "CONTROLLER" | "controller" => {
            let max_len = arg.map_or(Ok(u128::from(v13::CML_NO_BUFFER)), number)?;
            Action::Output { port: port::CONTROLLER, max_len: u16::try_from(max_len).unwrap_or(u16::MAX) }
        }
        "IN_PORT" | "FLOOD" | "ALL" | "LOCAL" | "NORMAL" | "in_port" | "flood" | "all" | "local" | "normal" => {
            Action::Output { port: port_number(name)?, max_len: 0 }
        }
        "group" => Action::Group(number(need()?)? as u32),
        "pop_vlan" | "strip_vlan" => Action::PopVlan,
        "push_vlan" => Action::PushVlan(number(need()?)? as u16),
        "mod_vlan_vid" => set_field(Field::VlanVid, (number(need()?)? & 0xfff) | u128::from(VID_PRESENT)),
        "mod_vlan_pcp" => set_field(Field::VlanPcp, number(need()?)? & 7),
        "mod_dl_src" => set_field(Field::EthSrc, mac(need()?)?),
        "mod_dl_dst" => set_field(Field::EthDst, mac(need()?)?),
        "mod_nw_src" => set_field(Field::Ipv4Src, value_of(Field::Ipv4Src, need()?)?),
        "mod_nw_dst" => set_field(Field::Ipv4Dst, value_of(Field::Ipv4Dst, need()?)?),
        "set_field" => {
            let (v, f) = need()?.split_once("->").ok_or_else(|| format!("`{w}` is not set_field:VALUE->FIELD"))?;
            let field = match f {
                "nw_src" => Field::Ipv4Src,
                "nw_dst" => Field::Ipv4Dst,
                "tp_src" | "tp_dst" => return Err(format!("`{w}`: name the protocol's field (tcp_dst, udp_dst)")),
                other => field_named(other).ok_or_else(|| format!("`{w}`: unknown field `{other}`"))?,
            };
            let v = if field == Field::VlanVid { number(v)? | u128::from(VID_PRESENT) } else { value_of(field, v)? };
            set_field(field, v)
        }
        // A bare number is an output port (`actions=2`).
        n if n.chars().all(|c| c.is_ascii_digit()) && arg.is_none() => {
            Action::Output { port: port_number(n)?, max_len: 0 }
        }
        other => return Err(format!("unsupported action `{other}` (in `{w}`)")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> v13::FlowMod {
        let flows = read(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(flows.len(), 1);
        flows[0].flow_mod.clone()
    }

    #[test]
    fn a_learning_switch_dump_reads_with_statistics_or_without() {
        let with = one(" cookie=0x0, duration=12.5s, table=0, n_packets=3, n_bytes=294, idle_age=2, priority=1,in_port=2,dl_dst=00:00:00:00:00:01 actions=output:1");
        assert_eq!((with.table_id, with.priority), (0, 1));
        assert_eq!(with.r#match, Match::new([BasicOxm::exact(Field::InPort, 2), BasicOxm::exact(Field::EthDst, 1)]));
        assert_eq!(with.instructions, vec![Instruction::ApplyActions(vec![Action::Output { port: 1, max_len: 0 }])]);
        let without = one(" priority=1,in_port=2,dl_dst=00:00:00:00:00:01 actions=output:1");
        assert_eq!((without.r#match, without.instructions), (with.r#match, with.instructions));
        let miss = one(" priority=0 actions=CONTROLLER:65535");
        assert_eq!(
            miss.instructions,
            vec![Instruction::ApplyActions(vec![Action::Output { port: port::CONTROLLER, max_len: 65535 }])]
        );
        assert_eq!(one("table=3, ip actions=drop").priority, DEFAULT_PRIORITY);
        assert!(one("table=3, ip actions=drop").instructions.is_empty());
    }

    #[test]
    fn each_flow_keeps_the_frames_the_bridge_counted_on_it() {
        let flows = read(
            " cookie=0x0, duration=1.2s, table=0, n_packets=10798, n_bytes=453516, priority=1,in_port=2 actions=output:3\n \
             priority=0 actions=CONTROLLER:65535\n",
        )
        .unwrap();
        assert_eq!(flows.iter().map(|f| f.packets).collect::<Vec<_>>(), [10798, 0]);
    }

    #[test]
    fn protocol_words_resolve_to_their_fields() {
        let m = one("priority=5,tcp,nw_src=10.0.0.0/8,nw_dst=10.0.0.2,tp_dst=80 actions=goto_table:1").r#match;
        assert_eq!(
            m,
            Match::new([
                BasicOxm::exact(Field::EthType, 0x0800),
                BasicOxm::exact(Field::IpProto, 6),
                BasicOxm::masked(Field::Ipv4Src, 0x0a00_0000, 0xff00_0000),
                BasicOxm::exact(Field::Ipv4Dst, 0x0a00_0002),
                BasicOxm::exact(Field::TcpDst, 80),
            ])
        );
        let m = one("arp,nw_dst=10.0.0.3 actions=FLOOD").r#match;
        assert!(m.get(Field::ArpTpa).is_some());
        let m = one("dl_vlan=10,vlan_tci=0x1000/0x1000 actions=pop_vlan,output:3").r#match;
        assert_eq!(m.get(Field::VlanVid), Some(&BasicOxm::exact(Field::VlanVid, 0x100a)));
    }

    #[test]
    fn what_cannot_be_read_is_named_with_its_line() {
        let e = read("priority=1 actions=output:1\n\npriority=2,in_port=\"s1-eth1\" actions=drop\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.what.contains("--no-names"), "{e}");
        let e = read("priority=1 actions=resubmit(,2)").unwrap_err();
        assert!(e.what.contains("resubmit"), "{e}");
        let normal = read("priority=1 actions=NORMAL").unwrap();
        assert_eq!(
            normal[0].flow_mod.instructions,
            [Instruction::ApplyActions(vec![Action::Output { port: port::NORMAL, max_len: 0 }])]
        );
        let e = read("priority=1,ct_state=+trk actions=drop").unwrap_err();
        assert!(e.what.contains("ct_state"), "{e}");
        let e = read("priority=1,tp_dst=80 actions=drop").unwrap_err();
        assert!(e.what.contains("tp_dst"), "{e}");
        assert!(read("priority=1,in_port=1").is_err());
    }

    #[test]
    fn a_fast_failover_group_reads_back_with_its_watched_ports() {
        let text = "OFPST_GROUP_DESC reply (OF1.3) (xid=0x2):\n \
                    group_id=7,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3\n \
                    group_id=1,type=all,bucket=actions=output:1,bucket=actions=pop_vlan,output:4\n";
        let groups = read_groups(text).unwrap();
        assert_eq!(groups.len(), 2);
        let ff = &groups[0].group_mod;
        assert_eq!((ff.group_id, ff.group_type, groups[0].line), (7, v13::group_type::FF, 2));
        assert_eq!(ff.buckets.iter().map(|b| b.watch_port).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(ff.buckets[1].actions, [Action::Output { port: 3, max_len: 0 }]);
        let all = &groups[1].group_mod;
        assert_eq!(all.group_type, v13::group_type::ALL);
        assert_eq!(all.buckets[0].watch_port, port::ANY);
        assert_eq!(all.buckets[1].actions, [Action::PopVlan, Action::Output { port: 4, max_len: 0 }]);
    }

    #[test]
    fn a_group_line_that_cannot_be_read_names_its_line_and_word() {
        let e = read_groups("group_id=1,type=ff,bucket=watch_port:2,actions=resubmit(,1)\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.what.contains("resubmit"), "{}", e.what);
        let e = read_groups("\ngroup_id=1,type=chained,bucket=actions=output:1\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.what.contains("chained"), "{}", e.what);
    }
}
