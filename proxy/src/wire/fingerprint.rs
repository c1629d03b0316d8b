//! Fingerprints: the part of a message that matters for equivalence across runs.
//!
//! Two runs of the same behaviour send messages that differ in transaction ids,
//! cookies, buffer ids, counters and durations, and in the incidental fields of
//! the packets they carry. A fingerprint masks exactly those, and keeps
//! everything else: two messages are *functionally equivalent* when their
//! fingerprints are equal (`docs/trace-format.md`).
//!
//! The fingerprint is the message type followed by the compact JSON of the
//! body with volatile values replaced by `"*"` and packet bytes by their
//! [`PacketSummary`]. Keys appear in the order the types declare their fields
//! (serialized directly, never through a map whose order a crate feature could
//! change), so it is stable across builds and runs, readable in a trace, and
//! cheap: one serialization and one pass over the text.

use serde::{Deserialize, Serialize};

use super::packet::PacketSummary;
use super::{v10, v13, Body, Message};

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

const MASKED: &str = "\"*\"";

impl Fingerprint {
    /// The fingerprint of a decoded message. The transaction id is not part of it.
    pub fn of(msg: &Message) -> Fingerprint {
        let mut text = format!("of{:x}/{} ", msg.version(), msg.type_name());
        // Echo payloads carry timestamps or nothing of interest: the type is enough.
        if matches!(
            msg.body,
            Body::V10(v10::Msg::EchoRequest(_) | v10::Msg::EchoReply(_))
                | Body::V13(v13::Msg::EchoRequest(_) | v13::Msg::EchoReply(_))
        ) {
            text.push_str(MASKED);
            return Fingerprint(text);
        }
        // "data" holds packet bytes in PACKET_IN/OUT (summarised) and the
        // offending message, xid included, in ERROR (masked).
        let data = match &msg.body {
            Body::V10(v10::Msg::PacketIn(p)) => Some(summary(&p.data)),
            Body::V10(v10::Msg::PacketOut(p)) => Some(summary(&p.data)),
            Body::V13(v13::Msg::PacketIn(p)) => Some(summary(&p.data)),
            Body::V13(v13::Msg::PacketOut(p)) => Some(summary(&p.data)),
            Body::V10(v10::Msg::Error(_)) | Body::V13(v13::Msg::Error(v13::Error::Standard { .. })) => {
                Some(MASKED.to_string())
            }
            _ => None,
        };
        // The body's fields under the type the prefix names, variants in the
        // spec's snake_case (the codec's enums are untagged or renamed for
        // this); a message without fields is `{}`.
        let json = serde_json::to_string(&msg.body).unwrap_or_default();
        mask(if json == "null" { "{}" } else { &json }, data.as_deref(), &mut text);
        Fingerprint(text)
    }
}

fn summary(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "null".into();
    }
    match PacketSummary::of(bytes) {
        Some(s) => serde_json::to_string(&s).unwrap_or_default(),
        None => format!("\"{}\"", super::packet::digest(bytes)),
    }
}

/// Copies compact JSON `json` to `out`, replacing the value of every volatile
/// key by `"*"` and, when `data` is given, the value of every `data` key by it.
fn mask(json: &str, data: Option<&str>, out: &mut String) {
    let b = json.as_bytes();
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        let end = skip_string(b, i);
        // A string followed by ':' is a key.
        if b.get(end) == Some(&b':') {
            let key = &json[i + 1..end - 1];
            let replacement = if VOLATILE_KEYS.contains(&key) {
                Some(MASKED)
            } else if key == "data" {
                data
            } else {
                None
            };
            if let Some(r) = replacement {
                out.push_str(&json[copied..=end]);
                let value_end = skip_value(b, end + 1);
                out.push_str(r);
                copied = value_end;
                i = value_end;
                continue;
            }
        }
        i = end;
    }
    out.push_str(&json[copied..]);
}

/// The index just past the string starting at `b[i]` (a quote).
fn skip_string(b: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The index just past the JSON value starting at `b[i]`.
fn skip_value(b: &[u8], i: usize) -> usize {
    match b.get(i) {
        Some(b'"') => skip_string(b, i),
        Some(b'{') | Some(b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            b.len()
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']') {
                j += 1;
            }
            j
        }
    }
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
    fn masking_replaces_whole_values_and_nothing_else() {
        let json = r#"{"cookie":{"a":[1,{"b":"x\"y"}]},"name":"cookie","counters":[1,2,3],"data":"00ff","priority":7,"ok":true}"#;
        let mut out = String::new();
        mask(json, Some("{\"summary\":1}"), &mut out);
        assert_eq!(out, r#"{"cookie":"*","name":"cookie","counters":"*","data":{"summary":1},"priority":7,"ok":true}"#);
        let mut out = String::new();
        mask(json, None, &mut out);
        assert!(out.contains(r#""data":"00ff""#), "data untouched without a replacement: {out}");
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
