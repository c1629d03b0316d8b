//! `sts races`: the engine's race analysis (`sts_engine::races`, docs/races.md)
//! judged against the violation's culprit rule (rebuilt from the trace, as
//! [`crate::why`] finds it) and rendered: text, JSON, the report's section.

use std::fmt::Write as _;

use sts_trace::Trace;

pub use sts_engine::races::{places, Culprit, Event, Options, Places, Race, Report};

/// The races of `trace` (up to its violation), harm judged by the culprit
/// rule the witness ends on when the tables rebuilt from the trace show it;
/// FLOW_MODs and PACKET_OUTs described in `dump-flows` words.
pub fn analyze(trace: &Trace, places: &Places, opts: &Options) -> Report {
    let opts = Options { describe: crate::flows::message, ..*opts };
    let culprit = trace.violation().and_then(|_| {
        let (_, switches) = crate::tables::at_violation(trace)?;
        let chain = crate::why::chain(trace, &switches)?;
        let flow_mod = chain.flow_mod.as_ref()?.seq;
        let dpid: u64 = chain.switch.trim_start_matches('s').parse().ok()?;
        let entry = switches.get(&dpid)?.tables.iter().enumerate().find_map(|(t, table)| {
            table
                .entries()
                .iter()
                .find(|e| crate::flows::entry_with(t, e, None) == chain.rule)
                .map(|e| sts_mocknet::flow::FlowEntry::clone(e))
        })?;
        Some(Culprit { dpid, rule: chain.rule, entry, flow_mod })
    });
    sts_engine::races::analyze(trace, places, &opts, culprit.as_ref())
}

fn event_line(e: &Event) -> String {
    let mut s = format!("seq {} at {} ms: {}", e.seq, e.t_ms, e.what);
    if let Some((seq, t)) = e.delivered {
        match e.behind {
            Some(held) => {
                let _ = write!(s, " [queued behind held seq {held}, delivered at {t} ms, seq {seq}]");
            }
            None => {
                let _ = write!(s, " [held, delivered at {t} ms, seq {seq}]");
            }
        }
    }
    s
}

/// The report for people: counts, the harmful races in full, then (with
/// `all`) every other race in a line, else how many.
pub fn text(r: &Report, all: bool) -> String {
    let harmful = r.harmful().count();
    let mut s = format!(
        "{} events, {} happens-before edges{}: {} race{}, {} harmful\n",
        r.events,
        r.edges,
        if r.skipped > 0 { format!(" (the first {} left out)", r.skipped) } else { String::new() },
        r.races.len(),
        if r.races.len() == 1 { "" } else { "s" },
        harmful
    );
    match (&r.violation, &r.judged_by, &r.unjudged) {
        (Some(v), Some(j), _) => {
            let _ = writeln!(s, "violation: {v}\njudged by: {j}");
        }
        (Some(v), None, Some(why)) => {
            let _ = writeln!(s, "violation: {v}\nharm not judged: {why}");
        }
        _ => s.push_str("no violation: no race is judged harmful\n"),
    }
    // The first few in full; the rest with --all.
    let shown = if all { harmful } else { harmful.min(5) };
    for (i, race) in r.harmful().take(shown).enumerate() {
        let _ = writeln!(
            s,
            "\nharmful race {} at {}: {}\n  first:  {}\n  second: {}\n  why: {}",
            i + 1,
            race.at,
            race.conflict,
            event_line(&race.first),
            event_line(&race.second),
            race.harm.as_deref().unwrap_or_default()
        );
    }
    if shown < harmful {
        let _ = writeln!(
            s,
            "\n{} more harmful race{} (--all shows them)",
            harmful - shown,
            if harmful - shown == 1 { "" } else { "s" }
        );
    }
    let others: Vec<&Race> = r.races.iter().filter(|x| x.harm.is_none()).collect();
    if all {
        if !others.is_empty() {
            s.push_str("\nother races:\n");
        }
        for race in others {
            let _ = writeln!(
                s,
                "  at {}: seq {} ∥ seq {}: {} / {} ({})",
                race.at, race.first.seq, race.second.seq, race.first.what, race.second.what, race.conflict
            );
        }
    } else if !others.is_empty() {
        let _ =
            writeln!(s, "\n{} other race{} (--all lists them)", others.len(), if others.len() == 1 { "" } else { "s" });
    }
    s
}

/// The report as JSON.
pub fn json(r: &Report) -> serde_json::Value {
    let event = |e: &Event| {
        serde_json::json!({
            "seq": e.seq, "t_ms": e.t_ms, "what": e.what,
            "delivered": e.delivered.map(|(seq, t)| serde_json::json!({"seq": seq, "t_ms": t, "behind": e.behind})),
        })
    };
    serde_json::json!({
        "events": r.events,
        "edges": r.edges,
        "skipped": r.skipped,
        "violation": r.violation,
        "judged_by": r.judged_by,
        "unjudged": r.unjudged,
        "harmful": r.harmful().count(),
        "races": r.races.iter().map(|x| serde_json::json!({
            "at": x.at, "first": event(&x.first), "second": event(&x.second),
            "conflict": x.conflict, "harm": x.harm,
        })).collect::<Vec<_>>(),
    })
}

/// The report's HTML section (`<section id="races">`): the harmful races,
/// each event a link to its row; `None` when there is none.
pub fn section(r: &Report) -> Option<String> {
    use crate::html::esc;
    let harmful: Vec<&Race> = r.harmful().collect();
    if harmful.is_empty() {
        return None;
    }
    let link = |e: &Event| {
        let held = match (e.delivered, e.behind) {
            (Some((_, t)), Some(held)) => format!(" <em>(queued behind held seq {held}, delivered at {t} ms)</em>"),
            (Some((_, t)), None) => format!(" <em>(held, delivered at {t} ms)</em>"),
            (None, _) => String::new(),
        };
        format!(r##"<a href="#r{}">seq {} at {} ms</a>: {}{held}"##, e.seq, e.seq, e.t_ms, esc(&e.what))
    };
    let mut html = format!(
        r#"<section id="races"><h2>Races that decide the violation</h2><p>Pairs of events nothing ordered (no message, reply or reaction between them) whose order decides what the violation's witness uses; judged by {}. {} race(s) in all (<code>sts races DIR --all</code>).</p><ol>"#,
        esc(r.judged_by.as_deref().unwrap_or("the violation")),
        r.races.len()
    );
    const SHOWN: usize = 5;
    for race in harmful.iter().take(SHOWN) {
        let _ = write!(
            html,
            "<li>at {}: {}<br>{}<br>{}<br><small>{}</small></li>",
            esc(&race.at),
            esc(&race.conflict),
            link(&race.first),
            link(&race.second),
            esc(race.harm.as_deref().unwrap_or_default())
        );
    }
    html.push_str("</ol>");
    if harmful.len() > SHOWN {
        let _ = write!(html, "<p>{} more (<code>sts races DIR --all</code>).</p>", harmful.len() - SHOWN);
    }
    html.push_str("</section>");
    Some(html)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sts_proxy::wire::v13::{self, Field};
    use sts_proxy::wire::{Body, Message};
    use sts_trace::{Direction, External, Internal, ProxyDecision};

    /// OFPP_CONTROLLER.
    const CONTROLLER: u32 = 0xffff_fffd;
    use sts_mocknet::packet::build;
    use sts_proxy::wire::Mac;
    use sts_trace::{Event as TraceEvent, Header, MsgType, Record};

    const H1: [u8; 6] = [0, 0, 0, 0, 0, 1];
    const H2: [u8; 6] = [0, 0, 0, 0, 0, 2];

    fn hosts() -> Places {
        Places { hosts: vec![("h1".into(), H1), ("h2".into(), H2)], ..Places::default() }
    }

    /// A trace under construction: records in order, one per call.
    #[derive(Default)]
    struct Run {
        records: Vec<Record>,
    }

    impl Run {
        fn push(&mut self, t_ms: u64, event: TraceEvent) -> u64 {
            let seq = self.records.len() as u64 + 1;
            self.records.push(Record { seq, t_ms, event, line: 0 });
            seq
        }

        fn message(&mut self, t_ms: u64, dpid: u64, dir: Direction, msg: Message) -> u64 {
            let raw = msg.emit().unwrap();
            let name = msg.type_name();
            self.push(
                t_ms,
                TraceEvent::Internal(Internal::Openflow {
                    dpid,
                    controller: 0,
                    dir,
                    msg: MsgType::from_name(name).unwrap(),
                    fp: sts_proxy::wire::Fingerprint::of(&msg),
                    raw: Some(Bytes::from(raw)),
                    proxy: None,
                }),
            )
        }

        /// `rule` in dump-flows words, sent to switch `dpid`.
        fn flow_mod(&mut self, t_ms: u64, dpid: u64, rule: &str) -> u64 {
            let fm = crate::dump_flows::read(rule).unwrap().remove(0).flow_mod;
            self.message(t_ms, dpid, Direction::ToSwitch, Message::new(7, Body::V13(v13::Msg::FlowMod(fm))))
        }

        /// A PACKET_IN from `dpid` of an echo request `src` → `dst` (its
        /// `id` tells frames apart) that came in on `port`.
        fn packet_in(&mut self, t_ms: u64, dpid: u64, port: u32, src: [u8; 6], dst: [u8; 6], id: u16) -> u64 {
            let frame = Self::frame(src, dst, id);
            let pin = v13::PacketIn {
                buffer_id: u32::MAX,
                total_len: frame.len() as u16,
                reason: 0,
                table_id: 0,
                cookie: 0,
                r#match: v13::Match::new([v13::BasicOxm::exact(Field::InPort, port as u128)]),
                data: Bytes::from(frame),
            };
            self.message(t_ms, dpid, Direction::ToController, Message::new(0, Body::V13(v13::Msg::PacketIn(pin))))
        }

        fn frame(src: [u8; 6], dst: [u8; 6], id: u16) -> Vec<u8> {
            let ip = |m: [u8; 6]| std::net::Ipv4Addr::new(10, 0, 0, m[5]);
            build::icmp_echo(8, Mac(src), Mac(dst), ip(src), ip(dst), id, 1, &[0; 8])
        }

        fn packet_out(&mut self, t_ms: u64, dpid: u64, frame: Vec<u8>) -> u64 {
            let out = v13::PacketOut {
                buffer_id: u32::MAX,
                in_port: CONTROLLER,
                actions: vec![v13::Action::Output { port: 2, max_len: 0 }],
                data: Bytes::from(frame),
            };
            self.message(t_ms, dpid, Direction::ToSwitch, Message::new(8, Body::V13(v13::Msg::PacketOut(out))))
        }

        /// Marks message `seq` as queued by the proxy (a `delivered` record
        /// must follow).
        fn hold(&mut self, seq: u64) {
            if let TraceEvent::Internal(Internal::Openflow { proxy, .. }) = &mut self.records[seq as usize - 1].event {
                *proxy = Some(ProxyDecision::Queued);
            }
        }

        fn barrier(&mut self, t_ms: u64, dpid: u64, xid: u32) {
            self.message(t_ms, dpid, Direction::ToSwitch, Message::new(xid, Body::V13(v13::Msg::BarrierRequest)));
            self.message(t_ms, dpid, Direction::ToController, Message::new(xid, Body::V13(v13::Msg::BarrierReply)));
        }

        /// Host `host` received `frame`.
        fn delivery(&mut self, t_ms: u64, host: &str, frame: Vec<u8>) -> u64 {
            let raw = Some(Bytes::from(frame));
            self.push(t_ms, TraceEvent::Internal(Internal::Frame { host: host.into(), sent: false, raw }))
        }

        fn races(self) -> Report {
            self.races_in(&hosts())
        }

        fn races_in(self, places: &Places) -> Report {
            let trace = Trace { header: Header::new(Some(1)), records: self.records };
            analyze(&trace, places, &Options::default())
        }
    }

    fn pairs(r: &Report) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> =
            r.races.iter().map(|x| (x.first.seq.min(x.second.seq), x.first.seq.max(x.second.seq))).collect();
        v.sort();
        v
    }

    #[test]
    fn a_rule_that_arrives_after_the_packet_it_would_have_taken_races_with_it() {
        let mut run = Run::default();
        run.flow_mod(10, 1, "table=0, priority=0 actions=CONTROLLER:65535");
        let p = run.packet_in(100, 1, 1, H1, H2, 1);
        // Half a second later: a timer's rule, not a reaction to the packet.
        let f = run.flow_mod(600, 1, "table=0, priority=10,dl_dst=00:00:00:00:00:02 actions=output:2");
        let r = run.races();
        assert_eq!(pairs(&r), vec![(p, f)], "{}", text(&r, true));
        assert_eq!(r.races[0].at, "s1");
        assert!(r.races[0].conflict.contains("matches the packet"), "{:?}", r.races[0]);
        assert!(r.races[0].second.what.contains("add priority=10,dl_dst=00:00:00:00:00:02"), "{:?}", r.races[0]);
        // No violation: nothing is judged harmful.
        assert_eq!(r.harmful().count(), 0);
    }

    #[test]
    fn a_route_sent_with_a_packet_out_and_no_barrier_races_with_the_packet_downstream() {
        // s1 port 2 is wired to s2 port 2; h2 hangs off s2 port 1.
        let places = Places { links: [((1, 2), (2, 2)), ((2, 2), (1, 2))].into_iter().collect(), ..hosts() };
        let path = |barrier: bool| {
            let mut run = Run::default();
            run.flow_mod(10, 1, "table=0, priority=0 actions=CONTROLLER:65535");
            run.packet_in(100, 1, 1, H1, H2, 1);
            let route = run.flow_mod(110, 2, "table=0, priority=10,dl_dst=00:00:00:00:00:02 actions=output:1");
            // A rule for the same host on a switch the packet never crosses.
            run.flow_mod(110, 3, "table=0, priority=10,dl_dst=00:00:00:00:00:02 actions=output:9");
            if barrier {
                run.barrier(111, 2, 40);
            }
            run.packet_out(112, 1, Run::frame(H1, H2, 1));
            let delivered = run.delivery(113, "h2", Run::frame(H1, H2, 1));
            (run.races_in(&places), route, delivered)
        };
        let (r, route, delivered) = path(false);
        assert_eq!(pairs(&r), vec![(route, delivered)], "{}", text(&r, true));
        assert_eq!(r.races[0].at, "s2");
        assert!(r.races[0].conflict.contains("on the path of the packet c0 sent out at s1"), "{:?}", r.races[0]);
        // The barrier reply came before the PACKET_OUT was sent: ordered.
        let (r, ..) = path(true);
        assert_eq!(pairs(&r), vec![], "{}", text(&r, true));
    }

    #[test]
    fn a_reaction_a_lower_rule_or_a_barrier_orders_a_rule_and_a_packet() {
        // The rule sent in reaction to the packet (20 ms later) is ordered after it.
        let mut run = Run::default();
        run.flow_mod(10, 1, "table=0, priority=0 actions=CONTROLLER:65535");
        run.packet_in(100, 1, 1, H1, H2, 1);
        run.flow_mod(120, 1, "table=0, priority=10,dl_dst=00:00:00:00:00:02 actions=output:2");
        assert_eq!(pairs(&run.races()), vec![]);
        // A rule below the one that sent the packet up would not have taken it.
        let mut run = Run::default();
        run.flow_mod(10, 1, "table=0, priority=5 actions=CONTROLLER:65535");
        run.packet_in(100, 1, 1, H1, H2, 1);
        run.flow_mod(600, 1, "table=0, priority=1,dl_dst=00:00:00:00:00:02 actions=output:2");
        assert_eq!(pairs(&run.races()), vec![]);
        // A rule that sent the packet up was there before it.
        let mut run = Run::default();
        run.flow_mod(10, 1, "table=0, priority=0 actions=CONTROLLER:65535");
        run.flow_mod(20, 1, "table=0, priority=10,dl_src=00:00:00:00:00:01 actions=CONTROLLER:65535");
        run.packet_in(500, 1, 1, H1, H2, 1);
        assert_eq!(pairs(&run.races()), vec![]);
        // A rule sent before a barrier the switch answered before sending
        // the packet up is ordered before it; without the barrier, the
        // switch may have met the packet first: a race.
        for barrier in [true, false] {
            let mut run = Run::default();
            run.flow_mod(10, 1, "table=0, priority=0 actions=CONTROLLER:65535");
            let f = run.flow_mod(20, 1, "table=0, priority=10,dl_src=00:00:00:00:00:01 actions=output:2");
            if barrier {
                run.barrier(21, 1, 99);
            }
            let p = run.packet_in(500, 1, 1, H1, H2, 1);
            let found = pairs(&run.races());
            assert_eq!(found, if barrier { vec![] } else { vec![(f, p)] }, "barrier {barrier}");
        }
    }

    #[test]
    fn two_switches_telling_a_controller_of_one_host_race_unless_a_packet_out_links_them() {
        // s1 and s2 both see h1 (different frames): nothing orders them.
        let mut run = Run::default();
        let a = run.packet_in(100, 1, 1, H1, H2, 1);
        let b = run.packet_in(101, 2, 3, H1, H2, 2);
        let r = run.races();
        assert_eq!(pairs(&r), vec![(a, b)]);
        assert_eq!(r.races[0].at, "c0");
        assert!(r.races[0].conflict.contains("host h1"), "{:?}", r.races[0]);
        // Two on one connection are in order (TCP).
        let mut run = Run::default();
        run.packet_in(100, 1, 1, H1, H2, 1);
        run.packet_in(101, 1, 1, H1, H2, 2);
        assert_eq!(pairs(&run.races()), vec![]);
        // The controller sends the first packet out (in reaction), and s2
        // sends that same frame up: the second comes from the first.
        let mut run = Run::default();
        run.packet_in(100, 1, 1, H1, H2, 1);
        run.packet_out(105, 1, Run::frame(H1, H2, 1));
        run.packet_in(110, 2, 3, H1, H2, 1);
        assert_eq!(pairs(&run.races()), vec![]);
    }

    #[test]
    fn a_long_trace_is_looked_at_in_its_last_events_and_says_how_many_it_left_out() {
        let mut run = Run::default();
        for k in 0..10u16 {
            run.packet_in(100 + u64::from(k), 1 + u64::from(k % 2), 1, H1, H2, k);
        }
        let trace = Trace { header: Header::new(Some(1)), records: run.records };
        let r = analyze(&trace, &hosts(), &Options { max_events: 4, ..Options::default() });
        assert_eq!((r.events, r.skipped), (4, 6));
        assert!(text(&r, false).contains("(the first 6 left out)"), "{}", text(&r, false));
        assert!(r.races.iter().all(|x| x.first.seq > 6 && x.second.seq > 6), "{}", text(&r, true));
    }

    #[test]
    fn an_input_races_only_with_what_was_still_in_flight_when_it_came() {
        // Told before the migration: sts injected it after seeing that.
        let mut run = Run::default();
        run.packet_in(100, 1, 1, H1, H2, 1);
        run.push(200, TraceEvent::External(External::HostMigrate { host: "h1".into(), from: 1, to: 2 }));
        run.packet_in(300, 2, 3, H1, H2, 2);
        assert_eq!(pairs(&run.races()), vec![]);
        // Held by the proxy across the migration: the controller learns of
        // the old place after the move, and nothing ordered the two.
        let mut run = Run::default();
        let p = run.packet_in(100, 1, 1, H1, H2, 1);
        run.hold(p);
        let m = run.push(200, TraceEvent::External(External::HostMigrate { host: "h1".into(), from: 1, to: 2 }));
        run.push(1100, TraceEvent::Internal(Internal::Delivered { of: p }));
        let r = run.races();
        assert_eq!(pairs(&r), vec![(p, m)], "{}", text(&r, true));
        assert_eq!((r.races[0].first.seq, r.races[0].second.seq), (m, p), "the controller saw the input first");
        assert_eq!(r.races[0].second.delivered.map(|(_, t)| t), Some(1100));
    }
}
