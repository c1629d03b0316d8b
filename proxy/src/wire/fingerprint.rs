//! Fingerprints: the part of a message that matters for equivalence across runs.
//!
//! Two runs of the same behaviour send messages that differ in transaction ids,
//! cookies, buffer ids, counters and durations, and in the incidental fields of
//! the packets they carry. A fingerprint masks exactly those, and keeps
//! everything else: two messages are *functionally equivalent* when their
//! fingerprints are equal (brief §2).
//!
//! The fingerprint is the message type followed by the canonical JSON of the
//! masked body (keys sorted), so it is stable across sts versions, readable in a
//! trace, and computable by other tools.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::packet::PacketSummary;
use super::{Body, Message};

/// The functionally-equivalent view of an event, as text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(pub String);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Field names whose values vary between equivalent runs: masked wherever they appear.
const VOLATILE_KEYS: &[&str] = &[
    "cookie",
    "cookie_mask",
    "buffer_id",
    "packet_count",
    "byte_count",
    "duration_sec",
    "duration_nsec",
    "counters",
    "lookup_count",
    "matched_count",
    "active_count",
    "flow_count",
    "ref_count",
    "tx_bytes",
    "tx_packets",
    "tx_errors",
    "packet_in_count",
    "byte_in_count",
    "bucket_stats",
    "band_stats",
];

const MASKED: &str = "*";

impl Fingerprint {
    /// The fingerprint of a decoded message. The transaction id is not part of it.
    pub fn of(msg: &Message) -> Fingerprint {
        let mut body = serde_json::to_value(&msg.body).unwrap_or(Value::Null);
        mask_volatile(&mut body);
        summarise_payloads(&msg.body, &mut body);
        let mut text = format!("of{:x}/{} ", msg.version(), msg.type_name());
        write_canonical(&body, &mut text);
        Fingerprint(text)
    }
}

/// Compact JSON with object keys sorted. Written by hand rather than relying on
/// serde_json's map order, which a crate feature (`preserve_order`) elsewhere in
/// a build can change: the fingerprint must not depend on what else is linked.
fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn mask_volatile(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if VOLATILE_KEYS.contains(&k.as_str()) {
                    *val = Value::String(MASKED.into());
                } else {
                    mask_volatile(val);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mask_volatile),
        _ => {}
    }
}

/// Replaces packet bytes by their [`PacketSummary`], echo payloads and error
/// data by nothing (they carry xids and timestamps).
fn summarise_payloads(body: &Body, json: &mut Value) {
    use super::{v10, v13};
    let (path, data): (&[&str], Option<&[u8]>) = match body {
        Body::V10(v10::Msg::PacketIn(p)) => (&["V10", "PacketIn", "data"], Some(&p.data)),
        Body::V10(v10::Msg::PacketOut(p)) => (&["V10", "PacketOut", "data"], Some(&p.data)),
        Body::V13(v13::Msg::PacketIn(p)) => (&["V13", "PacketIn", "data"], Some(&p.data)),
        Body::V13(v13::Msg::PacketOut(p)) => (&["V13", "PacketOut", "data"], Some(&p.data)),
        Body::V10(v10::Msg::EchoRequest(_)) => (&["V10", "EchoRequest"], None),
        Body::V10(v10::Msg::EchoReply(_)) => (&["V10", "EchoReply"], None),
        Body::V13(v13::Msg::EchoRequest(_)) => (&["V13", "EchoRequest"], None),
        Body::V13(v13::Msg::EchoReply(_)) => (&["V13", "EchoReply"], None),
        Body::V10(v10::Msg::Error(_)) => (&["V10", "Error", "data"], None),
        Body::V13(v13::Msg::Error(v13::Error::Standard { .. })) => (&["V13", "Error", "Standard", "data"], None),
        _ => return,
    };
    let mut slot = json;
    for key in path {
        match slot.get_mut(*key) {
            Some(next) => slot = next,
            None => return,
        }
    }
    *slot = match data {
        Some([]) => Value::Null,
        Some(bytes) => match PacketSummary::of(bytes) {
            Some(summary) => serde_json::to_value(summary).unwrap_or(Value::Null),
            None => Value::String(super::packet::digest(bytes)),
        },
        None => Value::String(MASKED.into()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{v13, Body, Message};
    use bytes::Bytes;

    fn packet_in(xid: u32, cookie: u64, buffer_id: u32, ip_id: u16) -> Message {
        // An ICMP echo request from 10.0.0.1 to 10.0.0.2; ip_id varies between runs.
        let mut f = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 28]);
        f.extend_from_slice(&ip_id.to_be_bytes());
        f.extend_from_slice(&[0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[8, 0, 0, 0, 0, 7, 0, 1]);
        Message::new(
            xid,
            Body::V13(v13::Msg::PacketIn(v13::PacketIn {
                buffer_id,
                total_len: f.len() as u16,
                reason: 0,
                table_id: 0,
                cookie,
                r#match: v13::Match::new([v13::BasicOxm::exact(v13::Field::InPort, 1)]),
                data: Bytes::from(f),
            })),
        )
    }

    #[test]
    fn equivalent_messages_share_a_fingerprint() {
        let a = Fingerprint::of(&packet_in(1, 5, 100, 7));
        let b = Fingerprint::of(&packet_in(99, 6, 200, 8));
        assert_eq!(a, b);
        assert!(a.0.starts_with("of4/packet_in "), "{a}");
        assert!(a.0.contains("10.0.0.2"), "{a}");
    }

    #[test]
    fn different_behaviour_differs() {
        let mut m = packet_in(1, 5, 100, 7);
        if let Body::V13(v13::Msg::PacketIn(p)) = &mut m.body {
            p.r#match = v13::Match::new([v13::BasicOxm::exact(v13::Field::InPort, 2)]);
        }
        assert_ne!(Fingerprint::of(&m), Fingerprint::of(&packet_in(1, 5, 100, 7)));
    }
}
