//! tshark as an independent oracle for the codec.
//!
//! A recorded session is written as a pcap, dissected by tshark's OpenFlow
//! dissector (`-T json --no-duplicate-keys`), and reduced, message by message,
//! to [`Facts`]: lists of values by kind, in wire order. The same facts are
//! computed from sts's own decoding; the two must be equal.
//!
//! tshark renders values in many ways (decimal, hex, MAC, dotted quad, VLAN
//! split into present bit and id), so every value is normalised to an integer
//! before comparison.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sts_proxy::wire::{v10, v13, Body, Message};

/// Per-message facts: kind → values in wire order.
pub type Facts = BTreeMap<&'static str, Vec<String>>;

/// Fact kinds compared.
pub const KINDS: &[&str] = &["header", "oxm", "action", "output_port", "instruction", "port_no", "in_port", "match10"];

fn push(f: &mut Facts, kind: &'static str, v: impl ToString) {
    f.entry(kind).or_default().push(v.to_string());
}

/// Runs tshark on `pcap` (OpenFlow on `port`) and returns one [`Facts`] per
/// OpenFlow message, in capture order.
pub fn dissect(pcap: &Path, port: u16) -> Result<Vec<Facts>, String> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("tcp.port=={port},openflow"), "-T", "json", "--no-duplicate-keys"])
        .output()
        .map_err(|e| format!("cannot run tshark (scripts/setup installs it): {e}"))?;
    if !out.status.success() {
        return Err(format!("tshark failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let packets: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("tshark JSON: {e}"))?;
    let mut all = Vec::new();
    for p in packets.as_array().ok_or("tshark JSON is not an array")? {
        let Some(layers) = p.pointer("/_source/layers").and_then(Value::as_object) else { continue };
        for (name, layer) in layers {
            if !name.starts_with("openflow_v") {
                continue;
            }
            let msgs = match layer {
                Value::Array(a) => a.clone(),
                other => vec![other.clone()],
            };
            for m in msgs {
                all.push(facts_from_tree(&m));
            }
        }
    }
    Ok(all)
}

/// Leaves of a tshark tree in document order.
fn leaves<'a>(v: &'a Value, out: &mut Vec<(&'a str, &'a str)>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                match x {
                    Value::String(s) => out.push((k, s)),
                    Value::Array(items) => {
                        for item in items {
                            match item {
                                Value::String(s) => out.push((k, s)),
                                other => leaves(other, out),
                            }
                        }
                    }
                    other => leaves(other, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|x| leaves(x, out)),
        _ => {}
    }
}

/// Parses tshark's renderings of a number, MAC, IPv4 or IPv6 address.
fn to_int(s: &str) -> Option<u128> {
    if let Some(h) = s.strip_prefix("0x") {
        return u128::from_str_radix(h, 16).ok();
    }
    if let Ok(n) = s.parse::<u128>() {
        return Some(n);
    }
    if let Ok(a) = s.parse::<Ipv4Addr>() {
        return Some(u32::from(a) as u128);
    }
    if s.split(':').all(|p| p.len() == 2) {
        return s.split(':').try_fold(0u128, |acc, p| u8::from_str_radix(p, 16).ok().map(|b| acc << 8 | b as u128));
    }
    if let Ok(a) = s.parse::<Ipv6Addr>() {
        return Some(u128::from(a));
    }
    match s {
        "True" => Some(1),
        "False" => Some(0),
        _ => None,
    }
}

fn facts_from_tree(m: &Value) -> Facts {
    let mut ls = Vec::new();
    leaves(m, &mut ls);
    let mut f = Facts::new();
    let first = |suffix: &str| ls.iter().find(|(k, _)| k.ends_with(suffix)).map(|(_, v)| *v).unwrap_or("?");
    let version = to_int(first(".version")).unwrap_or(0);
    // The type key is per version: openflow_1_0.type, openflow_v4.type, openflow_v6.type ...
    let ty = ls
        .iter()
        .find(|(k, _)| {
            *k == "openflow_1_0.type"
                || (k.starts_with("openflow_v") && k.ends_with(".type") && k.matches('.').count() == 1)
        })
        .map(|(_, v)| *v)
        .unwrap_or("?");
    push(&mut f, "header", format!("v{version} t{ty} len{} xid{}", first(".length"), first(".xid")));

    // OXM: a new entry starts at each class; values and masks normalised to integers.
    let mut oxm: Option<(String, u128, Option<u128>, u128)> = None; // (class/field/hm/len, value, mask, vlan_present)
    let flush = |f: &mut Facts, o: &mut Option<(String, u128, Option<u128>, u128)>| {
        if let Some((head, value, mask, _)) = o.take() {
            push(f, "oxm", format!("{head} value={value:#x} mask={}", mask.map_or("-".into(), |m| format!("{m:#x}"))));
        }
    };
    let mut head_parts: Vec<String> = Vec::new();
    for (k, v) in &ls {
        let k = *k;
        if let Some(rest) = k.strip_prefix("openflow_v4.oxm.") {
            match rest {
                "class" => {
                    flush(&mut f, &mut oxm);
                    head_parts = vec![format!("class={}", v)];
                }
                "field" | "hm" => head_parts.push(format!("{rest}={v}")),
                "length" => {
                    head_parts.push(format!("len={v}"));
                    oxm = Some((head_parts.join(" "), 0, None, 0));
                }
                _ if rest == "value_vlan_present" => {
                    if let Some(o) = oxm.as_mut() {
                        o.3 = to_int(v).unwrap_or(0);
                        o.1 |= o.3 << 12;
                    }
                }
                _ if rest.contains("mask") => {
                    if let Some(o) = oxm.as_mut() {
                        o.2 = Some(to_int(v).unwrap_or(u128::MAX));
                    }
                }
                _ if rest.contains("value") => {
                    if let Some(o) = oxm.as_mut() {
                        o.1 |= to_int(v).unwrap_or(u128::MAX);
                    }
                }
                _ => {}
            }
            continue;
        }
        match k {
            "openflow_v4.action.type" | "openflow.action_typ" => push(&mut f, "action", format!("type={v}")),
            "openflow_v4.action.length" | "openflow.action_len" => {
                if let Some(last) = f.get_mut("action").and_then(|a| a.last_mut()) {
                    last.push_str(&format!(" len={v}"));
                }
            }
            "openflow_v4.action.output.port" | "openflow.output_port" => push(&mut f, "output_port", v),
            "openflow_v4.instruction.type" => push(&mut f, "instruction", v),
            "openflow_v4.port.port_no" | "openflow.port_no" => push(&mut f, "port_no", v),
            "openflow_v4.packet_out.in_port" | "openflow.in_port" => push(&mut f, "in_port", v),
            "openflow.wildcards"
            | "openflow.eth_src"
            | "openflow.eth_dst"
            | "openflow.dl_vlan"
            | "openflow.ofp_match.dl_type"
            | "openflow.ofp_match.nw_proto"
            | "openflow.ofp_match.source_addr"
            | "openflow.ofp_match.dest_addr"
            | "openflow.ofp_match.source_port"
            | "openflow.ofp_match.dest_port" => push(
                &mut f,
                "match10",
                format!("{}={:#x}", k.rsplit('.').next().unwrap_or(k), to_int(v).unwrap_or(u128::MAX)),
            ),
            _ => {}
        }
    }
    flush(&mut f, &mut oxm);
    f
}

/// The same facts, from sts's decoding.
pub fn facts_of(bytes: &[u8], msg: &Message) -> Facts {
    let mut f = Facts::new();
    let len = u16::from_be_bytes([bytes[2], bytes[3]]);
    push(&mut f, "header", format!("v{} t{} len{len} xid{}", msg.version(), msg.msg_type(), msg.xid));
    match &msg.body {
        Body::V10(m) => facts_v10(&mut f, m),
        Body::V13(m) => facts_v13(&mut f, m),
        _ => {}
    }
    f
}

fn match10(f: &mut Facts, m: &v10::Match) {
    let mac = |m: &sts_proxy::wire::Mac| m.0.iter().fold(0u128, |a, &b| a << 8 | b as u128);
    for (name, v) in [
        ("wildcards", m.wildcards as u128),
        ("eth_src", mac(&m.dl_src)),
        ("eth_dst", mac(&m.dl_dst)),
        ("dl_vlan", m.dl_vlan as u128),
        ("dl_type", m.dl_type as u128),
        ("nw_proto", m.nw_proto as u128),
        ("source_addr", m.nw_src as u128),
        ("dest_addr", m.nw_dst as u128),
        ("source_port", m.tp_src as u128),
        ("dest_port", m.tp_dst as u128),
    ] {
        push(f, "match10", format!("{name}={v:#x}"));
    }
    push(f, "in_port", m.in_port);
}

fn actions10(f: &mut Facts, actions: &[v10::Action]) {
    for a in actions {
        // Re-encode inside a PACKET_OUT (16-byte fixed part) to read type and length as on the wire.
        let po = v10::PacketOut { buffer_id: 0, in_port: 0, actions: vec![a.clone()], data: Default::default() };
        let bytes = Message::new(0, Body::V10(v10::Msg::PacketOut(po))).emit().unwrap();
        let b = &bytes[16..];
        push(
            f,
            "action",
            format!("type={} len={}", u16::from_be_bytes([b[0], b[1]]), u16::from_be_bytes([b[2], b[3]])),
        );
        if let v10::Action::Output { port, .. } = a {
            push(f, "output_port", port);
        }
    }
}

fn facts_v10(f: &mut Facts, m: &v10::Msg) {
    match m {
        v10::Msg::FeaturesReply(r) => r.ports.iter().for_each(|p| push(f, "port_no", p.port_no)),
        v10::Msg::PortStatus(p) => push(f, "port_no", p.desc.port_no),
        v10::Msg::PacketIn(p) => push(f, "in_port", p.in_port),
        v10::Msg::PacketOut(p) => {
            push(f, "in_port", p.in_port);
            actions10(f, &p.actions);
        }
        v10::Msg::FlowMod(fm) => {
            match10(f, &fm.r#match);
            actions10(f, &fm.actions);
        }
        v10::Msg::FlowRemoved(r) => match10(f, &r.r#match),
        _ => {}
    }
}

fn oxms(f: &mut Facts, m: &v13::Match) {
    for o in &m.fields {
        if let v13::Oxm::Basic(b) = o {
            push(
                f,
                "oxm",
                format!(
                    "class=0x8000 field={} hm={} len={} value={:#x} mask={}",
                    b.field as u8,
                    b.mask.is_some() as u8,
                    o.wire_len() - 4,
                    b.value.to_u128(),
                    b.mask.map_or("-".into(), |m| format!("{:#x}", m.to_u128()))
                ),
            );
        }
    }
}

fn actions13(f: &mut Facts, actions: &[v13::Action]) {
    for a in actions {
        // Re-encode inside a PACKET_OUT (24-byte fixed part) to read the length as on the wire.
        let po = v13::PacketOut { buffer_id: 0, in_port: 0, actions: vec![a.clone()], data: Default::default() };
        let bytes = Message::new(0, Body::V13(v13::Msg::PacketOut(po))).emit().unwrap();
        let b = &bytes[24..];
        push(f, "action", format!("type={} len={}", a.action_type(), u16::from_be_bytes([b[2], b[3]])));
        match a {
            v13::Action::Output { port, .. } => push(f, "output_port", port),
            v13::Action::SetField(o) => oxms(f, &v13::Match { fields: vec![o.clone()] }),
            _ => {}
        }
    }
}

fn instructions(f: &mut Facts, list: &[v13::Instruction]) {
    for i in list {
        let ty = match i {
            v13::Instruction::GotoTable(_) => 1,
            v13::Instruction::WriteMetadata { .. } => 2,
            v13::Instruction::WriteActions(_) => 3,
            v13::Instruction::ApplyActions(_) => 4,
            v13::Instruction::ClearActions => 5,
            v13::Instruction::Meter(_) => 6,
            v13::Instruction::Experimenter { .. } => 0xffff,
            v13::Instruction::Unknown { instruction_type, .. } => *instruction_type,
        };
        push(f, "instruction", ty);
        if let v13::Instruction::WriteActions(a) | v13::Instruction::ApplyActions(a) = i {
            actions13(f, a);
        }
    }
}

fn facts_v13(f: &mut Facts, m: &v13::Msg) {
    use v13::multipart::ReplyBody;
    match m {
        v13::Msg::PortStatus(p) => push(f, "port_no", p.desc.port_no),
        v13::Msg::MultipartReply(r) => {
            if let ReplyBody::PortDesc(ports) = &r.body {
                ports.iter().for_each(|p| push(f, "port_no", p.port_no));
            }
            if let ReplyBody::Flow(flows) = &r.body {
                for fl in flows {
                    oxms(f, &fl.r#match);
                    instructions(f, &fl.instructions);
                }
            }
        }
        v13::Msg::PacketIn(p) => oxms(f, &p.r#match),
        v13::Msg::FlowRemoved(r) => oxms(f, &r.r#match),
        v13::Msg::PacketOut(p) => {
            push(f, "in_port", p.in_port);
            actions13(f, &p.actions);
        }
        v13::Msg::FlowMod(fm) => {
            oxms(f, &fm.r#match);
            instructions(f, &fm.instructions);
        }
        v13::Msg::GroupMod(g) => g.buckets.iter().for_each(|b| actions13(f, &b.actions)),
        _ => {}
    }
}
