//! The network at the violation, drawn: switches on a circle, hosts beside
//! the switch they are plugged into, links up or down as the trace's inputs
//! left them, and the violation's witness path (the frame's walk from its
//! host through the switches) as arrows, its end marked.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use sts_mocknet::network::{Endpoint, Network};
use sts_trace::{External, Trace};

use crate::html::esc;

/// The network as the trace's inputs left it at its violation (or at its
/// end): links, host places, failed switches.
pub fn at_violation(config: &sts_engine::config::Config, trace: &Trace) -> (Network, BTreeSet<u64>) {
    let mut net = Network::new(&config.topology(), config.network.openflow.wire());
    let mut down = BTreeSet::new();
    for r in trace.records.iter().take_while(|r| r.violation().is_none()) {
        let Some(e) = r.external() else { continue };
        match e {
            External::LinkDown { a, .. } | External::LinkUp { a, .. } => {
                let at = Endpoint::Switch { dpid: a.switch, port: a.port };
                if net.peer(at).is_some() {
                    net.set_link(at, matches!(e, External::LinkUp { .. }));
                }
            }
            External::HostMigrate { host, to, .. } => {
                if let Some(i) = net.hosts.iter().position(|h| &h.name == host) {
                    if net.switches.contains_key(to) {
                        net.migrate_host(i, *to);
                    }
                }
            }
            External::SwitchDown { switch } => {
                down.insert(*switch);
            }
            External::SwitchUp { switch } => {
                down.remove(switch);
            }
            _ => {}
        }
    }
    (net, down)
}

/// The nodes a witness walks through, in order: its host, each switch
/// (`s2 in 1: table 0 #3 ...`), and a host it ends at; and whether the
/// frame is dropped at the last switch.
fn walk(w: &sts_trace::WitnessRecord, hosts: &BTreeSet<String>) -> (Vec<String>, bool) {
    let mut nodes = vec![w.from.clone()];
    for hop in &w.path {
        if let Some(s) = hop.split_whitespace().next() {
            nodes.push(s.trim_end_matches(':').to_string());
        }
    }
    let dropped = w.end.contains("dropped") || w.end.contains("drop");
    if !dropped {
        if let Some(h) = w.end.split(|c: char| !c.is_alphanumeric()).find(|t| hosts.contains(*t)) {
            nodes.push(h.to_string());
        }
    }
    (nodes, dropped)
}

/// The config of the experiment `dir` belongs to, if it can be read: its
/// own, or for a replay's directory (`replays/N`, `mcs/final/N`) the one
/// two levels up.
pub fn config(dir: &Path) -> Option<sts_engine::config::Config> {
    let own = dir.join("config.toml");
    let path = if own.exists() {
        own
    } else {
        let parent = dir.parent()?;
        let kind = parent.file_name()?.to_str()?;
        if kind != "replays" && kind != "final" {
            return None;
        }
        parent.parent()?.join("config.toml")
    };
    sts_engine::config::Config::load(&path).ok()
}

/// Where the victim's frame and a frame that still arrives part: another
/// host's ping to the same destination (or the victim's to another host) is
/// delivered, and the first switch of the victim's path that both frames
/// cross and leave differently (towards other switches, or one of them ends
/// there) is where they part, each by the rules it meets there (the
/// "explain against a working reference" of provenance tools such as
/// DiffProv).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parting {
    /// The victim pair and the working one (`h1 → h3`, `h2 → h3`).
    pub victim: String,
    pub working: String,
    /// `s2`, and the rules each frame meets there, in `dump-flows` words.
    pub switch: String,
    pub victim_rules: Vec<String>,
    pub working_rules: Vec<String>,
}

/// The (table, index) pairs of a witness hop (`s2 in 1: table 0 #3
/// (priority 1), table 1 #0 (priority 0)`) and its switch.
pub(crate) fn hop_rules(hop: &str) -> Option<(u64, Vec<(usize, usize)>)> {
    let (head, rules) = hop.split_once(": ")?;
    let dpid = head.split_whitespace().next()?.strip_prefix('s')?.parse().ok()?;
    let mut out = Vec::new();
    for rule in rules.split(", ") {
        let mut words = rule.split_whitespace();
        if words.next() != Some("table") {
            continue;
        }
        let table = words.next().and_then(|t| t.parse().ok());
        let index = words.next().and_then(|i| i.strip_prefix('#')).and_then(|i| i.parse().ok());
        if let (Some(t), Some(i)) = (table, index) {
            out.push((t, i));
        }
    }
    Some((dpid, out))
}

/// The [`Parting`] of `trace`'s blackhole or reachability violation, with
/// the flow tables `switches` had at it; None when no other host's ping to
/// the victim's destination is delivered, or when the two paths share no
/// switch they leave differently.
pub fn parting(
    config: &sts_engine::config::Config,
    trace: &Trace,
    switches: &BTreeMap<u64, sts_mocknet::switch::Switch>,
) -> Option<Parting> {
    let v = sts_engine::records::to_violation(trace.violation()?).ok()?;
    let (mut net, _) = at_violation(config, trace);
    for (dpid, sw) in net.switches.iter_mut() {
        if let Some(rebuilt) = switches.get(dpid) {
            sw.tables = rebuilt.tables.clone();
        }
    }
    parting_in(&net, &v)
}

/// [`parting`] on a network whose tables are those the violation `v` was
/// found in. References are tried in order: other sources to the same
/// destination, then the same source to other destinations; hosts in
/// name order (h2 before h10).
pub fn parting_in(net: &Network, v: &sts_invariants::Violation) -> Option<Parting> {
    let w = v.witness.as_ref()?;
    let index = |name: &str| net.hosts.iter().position(|h| h.name == name);
    let mut others = v.elements.iter().filter(|e| **e != w.from).filter_map(|e| index(e));
    let (destination, None) = (others.next()?, others.next()) else { return None };
    let victim = index(&w.from)?;
    let words = |dpid: u64, rules: &[(usize, usize)]| -> Vec<String> {
        rules
            .iter()
            .filter_map(|&(t, i)| {
                let entry = net.switches.get(&dpid)?.tables.get(t)?.entries().get(i)?;
                Some(crate::flows::entry_with(t, entry, None).trim().to_string())
            })
            .collect()
    };
    let victim_hops: Vec<(u64, Vec<(usize, usize)>)> = w.path.iter().filter_map(|h| hop_rules(h)).collect();
    let mut hosts: Vec<usize> = (0..net.hosts.len()).filter(|&h| h != victim && h != destination).collect();
    hosts.sort_by_key(|&h| crate::html::natural(&net.hosts[h].name));
    let pairs = hosts.iter().map(|&h| (h, destination)).chain(hosts.iter().map(|&h| (victim, h)));
    for (a, b) in pairs {
        let walks = sts_invariants::check::ping_paths(net, a, b);
        let delivered = format!("is delivered to {}", net.hosts[b].name);
        if walks.is_empty() || walks.iter().any(|x| x.end != delivered) {
            continue;
        }
        let hops: Vec<(u64, Vec<(usize, usize)>)> = walks[0].path.iter().filter_map(|h| hop_rules(h)).collect();
        // Where each goes from a switch: the next switch, or its end there.
        let next = |hops: &[(u64, Vec<(usize, usize)>)], i: usize, end: &str| {
            hops.get(i + 1).map_or_else(|| end.to_string(), |(d, _)| format!("s{d}"))
        };
        for (i, (dpid, rules)) in victim_hops.iter().enumerate() {
            let Some(j) = hops.iter().position(|(d, _)| d == dpid) else { continue };
            if next(&victim_hops, i, &w.end) != next(&hops, j, &walks[0].end) {
                return Some(Parting {
                    victim: format!("{} → {}", w.from, net.hosts[destination].name),
                    working: format!("{} → {}", net.hosts[a].name, net.hosts[b].name),
                    switch: format!("s{dpid}"),
                    victim_rules: words(*dpid, rules),
                    working_rules: words(*dpid, &hops[j].1),
                });
            }
        }
    }
    None
}

/// The HTML section (`<section id="topology">`) for an experiment with
/// this config.
pub fn section(config: &sts_engine::config::Config, trace: &Trace) -> String {
    let (net, down) = at_violation(config, trace);
    let switches: Vec<u64> = net.switches.keys().copied().collect();
    let n = switches.len().max(1) as f64;
    let radius = (n * 22.0).clamp(70.0, 420.0);
    let margin = 80.0;
    let (cx, cy) = (radius + margin, radius + margin);
    let size = 2.0 * (radius + margin);
    let angle = |i: usize| std::f64::consts::TAU * i as f64 / n - std::f64::consts::FRAC_PI_2;
    let mut at: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (i, d) in switches.iter().enumerate() {
        let a = angle(i);
        at.insert(format!("s{d}"), (cx + radius * a.cos(), cy + radius * a.sin()));
    }
    // Hosts fan out beyond their switch, away from the centre.
    let mut per_switch: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for i in 0..net.hosts.len() {
        if let Some(Endpoint::Switch { dpid, .. }) = net.live_peer(Endpoint::Host(i)) {
            per_switch.entry(dpid).or_default().push(i);
        }
    }
    for (dpid, hs) in &per_switch {
        let Some(k) = switches.iter().position(|d| d == dpid) else { continue };
        for (j, &h) in hs.iter().enumerate() {
            let spread = (j as f64 - (hs.len() as f64 - 1.0) / 2.0) * 0.35;
            let a = angle(k) + spread;
            at.insert(net.hosts[h].name.clone(), (cx + (radius + 55.0) * a.cos(), cy + (radius + 55.0) * a.sin()));
        }
    }

    let mut svg = format!(
        r##"<svg id="topology-map" xmlns="http://www.w3.org/2000/svg" width="{size:.0}" height="{size:.0}" viewBox="0 0 {size:.0} {size:.0}"><defs><marker id="hop" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="4" markerHeight="4" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#c0392b"/></marker></defs>"##
    );
    for ((a, pa), (b, pb)) in net.switch_links() {
        let (Some(p), Some(q)) = (at.get(&format!("s{a}")), at.get(&format!("s{b}"))) else { continue };
        let up = net.live_peer(Endpoint::Switch { dpid: a, port: pa }).is_some();
        let _ = write!(
            svg,
            r#"<line class="link{}" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"><title>s{a}:{pa} - s{b}:{pb} {}</title></line>"#,
            if up { "" } else { " down" },
            p.0,
            p.1,
            q.0,
            q.1,
            if up { "up" } else { "down" }
        );
    }
    for (dpid, hs) in &per_switch {
        for &h in hs {
            let (Some(p), Some(q)) = (at.get(&format!("s{dpid}")), at.get(&net.hosts[h].name)) else { continue };
            let _ = write!(
                svg,
                r#"<line class="hostlink" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/>"#,
                p.0, p.1, q.0, q.1
            );
        }
    }
    // The witness: arrows from node to node, shortened to stop at the nodes' edges.
    let violation = trace.violation();
    let names: BTreeSet<String> = net.hosts.iter().map(|h| h.name.clone()).collect();
    let mut on_path = BTreeSet::new();
    let mut caption = String::from("No witness path (the violation has none).");
    if let Some(w) = violation.and_then(|v| v.witness.as_ref()) {
        let (nodes, dropped) = walk(w, &names);
        for (k, pair) in nodes.windows(2).enumerate() {
            let (Some(p), Some(q)) = (at.get(&pair[0]), at.get(&pair[1])) else { continue };
            let (dx, dy) = (q.0 - p.0, q.1 - p.1);
            let len = (dx * dx + dy * dy).sqrt().max(1.0);
            let (ux, uy) = (dx / len, dy / len);
            let _ = write!(
                svg,
                r##"<line class="witness" data-hop="{k}" marker-end="url(#hop)" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"><title>{} → {}</title></line>"##,
                p.0 + ux * 16.0,
                p.1 + uy * 16.0,
                q.0 - ux * 18.0,
                q.1 - uy * 18.0,
                esc(&pair[0]),
                esc(&pair[1])
            );
        }
        on_path.extend(nodes.iter().cloned());
        if let (true, Some(last)) = (dropped, nodes.last().and_then(|l| at.get(l))) {
            let _ = write!(
                svg,
                r#"<text class="drop" x="{:.1}" y="{:.1}">✕<title>{}</title></text>"#,
                last.0 + 14.0,
                last.1 - 14.0,
                esc(&w.end)
            );
        }
        caption = format!("Witness: {} from {}, {}.", esc(&w.header), esc(&w.from), esc(&w.end));
    }
    for d in &switches {
        let name = format!("s{d}");
        let (x, y) = at[&name];
        let mut class = String::from("node switch");
        if on_path.contains(&name) {
            class.push_str(" on-path");
        }
        if down.contains(d) {
            class.push_str(" failed");
        }
        let _ = write!(
            svg,
            r#"<g class="{class}" data-node="{name}"><rect x="{:.1}" y="{:.1}" width="32" height="22" rx="4"/><text x="{x:.1}" y="{:.1}">{name}</text></g>"#,
            x - 16.0,
            y - 11.0,
            y + 4.0
        );
    }
    for h in &net.hosts {
        let Some(&(x, y)) = at.get(&h.name) else { continue };
        let class = if on_path.contains(&h.name) { "node host on-path" } else { "node host" };
        let _ = write!(
            svg,
            r#"<g class="{class}" data-node="{}"><circle cx="{x:.1}" cy="{y:.1}" r="13"/><text x="{x:.1}" y="{:.1}">{}</text></g>"#,
            esc(&h.name),
            y + 4.0,
            esc(&h.name)
        );
    }
    svg.push_str("</svg>");
    let unplugged: Vec<&str> = net
        .hosts
        .iter()
        .enumerate()
        .filter(|(i, _)| net.live_peer(Endpoint::Host(*i)).is_none())
        .map(|(_, h)| h.name.as_str())
        .collect();
    let mut html = String::from(
        r#"<section id="topology"><h2>The network at the violation</h2><p>Links and host places as the trace's inputs left them (dashed: down; a failed switch is greyed). "#,
    );
    html.push_str(&caption);
    if !unplugged.is_empty() {
        let _ = write!(html, " Unplugged: {}.", esc(&unplugged.join(", ")));
    }
    html.push_str("</p>");
    html.push_str(&svg);
    html.push_str("</section>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_invariants::check::{Checker, Facts, Invariant};
    use sts_mocknet::Topology;
    use sts_proxy::wire::v13::oxm::{BasicOxm, Field, Match};
    use sts_proxy::wire::v13::{self, Action, Instruction};
    use sts_proxy::wire::{Body, Message, OFP13};

    fn install(net: &mut Network, dpid: u64, priority: u16, fields: Vec<BasicOxm>, out: Option<u32>) {
        let actions = out.map(|port| vec![Action::Output { port, max_len: 0 }]).unwrap_or_default();
        let fm = v13::FlowMod::add(0, priority, Match::new(fields), vec![Instruction::ApplyActions(actions)]);
        let m = Message::new(1, Body::V13(v13::Msg::FlowMod(fm)));
        net.handle_controller(dpid, &m.emit().expect("encodes"), &m, 0);
    }

    fn blackhole(net: &Network, pair: [&str; 2]) -> sts_invariants::Violation {
        let checker = Checker { enabled: [Invariant::Blackhole].into_iter().collect(), ..Checker::default() };
        let report = checker.check(net, &Facts::default());
        report.violations.into_iter().find(|v| v.elements == pair).unwrap_or_else(|| panic!("{pair:?} blackholed"))
    }

    /// h1 - s1 - s2 - s3 - h3, h2 on s2 (hosts on port 1; s1 2 to s2; s2 2
    /// to s1, 3 to s3; s3 2 to s2). s2 drops h1's frames for h3 (a rule on
    /// the source, priority 20) while h2's go on (priority 10): the two
    /// paths part at s2, where each meets its own rule.
    #[test]
    fn the_victims_path_and_a_working_one_part_where_their_rules_differ() {
        let mut net = Network::new(&Topology::linear(3), OFP13);
        let (src, dst) = (|h: u128| BasicOxm::exact(Field::EthSrc, h), |h: u128| BasicOxm::exact(Field::EthDst, h));
        install(&mut net, 1, 1, vec![dst(3)], Some(2));
        install(&mut net, 2, 20, vec![src(1), dst(3)], None);
        install(&mut net, 2, 10, vec![dst(3)], Some(3));
        install(&mut net, 3, 1, vec![dst(3)], Some(1));
        let v = blackhole(&net, ["h1", "h3"]);
        let p = parting_in(&net, &v).expect("h2 → h3 arrives");
        assert_eq!((p.victim.as_str(), p.working.as_str(), p.switch.as_str()), ("h1 → h3", "h2 → h3", "s2"));
        assert_eq!(p.victim_rules, ["priority=20,dl_src=00:00:00:00:00:01,dl_dst=00:00:00:00:00:03 actions=drop"]);
        assert_eq!(p.working_rules, ["priority=10,dl_dst=00:00:00:00:00:03 actions=output:3"]);
        // Without a frame that arrives there is nothing to part from.
        let mut alone = Network::new(&Topology::linear(3), OFP13);
        install(&mut alone, 1, 1, vec![dst(3)], Some(2));
        install(&mut alone, 2, 20, vec![dst(3)], None);
        let v = blackhole(&alone, ["h1", "h3"]);
        assert_eq!(parting_in(&alone, &v), None);
    }
}
