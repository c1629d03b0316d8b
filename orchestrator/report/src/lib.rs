//! `sts-report`: what sts's results look like to people. Text for the
//! terminal and Markdown for experiment directories, rendered from the
//! engine's result types and the trace; nothing here runs anything.
//!
//! - [`pcap`]: a trace's OpenFlow messages as a pcap for Wireshark;
//! - [`junit`]: fuzz, replay and minimize results as JUnit XML for CI;
//! - [`shiviz`]: a trace as a ShiViz log (a space-time diagram in ShiViz);
//! - [`html`]: `report/index.html`, a self-contained space-time diagram;
//! - [`flows`]: flow tables in `ovs-ofctl dump-flows` style.

pub mod diff;
pub mod dump_flows;
pub mod flows;
pub mod html;
pub mod junit;
pub mod pcap;
pub mod races;
pub mod shiviz;
pub mod tables;
pub mod topology;
pub mod why;

use std::path::Path;

use sts_engine::minimize;
use sts_engine::pingall::Matrix;
use sts_engine::replay::ReplayResult;
use sts_invariants::Violation;
use sts_mocknet::DataplaneEvent;

/// Mininet-style rendering of a pingall: one line per source host, `X` for
/// a miss, then the totals.
pub fn matrix(m: &Matrix) -> String {
    let mut s = String::from("*** Ping: testing ping reachability\n");
    for (i, h) in m.hosts.iter().enumerate() {
        s.push_str(&format!("{h} ->"));
        for (j, g) in m.hosts.iter().enumerate() {
            if i != j {
                s.push(' ');
                s.push_str(if m.reached[i][j] { g } else { "X" });
            }
        }
        s.push('\n');
    }
    let (r, t) = m.counts();
    let dropped = (100 * (t - r)).checked_div(t).unwrap_or(0);
    s.push_str(&format!("*** Results: {dropped}% dropped ({r}/{t} received)\n"));
    s
}

/// One line per dataplane report (loops, storms, fault drops).
pub fn dataplane_event(e: &DataplaneEvent) -> String {
    match e {
        DataplaneEvent::HopLimit { dpid, in_port, summary } if *in_port == sts_proxy::wire::v13::port::CONTROLLER => {
            format!("forwarding loop: a frame ({summary}) went back and forth between switch {dpid} and its controller until it exceeded the hop limit")
        }
        DataplaneEvent::HopLimit { dpid, in_port, summary } => {
            format!("forwarding loop: a frame ({summary}) exceeded the hop limit at switch {dpid} port {in_port}")
        }
        DataplaneEvent::StepBudget { deliveries } => {
            format!("broadcast storm: one injection caused over {deliveries} deliveries")
        }
        DataplaneEvent::FaultDrop { at } => format!("a frame was dropped by the fault on the link at {at:?}"),
        DataplaneEvent::WorkBudget { dpid } => format!(
            "switch {dpid} dropped a frame whose actions exceeded the work budget ({} actions, group buckets and copies)",
            sts_mocknet::switch::WORK_BUDGET
        ),
    }
}

/// A violation with its witness: the summary, the header from its source,
/// each hop with the rule it matched, and how it ended; then its culprit and
/// victim.
pub fn violation(v: &Violation) -> String {
    let mut s = format!("{}\n", v.summary);
    if let Some(w) = &v.witness {
        s.push_str(&format!("  witness from {}: {}\n", w.from, w.header));
        for hop in &w.path {
            s.push_str(&format!("    {hop}\n"));
        }
        s.push_str(&format!("  then it {}\n", w.end));
    }
    if let Some(c) = &v.culprit {
        s.push_str(&format!("culprit: {c}\n"));
    }
    s.push_str(&format!("victim: {}\n", v.fingerprint()));
    s
}

/// What one replay found, and where it first diverged from the original
/// (`has_internals`: whether the original recorded internal events at all).
pub fn replay_run(r: &ReplayResult, has_internals: bool) -> String {
    let what = match (&r.violation, r.reproduced) {
        (Some(v), true) => format!("reproduced: {}", v.summary),
        (Some(v), false) => format!(
            "not reproduced; found instead: {}{}",
            v.fingerprint(),
            v.culprit.as_ref().map_or(String::new(), |c| format!(" (culprit: {c})"))
        ),
        (None, _) => "not reproduced".to_string(),
    };
    let mut s = format!("replay {}: {what} ({} inputs, {} waits timed out)\n", r.run, r.injected, r.timeouts);
    if let Some(clock) = &r.clock {
        s.push_str(&format!("  {clock}\n"));
    }
    if let Some((seq, k)) = &r.divergence.first_missing {
        s.push_str(&format!("  first missing: seq {seq}: {}\n", shorten(k)));
    }
    if let Some(k) = r.divergence.first_unexpected.as_ref().filter(|_| has_internals) {
        s.push_str(&format!("  first unexpected: {}\n", shorten(k)));
    }
    s
}

/// One run of `sts replay --on ovs`: the verdict against `lab` (the trace's
/// violation, if it has one), what the tables showed, the pings' outcomes.
pub fn ovs_run(r: &sts_engine::on_ovs::Run, lab: Option<&sts_trace::ViolationRecord>) -> String {
    let compared = lab.is_some();
    let lab_culprit = lab.is_some_and(|l| l.culprit.is_some());
    let what = match (&r.error, r.reproduced, r.same_culprit) {
        (Some(e), _, _) => format!("could not finish: {e}"),
        (None, true, _) if !compared => "a persistent violation (the trace records none to compare with)".to_string(),
        (None, true, _) if !lab_culprit => "reproduced (the trace names no culprit to compare)".to_string(),
        (None, true, true) => "reproduced, the same culprit".to_string(),
        (None, true, false) => "reproduced, another culprit".to_string(),
        (None, false, _) if r.violations.is_empty() && !compared => "no violation in the tables".to_string(),
        (None, false, _) if r.violations.is_empty() => "not reproduced: no violation in the tables".to_string(),
        (None, false, _) => "not reproduced; found instead:".to_string(),
    };
    let flows: Vec<String> = r.flows.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let mut s = format!("Open vSwitch run {}: {what}\n", r.run);
    for v in &r.violations {
        s.push_str(&format!("  {}: {}\n", v.invariant, v.summary));
        if let Some(c) = &v.culprit {
            s.push_str(&format!("    culprit: {c}\n"));
        }
    }
    for n in &r.not_performed {
        s.push_str(&format!("  not performed: {n}\n"));
    }
    if let Some(d) = &r.differs {
        s.push_str(&format!("  tables differ from the lab's at its violation: {d}\n"));
    }
    if !r.messages_differ.is_empty() {
        s.push_str("  the controllers' messages that differ from the lab's:\n");
        for m in &r.messages_differ {
            s.push_str(&format!("    {m}\n"));
        }
    }
    if !flows.is_empty() {
        s.push_str(&format!("  flows: {}; {} OpenFlow messages recorded\n", flows.join(", "), r.recorded));
    }
    match (&r.experiment, &r.import_error) {
        (Some(e), _) => s.push_str(&format!("  the recording as an experiment: {}\n", e.display())),
        (None, Some(e)) => s.push_str(&format!("  the recording could not be imported: {e}\n")),
        _ => {}
    }
    if !r.pings.is_empty() {
        let pings: Vec<String> = r
            .pings
            .iter()
            .map(|p| format!("{} -> {} {}", p.src, p.dst, if p.answered { "answered" } else { "unanswered" }))
            .collect();
        s.push_str(&format!("  pings: {}\n", pings.join(", ")));
    }
    s
}

/// A minimization's wall time: tenths under ten seconds (most take one or
/// two), whole seconds above.
fn seconds(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// The terminal summary of a minimization.
pub fn mcs_summary(r: &minimize::Report) -> String {
    let mut s = format!(
        "MCS: {} of {} inputs ({} replays, {}); reproduces {}/{}{}\n",
        r.mcs_inputs,
        r.original_inputs,
        r.replays,
        seconds(r.seconds),
        r.final_reproduced,
        r.final_replays,
        if r.budget_exhausted { "; budget exhausted: not 1-minimal" } else { "" }
    );
    if r.present_without_inputs {
        s.push_str("  (none: the violation is present without any input; the network was never healthy)\n");
    }
    if let Some(b) = r.beyond.as_ref().filter(|b| b.to < b.from) {
        s.push_str(&format!(
            "  past delta debugging's {} inputs: {} found elsewhere in the trace ({} replays)\n",
            b.from, b.to, b.replays
        ));
    }
    if let Some(why) = r.warm.as_ref().and_then(|w| w.fresh_because.as_deref()) {
        s.push_str(&format!("  every replay started fresh controllers: {why}\n"));
    }
    s.push_str(&format!("  same bug by {}", r.same));
    let theirs = r.observed.as_ref().and_then(|v| v.culprit.as_deref());
    match (&r.culprit, r.same_culprit) {
        (Some(c), Some(true)) if theirs.is_some_and(|t| t != c) => s.push_str(&format!(
            "; culprit kept: {c} (the MCS's replays show it on another switch: {})\n",
            theirs.unwrap_or_default()
        )),
        (Some(c), Some(true)) => s.push_str(&format!("; culprit kept: {c}\n")),
        (Some(c), Some(false)) => s.push_str(&format!("; the original's culprit was {c}, the MCS shows another\n")),
        (Some(c), None) => s.push_str(&format!("; culprit: {c}\n")),
        (None, _) => s.push('\n'),
    }
    for e in &r.mcs {
        s.push_str(&format!("  {e}\n"));
    }
    s
}

/// `mcs/report.md`: the minimization as Markdown.
pub fn mcs_markdown(r: &minimize::Report) -> String {
    let mut s = format!("# Minimal causal sequence for `{}`\n\n", r.violation);
    s.push_str(&format!(
        "A candidate reproduced the violation when a replay found the same bug at level `{}` ({}).\n",
        r.same,
        match r.same {
            sts_invariants::Same::Kind => "the same invariant",
            sts_invariants::Same::Culprit => "the same culprit rule, whoever the victim and on whichever switch",
            sts_invariants::Same::Switch => "the same culprit rule on the same switch, whoever the victim",
            sts_invariants::Same::Victim => "the same victim, whatever the cause",
            sts_invariants::Same::Exact => "the same culprit and the same elements",
        }
    ));
    if let Some(c) = &r.culprit {
        s.push_str(&format!("The original's culprit: {c}.\n"));
    }
    let theirs = r.observed.as_ref().and_then(|v| v.culprit.as_deref());
    match r.same_culprit {
        Some(true) if theirs.is_some_and(|t| Some(t) != r.culprit.as_deref()) => s.push_str(&format!(
            "The sequence's own replays show the same culprit, on another switch: {}.\n",
            theirs.unwrap_or_default()
        )),
        Some(true) => s.push_str("The sequence's own replays show the same culprit.\n"),
        Some(false) => s.push_str("**The sequence's own replays show another culprit** (see below).\n"),
        None => {}
    }
    s.push('\n');
    s.push_str("| original inputs | MCS inputs | replays | time | MCS reproduces |\n|---|---|---|---|---|\n");
    s.push_str(&format!(
        "| {} | {} | {} | {} | {}/{} |\n\n",
        r.original_inputs,
        r.mcs_inputs,
        r.replays,
        seconds(r.seconds),
        r.final_reproduced,
        r.final_replays
    ));
    if r.budget_exhausted {
        s.push_str("The time budget ran out: the sequence is smaller but not proven 1-minimal.\n\n");
    }
    match &r.beyond {
        Some(b) if b.to < b.from => s.push_str(&format!(
            "Delta debugging stopped at {} inputs (1-minimal: none can go); the search past it found {} elsewhere in the trace, in {} replays.\n\n",
            b.from, b.to, b.replays
        )),
        Some(b) => s.push_str(&format!(
            "The search past delta debugging's result found nothing smaller elsewhere in the trace ({} replays{}).\n\n",
            b.replays,
            if b.capped { "; it stopped at its cap, as many replays as delta debugging took" } else { "" }
        )),
        None => {}
    }
    match &r.warm {
        Some(w) if w.resumed > 0 => s.push_str(&format!(
            "Candidates were replayed from a checkpoint taken after the handshakes ({} of the search's replays, on {} live run{}); the final replays started fresh.\n\n",
            w.resumed,
            w.places,
            if w.places == 1 { "" } else { "s" }
        )),
        Some(w) => {
            if let Some(why) = &w.fresh_because {
                s.push_str(&format!("Every replay started fresh controllers (no checkpoint after the handshakes: {why}).\n\n"));
            }
        }
        None => {}
    }
    if r.called_off > 0 {
        s.push_str(&format!(
            "{} candidate{} called off mid-replay: an earlier candidate of {} round had reproduced.\n\n",
            r.called_off,
            if r.called_off == 1 { " was" } else { "s were" },
            if r.called_off == 1 { "its" } else { "their" }
        ));
    }
    s.push_str(&format!(
        "Inputs left after each reduction: {}\n\n## The sequence\n\n",
        r.curve.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" → ")
    ));
    if r.present_without_inputs {
        s.push_str("No input: the violation is present without any (the empty sequence, tried first, reproduces it). The network was never healthy.\n");
    }
    if r.events.is_empty() {
        for e in &r.mcs {
            s.push_str(&format!("1. {e}\n"));
        }
    } else {
        s.push_str("| # | seq in the original trace | original time | replayed at | input |\n|---|---|---|---|---|\n");
        for (i, e) in r.events.iter().enumerate() {
            s.push_str(&format!("| {} | {} | {} ms | {} ms | {} |\n", i + 1, e.seq, e.original_t_ms, e.t_ms, e.input));
        }
        s.push_str(
            "\nReplays inject each input at its original time, less the pause the removed inputs before the first kept one took.\n",
        );
    }
    match &r.observed {
        Some(v) => {
            s.push_str("\n## The violation, as the sequence's own replays saw it\n\n```\n");
            s.push_str(&violation(v));
            s.push_str("```\n");
        }
        None => s.push_str("\nNo final replay reproduced the violation.\n"),
    }
    s
}

/// `OUT/summary.md`: a campaign's bugs and their minimal causal sequences.
pub fn campaign_markdown(c: &sts_engine::campaign::Report) -> String {
    let found = c.seeds.iter().filter(|s| s.violation.is_some()).count();
    let failed = c.seeds.iter().filter(|s| s.error.is_some()).count();
    let mut s = format!(
        "# Campaign: {} seeds, {} distinct bug(s)\n\n{} seed(s) found a violation, {} found none{}; bugs are told apart by `{}`.\n\n",
        c.seeds.len(),
        c.bugs.len(),
        found,
        c.seeds.len() - found - failed,
        if failed > 0 { format!(", {failed} could not run") } else { String::new() },
        c.same
    );
    if !c.bugs.is_empty() {
        s.push_str(
            "| bug | violation | seen on | seeds | minimized on | MCS | reproduces |\n|---|---|---|---|---|---|---|\n",
        );
    }
    for (i, b) in c.bugs.iter().enumerate() {
        let seeds: Vec<String> = b.seeds.iter().map(u64::to_string).collect();
        let (mcs, rate) = match (&b.mcs, &b.error) {
            (Some(r), _) => (
                format!("{} of {} inputs", r.mcs_inputs, r.original_inputs),
                format!("{}/{}", r.final_reproduced, r.final_replays),
            ),
            (None, Some(e)) => (format!("failed: {}", shorten(e)), "-".into()),
            (None, None) => ("-".into(), "-".into()),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | `seeds/{}/mcs/` | {mcs} | {rate} |\n",
            i + 1,
            shorten(&b.identity).replace('|', "\\|"),
            if b.switches.is_empty() { "-".to_string() } else { b.switches.join(", ") },
            seeds.join(", "),
            b.minimized
        ));
    }
    for (i, b) in c.bugs.iter().enumerate() {
        s.push_str(&format!("\n## Bug {}: {}\n\n", i + 1, b.violation.summary));
        if let Some(r) = &b.mcs {
            for e in &r.mcs {
                s.push_str(&format!("1. {e}\n"));
            }
            if r.mcs.is_empty() {
                s.push_str("No input: the violation is present without any.\n");
            }
        }
    }
    for run in c.seeds.iter().filter(|r| r.error.is_some()) {
        s.push_str(&format!("\nSeed {} could not run: {}\n", run.seed, run.error.as_deref().unwrap_or("")));
    }
    s
}

/// Writes `mcs/report.md` next to the engine's `report.json` (atomically).
pub fn write_mcs_markdown(mcs_dir: &Path, r: &minimize::Report) -> std::io::Result<()> {
    sts_trace::dir::write_atomic(&mcs_dir.join("report.md"), mcs_markdown(r).as_bytes())
}

/// `s`, cut to 160 characters with an ellipsis.
pub fn shorten(s: &str) -> String {
    if s.chars().count() > 160 {
        format!("{}...", s.chars().take(160).collect::<String>())
    } else {
        s.to_string()
    }
}

/// One kept message in a line: when, which way, what (FLOW_MODs and
/// PACKET_OUTs in dump-flows words), and the input it followed.
fn kept_line(m: &sts_engine::internal::KeptMessage) -> String {
    use sts_proxy::interpose::Direction;
    let (from, to) = match m.id.dir {
        Direction::ControllerToSwitch => (format!("c{}", m.id.channel.controller), format!("s{}", m.id.channel.dpid)),
        Direction::SwitchToController => (format!("s{}", m.id.channel.dpid), format!("c{}", m.id.channel.controller)),
    };
    let decoded = m.raw.as_deref().and_then(|hex| {
        let bytes: Option<Vec<u8>> =
            (0..hex.len() / 2).map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()).collect();
        sts_proxy::wire::Message::parse(bytes?.into()).ok()
    });
    let what = decoded.as_ref().and_then(flows::message).unwrap_or_else(|| shorten(&m.id.fp));
    let after = m.after_input.as_deref().map_or_else(|| "before the first input".to_string(), |e| format!("after {e}"));
    format!("{} ms, {after}: {from} -> {to} {}: {what}", m.t_ms, m.msg_type)
}

/// `sts minimize --internal`'s result in a few lines.
pub fn internal_summary(r: &sts_engine::internal::Report) -> String {
    let mut s = format!(
        "messages: {} delivered in the original run, {} in the minimal sequence's replay ({} droppable), {} with the \
         others dropped; {} kept ({} candidates, {} replays, {:.0} s); reproduces {}/{}\n",
        r.delivered_original,
        r.delivered_external,
        r.droppable,
        r.delivered_internal,
        r.kept.len(),
        r.tested,
        r.replays,
        r.elapsed_s,
        r.final_reproduced,
        r.final_runs
    );
    for m in &r.kept {
        s.push_str(&format!("  {}\n", kept_line(m)));
    }
    s
}

/// The section `--internal` adds to `mcs/report.md`.
pub fn internal_markdown(r: &sts_engine::internal::Report) -> String {
    let mut s = String::from("## Messages that matter (`--internal`)\n\n");
    s.push_str(&format!(
        "| run | OpenFlow messages delivered |\n|---|---|\n| original | {} |\n| minimal sequence of inputs | {} |\n\
         | with only the messages below (and the handshake, keepalives, barriers) | {} |\n\n",
        r.delivered_original, r.delivered_external, r.delivered_internal
    ));
    s.push_str(&format!(
        "{} of {} droppable messages kept; the rest dropped by the proxy, the bug still reproduces {}/{}.\n\n",
        r.kept.len(),
        r.droppable,
        r.final_reproduced,
        r.final_runs
    ));
    for m in &r.kept {
        s.push_str(&format!("- {}\n", kept_line(m)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_marks_misses_and_counts() {
        let m = Matrix {
            hosts: vec!["h1".into(), "h2".into(), "h3".into()],
            reached: vec![vec![false, true, true], vec![true, false, false], vec![true, true, false]],
        };
        assert_eq!(matrix(&m), "*** Ping: testing ping reachability\nh1 -> h2 h3\nh2 -> h1 X\nh3 -> h1 h2\n*** Results: 16% dropped (5/6 received)\n");
        let empty = Matrix { hosts: vec![], reached: vec![] };
        assert!(matrix(&empty).ends_with("0% dropped (0/0 received)\n"));
    }

    #[test]
    fn a_minimizations_time_keeps_its_tenths_while_short() {
        assert_eq!(seconds(0.04), "0.0 s");
        assert_eq!(seconds(1.37), "1.4 s");
        assert_eq!(seconds(9.94), "9.9 s");
        assert_eq!(seconds(66.4), "66 s");
    }

    #[test]
    fn long_keys_are_cut() {
        assert_eq!(shorten("abc"), "abc");
        let long = "x".repeat(200);
        assert_eq!(shorten(&long).chars().count(), 163);
    }
}
