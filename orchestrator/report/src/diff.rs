//! Trace diffs: two runs of one experiment side by side (the original and a
//! replay, or a minimal sequence and its replay), equivalent events aligned
//! by what replay matches on (inputs by their description, OpenFlow messages
//! and log lines by channel and fingerprint, violations by bug identity),
//! with the first divergence marked. The alignment is a Myers diff
//! (`similar`) over those keys.

use std::fmt::Write as _;

use crate::html::esc;

use sts_invariants::Same;
use sts_trace::{Internal, Record, Trace};

/// Rows drawn at most; the section says when it stops.
pub const MAX_ROWS: usize = 20_000;

/// Rows per table of the diff (each laid out only when in view).
const CHUNK_ROWS: usize = 500;

/// One row of a diff: indices into the two traces' records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// Equivalent events.
    Same(usize, usize),
    /// Only in the left trace.
    Left(usize),
    /// Only in the right trace.
    Right(usize),
}

/// What a record is matched on.
fn key(trace: &Trace, r: &Record) -> String {
    if let Some(e) = r.external() {
        return format!("input {}", e.describe());
    }
    if let Some(v) = r.violation() {
        return match sts_engine::records::to_violation(v) {
            Ok(v) => format!("violation {}", v.identity(Same::Culprit)),
            Err(_) => format!("violation {}", v.summary),
        };
    }
    match r.internal() {
        Some(Internal::Dataplane(d)) => format!("dataplane {}", d.describe()),
        Some(Internal::Frame { host, sent, raw }) => {
            format!("frame {host} {sent} {}", raw.as_deref().map(sts_trace::frame_summary).unwrap_or_default())
        }
        // Matched by what was delivered: the seq differs between runs.
        Some(Internal::Delivered { of }) => {
            let arrival = trace.record(*of).and_then(|a| a.internal()).and_then(Internal::key);
            format!("delivered {}", arrival.unwrap_or_default())
        }
        Some(i) => i.key().unwrap_or_default(),
        None => String::new(),
    }
}

/// One line describing a record, for people.
pub fn describe(r: &Record) -> String {
    if let Some(e) = r.external() {
        return format!("input: {}", e.describe());
    }
    if let Some(v) = r.violation() {
        return format!("violation: {}", v.summary);
    }
    match r.internal() {
        Some(i @ Internal::Openflow { msg, .. }) => {
            let (from, to) = i.sender_receiver().unwrap_or_default();
            format!("{}: {from} → {to}", msg.as_str())
        }
        Some(Internal::Log { controller, line, .. }) => format!("{controller} log: {line}"),
        Some(Internal::Dataplane(d)) => format!("dataplane: {}", d.describe()),
        Some(Internal::Frame { host, sent, raw }) => frame_line(host, *sent, raw.as_deref()),
        Some(Internal::Delivered { of }) => format!("the proxy delivers the message of seq {of}, queued till now"),
        None => String::new(),
    }
}

/// A host frame in one line: `h1 sends: arp who-has 10.0.0.3 tell 10.0.0.1`.
pub fn frame_line(host: &str, sent: bool, raw: Option<&[u8]>) -> String {
    let what = raw.map(sts_trace::frame_summary).unwrap_or_default();
    format!("{host} {}: {what}", if sent { "sends" } else { "receives" })
}

/// `a` and `b` aligned.
pub fn align(a: &Trace, b: &Trace) -> Vec<Row> {
    let ka: Vec<String> = a.records.iter().map(|r| key(a, r)).collect();
    let kb: Vec<String> = b.records.iter().map(|r| key(b, r)).collect();
    let ops = similar::capture_diff_slices(similar::Algorithm::Myers, &ka, &kb);
    let mut rows = Vec::with_capacity(ka.len().max(kb.len()));
    for op in ops {
        for change in op.iter_changes(&ka, &kb) {
            rows.push(match (change.tag(), change.old_index(), change.new_index()) {
                (similar::ChangeTag::Equal, Some(i), Some(j)) => Row::Same(i, j),
                (_, Some(i), None) => Row::Left(i),
                (_, None, Some(j)) => Row::Right(j),
                (_, Some(i), Some(_)) => Row::Left(i),
                (_, None, None) => continue,
            });
        }
    }
    rows
}

/// The row where the two runs first differ, if they do.
pub fn first_divergence(rows: &[Row]) -> Option<usize> {
    rows.iter().position(|r| !matches!(r, Row::Same(..)))
}

/// The HTML section (`<section id="diff">`) of `left` against `right`.
pub fn section(left_label: &str, left: &Trace, right_label: &str, right: &Trace) -> String {
    let rows = align(left, right);
    let first = first_divergence(&rows);
    let only_left = rows.iter().filter(|r| matches!(r, Row::Left(_))).count();
    let only_right = rows.iter().filter(|r| matches!(r, Row::Right(_))).count();
    let same = rows.len() - only_left - only_right;
    let mut html = String::with_capacity(rows.len().min(MAX_ROWS) * 200);
    let _ = write!(
        html,
        r#"<section id="diff"><h2>Trace diff: {l} against {r}</h2><p>{same} events equivalent in both, {only_left} only in {l}, {only_right} only in {r}. "#,
        l = esc(left_label),
        r = esc(right_label)
    );
    match first {
        Some(i) => {
            let _ = write!(html, r##"<a href="#first-divergence">The first divergence is at row {}.</a></p>"##, i + 1);
        }
        None => html.push_str(r#"<span id="no-divergence">No divergence: every event has its equivalent.</span></p>"#),
    }
    if rows.len() > MAX_ROWS {
        let _ = write!(html, r#"<p class="warn">The table stops after {MAX_ROWS} of {} rows.</p>"#, rows.len());
    }
    // Tables of CHUNK_ROWS rows, each in a box the browser lays out only
    // when it comes into view (`content-visibility: auto`), with the same
    // fixed columns so that they read as one table: a 20,000-row diff below
    // the diagram then costs a page nothing until someone scrolls to it.
    let colgroup = r#"<colgroup><col class="n"><col class="seq"><col class="ms"><col><col class="seq"><col class="ms"><col></colgroup>"#;
    let _ = write!(
        html,
        r#"<div class="diff-rows"><table class="diff">{colgroup}<thead><tr><th>row</th><th colspan="3">{}</th><th colspan="3">{}</th></tr><tr><th></th><th>seq</th><th>ms</th><th>event</th><th>seq</th><th>ms</th><th>event</th></tr></thead><tbody>"#,
        esc(left_label),
        esc(right_label)
    );
    let cells = |r: Option<&Record>| match r {
        Some(r) => format!("<td>{}</td><td>{}</td><td>{}</td>", r.seq, r.t_ms, esc(&describe(r))),
        None => "<td></td><td></td><td></td>".to_string(),
    };
    for (n, row) in rows.iter().take(MAX_ROWS).enumerate() {
        if n > 0 && n % CHUNK_ROWS == 0 {
            let _ =
                write!(html, r#"</tbody></table></div><div class="diff-rows"><table class="diff">{colgroup}<tbody>"#);
        }
        let (class, l, r) = match *row {
            Row::Same(i, j) => ("same", Some(&left.records[i]), Some(&right.records[j])),
            Row::Left(i) => ("left", Some(&left.records[i]), None),
            Row::Right(j) => ("right", None, Some(&right.records[j])),
        };
        let id = if Some(n) == first { r#" id="first-divergence""# } else { "" };
        let _ = write!(html, r#"<tr class="{class}"{id}><td>{}</td>{}{}</tr>"#, n + 1, cells(l), cells(r));
    }
    html.push_str("</tbody></table></div></section>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_trace::{External, Header};

    fn trace(events: &[&str]) -> Trace {
        let records = events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let event = match e.strip_prefix("ping ") {
                    Some(dst) => sts_trace::Event::External(External::Ping { src: "h1".into(), dst: dst.into() }),
                    None => sts_trace::Event::Internal(Internal::Log {
                        controller: "c0".into(),
                        line: e.to_string(),
                        fp: e.to_string(),
                    }),
                };
                Record { seq: i as u64 + 1, t_ms: i as u64 * 10, event, line: 0 }
            })
            .collect();
        Trace { header: Header::new(None), records }
    }

    #[test]
    fn equivalent_runs_do_not_diverge() {
        let a = trace(&["ping h2", "learned h2", "ping h3"]);
        let rows = align(&a, &a.clone());
        assert_eq!(rows, [Row::Same(0, 0), Row::Same(1, 1), Row::Same(2, 2)]);
        assert_eq!(first_divergence(&rows), None);
        assert!(section("original", &a, "replay 1", &a).contains(r#"id="no-divergence""#));
    }

    #[test]
    fn the_first_divergence_is_marked() {
        let a = trace(&["ping h2", "learned h2", "ping h3", "learned h3"]);
        let b = trace(&["ping h2", "learned h2", "crashed", "ping h3", "learned h3"]);
        let rows = align(&a, &b);
        assert_eq!(first_divergence(&rows), Some(2));
        assert_eq!(rows[2], Row::Right(2));
        assert_eq!(rows.iter().filter(|r| matches!(r, Row::Same(..))).count(), 4);
        let html = section("original", &a, "replay 1", &b);
        assert_eq!(html.matches(r#"id="first-divergence""#).count(), 1);
        assert!(html.contains(r#"<tr class="right" id="first-divergence"><td>3</td>"#), "{html}");
    }

    #[test]
    fn long_diffs_come_in_tables_laid_out_when_in_view() {
        let lines: Vec<String> = (0..1_200).map(|i| format!("line {i}")).collect();
        let a = trace(&lines.iter().map(String::as_str).collect::<Vec<_>>());
        let html = section("original", &a, "replay 1", &a);
        assert_eq!(html.matches(r#"<div class="diff-rows">"#).count(), 3, "500 rows a table");
        assert_eq!(html.matches("<thead>").count(), 1, "one header");
        assert_eq!(html.matches(r#"<tr class="same">"#).count(), 1_200, "every row once");
        assert_eq!(html.matches("<colgroup>").count(), 3, "the same columns in each table");
    }
}
