//! A mock switch's flow tables in `ovs-ofctl dump-flows` style, for the
//! console and reports:
//!
//! ```text
//!  cookie=0x0, table=0, n_packets=3, n_bytes=294, priority=1,in_port=1,eth_dst=00:00:00:00:00:03 actions=output:2
//! ```

use sts_mocknet::flow::{full_mask, Action, FieldMatch, FlowEntry, Instructions};
use sts_mocknet::switch::Switch;
use sts_proxy::wire::v13::oxm::Field;
use sts_proxy::wire::v13::port;

fn mac(v: u128) -> String {
    let b = (v as u64).to_be_bytes();
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[2], b[3], b[4], b[5], b[6], b[7])
}

fn value(field: Field, v: u128) -> String {
    match field {
        Field::EthSrc | Field::EthDst | Field::ArpSha | Field::ArpTha => mac(v),
        Field::Ipv4Src | Field::Ipv4Dst | Field::ArpSpa | Field::ArpTpa => {
            std::net::Ipv4Addr::from(v as u32).to_string()
        }
        Field::EthType => format!("{v:#06x}"),
        _ => v.to_string(),
    }
}

fn field(f: &FieldMatch) -> String {
    if f.mask == full_mask(f.field) {
        format!("{}={}", f.field.name(), value(f.field, f.value))
    } else {
        format!("{}={}/{}", f.field.name(), value(f.field, f.value), value(f.field, f.mask))
    }
}

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

fn action(a: &Action) -> Option<String> {
    Some(match a {
        Action::Output { port: p, max_len } if *p == port::CONTROLLER => format!("CONTROLLER:{max_len}"),
        Action::Output { port: p, .. } => format!("output:{}", port_name(*p)),
        Action::SetField(f, v) => format!("set_field:{}->{}", value(*f, *v), f.name()),
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

/// One entry, as `ovs-ofctl dump-flows` prints it.
pub fn entry(table: usize, e: &FlowEntry) -> String {
    entry_with(table, e, true)
}

/// One entry, with its packet and byte counters or (as `ovs-ofctl
/// --no-stats` prints it) without.
pub fn entry_with(table: usize, e: &FlowEntry, stats: bool) -> String {
    let mut m = vec![format!("priority={}", e.priority)];
    m.extend(e.r#match.fields.iter().map(field));
    let mut timeouts = String::new();
    if e.idle_timeout > 0 {
        timeouts.push_str(&format!(" idle_timeout={},", e.idle_timeout));
    }
    if e.hard_timeout > 0 {
        timeouts.push_str(&format!(" hard_timeout={},", e.hard_timeout));
    }
    let counters =
        if stats { format!(" n_packets={}, n_bytes={},", e.packet_count, e.byte_count) } else { String::new() };
    format!(
        " cookie={:#x}, table={table},{counters}{timeouts} {} actions={}",
        e.cookie,
        m.join(","),
        actions(&e.instructions)
    )
}

/// Every entry of every table of `sw`, highest priority first per table.
pub fn dump(sw: &Switch) -> String {
    dump_with(sw, true)
}

/// [`dump`], with or without the counters ([`entry_with`]).
pub fn dump_with(sw: &Switch, stats: bool) -> String {
    let mut s = String::new();
    for (t, table) in sw.tables.iter().enumerate() {
        for e in table.entries() {
            s.push_str(&entry_with(t, e, stats));
            s.push('\n');
        }
    }
    s
}

/// A FLOW_MOD or PACKET_OUT in one line, in the words `dump-flows` uses
/// (`add priority=1,in_port=2,eth_dst=... actions=output:1`); `None` for
/// other messages (and a 1.3 match sts does not model).
pub fn message(m: &sts_proxy::wire::Message) -> Option<String> {
    use sts_mocknet::flow::FlowMatch;
    use sts_proxy::wire::{v10, v13, Body};
    let apply = |apply: Vec<Action>| Instructions { apply, ..Instructions::default() };
    let rule = |command: &str, priority: u16, m: &FlowMatch, ins: &Instructions| {
        let mut parts = vec![format!("priority={priority}")];
        parts.extend(m.fields.iter().map(field));
        format!("{command} {} actions={}", parts.join(","), actions(ins))
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
    use sts_mocknet::flow::FlowMatch;
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
                .map(|m| m.fields.iter().map(field).collect::<Vec<_>>().join(","))
                .unwrap_or_default();
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
        assert_eq!(
            message(&fm).as_deref(),
            Some("add priority=1,in_port=2,eth_dst=00:00:00:00:00:03 actions=output:1")
        );
        assert_eq!(message(&Message::new(1, Body::V13(v13::Msg::BarrierRequest))), None);
    }
}
