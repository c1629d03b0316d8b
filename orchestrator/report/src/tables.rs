//! The flow tables each switch held when the violation was seen, rebuilt
//! from the trace: every message a controller sent to a switch before the
//! violation, applied in order (with timeouts expired at each message's
//! time) to a fresh model of that switch, the same model the run's mock
//! network used. Counters are not rebuilt (no frames are replayed).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::html::esc;

use sts_mocknet::switch::Switch;
use sts_proxy::wire::Message;
use sts_trace::{Direction, Internal, Trace};

/// Ports each rebuilt switch is given (the trace does not say; rules naming
/// others are kept all the same).
const PORTS: u32 = 64;

/// The switches as they stood at the trace's violation, and its time; None
/// when the trace records no violation.
pub fn at_violation(trace: &Trace) -> Option<(u64, BTreeMap<u64, Switch>)> {
    let end = trace.records.iter().position(|r| r.violation().is_some())?;
    let mut switches: BTreeMap<u64, Switch> = BTreeMap::new();
    for r in &trace.records[..end] {
        let Some(Internal::Openflow { dpid, dir: Direction::ToSwitch, raw: Some(raw), .. }) = r.internal() else {
            continue;
        };
        // HELLO offers versions; the first other message says the one spoken.
        if raw.len() < 8 || raw[1] == 0 {
            continue;
        }
        let Ok(msg) = Message::parse(raw.clone()) else { continue };
        let sw = switches.entry(*dpid).or_insert_with(|| Switch::new(*dpid, raw[0], PORTS));
        sw.expire(r.t_ms);
        sw.handle(raw, &msg, r.t_ms);
    }
    let at = trace.records[end].t_ms;
    for sw in switches.values_mut() {
        sw.expire(at);
    }
    Some((at, switches))
}

/// The whole network as it stood at the trace's violation: links and host
/// places as the inputs left them ([`crate::topology::at_violation`]), each
/// switch's flow and group tables as the controllers' messages made them
/// ([`at_violation`]); with the violation's time and the switches failed
/// then. None when the trace records no violation.
pub fn network_at_violation(
    config: &sts_engine::config::Config,
    trace: &Trace,
) -> Option<(u64, sts_mocknet::Network, std::collections::BTreeSet<u64>)> {
    let (at, switches) = at_violation(trace)?;
    let (mut net, down) = crate::topology::at_violation(config, trace);
    for (dpid, sw) in switches {
        if let Some(s) = net.switches.get_mut(&dpid) {
            s.tables = sw.tables;
            s.groups = sw.groups;
        }
    }
    Some((at, net, down))
}

/// The HTML section (`<section id="tables">`) of the tables
/// [`at_violation`] rebuilt (at `at` ms), with the culprit rule (`switch`,
/// its `dump-flows` line) marked (`<mark id="culprit-rule">`), as the
/// report's "why" links to it; `None` without OpenFlow messages.
pub fn section(at: u64, switches: &BTreeMap<u64, Switch>, culprit: Option<(&str, &str)>) -> Option<String> {
    if switches.is_empty() {
        return None;
    }
    let mut html = format!(
        r#"<section id="tables"><h2>Flow tables at the violation ({at} ms)</h2><p>Rebuilt from the messages the controllers sent before it (counters not rebuilt), in <code>ovs-ofctl dump-flows --no-stats</code> style.</p>"#
    );
    for (dpid, sw) in switches {
        let dump = crate::flows::dump_with(sw, None);
        let _ = write!(
            html,
            r#"<h3>s{dpid} ({} entries)</h3><pre class="flows" data-switch="s{dpid}">{}</pre>"#,
            sw.flow_count(),
            if dump.is_empty() {
                "(empty)".to_string()
            } else {
                let name = format!("s{dpid}");
                let mut marked = false;
                dump.lines()
                    .map(|l| match culprit {
                        Some((s, rule)) if !marked && s == name && l.trim() == rule.trim() => {
                            marked = true;
                            format!(r#"<mark id="culprit-rule">{}</mark>"#, esc(l))
                        }
                        _ => esc(l),
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        );
    }
    html.push_str("</section>");
    Some(html)
}

/// Where two networks' flow tables first differ, in `dump-flows` words
/// (statistics left out, so the lab's rebuilt tables and a testbed's read
/// back compare entry for entry): the first switch, in datapath order, with
/// an entry one side has and the other lacks. `None` when every switch of
/// `lab` holds the same entries in `other`.
pub fn first_difference(
    lab: &BTreeMap<u64, Switch>,
    other: &BTreeMap<u64, Switch>,
    other_name: &str,
) -> Option<String> {
    let words = |sw: Option<&Switch>| -> Vec<String> {
        let mut lines: Vec<String> =
            sw.map_or_else(String::new, |s| crate::flows::dump_with(s, None)).lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let dpids: std::collections::BTreeSet<u64> = lab.keys().chain(other.keys()).copied().collect();
    for dpid in dpids {
        let (a, b) = (words(lab.get(&dpid)), words(other.get(&dpid)));
        let only_lab: Vec<&String> = a.iter().filter(|l| !b.contains(l)).collect();
        let only_other: Vec<&String> = b.iter().filter(|l| !a.contains(l)).collect();
        let mut said = Vec::new();
        if let Some(l) = only_lab.first() {
            said.push(format!("the lab has `{}`{}", l.trim(), more(only_lab.len())));
        }
        if let Some(l) = only_other.first() {
            said.push(format!("{other_name} has `{}`{}", l.trim(), more(only_other.len())));
        }
        if !said.is_empty() {
            return Some(format!("s{dpid}: {}", said.join("; ")));
        }
    }
    None
}

fn more(n: usize) -> String {
    if n > 1 {
        format!(" (and {} more)", n - 1)
    } else {
        String::new()
    }
}

#[cfg(test)]
mod difference_tests {
    use super::*;

    /// s1 and s2 of a linear network, s1's table read from `s1_flows`.
    fn switches(s1_flows: &str) -> BTreeMap<u64, Switch> {
        let topo = sts_mocknet::Topology::linear(2);
        let mut net = sts_mocknet::Network::new(&topo, sts_proxy::wire::OFP13);
        let flows = crate::dump_flows::read(s1_flows).unwrap();
        crate::dump_flows::install(&mut net, 1, &flows).unwrap();
        net.switches.into_iter().collect()
    }

    #[test]
    fn the_first_switch_whose_entries_differ_is_named_with_both_sides_entries() {
        let lab = switches("priority=10,dl_dst=00:00:00:00:00:02 actions=output:2\npriority=0 actions=drop\n");
        let same = switches("priority=0 actions=drop\npriority=10,dl_dst=00:00:00:00:00:02 actions=output:2\n");
        assert_eq!(first_difference(&lab, &same, "Open vSwitch"), None, "order does not matter");
        let other = switches("priority=10,dl_dst=00:00:00:00:00:02 actions=output:3\npriority=0 actions=drop\n");
        let said = first_difference(&lab, &other, "Open vSwitch").unwrap();
        assert_eq!(
            said,
            "s1: the lab has `priority=10,dl_dst=00:00:00:00:00:02 actions=output:2`; \
             Open vSwitch has `priority=10,dl_dst=00:00:00:00:00:02 actions=output:3`"
        );
    }
}
