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
    let mut m = vec![format!("priority={}", e.priority)];
    m.extend(e.r#match.fields.iter().map(field));
    let mut timeouts = String::new();
    if e.idle_timeout > 0 {
        timeouts.push_str(&format!(" idle_timeout={},", e.idle_timeout));
    }
    if e.hard_timeout > 0 {
        timeouts.push_str(&format!(" hard_timeout={},", e.hard_timeout));
    }
    format!(
        " cookie={:#x}, table={table}, n_packets={}, n_bytes={},{timeouts} {} actions={}",
        e.cookie,
        e.packet_count,
        e.byte_count,
        m.join(","),
        actions(&e.instructions)
    )
}

/// Every entry of every table of `sw`, highest priority first per table.
pub fn dump(sw: &Switch) -> String {
    let mut s = String::new();
    for (t, table) in sw.tables.iter().enumerate() {
        for e in table.entries() {
            s.push_str(&entry(t, e));
            s.push('\n');
        }
    }
    s
}
