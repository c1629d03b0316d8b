//! A trace as a ShiViz log, to see a run as a space-time diagram in an
//! existing visualizer (ShiViz, from the DistributedClocks project).
//!
//! One lane ("host" in ShiViz's words) per controller (`c0` ...), per switch
//! (`s1` ...) and one for sts itself (its inputs and the violation). Each
//! OpenFlow message is a send on its sender's lane and a receive on the
//! other's; an input that touches switches or controllers is a message from
//! `sts` to each of them, so what an input caused follows it in the diagram.
//! Every event carries a vector clock. The log is pairs of lines, `LANE
//! {CLOCK}` then the event, which [`REGEX`] parses (paste it into ShiViz's
//! "log parsing regular expression" box).

use std::collections::BTreeMap;
use std::io::Write;

use sts_trace::{Internal, Trace};

/// The regular expression ShiViz needs for these logs.
pub const REGEX: &str = r"(?<host>\S*) (?<clock>{.*})\n(?<event>.*)";

/// The sts lane: inputs and the violation.
const STS: &str = "sts";

/// Vector clocks, one per lane.
#[derive(Default)]
struct Clocks(BTreeMap<String, BTreeMap<String, u64>>);

impl Clocks {
    /// A local event (or a send) on `lane`: its own entry ticks.
    fn tick(&mut self, lane: &str) -> String {
        let clock = self.0.entry(lane.to_string()).or_default();
        *clock.entry(lane.to_string()).or_default() += 1;
        serde_json::to_string(clock).expect("a map of counters is JSON")
    }

    /// A receive on `lane` of what `from` sent at `sent`: merge, then tick.
    fn receive(&mut self, lane: &str, sent: &BTreeMap<String, u64>) -> String {
        let clock = self.0.entry(lane.to_string()).or_default();
        for (k, &v) in sent {
            let e = clock.entry(k.clone()).or_default();
            *e = (*e).max(v);
        }
        self.tick(lane)
    }

    fn of(&self, lane: &str) -> BTreeMap<String, u64> {
        self.0.get(lane).cloned().unwrap_or_default()
    }
}

/// Writes `trace` as a ShiViz log into `w`; returns the number of events.
pub fn write_trace(trace: &Trace, mut w: impl Write) -> std::io::Result<usize> {
    let mut clocks = Clocks::default();
    let mut events = 0;
    let mut event = |w: &mut dyn Write, lane: &str, clock: String, text: String| -> std::io::Result<()> {
        events += 1;
        // One line per event: newlines in log lines would break the pairs.
        writeln!(w, "{lane} {clock}\n{}", text.replace(['\n', '\r'], " "))
    };
    // A queued message is received when the proxy delivered it (its
    // `delivered` record), a dropped one never.
    let delivered_later = trace.deliveries();
    let mut in_flight: BTreeMap<u64, (String, String, BTreeMap<String, u64>)> = BTreeMap::new();
    for r in &trace.records {
        let t = r.t_ms;
        if let Some(e) = r.external() {
            let clock = clocks.tick(STS);
            event(&mut w, STS, clock, format!("{t} ms: input: {}", e.describe()))?;
            let sent = clocks.of(STS);
            for lane in e.touches() {
                let clock = clocks.receive(&lane, &sent);
                event(&mut w, &lane, clock, format!("{t} ms: {}", e.describe()))?;
            }
        }
        match r.internal() {
            Some(i @ Internal::Openflow { msg, proxy, .. }) => {
                let (from, to) = i.sender_receiver().expect("an OpenFlow message has two ends");
                let clock = clocks.tick(&from);
                event(&mut w, &from, clock, format!("{t} ms: {} to {to}", msg.as_str()))?;
                let sent = clocks.of(&from);
                match proxy {
                    Some(sts_trace::ProxyDecision::Dropped) => {}
                    Some(sts_trace::ProxyDecision::Queued) if delivered_later.contains_key(&r.seq) => {
                        in_flight.insert(r.seq, (from, to, sent));
                    }
                    _ => {
                        let clock = clocks.receive(&to, &sent);
                        event(&mut w, &to, clock, format!("{t} ms: {} from {from}", msg.as_str()))?;
                    }
                }
            }
            Some(Internal::Delivered { of }) => {
                if let Some((from, to, sent)) = in_flight.remove(of) {
                    let clock = clocks.receive(&to, &sent);
                    event(
                        &mut w,
                        &to,
                        clock,
                        format!("{t} ms: message {of} from {from}, delivered late by the proxy"),
                    )?;
                }
            }
            Some(Internal::Log { controller, line, .. }) => {
                let clock = clocks.tick(controller);
                event(&mut w, controller, clock, format!("{t} ms: log: {line}"))?;
            }
            Some(Internal::Dataplane(report)) => {
                let clock = clocks.tick(STS);
                event(&mut w, STS, clock, format!("{t} ms: dataplane: {}", report.describe()))?;
            }
            // The hosts are not processes ShiViz would draw: their frames
            // show in the switches' PACKET_INs and PACKET_OUTs.
            Some(Internal::Frame { .. }) => {}
            None => {}
        }
        if let Some(v) = r.violation() {
            let clock = clocks.tick(STS);
            event(&mut w, STS, clock, format!("{t} ms: violation: {}", v.summary))?;
        }
    }
    w.flush()?;
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_knows_everything_its_send_knew() {
        let mut c = Clocks::default();
        c.tick("sts");
        c.tick("c0");
        let sent = c.of("c0");
        c.receive("s1", &sent);
        let s1 = c.of("s1");
        assert_eq!(s1.get("c0"), Some(&1));
        assert_eq!(s1.get("s1"), Some(&1));
        assert_eq!(s1.get("sts"), None, "s1 heard nothing from sts");
    }

    /// A held message is received when the proxy delivered it, after what
    /// the receiver saw meanwhile; a dropped one is never received.
    #[test]
    fn a_queued_message_is_received_at_its_delivery() {
        use sts_proxy::wire::Fingerprint;
        use sts_trace::{Direction, Header, MsgType, ProxyDecision, Record};
        let of = |seq, dpid, proxy| Record {
            seq,
            t_ms: seq,
            event: sts_trace::Event::Internal(Internal::Openflow {
                dpid,
                controller: 0,
                dir: Direction::ToSwitch,
                msg: MsgType::recorded("flow_mod"),
                fp: Fingerprint(String::new()),
                raw: None,
                proxy,
            }),
            line: 0,
        };
        let delivered =
            Record { seq: 4, t_ms: 9, event: sts_trace::Event::Internal(Internal::Delivered { of: 1 }), line: 0 };
        let trace = Trace {
            header: Header::new(None),
            records: vec![
                of(1, 1, Some(ProxyDecision::Queued)),
                of(2, 1, None),
                of(3, 2, Some(ProxyDecision::Dropped)),
                delivered,
            ],
        };
        let mut out = Vec::new();
        // Sends 1, 2, 3 on c0; receives: 2 on s1, then 1 on s1 at its delivery; 3 never.
        assert_eq!(write_trace(&trace, &mut out).unwrap(), 5);
        let text = String::from_utf8(out).unwrap();
        let s1: Vec<&str> = text.lines().filter(|l| l.starts_with("s1 ")).collect();
        assert_eq!(s1, [r#"s1 {"c0":2,"s1":1}"#, r#"s1 {"c0":2,"s1":2}"#], "{text}");
        assert!(text.contains("9 ms: message 1 from c0, delivered late by the proxy"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("s2 ")), "the dropped one never arrives: {text}");
    }
}
