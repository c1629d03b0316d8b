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
fn at_violation(config: &sts_engine::config::Config, trace: &Trace) -> (Network, BTreeSet<u64>) {
    let mut net = Network::new(&config.topology(), config.network.openflow.wire());
    let mut down = BTreeSet::new();
    for r in trace.records.iter().take_while(|r| r.violation.is_none()) {
        let Some(e) = &r.external else { continue };
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
fn walk(w: &sts_invariants::check::Witness, hosts: &BTreeSet<String>) -> (Vec<String>, bool) {
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

/// The HTML section (`<section id="topology">`) for the experiment in
/// `dir`: None when its config cannot be read.
pub fn section(dir: &Path, trace: &Trace) -> Option<String> {
    let config = sts_engine::config::Config::load(&dir.join("config.toml")).ok()?;
    let (net, down) = at_violation(&config, trace);
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
    Some(html)
}
