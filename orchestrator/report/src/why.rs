//! Why the violation happened, as a chain a person can follow: the culprit
//! rule (the violation's culprit on the witness path: its first wrong turn,
//! else its last rule; in `dump-flows` words), the
//! FLOW_MOD that installed it, the PACKET_IN it answered and the input after
//! which it came. Each link names a trace `seq` and jumps to its row in the
//! diagram (`#rSEQ`).
//!
//! The rule is found in the flow tables rebuilt from the trace
//! ([`crate::tables`], the same switch model the run used) at the table and
//! index the witness names; the FLOW_MOD is the last message to that switch
//! after which the rule was there and before which it was not.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use sts_mocknet::flow::FlowEntry;
use sts_mocknet::switch::Switch;
use sts_proxy::wire::Message;
use sts_trace::{Direction, Internal, Trace};

use crate::html::esc;

/// A record of the trace: its seq, time and what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub seq: u64,
    pub t_ms: u64,
    pub what: String,
}

/// The culprit rule and what put it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// `s2`, and the rule in `dump-flows` words.
    pub switch: String,
    pub rule: String,
    /// The FLOW_MOD that installed it.
    pub flow_mod: Option<Link>,
    /// The last PACKET_IN from that switch before it (what it likely answered).
    pub packet_in: Option<Link>,
    /// The last input before it.
    pub input: Option<Link>,
}

/// (dpid, table, index) of the culprit rule on the witness path: the hop on
/// the switch and table the violation's culprit names (`s2 table 0: ...`:
/// the frame's first wrong turn), else the last rule on the path. `s2 in 2:
/// table 0 #3 (priority 1)` gives (2, 0, 3).
fn culprit_place(trace: &Trace) -> Option<(u64, usize, usize)> {
    let v = trace.violation()?;
    let w = v.witness.as_ref()?;
    // The hop's last rule: the one that sent the frame on.
    let place = |hop: &str| -> Option<(u64, usize, usize)> {
        let (dpid, rules) = crate::topology::hop_rules(hop)?;
        rules.last().map(|&(table, index)| (dpid, table, index))
    };
    // `s2 table 0: ...` names the hop.
    let named = v.culprit.as_deref().and_then(|c| {
        let mut words = c.split_whitespace();
        let dpid: u64 = words.next()?.strip_prefix('s')?.parse().ok()?;
        (words.next()? == "table").then_some(())?;
        let table: usize = words.next()?.trim_end_matches(':').parse().ok()?;
        Some((dpid, table))
    });
    if let Some((dpid, table)) = named {
        let hop = w.path.iter().filter_map(|h| place(h)).find(|&(d, t, _)| d == dpid && t == table);
        if hop.is_some() {
            return hop;
        }
    }
    place(w.path.last()?)
}

fn same_rule(a: &FlowEntry, b: &FlowEntry) -> bool {
    a.priority == b.priority && a.r#match == b.r#match && a.instructions == b.instructions
}

/// The chain for `trace`'s violation, when its witness ends on a rule;
/// `switches` are the tables at the violation ([`crate::tables::at_violation`]).
pub fn chain(trace: &Trace, switches: &std::collections::BTreeMap<u64, Switch>) -> Option<Chain> {
    let (dpid, table, index) = culprit_place(trace)?;
    let culprit = switches.get(&dpid)?.tables.get(table)?.entries().get(index).map(|e| FlowEntry::clone(e))?;
    let rule = crate::flows::entry_with(table, &culprit, None);
    // Replay the messages to that switch, watching for the rule to appear.
    let end = trace.records.iter().position(|r| r.violation().is_some())?;
    let mut sw: Option<Switch> = None;
    let mut installed_at: Option<usize> = None;
    for (i, r) in trace.records[..end].iter().enumerate() {
        let Some(Internal::Openflow { dpid: d, dir: Direction::ToSwitch, raw: Some(raw), .. }) = r.internal() else {
            continue;
        };
        if *d != dpid || raw.len() < 8 || raw[1] == 0 {
            continue;
        }
        let Ok(parsed) = Message::parse(raw.clone()) else { continue };
        let s = sw.get_or_insert_with(|| Switch::new(dpid, raw[0], 64));
        let had = s.tables.get(table).is_some_and(|t| t.entries().iter().any(|e| same_rule(e, &culprit)));
        s.expire(r.t_ms);
        s.handle(raw, &parsed, r.t_ms);
        let has = s.tables.get(table).is_some_and(|t| t.entries().iter().any(|e| same_rule(e, &culprit)));
        // The last time it appeared: a delete and a new add make the add its installer.
        if has && !had {
            installed_at = Some(i);
        }
    }
    let link = |i: usize, what: String| Link { seq: trace.records[i].seq, t_ms: trace.records[i].t_ms, what };
    let flow_mod = installed_at.map(|i| {
        let controller = match trace.records[i].internal() {
            Some(Internal::Openflow { controller, .. }) => format!("c{controller}"),
            _ => "?".into(),
        };
        link(i, format!("flow_mod {controller} → s{dpid}"))
    });
    let before = installed_at.unwrap_or(end);
    let packet_in = trace.records[..before].iter().rposition(|r| {
        matches!(r.internal(), Some(Internal::Openflow { dpid: d, dir: Direction::ToController, msg, .. }) if *d == dpid && msg == "packet_in")
    });
    let packet_in = packet_in.map(|i| link(i, format!("packet_in s{dpid} → controller")));
    let input = trace.records[..before].iter().rposition(|r| r.external().is_some());
    let input = input.map(|i| link(i, trace.records[i].external().map(|e| e.describe()).unwrap_or_default()));
    Some(Chain { switch: format!("s{dpid}"), rule, flow_mod, packet_in, input })
}

/// The seqs a page should give ids to (`rSEQ`) so that links can jump there.
pub fn anchors(chain: Option<&Chain>, mcs: &BTreeSet<u64>) -> BTreeSet<u64> {
    let mut seqs = mcs.clone();
    if let Some(c) = chain {
        seqs.extend([&c.flow_mod, &c.packet_in, &c.input].into_iter().flatten().map(|l| l.seq));
    }
    seqs
}

fn jump(l: &Link) -> String {
    format!(r##"<a href="#r{}">seq {} at {} ms</a>: {}"##, l.seq, l.seq, l.t_ms, esc(&l.what))
}

/// The "why" section: the culprit rule and what installed it, then the
/// MCS's inputs as a numbered list, each a link to its row.
pub fn section(
    chain: Option<&Chain>,
    parting: Option<&crate::topology::Parting>,
    trace: &Trace,
    mcs: &BTreeSet<u64>,
) -> String {
    let mut html = String::from(r#"<section id="why">"#);
    if let Some(c) = chain {
        let _ = write!(
            html,
            r##"<h2>Why</h2><ol class="chain"><li>The culprit: on {}, <code class="culprit-rule">{}</code> (<a href="#culprit-rule">in the flow tables</a>)</li>"##,
            esc(&c.switch),
            esc(&c.rule)
        );
        match &c.flow_mod {
            Some(f) => {
                let _ = write!(html, "<li>installed by {}</li>", jump(f));
            }
            None => html.push_str("<li>installed by no FLOW_MOD the trace recorded</li>"),
        }
        if let Some(p) = &c.packet_in {
            let _ = write!(html, "<li>after {}</li>", jump(p));
        }
        if let Some(i) = &c.input {
            let _ = write!(html, "<li>after the input {}</li>", jump(i));
        }
        html.push_str("</ol>");
    }
    if let Some(p) = parting {
        let rules =
            |r: &[String]| r.iter().map(|w| format!("<code>{}</code>", esc(w))).collect::<Vec<_>>().join(", then ");
        let _ = write!(
            html,
            r#"<div id="parting"><p>Against a frame that arrives: {w} is delivered. The two part at <b>{s}</b>:</p><ul><li>{v} meets {vr}</li><li>{w} meets {wr}</li></ul></div>"#,
            w = esc(&p.working),
            v = esc(&p.victim),
            s = esc(&p.switch),
            vr = rules(&p.victim_rules),
            wr = rules(&p.working_rules),
        );
    }
    let kept: Vec<_> = trace.records.iter().filter(|r| r.external().is_some() && mcs.contains(&r.seq)).collect();
    if !kept.is_empty() {
        html.push_str(r#"<h2>The minimal causal sequence</h2><ol id="mcs-list">"#);
        for r in kept {
            let what = r.external().map(|e| e.describe()).unwrap_or_default();
            let _ =
                write!(html, r##"<li><a href="#r{}">{} ms: {}</a> (seq {})</li>"##, r.seq, r.t_ms, esc(&what), r.seq);
        }
        html.push_str("</ol>");
    }
    html.push_str("</section>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_culprit_place_is_the_last_rule_of_the_last_hop() {
        let text = r#"{"format":"sts-trace","version":2}
{"seq":1,"t_ms":5,"violation":{"invariant":"blackhole","elements":["h2"],"summary":"x","witness":{"header":"h","frame":"","from":"h1","path":["s1 in 1: table 0 #3 (priority 1)","s2 in 2: table 0 #1 (priority 5), table 1 #4 (priority 1)"],"end":"dropped"},"culprit":"s2 table 1: a rule"}}
"#;
        let dir = std::env::temp_dir().join(format!("sts-why-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.jsonl");
        std::fs::write(&path, text).unwrap();
        let trace = Trace::load(&path).unwrap();
        assert_eq!(culprit_place(&trace), Some((2, 1, 4)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
