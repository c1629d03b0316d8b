//! Message-level minimization (`sts minimize DIR --internal`, issue 24): after
//! the minimal causal sequence of inputs, which OpenFlow deliveries matter.
//!
//! One replay of the MCS (`DIR/mcs/internal/base`) gives the messages the
//! controllers and switches exchanged. Each is named by its identity (its
//! channel, direction, fingerprint, and which occurrence of that
//! fingerprint it is: [`MessageId`]), so that a later run can drop "the second
//! FLOW_MOD like this one to s3" even when other messages come and go around
//! it. Delta debugging then searches for the smallest set of those messages
//! to deliver: every other one is dropped by the interposer
//! (`Interposer::drop_ids`), and a candidate passes when the same bug (bug
//! identity, as for inputs) still shows up. Messages that appear only in a
//! candidate's run (new ones) pass.
//!
//! What must stay ([`MUST_KEEP`]): the handshake (HELLO, FEATURES, the
//! switch's configuration and description requests and replies, multipart),
//! keepalives, barriers and roles. Losing those tests the session machinery,
//! not the controller's logic, and a switch without a session shows nothing
//! anyway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;
use sts_proxy::interpose::{ChannelId, Direction as Dir, MessageId};
use sts_trace::{Direction, Internal, Trace};

use crate::minimize::Ddmin;
use crate::replay;
use crate::session::RunError;
use crate::{Engine, Progress};

/// Message types every candidate delivers (see the module's comment).
pub const MUST_KEEP: &[&str] = &[
    "hello",
    "features_request",
    "features_reply",
    "echo_request",
    "echo_reply",
    "get_config_request",
    "get_config_reply",
    "set_config",
    "multipart_request",
    "multipart_reply",
    "stats_request",
    "stats_reply",
    "barrier_request",
    "barrier_reply",
    "role_request",
    "role_reply",
    "get_async_request",
    "get_async_reply",
    "set_async",
    "queue_get_config_request",
    "queue_get_config_reply",
];

/// How `--internal` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Replays per candidate (the first reproduction counts).
    pub replays: u32,
    /// Replays of the result, counted.
    pub final_replays: u32,
    /// The level of bug identity a candidate must keep (`--same`; the
    /// config's when `None`), as for the inputs' minimization before it.
    pub same: Option<sts_invariants::Same>,
}

/// A message the bug needs delivered.
#[derive(Debug, Clone, Serialize)]
pub struct KeptMessage {
    pub id: MessageId,
    pub msg_type: String,
    /// When it crossed the proxy in the baseline replay (ms).
    pub t_ms: u64,
    /// The input it came after, described (none: before the first input).
    pub after_input: Option<String>,
    /// Its bytes, hex.
    pub raw: Option<String>,
}

/// What `--internal` found (`DIR/mcs/internal.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// OpenFlow messages (keepalives aside) in the original run, before its violation.
    pub delivered_original: usize,
    /// In the baseline replay of the external MCS.
    pub delivered_external: usize,
    /// Of those, messages a candidate may drop (not in [`MUST_KEEP`]).
    pub droppable: usize,
    /// The droppable messages the bug needs.
    pub kept: Vec<KeptMessage>,
    /// Messages delivered in the first final replay, with the others dropped.
    pub delivered_internal: usize,
    /// Candidates tested, and replays run.
    pub tested: usize,
    pub replays: u64,
    pub final_reproduced: u32,
    pub final_runs: u32,
    pub elapsed_s: f64,
}

fn dir_of(d: Direction) -> Dir {
    match d {
        Direction::ToController => Dir::SwitchToController,
        Direction::ToSwitch => Dir::ControllerToSwitch,
    }
}

/// One message of a trace: its identity, type, time, record index.
struct Seen {
    id: MessageId,
    msg_type: &'static str,
    t_ms: u64,
    index: usize,
}

/// The OpenFlow messages of `trace` (before its violation, keepalives
/// aside), each with its identity.
fn messages(trace: &Trace) -> Vec<Seen> {
    let mut counts: BTreeMap<(ChannelId, Dir, String), u32> = BTreeMap::new();
    let mut out = Vec::new();
    for (index, r) in trace.records.iter().enumerate().take_while(|(_, r)| r.violation().is_none()) {
        let Some(Internal::Openflow { dpid, controller, dir, msg, fp, .. }) = r.internal() else { continue };
        if matches!(msg.as_str(), "echo_request" | "echo_reply") {
            continue;
        }
        let channel = ChannelId { dpid: *dpid, controller: *controller };
        let n = counts.entry((channel, dir_of(*dir), fp.0.clone())).or_default();
        out.push(Seen {
            id: MessageId { channel, dir: dir_of(*dir), fp: fp.0.clone(), occurrence: *n },
            msg_type: msg.as_str(),
            t_ms: r.t_ms,
            index,
        });
        *n += 1;
    }
    out
}

/// `trace` without the records of the messages in `drops` (a candidate's
/// replay must not wait for messages it drops).
fn without(trace: &Trace, drops: &BTreeSet<MessageId>) -> Trace {
    let gone: BTreeSet<usize> =
        messages(trace).into_iter().filter(|m| drops.contains(&m.id)).map(|m| m.index).collect();
    let records = trace.records.iter().enumerate().filter(|(i, _)| !gone.contains(i)).map(|(_, r)| r.clone()).collect();
    Trace { header: trace.header.clone(), records }
}

/// `sts minimize DIR --internal`, on `DIR/mcs/trace.jsonl`.
pub async fn run(engine: &Engine, dir: &Path, opts: &Options) -> Result<Report, RunError> {
    let started = std::time::Instant::now();
    let (_, config, original) = replay::load(dir, opts.same)?;
    let mcs_path = dir.join("mcs").join("trace.jsonl");
    if !mcs_path.is_file() {
        return Err(RunError::BadInput(format!(
            "{}: no minimal causal sequence of inputs yet: `sts minimize {}` makes one (with --internal it runs first)",
            mcs_path.display(),
            dir.display()
        )));
    }
    let mcs = Trace::load(&mcs_path).map_err(|e| RunError::BadInput(e.to_string()))?;
    let work = dir.join("mcs").join("internal");
    let _ = std::fs::remove_dir_all(&work);
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", work.display()));
    std::fs::create_dir_all(&work).map_err(env)?;

    // The baseline: what the MCS's replay exchanges.
    let base_run = replay::replay_once(engine, &config, &mcs, &work.join("base"), 0).await?;
    if !base_run.reproduced {
        return Err(RunError::BadInput(
            "the minimal causal sequence did not reproduce in the baseline replay: run `sts minimize` again".into(),
        ));
    }
    let base = Trace::load(&base_run.trace).map_err(|e| RunError::Environment(e.to_string()))?;
    let all = messages(&base);
    let droppable: Vec<&Seen> = all.iter().filter(|m| !MUST_KEEP.contains(&m.msg_type)).collect();

    let mut d = Ddmin::new(droppable.len());
    let (mut tested, mut replays, mut run_no) = (0usize, 0u64, 1u32);
    let drops_for = |keep: &[usize]| -> BTreeSet<MessageId> {
        let keep: BTreeSet<usize> = keep.iter().copied().collect();
        droppable.iter().enumerate().filter(|(i, _)| !keep.contains(i)).map(|(_, m)| m.id.clone()).collect()
    };
    while !d.is_done() {
        let candidates = d.candidates().to_vec();
        engine.progress(Progress::Minimize {
            inputs_left: d.kept().len(),
            original: droppable.len(),
            trying: candidates.len(),
            candidate_inputs: candidates.first().map_or(0, Vec::len),
            tested,
            replays,
            elapsed_s: started.elapsed().as_secs_f64(),
        });
        let mut results = vec![false; candidates.len()];
        for (c, keep) in candidates.iter().enumerate() {
            tested += 1;
            let drops = drops_for(keep);
            let mut cfg = config.clone();
            cfg.drop_ids = drops.clone();
            let cand = without(&mcs, &drops);
            for _ in 0..opts.replays.max(1) {
                let out = work.join(run_no.to_string());
                let r = replay::replay_once(engine, &cfg, &cand, &out, run_no).await?;
                let _ = std::fs::remove_dir_all(&out);
                run_no += 1;
                replays += 1;
                if r.reproduced {
                    results[c] = true;
                    break;
                }
            }
            if results[c] {
                break;
            }
        }
        d.advance(&results);
    }
    engine.progress(Progress::Done);

    // The result, replayed and counted.
    let drops = drops_for(d.kept());
    let mut cfg = config.clone();
    cfg.drop_ids = drops.clone();
    let cand = without(&mcs, &drops);
    let (mut final_reproduced, mut delivered_internal) = (0, None);
    for k in 0..opts.final_replays {
        let out = work.join("final").join((k + 1).to_string());
        let r = replay::replay_once(engine, &cfg, &cand, &out, k + 1).await?;
        replays += 1;
        final_reproduced += u32::from(r.reproduced);
        if delivered_internal.is_none() {
            let t = Trace::load(&r.trace).map_err(|e| RunError::Environment(e.to_string()))?;
            delivered_internal = Some(messages(&t).iter().filter(|m| !drops.contains(&m.id)).count());
        }
    }
    let inputs: Vec<(usize, String)> =
        base.records.iter().enumerate().filter_map(|(i, r)| r.external().map(|e| (i, e.describe()))).collect();
    let kept = d
        .kept()
        .iter()
        .map(|&i| {
            let m = droppable[i];
            let after_input = inputs.iter().rev().find(|(at, _)| *at < m.index).map(|(_, e)| e.clone());
            let raw = match base.records[m.index].internal() {
                Some(Internal::Openflow { raw: Some(b), .. }) => Some(b.iter().map(|x| format!("{x:02x}")).collect()),
                _ => None,
            };
            KeptMessage { id: m.id.clone(), msg_type: m.msg_type.to_string(), t_ms: m.t_ms, after_input, raw }
        })
        .collect();
    let report = Report {
        delivered_original: messages(&original).len(),
        delivered_external: all.len(),
        droppable: droppable.len(),
        kept,
        delivered_internal: delivered_internal.unwrap_or(0),
        tested,
        replays,
        final_reproduced,
        final_runs: opts.final_replays,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    sts_trace::dir::write_json(&dir.join("mcs").join("internal.json"), &report).map_err(env)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_proxy::wire::Fingerprint;
    use sts_trace::{Header, MsgType, Record};

    #[test]
    fn identities_count_occurrences_and_dropping_removes_exactly_those_records() {
        let rec = |seq: u64, msg: &str, fp: &str| Record {
            seq,
            t_ms: seq,
            event: sts_trace::Event::Internal(Internal::Openflow {
                dpid: 1,
                controller: 0,
                dir: Direction::ToSwitch,
                msg: MsgType::from_name(msg).unwrap(),
                fp: Fingerprint(fp.into()),
                raw: None,
                proxy: None,
            }),
            line: 0,
        };
        let t = Trace {
            header: Header::new(None),
            records: vec![
                rec(1, "flow_mod", "A"),
                rec(2, "echo_request", "E"),
                rec(3, "flow_mod", "A"),
                rec(4, "packet_out", "B"),
            ],
        };
        let m = messages(&t);
        assert_eq!(
            m.iter().map(|s| (s.id.fp.as_str(), s.id.occurrence)).collect::<Vec<_>>(),
            vec![("A", 0), ("A", 1), ("B", 0)]
        );
        let drops: BTreeSet<MessageId> = [m[1].id.clone()].into();
        let kept: Vec<u64> = without(&t, &drops).records.iter().map(|r| r.seq).collect();
        assert_eq!(kept, vec![1, 2, 4], "the second A goes, the first stays");
    }
}
