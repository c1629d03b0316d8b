//! A mock switch's flow tables in `ovs-ofctl dump-flows` style, for the
//! console and reports:
//!
//! ```text
//!  cookie=0x0, duration=1.5s, table=0, n_packets=3, n_bytes=294, priority=1,in_port=1,dl_dst=00:00:00:00:00:03 actions=output:2
//! ```

use sts_mocknet::flow::{full_mask, Action, FieldMatch, FlowEntry, FlowMatch, Instructions, Millis};
use sts_mocknet::switch::Switch;
use sts_proxy::wire::v13::oxm::Field;
use sts_proxy::wire::v13::port;

fn mac(v: u128) -> String {
    let b = (v as u64).to_be_bytes();
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[2], b[3], b[4], b[5], b[6], b[7])
}

fn value(field: Field, v: u128) -> String {
    match field {
        Field::EthSrc | Field::EthDst | Field::ArpSha | Field::ArpTha | Field::Ipv6NdSll | Field::Ipv6NdTll => mac(v),
        Field::Ipv4Src | Field::Ipv4Dst | Field::ArpSpa | Field::ArpTpa => {
            std::net::Ipv4Addr::from(v as u32).to_string()
        }
        Field::Ipv6Src | Field::Ipv6Dst | Field::Ipv6NdTarget => std::net::Ipv6Addr::from(v).to_string(),
        Field::EthType => format!("{v:#06x}"),
        Field::Metadata | Field::Ipv6Flabel => format!("{v:#x}"),
        _ => v.to_string(),
    }
}

/// A masked address as Open vSwitch writes it: `10.0.0.0/24` for a prefix,
/// `10.0.0.0/255.0.255.0` otherwise.
fn address(f: &FieldMatch) -> String {
    let bits = f.field.width() as u32 * 8;
    let ones = f.mask.count_ones();
    let full = full_mask(f.field);
    let is_prefix = ones <= bits && (f.mask == 0 || f.mask == (full >> (bits - ones)) << (bits - ones));
    if is_prefix {
        format!("{}/{ones}", value(f.field, f.value))
    } else {
        format!("{}/{}", value(f.field, f.value), value(f.field, f.mask))
    }
}

/// One field constraint as `name=value[/mask]`, under `name`.
fn named(name: &str, f: &FieldMatch) -> String {
    if f.mask == full_mask(f.field) {
        format!("{name}={}", value(f.field, f.value))
    } else if matches!(
        f.field,
        Field::Ipv4Src | Field::Ipv4Dst | Field::ArpSpa | Field::ArpTpa | Field::Ipv6Src | Field::Ipv6Dst
    ) {
        format!("{name}={}", address(f))
    } else {
        format!("{name}={}/{}", value(f.field, f.value), value(f.field, f.mask))
    }
}

/// Open vSwitch's protocol words: each stands for an EtherType and, for
/// some, an IP protocol (`ovs-fields(7)`); the ones sts writes, most specific
/// first. `dump_flows` reads them back.
pub(crate) const SHORTHANDS: &[(&str, u16, Option<u8>)] = &[
    ("tcp", 0x0800, Some(6)),
    ("udp", 0x0800, Some(17)),
    ("icmp", 0x0800, Some(1)),
    ("ip", 0x0800, None),
    ("arp", 0x0806, None),
    ("tcp6", 0x86dd, Some(6)),
    ("udp6", 0x86dd, Some(17)),
    ("icmp6", 0x86dd, Some(58)),
    ("ipv6", 0x86dd, None),
];

/// A match in Open vSwitch's words and order (`ovs-ofctl dump-flows`, its
/// `match_format`): `priority=1,tcp,in_port=2,dl_src=...,nw_dst=...,tp_dst=80`.
/// The protocol shorthand (`ip`, `arp`, `tcp`, `udp`, `icmp`, `ipv6`,
/// `tcp6`, `udp6`, `icmp6`) stands for the EtherType and IP protocol it
/// implies; `dl_*`, `nw_*` and `tp_*` name the rest, as OpenFlow 1.0 did.
pub fn match_words(priority: u16, m: &FlowMatch) -> String {
    let get = |f: Field| m.fields.iter().find(|x| x.field == f);
    let exact = |f: Field| get(f).filter(|x| x.mask == full_mask(f)).map(|x| x.value);
    let eth_type = exact(Field::EthType);
    let proto = exact(Field::IpProto);
    // The most specific first: a protocol's word before its EtherType's.
    let shorthand = eth_type.and_then(|et| {
        SHORTHANDS
            .iter()
            .find(|&&(_, t, p)| u128::from(t) == et && p.is_none_or(|p| proto == Some(u128::from(p))))
            .map(|&(name, _, p)| (name, p.is_some()))
    });
    let mut out = vec![format!("priority={priority}")];
    if let Some((name, _)) = shorthand {
        out.push(name.into());
    }
    let mut said = std::collections::BTreeSet::new();
    let mut say = |out: &mut Vec<String>, f: Field, name: &str| {
        if let Some(x) = get(f) {
            said.insert(f);
            out.push(named(name, x));
        }
    };
    say(&mut out, Field::Metadata, "metadata");
    if let Some(x) = get(Field::InPort) {
        out.push(format!("in_port={}", port_name(x.value as u32)));
    }
    if let Some(x) = get(Field::VlanVid) {
        let present = u128::from(sts_proxy::wire::v13::oxm::VID_PRESENT);
        if x.mask == full_mask(Field::VlanVid) && x.value & present != 0 {
            out.push(format!("dl_vlan={}", x.value & 0xfff));
        } else {
            // OpenFlow 1.3's VLAN_VID is the tag's 12-bit id and its
            // "present" bit: the low 13 bits of Open vSwitch's TCI.
            out.push(format!("vlan_tci={:#06x}/{:#06x}", x.value & 0x1fff, x.mask & 0x1fff));
        }
    }
    say(&mut out, Field::VlanPcp, "dl_vlan_pcp");
    say(&mut out, Field::EthSrc, "dl_src");
    say(&mut out, Field::EthDst, "dl_dst");
    if shorthand.is_none() {
        say(&mut out, Field::EthType, "dl_type");
    }
    say(&mut out, Field::Ipv6Src, "ipv6_src");
    say(&mut out, Field::Ipv6Dst, "ipv6_dst");
    say(&mut out, Field::Ipv6Flabel, "ipv6_label");
    say(&mut out, Field::Ipv4Src, "nw_src");
    say(&mut out, Field::Ipv4Dst, "nw_dst");
    say(&mut out, Field::ArpSpa, "arp_spa");
    say(&mut out, Field::ArpTpa, "arp_tpa");
    if !shorthand.is_some_and(|(_, implies_proto)| implies_proto) {
        say(&mut out, Field::IpProto, "nw_proto");
    }
    say(&mut out, Field::ArpOp, "arp_op");
    say(&mut out, Field::ArpSha, "arp_sha");
    say(&mut out, Field::ArpTha, "arp_tha");
    if let Some(x) = get(Field::IpDscp) {
        out.push(format!("nw_tos={}", x.value << 2));
    }
    say(&mut out, Field::IpEcn, "nw_ecn");
    for (f, name) in [
        (Field::TcpSrc, "tp_src"),
        (Field::TcpDst, "tp_dst"),
        (Field::UdpSrc, "tp_src"),
        (Field::UdpDst, "tp_dst"),
        (Field::SctpSrc, "tp_src"),
        (Field::SctpDst, "tp_dst"),
        (Field::Icmpv4Type, "icmp_type"),
        (Field::Icmpv4Code, "icmp_code"),
        (Field::Icmpv6Type, "icmp_type"),
        (Field::Icmpv6Code, "icmp_code"),
    ] {
        say(&mut out, f, name);
    }
    say(&mut out, Field::Ipv6NdTarget, "nd_target");
    say(&mut out, Field::Ipv6NdSll, "nd_sll");
    say(&mut out, Field::Ipv6NdTll, "nd_tll");
    // Anything else in OpenFlow 1.3's own name.
    let done = [Field::InPort, Field::VlanVid, Field::IpDscp, Field::EthType, Field::IpProto];
    for x in &m.fields {
        if !said.contains(&x.field) && !done.contains(&x.field) {
            out.push(named(x.field.name(), x));
        }
    }
    out.join(",")
}

/// A port in an action or match: its number, or a reserved port's name.
fn port_name(p: u32) -> String {
    match p {
        port::IN_PORT => "IN_PORT".into(),
        port::TABLE => "TABLE".into(),
        port::NORMAL => "NORMAL".into(),
        port::FLOOD => "FLOOD".into(),
        port::ALL => "ALL".into(),
        port::CONTROLLER => "CONTROLLER".into(),
        port::LOCAL => "LOCAL".into(),
        p => p.to_string(),
    }
}

/// The name Open vSwitch gives a field in `set_field:V->NAME`.
fn set_field_name(f: Field) -> &'static str {
    match f {
        Field::Ipv4Src => "ip_src",
        Field::Ipv4Dst => "ip_dst",
        f => f.name(),
    }
}

fn action(a: &Action) -> Option<String> {
    Some(match a {
        Action::Output { port: p, max_len } if *p == port::CONTROLLER => format!("CONTROLLER:{max_len}"),
        // Reserved ports by name alone, as Open vSwitch writes them.
        Action::Output { port: p, .. } if *p > port::MAX => port_name(*p),
        Action::Output { port: p, .. } => format!("output:{p}"),
        Action::SetField(f, v) => format!("set_field:{}->{}", value(*f, *v), set_field_name(*f)),
        Action::SetVlanVid10(v) => format!("mod_vlan_vid:{v}"),
        Action::SetVlanPcp10(p) => format!("mod_vlan_pcp:{p}"),
        Action::PushVlan(t) => format!("push_vlan:{t:#06x}"),
        Action::PopVlan => "pop_vlan".into(),
        Action::Group(g) => format!("group:{g}"),
        Action::Ignored => return None,
    })
}

fn actions(ins: &Instructions) -> String {
    let mut parts: Vec<String> = ins.apply.iter().filter_map(action).collect();
    if ins.clear {
        parts.push("clear_actions".into());
    }
    if let Some(w) = &ins.write {
        parts.push(format!("write_actions({})", w.iter().filter_map(action).collect::<Vec<_>>().join(",")));
    }
    if let Some((v, m)) = ins.write_metadata {
        parts.push(format!("write_metadata:{v:#x}/{m:#x}"));
    }
    if let Some(t) = ins.goto {
        parts.push(format!("goto_table:{t}"));
    }
    if parts.is_empty() {
        "drop".into()
    } else {
        parts.join(",")
    }
}

/// One entry, as `ovs-ofctl dump-flows` prints it, with its statistics at
/// `now` (the run's time, for its duration).
pub fn entry(table: usize, e: &FlowEntry, now: Millis) -> String {
    entry_with(table, e, Some(now))
}

/// A duration as Open vSwitch prints it: seconds, the fraction without
/// trailing zeros (`2s`, `1.5s`, `0.123s`).
fn duration(ms: Millis) -> String {
    let (s, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0'))
    }
}

/// One entry, as `ovs-ofctl dump-flows` prints it: with its statistics at
/// `now` (cookie, duration, table, counters), or without (`None`: as
/// `--no-stats` prints it, the cookie and table only when not 0).
pub fn entry_with(table: usize, e: &FlowEntry, now: Option<Millis>) -> String {
    let mut head = String::new();
    if now.is_some() || e.cookie != 0 {
        head.push_str(&format!(" cookie={:#x},", e.cookie));
    }
    if let Some(now) = now {
        head.push_str(&format!(" duration={},", duration(now.saturating_sub(e.installed_at))));
    }
    if now.is_some() || table != 0 {
        head.push_str(&format!(" table={table},"));
    }
    if now.is_some() {
        head.push_str(&format!(" n_packets={}, n_bytes={},", e.packet_count, e.byte_count));
    }
    if e.idle_timeout > 0 {
        head.push_str(&format!(" idle_timeout={},", e.idle_timeout));
    }
    if e.hard_timeout > 0 {
        head.push_str(&format!(" hard_timeout={},", e.hard_timeout));
    }
    format!("{head} {} actions={}", match_words(e.priority, &e.r#match), actions(&e.instructions))
}

/// Every entry of every table of `sw`, highest priority first per table,
/// with their statistics at `now`.
pub fn dump(sw: &Switch, now: Millis) -> String {
    dump_with(sw, Some(now))
}

/// [`dump`], with the statistics at a time or without ([`entry_with`]).
pub fn dump_with(sw: &Switch, now: Option<Millis>) -> String {
    let mut s = String::new();
    for (t, table) in sw.tables.iter().enumerate() {
        for e in table.entries() {
            s.push_str(&entry_with(t, e, now));
            s.push('\n');
        }
    }
    s
}

/// A FLOW_MOD or PACKET_OUT in one line, in the words `dump-flows` uses
/// (`add priority=1,in_port=2,dl_dst=... actions=output:1`); `None` for
/// other messages (and a 1.3 match sts does not model).
pub fn message(m: &sts_proxy::wire::Message) -> Option<String> {
    use sts_proxy::wire::{v10, v13, Body};
    let apply = |apply: Vec<Action>| Instructions { apply, ..Instructions::default() };
    let rule = |command: &str, priority: u16, m: &FlowMatch, ins: &Instructions| {
        format!("{command} {} actions={}", match_words(priority, m), actions(ins))
    };
    let command = |c: u16| match c {
        0 => "add",
        1 => "modify",
        2 => "modify_strict",
        3 => "delete",
        4 => "delete_strict",
        _ => "command?",
    };
    match &m.body {
        Body::V13(v13::Msg::FlowMod(f)) => {
            let m = FlowMatch::from_v13(&f.r#match).ok()?;
            Some(rule(command(f.command.into()), f.priority, &m, &Instructions::from_v13(&f.instructions)))
        }
        Body::V10(v10::Msg::FlowMod(f)) => {
            let ins = apply(f.actions.iter().map(Action::from_v10).collect());
            Some(rule(command(f.command), f.priority, &FlowMatch::from_v10(&f.r#match), &ins))
        }
        Body::V13(v13::Msg::PacketOut(p)) => Some(format!(
            "in_port={} actions={}",
            port_name(p.in_port),
            actions(&apply(p.actions.iter().map(Action::from_v13).collect()))
        )),
        Body::V10(v10::Msg::PacketOut(p)) => Some(format!(
            "in_port={} actions={}",
            port_name(sts_mocknet::flow::port10(p.in_port)),
            actions(&apply(p.actions.iter().map(Action::from_v10).collect()))
        )),
        _ => None,
    }
}

/// Any OpenFlow message's bytes in one line for people: its xid, then a
/// FLOW_MOD or PACKET_OUT in dump-flows words ([`message`]), a PACKET_IN's
/// port, reason and frame (`in_port=2 reason=no_match: arp who-has ...`);
/// other messages only their xid. `None` when the bytes do not parse.
pub fn message_line(raw: &bytes::Bytes) -> Option<String> {
    use sts_proxy::wire::{v10, v13, Body};
    let m = sts_proxy::wire::Message::parse(raw.clone()).ok()?;
    let reason = |r: u8| match r {
        0 => "no_match",
        1 => "action",
        2 => "invalid_ttl",
        _ => "reason?",
    };
    let words = match &m.body {
        Body::V13(v13::Msg::PacketIn(p)) => {
            let at = FlowMatch::from_v13(&p.r#match)
                .ok()
                .and_then(|m| m.fields.iter().find(|f| f.field == Field::InPort).map(|f| f.value as u32))
                .map_or_else(String::new, |p| format!("in_port={}", port_name(p)));
            Some(format!("{at} reason={}: {}", reason(p.reason), sts_trace_frame(&p.data)))
        }
        Body::V10(v10::Msg::PacketIn(p)) => Some(format!(
            "in_port={} reason={}: {}",
            port_name(sts_mocknet::flow::port10(p.in_port)),
            reason(p.reason),
            sts_trace_frame(&p.data)
        )),
        _ => message(&m),
    };
    Some(match words {
        Some(w) => format!("xid={} {w}", m.xid),
        None => format!("xid={}", m.xid),
    })
}

/// A frame's summary as traces and diffs give it.
fn sts_trace_frame(data: &[u8]) -> String {
    if data.is_empty() {
        "no frame (buffered)".into()
    } else {
        sts_trace::frame_summary(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_proxy::wire::v13::oxm::{BasicOxm, Match};
    use sts_proxy::wire::{v13, Body, Message};

    #[test]
    fn a_flow_mod_reads_as_dump_flows_does() {
        let m = Match::new([BasicOxm::exact(Field::InPort, 2), BasicOxm::exact(Field::EthDst, 3)]);
        let out = v13::Instruction::ApplyActions(vec![v13::Action::Output { port: 1, max_len: 0 }]);
        let fm = Message::new(7, Body::V13(v13::Msg::FlowMod(v13::FlowMod::add(0, 1, m, vec![out]))));
        assert_eq!(message(&fm).as_deref(), Some("add priority=1,in_port=2,dl_dst=00:00:00:00:00:03 actions=output:1"));
        assert_eq!(message(&Message::new(1, Body::V13(v13::Msg::BarrierRequest))), None);
    }

    #[test]
    fn entries_read_as_dump_flows_prints_them_with_and_without_statistics() {
        let m = FlowMatch::from_v13(&Match::new([BasicOxm::exact(Field::InPort, 2)])).unwrap();
        let e = FlowEntry {
            r#match: m,
            priority: 1,
            cookie: 0,
            idle_timeout: 10,
            hard_timeout: 0,
            flags: 0,
            instructions: Instructions {
                apply: vec![Action::Output { port: 1, max_len: 0 }],
                ..Instructions::default()
            },
            wire: sts_mocknet::flow::WireForm::V13 { r#match: Match::new([]), instructions: vec![] },
            installed_at: 1_000,
            last_used: 1_000,
            packet_count: 3,
            byte_count: 294,
        };
        assert_eq!(
            entry(0, &e, 2_500),
            " cookie=0x0, duration=1.5s, table=0, n_packets=3, n_bytes=294, idle_timeout=10, priority=1,in_port=2 actions=output:1"
        );
        assert_eq!(entry_with(0, &e, None), " idle_timeout=10, priority=1,in_port=2 actions=output:1");
        let e = FlowEntry { cookie: 0x2a, idle_timeout: 0, ..e };
        assert_eq!(entry_with(3, &e, None), " cookie=0x2a, table=3, priority=1,in_port=2 actions=output:1");
        assert_eq!(duration(3_000), "3s");
        assert_eq!(duration(123), "0.123s");
        assert_eq!(duration(1_010), "1.01s");
    }
}
