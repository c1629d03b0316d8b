//! `DIR/report/index.html`: one self-contained page (inline SVG, CSS and a
//! little JavaScript; nothing fetched) showing a run as a space-time diagram.
//!
//! One vertical lane per actor: `sts` (its inputs and the violation), each
//! controller, each switch. Each trace record is a row, top to bottom in the
//! trace's order; an OpenFlow message is an arrow from its sender's lane to
//! its receiver's, an input a dot on the `sts` lane with arrows to what it
//! touches, a controller's log line a tick on its lane, the violation a red
//! band. With a minimization in `DIR/mcs/`, the inputs of the minimal causal
//! sequence are highlighted. Message types can be hidden, the diagram zoomed;
//! hovering shows an element's record. Past [`MAX_ROWS`] records the page
//! says it stops drawing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use sts_trace::{Internal, Trace};

/// Records drawn at most; the page says when it stops.
pub const MAX_ROWS: usize = 200_000;

const ROW: usize = 7;
const LANE: usize = 90;
const TOP: usize = 40;
/// Rows per band of the diagram (one <svg> each, drawn when in view).
const BAND_ROWS: usize = 1000;
const LEFT: usize = 60;

/// What a minimization found, as far as the page needs it.
#[derive(Debug, Default, Clone)]
pub struct Mcs {
    /// The original trace's `seq` of each input kept.
    pub seqs: BTreeSet<u64>,
    /// One line: "2 of 41 inputs ...".
    pub summary: String,
    /// Inputs left after each reduction (the first: the original's).
    pub curve: Vec<u64>,
    /// The OpenFlow messages `--internal` kept, as `dpid controller dir fp`
    /// (`mcs/internal.json`): the original's messages like them are drawn in
    /// orange.
    pub messages: BTreeSet<String>,
}

impl Mcs {
    /// Reads `mcs/report.json` (written by `sts minimize`).
    pub fn from_report_json(text: &str) -> Option<Mcs> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let seqs = v["events"].as_array()?.iter().filter_map(|e| e["seq"].as_u64()).collect();
        let summary = format!(
            "minimal causal sequence: {} of {} inputs, reproducing {}/{} ({})",
            v["mcs_inputs"].as_u64()?,
            v["original_inputs"].as_u64()?,
            v["final_reproduced"].as_u64().unwrap_or(0),
            v["final_replays"].as_u64().unwrap_or(0),
            v["violation"].as_str().unwrap_or("")
        );
        let curve = v["curve"].as_array().map(|c| c.iter().filter_map(|n| n.as_u64()).collect()).unwrap_or_default();
        Some(Mcs { seqs, summary, curve, messages: BTreeSet::new() })
    }

    /// Adds the messages `mcs/internal.json` (`sts minimize --internal`) kept.
    pub fn with_internal_json(mut self, text: &str) -> Mcs {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else { return self };
        for m in v["kept"].as_array().into_iter().flatten() {
            let id = &m["id"];
            let dir = match id["dir"].as_str() {
                Some("controller_to_switch") => "to_switch",
                Some("switch_to_controller") => "to_controller",
                _ => continue,
            };
            let (Some(dpid), Some(c), Some(fp)) =
                (id["channel"]["dpid"].as_u64(), id["channel"]["controller"].as_u64(), id["fp"].as_str())
            else {
                continue;
            };
            self.messages.insert(format!("{dpid} {c} {dir} {fp}"));
        }
        if !self.messages.is_empty() {
            self.summary.push_str(&format!(
                "; --internal kept {} messages (orange arrows: the original's messages like them)",
                v["kept"].as_array().map_or(0, Vec::len)
            ));
        }
        self
    }
}

/// `s` made safe in HTML text and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A host name's sort key: h2 before h10.
pub(crate) fn natural(name: &str) -> (u64, String) {
    let n = name.trim_start_matches(|c: char| !c.is_ascii_digit()).parse::<u64>().unwrap_or(u64::MAX);
    (n, name.to_string())
}

/// The lanes of `trace`, left to right: sts, controllers, switches, hosts.
fn lanes(trace: &Trace) -> Vec<String> {
    let mut controllers = BTreeSet::new();
    let mut switches = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for r in &trace.records {
        match r.internal() {
            Some(Internal::Openflow { dpid, controller, .. }) => {
                switches.insert(*dpid);
                controllers.insert(*controller);
            }
            Some(Internal::Log { controller, .. }) => {
                if let Some(n) = controller.strip_prefix('c').and_then(|n| n.parse::<usize>().ok()) {
                    controllers.insert(n);
                }
            }
            Some(Internal::Frame { host, .. }) => {
                hosts.insert(natural(host));
            }
            _ => {}
        }
        if let Some(e) = r.external() {
            for lane in e.touches() {
                if let Some(n) = lane.strip_prefix('s').and_then(|n| n.parse::<u64>().ok()) {
                    switches.insert(n);
                }
            }
        }
    }
    std::iter::once("sts".to_string())
        .chain(controllers.into_iter().map(|c| format!("c{c}")))
        .chain(switches.into_iter().map(|s| format!("s{s}")))
        .chain(hosts.into_iter().map(|(_, h)| h))
        .collect()
}

/// A second run to set beside the trace: its label and its trace.
pub struct Other {
    pub label: String,
    pub trace: Trace,
}

/// The page for `trace` (titled `title`), with the minimization's inputs
/// highlighted when `mcs` is given.
pub fn page(title: &str, trace: &Trace, mcs: Option<&Mcs>) -> String {
    page_with_diff(title, trace, mcs, None)
}

/// [`page`], with a trace diff of `trace` (labelled `label`) against `other`
/// after the diagram.
pub fn page_with_diff(title: &str, trace: &Trace, mcs: Option<&Mcs>, diff: Option<(&str, &Other)>) -> String {
    page_with(title, trace, mcs, diff, None)
}

/// [`page_with_diff`], for an experiment with this config: a section
/// drawing the network at the violation ([`crate::topology::section`])
/// before the flow tables, and in "why" where the victim's path and a
/// working one part ([`crate::topology::parting`]).
pub fn page_with(
    title: &str,
    trace: &Trace,
    mcs: Option<&Mcs>,
    diff: Option<(&str, &Other)>,
    config: Option<&sts_engine::config::Config>,
) -> String {
    let topology = config.filter(|_| trace.violation().is_some()).map(|c| crate::topology::section(c, trace));
    let topology = topology.as_deref();
    let lanes = lanes(trace);
    let x: BTreeMap<&str, usize> = lanes.iter().enumerate().map(|(i, l)| (l.as_str(), LEFT + i * LANE)).collect();
    let shown = trace.records.len().min(MAX_ROWS);
    let height = TOP + shown * ROW + 40;
    let width = LEFT + lanes.len() * LANE;
    let mut svg = String::with_capacity(shown * 160);
    let mut types: BTreeMap<&str, usize> = BTreeMap::new();
    let mut messages = 0usize;
    // The diagram is cut into bands of rows, each its own <svg> in a box
    // the browser lays out and paints only when it comes into view
    // (`content-visibility: auto`): a 135,000-record page then costs its
    // parsing, not the drawing of rows nobody looks at.
    let bands = shown.div_ceil(BAND_ROWS).max(1);
    let band_top = |k: usize| if k == 0 { 0 } else { TOP + k * BAND_ROWS * ROW - ROW / 2 };
    let band_bottom = |k: usize| if k + 1 >= bands { height } else { band_top(k + 1) };
    let open_band = |svg: &mut String, k: usize| {
        let (top, h) = (band_top(k), band_bottom(k) - band_top(k));
        let _ = write!(
            svg,
            r#"<div class="band" data-h="{h}" style="width:{width}px;height:{h}px"><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" viewBox="0 {top} {width} {h}">"#
        );
        for (lane, &lx) in &x {
            let _ = write!(
                svg,
                r#"<line class="lane" data-lane="{lane}" x1="{lx}" y1="{}" x2="{lx}" y2="{}"/>"#,
                top.max(TOP - 12),
                top + h
            );
            if k == 0 {
                let _ = write!(svg, r#"<text class="label" x="{lx}" y="{}">{lane}</text>"#, TOP - 18);
            }
        }
    };
    let _ = write!(
        svg,
        r#"<div id="diagram" data-w="{width}" data-h="{height}" style="width:{width}px;height:{height}px"><svg class="defs" width="0" height="0"><defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="5" markerHeight="5" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="rgb(68,85,102)"/></marker></defs></svg>"#
    );
    open_band(&mut svg, 0);
    let mut anchor_links = String::new();
    let (mut dropped, mut queued) = (0usize, 0usize);
    let dropped_later = dropped_after_holding(trace);
    // Each queued message the proxy delivered later (the row of its
    // `delivered` record, drawn if within `shown`); and the ones drawn,
    // awaiting that row.
    let delivered = trace.deliveries();
    let mut waits: BTreeMap<u64, (String, String, u64, u64)> = BTreeMap::new();
    let mut violation_text = None;
    // The rows the page links to (the culprit's chain, the MCS) get an id.
    // The flow tables at the violation, rebuilt once for the chain and the tables section.
    let tables = trace.violation().and_then(|_| crate::tables::at_violation(trace));
    let chain = tables.as_ref().and_then(|(_, switches)| crate::why::chain(trace, switches));
    let parting =
        config.zip(tables.as_ref()).and_then(|(c, (_, switches))| crate::topology::parting(c, trace, switches));
    let mcs_seqs = mcs.map(|m| m.seqs.clone()).unwrap_or_default();
    let mut anchors = crate::why::anchors(chain.as_ref(), &mcs_seqs);
    // The races that decide the violation (a bounded look: the page also
    // serves traces of a hundred thousand records).
    let races = trace.violation().map(|_| {
        let places = config.map(crate::races::places).unwrap_or_default();
        crate::races::analyze(trace, &places, &crate::races::Options { max_events: 4_000, ..Default::default() })
    });
    for race in races.iter().flat_map(|r| r.harmful().take(5)) {
        anchors.extend([race.first.seq, race.second.seq]);
    }
    for (row, r) in trace.records.iter().take(shown).enumerate() {
        let y = TOP + row * ROW;
        if row > 0 && row % BAND_ROWS == 0 {
            svg.push_str("</svg></div>");
            open_band(&mut svg, row / BAND_ROWS);
        }
        if anchors.contains(&r.seq) {
            // Outside the bands (an unpainted band's elements have no place
            // to scroll to), a little above the row so that a jump shows
            // what led to it.
            let top = y.saturating_sub(40);
            let _ =
                write!(anchor_links, r#"<a id="r{}" class="anchor" data-y="{top}" style="top:{top}px"></a>"#, r.seq);
        }
        // Shown on hover by the page's script (an attribute, not a <title>
        // element: half the DOM nodes on a 100,000-record page).
        let title = |what: &str| format!(r#" data-t="seq {} at {} ms: {}""#, r.seq, r.t_ms, esc(what));
        if let Some(e) = r.external() {
            let kept = mcs.is_some_and(|m| m.seqs.contains(&r.seq));
            let class = if kept { "input mcs" } else { "input" };
            let what = format!("input: {}{}", e.describe(), if kept { " (in the MCS)" } else { "" });
            let sx = x["sts"];
            for lane in e.touches() {
                if let Some(&tx) = x.get(lane.as_str()) {
                    let _ = write!(
                        svg,
                        r#"<line class="{class}" x1="{sx}" y1="{y}" x2="{tx}" y2="{}" marker-end="url(#arrow)"{}/>"#,
                        y + 3,
                        title(&what)
                    );
                }
            }
            let _ = write!(svg, r#"<circle class="{class}" cx="{sx}" cy="{y}" r="4"{}/>"#, title(&what));
        }
        match r.internal() {
            Some(i @ Internal::Openflow { msg, dpid, controller, dir, fp, proxy, raw }) => {
                let (from, to) = i.sender_receiver().expect("an OpenFlow message has two ends");
                let t = msg.as_str();
                *types.entry(t).or_default() += 1;
                messages += 1;
                let kept = mcs.is_some_and(|m| {
                    !m.messages.is_empty()
                        && m.messages.contains(&format!("{dpid} {controller} {} {}", dir.as_str(), fp.0))
                });
                // What the proxy did with it, drawn: a dropped message stops
                // short of its receiver; a held or delayed one is dashed.
                let proxy =
                    if dropped_later.contains(&r.seq) { &Some(sts_trace::ProxyDecision::Dropped) } else { proxy };
                let (decision, said, end) = match proxy {
                    Some(sts_trace::ProxyDecision::Dropped) if dropped_later.contains(&r.seq) => {
                        dropped += 1;
                        (
                            " dropped",
                            " (held by the proxy, then dropped: never delivered)".to_string(),
                            (x[from.as_str()] + x[to.as_str()]) / 2,
                        )
                    }
                    Some(sts_trace::ProxyDecision::Dropped) => {
                        dropped += 1;
                        (
                            " dropped",
                            " (dropped by the proxy: never delivered)".to_string(),
                            (x[from.as_str()] + x[to.as_str()]) / 2,
                        )
                    }
                    Some(sts_trace::ProxyDecision::Queued) => {
                        queued += 1;
                        match delivered.get(&r.seq).filter(|&&drow| drow < shown) {
                            // It stops at the proxy (half-way); its delivery
                            // row draws the rest, and a dotted line the wait.
                            Some(&drow) => {
                                let (dseq, dt) = (trace.records[drow].seq, trace.records[drow].t_ms);
                                let mid = (x[from.as_str()] + x[to.as_str()]) / 2;
                                if drow / BAND_ROWS == row / BAND_ROWS && drow > row {
                                    let _ = write!(
                                        svg,
                                        r#"<line class="wait" x1="{mid}" y1="{}" x2="{mid}" y2="{}"/>"#,
                                        y + 3,
                                        TOP + drow * ROW
                                    );
                                }
                                waits.insert(r.seq, (from.clone(), to.clone(), r.t_ms, *dpid));
                                (
                                    " queued",
                                    format!(
                                        " (held or delayed by the proxy {} ms: delivered at {dt} ms, seq {dseq})",
                                        dt - r.t_ms
                                    ),
                                    mid,
                                )
                            }
                            None => (
                                " queued",
                                " (held or delayed by the proxy, delivered later)".to_string(),
                                x[to.as_str()],
                            ),
                        }
                    }
                    None => ("", String::new(), x[to.as_str()]),
                };
                let _ = write!(
                    svg,
                    r#"<line class="msg t-{t} sw-s{dpid}{}{decision}" x1="{}" y1="{y}" x2="{end}" y2="{}"{}{}/>"#,
                    if kept { " kept" } else { "" },
                    x[from.as_str()],
                    y + 3,
                    // A message waiting at the proxy has no head: its delivery's arrow has.
                    if waits.contains_key(&r.seq) { "" } else { r#" marker-end="url(#arrow)""# },
                    title(&match raw.as_ref().and_then(crate::flows::message_line) {
                        Some(words) => format!("{t}: {from} → {to}{said} {words}"),
                        None => format!("{t}: {from} → {to}{said}"),
                    })
                );
            }
            Some(Internal::Delivered { of }) => {
                if let Some((from, to, came, dpid)) = waits.remove(of) {
                    let (t, words) = match trace.record(*of).and_then(|a| a.internal()) {
                        Some(Internal::Openflow { msg, raw, .. }) => {
                            (msg.as_str(), raw.as_ref().and_then(crate::flows::message_line).unwrap_or_default())
                        }
                        _ => ("message", String::new()),
                    };
                    let _ = write!(
                        svg,
                        r#"<line class="msg t-{t} sw-s{dpid} delivered" x1="{}" y1="{y}" x2="{}" y2="{}" marker-end="url(#arrow)"{}/>"#,
                        (x[from.as_str()] + x[to.as_str()]) / 2,
                        x[to.as_str()],
                        y + 3,
                        title(&format!(
                            "{t}: {from} → {to} delivered by the proxy {} ms after it came (seq {of}) {words}",
                            r.t_ms.saturating_sub(came)
                        ))
                    );
                }
            }
            Some(Internal::Log { controller, line, .. }) => {
                if let Some(&cx) = x.get(controller.as_str()) {
                    let _ = write!(
                        svg,
                        r#"<line class="log" x1="{}" y1="{y}" x2="{}" y2="{y}"{}/>"#,
                        cx - 5,
                        cx + 5,
                        title(&format!("{controller} log: {line}"))
                    );
                }
            }
            Some(Internal::Dataplane(report)) => {
                let _ = write!(
                    svg,
                    r#"<rect class="dataplane" x="{}" y="{}" width="8" height="5"{}/>"#,
                    x["sts"] - 4,
                    y - 2,
                    title(&format!("dataplane: {}", report.describe()))
                );
            }
            Some(Internal::Frame { host, sent, raw }) => {
                if let Some(&hx) = x.get(host.as_str()) {
                    let class = if *sent { "frame sent" } else { "frame received" };
                    let _ = write!(
                        svg,
                        r#"<circle class="{class}" cx="{hx}" cy="{y}" r="3"{}/>"#,
                        title(&crate::diff::frame_line(host, *sent, raw.as_deref()))
                    );
                }
            }
            None => {}
        }
        if let Some(v) = r.violation() {
            violation_text = Some(match sts_engine::records::to_violation(v) {
                Ok(v) => crate::violation(&v),
                Err(e) => format!("{}\n({e})\n", v.summary),
            });
            let _ = write!(
                svg,
                r#"<rect class="violation" x="0" y="{}" width="{width}" height="5"{}/>"#,
                y - 2,
                title(&format!("violation: {}", v.summary))
            );
        }
    }
    svg.push_str("</svg></div>");
    svg.push_str(&anchor_links);
    svg.push_str("</div>");

    let mut html = String::with_capacity(svg.len() + 8192);
    let mut tables_html = None;
    let _ = write!(
        html,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>sts: {t}</title><style>{css}</style></head><body>"#,
        t = esc(title),
        css = CSS
    );
    let _ = write!(html, "<h1>{}</h1>", esc(title));
    let _ = write!(
        html,
        r#"<p id="counts">{} records, {} OpenFlow messages, {} lanes</p>"#,
        trace.records.len(),
        messages,
        lanes.len()
    );
    if dropped + queued > 0 {
        let _ = write!(
            html,
            r#"<p id="proxy-decisions">The proxy dropped {dropped} message(s) (arrows that stop half-way) and held or delayed {queued} (dashed: to the proxy half-way, a dotted wait, then on to the receiver when it was delivered).</p>"#
        );
    }
    if trace.records.len() > shown {
        let _ = write!(
            html,
            r#"<p id="truncated" class="warn">Drawing stops after {shown} of {} records (the rest is in the trace).</p>"#,
            trace.records.len()
        );
    }
    if let Some(v) = &violation_text {
        let _ = write!(html, r#"<h2>Violation</h2><pre id="violation">{}</pre>"#, esc(v));
        if topology.is_some() {
            let with =
                if trace.violation().is_some_and(|v| v.witness.is_some()) { ", with the witness path" } else { "" };
            let _ = write!(html, r##"<p><a href="#topology">The network at the violation{with}</a></p>"##);
        }
        html.push_str(&crate::why::section(chain.as_ref(), parting.as_ref(), trace, &mcs_seqs));
        if let Some(section) = races.as_ref().and_then(crate::races::section) {
            html.push_str(&section);
        }
        let culprit = chain.as_ref().map(|c| (c.switch.as_str(), c.rule.as_str()));
        if let Some(t) = tables.as_ref().and_then(|(at, switches)| crate::tables::section(*at, switches, culprit)) {
            let _ =
                write!(html, r##"<p><a href="#tables">The flow tables at the violation</a> (below the diagram)</p>"##);
            tables_html = Some(t);
        }
    }
    if let Some(m) = mcs {
        let _ = write!(html, r#"<p id="mcs" class="mcs-note">{} (highlighted)</p>"#, esc(&m.summary));
        html.push_str(&curve(&m.curve));
    }
    let diff_html = diff.map(|(label, other)| crate::diff::section(label, trace, &other.label, &other.trace));
    if let Some((_, other)) = diff {
        let _ = write!(
            html,
            r##"<p><a href="#diff">Trace diff against {}</a> (below the diagram)</p>"##,
            esc(&other.label)
        );
    }
    html.push_str(
        r#"<div id="controls"><button id="zoom-in">zoom in</button><button id="zoom-out">zoom out</button> <input id="find" type="search" size="24" placeholder="seq 123, or text (Enter: next)"> <span id="found"></span> show:"#,
    );
    for (t, n) in &types {
        let _ = write!(html, r#" <label><input type="checkbox" checked data-type="{t}">{t} ({n})</label>"#);
    }
    // Messages by switch; everything by kind.
    html.push_str("<br>switches:");
    for lane in lanes.iter().filter(|l| l.starts_with('s') && l.as_str() != "sts") {
        let _ = write!(html, r#" <label><input type="checkbox" checked data-switch="{lane}">{lane}</label>"#);
    }
    html.push_str(" kinds:");
    for (kind, label) in [
        ("input", "inputs"),
        ("msg", "OpenFlow"),
        ("log", "logs"),
        ("frame", "host frames"),
        ("dataplane", "dataplane"),
    ] {
        let _ = write!(html, r#" <label><input type="checkbox" checked data-kind="{kind}">{label}</label>"#);
    }
    // The lane names again, in the sticky controls: they stay in sight while
    // the diagram scrolls (the script keeps them aligned and zoomed with it).
    let _ = write!(html, r#"<div id="lane-head"><svg id="lanes" width="{width}" height="18">"#);
    for (lane, &lx) in &x {
        let _ = write!(html, r#"<text class="label" data-x="{lx}" x="{lx}" y="13">{lane}</text>"#);
    }
    html.push_str("</svg></div>");
    html.push_str(r#"</div><div id="tip"></div><div id="view">"#);
    html.push_str(&svg);
    html.push_str("</div>");
    if let Some(t) = topology {
        html.push_str(t);
    }
    if let Some(t) = &tables_html {
        html.push_str(t);
    }
    if let Some(d) = &diff_html {
        html.push_str(d);
    }
    html.push_str("<script>");
    html.push_str(SCRIPT);
    html.push_str("</script></body></html>\n");
    html
}

/// The minimization's reduction curve: inputs left after each reduction.
fn curve(points: &[u64]) -> String {
    if points.len() < 2 {
        return String::new();
    }
    let (w, h, pad) = (360.0, 120.0, 30.0);
    let top = *points.iter().max().unwrap_or(&1).max(&1) as f64;
    let step = (w - 2.0 * pad) / (points.len() - 1) as f64;
    let xy: Vec<(f64, f64)> = points
        .iter()
        .enumerate()
        .map(|(i, &n)| (pad + i as f64 * step, h - pad + 10.0 - (n as f64 / top) * (h - 2.0 * pad)))
        .collect();
    let line: Vec<String> = xy.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let mut s = format!(
        r#"<h2>Reduction</h2><svg id="curve" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}"><polyline class="curve" points="{}"/>"#,
        line.join(" ")
    );
    for ((x, y), n) in xy.iter().zip(points) {
        let _ = write!(
            s,
            r#"<circle class="curve-point" cx="{x:.1}" cy="{y:.1}" r="3" data-t="{n} inputs"/><text class="curve-label" x="{x:.1}" y="{:.1}">{n}</text>"#,
            y - 6.0
        );
    }
    let _ = write!(
        s,
        r#"<text class="axis" x="{pad}" y="{}">reductions →  (inputs left after each)</text></svg>"#,
        h - 4.0
    );
    s
}

const CSS: &str = "body{font:13px system-ui,sans-serif;margin:16px;color:#222}h1{font-size:18px}h2{font-size:15px}\
pre{background:#f6f6f6;padding:8px;overflow:auto}.warn{color:#a40}.mcs-note{color:#b25000;font-weight:bold}\
#controls{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ccc;z-index:1}\
#view{overflow:auto}#lane-head{overflow:hidden;margin-top:4px}\
#topology-map .link{stroke:#888;stroke-width:2}#topology-map .link.down{stroke-dasharray:6 4;stroke:#c66}\
#topology-map .hostlink{stroke:#bbb;stroke-width:1}#topology-map .witness{stroke:#c0392b;stroke-width:3}\
#topology-map .node rect{fill:#e8eef6;stroke:#456}#topology-map .node circle{fill:#f4f4f4;stroke:#777}\
#topology-map .on-path rect,#topology-map .on-path circle{fill:#fbe3c8;stroke:#b25000;stroke-width:2}\
#topology-map .failed rect{fill:#ddd;stroke:#999;stroke-dasharray:3 2}\
#topology-map text{font:11px sans-serif;text-anchor:middle}#topology-map .drop{font:bold 18px sans-serif;fill:#c0392b}\
.lane{stroke:#bbb;stroke-width:1}.label{font:bold 12px sans-serif;text-anchor:middle;fill:#333}\
.msg{stroke:#456;stroke-width:1}.msg:hover{stroke:#06c;stroke-width:3}.msg.kept{stroke:#d35400;stroke-width:2.5}\
.frame.sent{fill:#2a7}.frame.received{fill:#fff;stroke:#2a7;stroke-width:1.5}\
.input{stroke:#888;fill:#888;stroke-width:1.5}.input.mcs{stroke:#e07000;fill:#e07000;stroke-width:3}\
.log{stroke:#9a6;stroke-width:2}.curve{fill:none;stroke:#e07000;stroke-width:2}.curve-point{fill:#e07000}\
.curve-label,.axis{font:11px sans-serif;fill:#555;text-anchor:middle}.axis{text-anchor:start}#tip{position:fixed;right:12px;top:12px;max-width:45%;background:#ffd;border:1px solid #cc9;padding:4px 8px;display:none;z-index:2}.dataplane{fill:#c90}.violation{fill:#d22;opacity:.8}\
table.diff{border-collapse:collapse;font:12px monospace;table-layout:fixed;width:100%}table.diff col.n{width:4em}table.diff col.seq{width:5em}table.diff col.ms{width:6em}\
table.diff td{overflow-wrap:anywhere}.diff-rows{content-visibility:auto;contain-intrinsic-size:auto 8000px}table.diff td,table.diff th{padding:1px 6px;text-align:left}\
tr.left td{background:#fde2e2}tr.right td{background:#e0f5e0}#first-divergence td{border-top:2px solid #d22;border-bottom:2px solid #d22}\
.anchor{fill:none}#diagram .hit{stroke:#f0c000;stroke-width:5;fill:#f0c000}.msg.dropped{stroke:#c0392b;stroke-width:2}.msg.queued,.msg.delivered{stroke-dasharray:3 3}.wait{stroke:#8a6d3b;stroke-dasharray:1 3;stroke-width:1.5}#why ol.chain li{margin:2px 0}#parting ul{margin:2px 0}#parting p{margin:6px 0 2px}#why code.culprit-rule,mark#culprit-rule{background:#fbe3c8;color:#222}\
#why{border-left:3px solid #b25000;padding-left:10px}\
#diagram{position:relative}.band{content-visibility:auto;overflow:hidden}.defs{position:absolute}\
#diagram .anchor{position:absolute;left:0;width:1px;height:1px}\
#diagram text.arrow-label{display:none;stroke:none;fill:#234;font:4.2px sans-serif;text-anchor:middle}#diagram.labelled text.arrow-label{display:inline}\
#tip.pinned{border-color:#b25000;user-select:text;cursor:pointer}";

const SCRIPT: &str = r#"
(function(){
  var diagram=document.getElementById('diagram'), zoom=1, css=document.createElement('style');
  document.head.appendChild(css);
  function hidden(){
    var rules=[];
    document.querySelectorAll('#controls input').forEach(function(c){
      if(c.checked||c.type!=='checkbox') return;
      if(c.dataset.type) rules.push('#diagram .t-'+c.dataset.type+'{display:none!important}');
      if(c.dataset.switch) rules.push('#diagram .sw-'+c.dataset.switch+'{display:none!important}');
      if(c.dataset.kind) rules.push('#diagram .'+c.dataset.kind+'{display:none!important}');
    });
    css.textContent=rules.join('');
  }
  document.querySelectorAll('#controls input').forEach(function(c){c.addEventListener('change',hidden);});
  var w=+diagram.dataset.w, h=+diagram.dataset.h, bands=diagram.querySelectorAll('.band');
  var head=document.getElementById('lane-head'), lanes=document.getElementById('lanes'), view=document.getElementById('view');
  view.addEventListener('scroll',function(){head.scrollLeft=view.scrollLeft;});
  function setZoom(z){
    var keep=(window.scrollY-view.offsetTop)/zoom;
    zoom=Math.max(0.1,Math.min(8,z));
    diagram.style.width=w*zoom+'px'; diagram.style.height=h*zoom+'px';
    bands.forEach(function(b){var bh=b.dataset.h*zoom, s=b.firstChild;
      b.style.width=w*zoom+'px'; b.style.height=bh+'px'; s.setAttribute('width',w*zoom); s.setAttribute('height',bh);});
    diagram.querySelectorAll('.anchor').forEach(function(a){a.style.top=a.dataset.y*zoom+'px';});
    lanes.setAttribute('width',w*zoom);
    lanes.querySelectorAll('text').forEach(function(t){t.setAttribute('x',t.dataset.x*zoom);});
    head.scrollLeft=view.scrollLeft;
    diagram.classList.toggle('labelled',zoom>=2);
    if(keep>0) window.scrollTo(window.scrollX,view.offsetTop+keep*zoom);
    label();
  }
  // Zoomed in, each arrow in sight gets its message as a label (made when
  // its band first comes into view: a label per arrow of the whole page
  // would double the page's elements).
  function label(){
    if(zoom<2) return;
    bands.forEach(function(b){
      if(b.dataset.labelled) return;
      var r=b.getBoundingClientRect(); if(r.bottom<0||r.top>innerHeight) return;
      b.dataset.labelled=1; var s=b.firstChild;
      s.querySelectorAll('line.msg,line.input').forEach(function(l){
        var t=l.getAttribute('data-t')||'', text=t.slice(t.indexOf(': ')+2);
        var e=document.createElementNS('http://www.w3.org/2000/svg','text');
        e.setAttribute('class','arrow-label '+l.getAttribute('class'));
        e.setAttribute('x',(+l.getAttribute('x1')+ +l.getAttribute('x2'))/2); e.setAttribute('y',+l.getAttribute('y1')-0.8);
        e.textContent=text.length>70?text.slice(0,70)+'…':text; s.appendChild(e);
      });
    });
  }
  window.addEventListener('scroll',function(){if(zoom>=2) requestAnimationFrame(label);});
  // Hover shows an element's record; a click pins it (to read or copy), a
  // click on the pinned box lets it go.
  var tip=document.getElementById('tip');
  diagram.addEventListener('mouseover',function(e){var t=e.target.getAttribute&&e.target.getAttribute('data-t');
    if(t&&!tip.classList.contains('pinned')){tip.textContent=t;tip.style.display='block';}});
  diagram.addEventListener('mouseout',function(){if(!tip.classList.contains('pinned')) tip.style.display='none';});
  diagram.addEventListener('click',function(e){var t=e.target.getAttribute&&e.target.getAttribute('data-t');
    if(t){tip.textContent=t;tip.style.display='block';tip.classList.add('pinned');}});
  tip.addEventListener('click',function(){tip.classList.remove('pinned');tip.style.display='none';});
  // Find: a number jumps to that seq's row; other text to the next element
  // whose hover text holds it (Enter again: the one after), marked.
  var find=document.getElementById('find'), found=document.getElementById('found'), hits=[], at=-1;
  function search(){
    var q=find.value.trim().replace(/^seq\s*/,''); diagram.querySelectorAll('.hit').forEach(function(e){e.classList.remove('hit');});
    hits=[]; at=-1; if(!q){found.textContent='';return;}
    var all=diagram.querySelectorAll('[data-t]');
    if(/^\d+$/.test(q)){all.forEach(function(e){if(e.getAttribute('data-t').indexOf('seq '+q+' ')===0)hits.push(e);});}
    else{q=q.toLowerCase();all.forEach(function(e){if(e.getAttribute('data-t').toLowerCase().indexOf(q)>=0)hits.push(e);});}
    hits.forEach(function(e){e.classList.add('hit');});
    found.textContent=hits.length+' found';
  }
  find.addEventListener('input',search);
  find.addEventListener('keydown',function(ev){
    if(ev.key!=='Enter'||!hits.length) return;
    at=(at+1)%hits.length; hits[at].scrollIntoView({block:'center'});
    found.textContent=(at+1)+' of '+hits.length;
  });
  document.getElementById('zoom-in').onclick=function(){setZoom(zoom*1.5);};
  document.getElementById('zoom-out').onclick=function(){setZoom(zoom/1.5);};
})();
"#;

/// The report of a minimization's own directory: the run its final replay
/// `n` recorded (`recorded`), every input of which is in the MCS.
fn write_mcs_dir(dir: &std::path::Path, recorded: &Trace, n: u32) -> Result<std::path::PathBuf, String> {
    let mcs =
        std::fs::read_to_string(dir.join("report.json")).ok().and_then(|t| Mcs::from_report_json(&t)).map(|mut m| {
            m.seqs = recorded.records.iter().filter(|r| r.external().is_some()).map(|r| r.seq).collect();
            m.summary = format!("{} (as its final replay {n} recorded it: final/{n}/trace.jsonl)", m.summary);
            m
        });
    let title = format!(
        "{} (the MCS's replay {n})",
        dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
    );
    let out = dir.join("report");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let path = out.join("index.html");
    let config = crate::topology::config(dir);
    let html = page_with(&title, recorded, mcs.as_ref(), None, config.as_ref());
    sts_trace::dir::write_atomic(&path, html.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The held messages a later input dropped (the console's `drop ID`, a
/// `held_message` input with fate `drop`): they were queued when they came,
/// and never delivered. Held messages are told apart as the proxy does, by
/// switch and type, oldest first; a release delivers every held one.
pub(crate) fn dropped_after_holding(trace: &Trace) -> std::collections::BTreeSet<u64> {
    use std::collections::{BTreeMap, BTreeSet};
    use sts_trace::{External, Fate, ProxyDecision};
    let mut held: BTreeMap<(u64, String), Vec<u64>> = BTreeMap::new();
    let mut dropped = BTreeSet::new();
    for r in &trace.records {
        if let Some(Internal::Openflow { dpid, msg, proxy: Some(ProxyDecision::Queued), .. }) = r.internal() {
            held.entry((*dpid, msg.as_str().to_string())).or_default().push(r.seq);
        }
        match r.external() {
            Some(External::HeldMessage { switch, msg_type, index, fate }) => {
                let queue = held.entry((*switch, msg_type.as_str().to_string())).or_default();
                if (*index as usize) < queue.len() {
                    let seq = queue.remove(*index as usize);
                    if *fate == Fate::Drop {
                        dropped.insert(seq);
                    }
                }
            }
            Some(External::ControlRelease { switch }) => held.retain(|(d, _), _| switch.is_some_and(|s| s != *d)),
            _ => {}
        }
    }
    dropped
}

/// A page's title for the experiment `dir`: its name, or for a replay's
/// own directory (`EXP/replays/N`, `EXP/mcs/final/N`) `EXP: replay N`.
fn experiment_title(dir: &std::path::Path) -> String {
    let name = |p: &std::path::Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let parent = dir.parent();
    match (name(dir), parent.and_then(name), parent.and_then(|p| p.parent()).and_then(name)) {
        (Some(n), Some(kind), Some(exp)) if kind == "replays" => format!("{exp}: replay {n}"),
        (Some(n), Some(kind), Some(mcs)) if kind == "final" => format!("{mcs}: final replay {n}"),
        (Some(n), _, _) => n,
        _ => dir.display().to_string(),
    }
}

/// An experiment's latest replay (`replays/N/`), if it has one.
fn latest_replay(dir: &std::path::Path) -> Option<Other> {
    let replays = dir.join("replays");
    let n = std::fs::read_dir(&replays)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|n| replays.join(n.to_string()).join("trace.jsonl").is_file())
        .max()?;
    let trace = Trace::load(&replays.join(n.to_string()).join("trace.jsonl")).ok()?;
    Some(Other { label: format!("replay {n}"), trace })
}

/// A minimization's own directory (`DIR/mcs`, with its `report.json`): its
/// `trace.jsonl` is what the replays were given (the kept inputs, and the
/// messages recorded before the first of them), not a run, so flow tables
/// rebuilt from it miss every rule the run installed after. The run is the
/// first final replay that reproduced (`final/N/`): its number and trace.
pub fn mcs_recording(dir: &std::path::Path) -> Option<(u32, Trace)> {
    if !dir.join("report.json").is_file() {
        return None;
    }
    let finals = dir.join("final");
    let mut ns: Vec<u32> =
        std::fs::read_dir(&finals).ok()?.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    ns.sort_unstable();
    ns.into_iter().find_map(|n| {
        let t = Trace::load(&finals.join(n.to_string()).join("trace.jsonl")).ok()?;
        t.violation().is_some().then_some((n, t))
    })
}

/// Writes `dir/report/index.html` for the experiment in `dir` (its trace,
/// its minimization when `dir/mcs/report.json` exists, and a diff against
/// its latest replay, or of the MCS against its replay); returns the path.
pub fn write_experiment(dir: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let trace = Trace::load(&dir.join("trace.jsonl")).map_err(|e| e.to_string())?;
    write_experiment_with(dir, &trace)
}

/// [`write_experiment`] with the experiment's trace already loaded (so that
/// what loading it says is said once).
pub fn write_experiment_with(dir: &std::path::Path, trace: &Trace) -> Result<std::path::PathBuf, String> {
    if let Some((n, recorded)) = mcs_recording(dir) {
        return write_mcs_dir(dir, &recorded, n);
    }
    let mcs = std::fs::read_to_string(dir.join("mcs").join("report.json")).ok().and_then(|t| Mcs::from_report_json(&t));
    let mcs = match std::fs::read_to_string(dir.join("mcs").join("internal.json")) {
        Ok(text) => mcs.map(|m| m.with_internal_json(&text)),
        Err(_) => mcs,
    };
    let pair = latest_replay(dir).map(|other| ("original".to_string(), None, other)).or_else(|| {
        let mcs_trace = Trace::load(&dir.join("mcs").join("trace.jsonl")).ok()?;
        let replay = Trace::load(&dir.join("mcs").join("final").join("1").join("trace.jsonl")).ok()?;
        Some(("the MCS".into(), Some(mcs_trace), Other { label: "its replay 1".into(), trace: replay }))
    });
    let title = experiment_title(dir);
    let out = dir.join("report");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let path = out.join("index.html");
    let config = crate::topology::config(dir);
    let topology = config.as_ref();
    let html = match &pair {
        // The diff of the original's trace: in the same page.
        Some((label, None, other)) => page_with(&title, trace, mcs.as_ref(), Some((label, other)), topology),
        // The MCS against its replay: the diagram stays the original's; the diff is of the MCS.
        Some((label, Some(mcs_trace), other)) => {
            let mut html = page_with(&title, trace, mcs.as_ref(), None, topology);
            let section = crate::diff::section(label, mcs_trace, &other.label, &other.trace);
            html = html.replacen("<script>", &format!("{section}<script>"), 1);
            html
        }
        None => page_with(&title, trace, mcs.as_ref(), None, topology),
    };
    sts_trace::dir::write_atomic(&path, html.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_trace::{External, Header, Record};

    /// `n` records: a ping every 100th, controller log lines between.
    fn trace(n: u64) -> Trace {
        let records = (1..=n)
            .map(|seq| {
                let event = if seq % 100 == 0 {
                    sts_trace::Event::External(External::Ping { src: "h1".into(), dst: "h2".into() })
                } else {
                    let line = format!("line {seq}");
                    sts_trace::Event::Internal(Internal::Log { controller: "c0".into(), line: line.clone(), fp: line })
                };
                Record { seq, t_ms: seq, event, line: 0 }
            })
            .collect();
        Trace { header: Header::new(None), records }
    }

    /// Every number after `attr="` in `s`.
    fn numbers(s: &str, attr: &str) -> Vec<usize> {
        s.split(&format!(r#"{attr}=""#)).skip(1).filter_map(|r| r.split('"').next()?.parse().ok()).collect()
    }

    #[test]
    fn rows_are_drawn_in_bands_that_hold_them_and_anchors_stay_outside() {
        let t = trace(2_500);
        let mcs = Mcs { seqs: [2_100].into(), ..Mcs::default() };
        let html = page("bands", &t, Some(&mcs));
        let diagram = &html[html.find(r#"<div id="diagram""#).unwrap()..];
        let bands: Vec<&str> = diagram.split(r#"<div class="band""#).skip(1).collect();
        assert_eq!(bands.len(), 3, "1,000 rows a band");
        let mut rows = 0;
        for band in &bands {
            let view = band.split(r#"viewBox="0 "#).nth(1).unwrap();
            let mut v = view.split(['"', ' ']).map(|n| n.parse::<usize>().unwrap());
            let (top, _, h) = (v.next().unwrap(), v.next().unwrap(), v.next().unwrap());
            let body = &band[..band.find("</svg>").unwrap()];
            // Each log tick is drawn at its row's y, inside the band's view.
            let logs: Vec<&str> = body.split(r#"<line class="log""#).skip(1).collect();
            for l in &logs {
                let y = numbers(l, "y1")[0];
                assert!(y >= top + 3 && y + 3 <= top + h, "row at {y} inside band {top}..{}", top + h);
            }
            rows += logs.len() + body.matches(r#"<circle class="input"#).count();
        }
        assert_eq!(rows, 2_500, "every record drawn once");
        // The MCS input's anchor: an HTML element after the bands, 40 px above its row.
        let anchor = diagram.split(r#"<a id="r2100" class="anchor""#).nth(1).expect("an anchor");
        assert_eq!(numbers(anchor, "data-y")[0], TOP + 2_099 * ROW - 40);
        assert!(!bands[2].split("</svg>").next().unwrap().contains("r2100"), "not inside a band's drawing");
        assert!(CSS.contains(".band{content-visibility:auto"), "bands out of view are not laid out");
    }
}
