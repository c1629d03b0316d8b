//! `sts learn`: fingerprint masks learned from replays (`DIR/masks.json`,
//! [`sts_trace::masks`]).
//!
//! The trace is replayed `runs` times (into `DIR/learn/N/`, with no masks).
//! Each run's OpenFlow messages are lined up with the original's, stream by
//! stream (a switch, a controller, a direction, a message type): those found
//! verbatim in both are set aside, the rest lined up in order. Two lined-up
//! messages that differ in a few fields, agree on every other one, and whose
//! differing values are new to the other run (a nonce, a timestamp: not a
//! port or an address seen elsewhere) are the same message with volatile
//! values: those fields are learned, for that message type. Anything else
//! teaches nothing ([`learn_from`]).
//!
//! The report counts, for each replay, the original's events it missed and
//! the events it had that the original did not, with today's hand-written
//! masks alone and with the learned ones too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;
use sts_trace::masks::{self, Masks};
use sts_trace::{Internal, Trace};

use crate::replay::{self, diverge};
use crate::session::RunError;
use crate::{Engine, Progress};

/// Fields two aligned messages may differ in and still count as the same
/// message with volatile values (and fewer than half of their fields).
pub const MAX_VOLATILE: usize = 3;

/// One replay's divergence from the original, without and with the masks.
#[derive(Debug, Clone, Serialize)]
pub struct RunCounts {
    pub run: u32,
    /// Original events missed / replayed events the original lacked, with
    /// the hand-written masks only.
    pub missing_before: usize,
    pub unexpected_before: usize,
    /// The same with the learned masks too.
    pub missing_after: usize,
    pub unexpected_after: usize,
}

/// What `sts learn` found.
#[derive(Debug, Clone, Serialize)]
pub struct Learned {
    pub masks: Masks,
    pub runs: Vec<RunCounts>,
    /// Aligned message pairs compared, and those that differed in a few
    /// fields (and taught something).
    pub pairs: usize,
    pub volatile_pairs: usize,
}

/// Stream → fingerprints in order.
type Streams = BTreeMap<(u64, usize, &'static str, String), Vec<String>>;

fn streams(trace: &Trace) -> Streams {
    let mut out: Streams = BTreeMap::new();
    for r in trace.records.iter().take_while(|r| r.violation().is_none()) {
        if let Some(Internal::Openflow { dpid, controller, dir, msg, fp, .. }) = r.internal() {
            out.entry((*dpid, *controller, dir.as_str(), msg.as_str().to_string())).or_default().push(fp.0.clone());
        }
    }
    out
}

/// Learns masks from `original` and `replays` (see the module's comment):
/// (masks, pairs compared, pairs that taught something).
///
/// Per stream, messages present verbatim in both runs are set aside (the
/// runs may order them differently); the rest are lined up in order. A
/// field counts as volatile in a lined-up pair only when the pair agrees on
/// most fields and neither value of the field appears anywhere in the other
/// run's stream: a nonce or a timestamp is new each run, while a port, an
/// address or a priority that merely moved (another message, reordered)
/// shows up elsewhere.
pub fn learn_from(original: &Trace, replays: &[Trace]) -> (Masks, usize, usize) {
    let base = streams(original);
    let mut masks = Masks::default();
    let (mut pairs, mut taught) = (0, 0);
    for replay in replays {
        let other = streams(replay);
        for (stream, fps) in &base {
            let Some(theirs) = other.get(stream) else { continue };
            let (ours_left, theirs_left) = leftovers(fps, theirs);
            let values = |side: &[String]| -> BTreeMap<String, BTreeSet<String>> {
                let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
                for l in side.iter().filter_map(|fp| masks::leaves(fp)) {
                    for (k, v) in l {
                        out.entry(k).or_default().insert(v.to_string());
                    }
                }
                out
            };
            let (ours_values, theirs_values) = (values(fps), values(theirs));
            pairs += fps.len().min(theirs.len());
            for (a, b) in ours_left.iter().zip(&theirs_left) {
                let (Some(la), Some(lb)) = (masks::leaves(a), masks::leaves(b)) else { continue };
                if la.len() != lb.len() || la.keys().ne(lb.keys()) {
                    continue;
                }
                let differ: Vec<&String> = la.iter().filter(|(k, v)| lb.get(*k) != Some(v)).map(|(k, _)| k).collect();
                // A few fields, and fewer than half: the same message.
                if differ.is_empty() || differ.len() > MAX_VOLATILE || differ.len() * 2 >= la.len() {
                    continue;
                }
                let fresh = |k: &String| {
                    let new_in = |v: &serde_json::Value, vals: &BTreeMap<String, BTreeSet<String>>| {
                        !vals.get(k).is_some_and(|set| set.contains(&v.to_string()))
                    };
                    new_in(&la[k], &theirs_values) && new_in(&lb[k], &ours_values)
                };
                if differ.iter().all(|k| fresh(k)) {
                    taught += 1;
                    let set = masks.by_type.entry(stream.3.clone()).or_default();
                    set.extend(differ.into_iter().cloned());
                }
            }
        }
    }
    (masks, pairs, taught)
}

/// The messages of `a` not in `b` and of `b` not in `a` (as multisets), each
/// in its own order.
fn leftovers(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
    fn count(xs: &[String]) -> BTreeMap<&str, usize> {
        let mut m = BTreeMap::new();
        xs.iter().for_each(|x| *m.entry(x.as_str()).or_default() += 1);
        m
    }
    fn only(xs: &[String], mut other: BTreeMap<&str, usize>) -> Vec<String> {
        xs.iter()
            .filter(|x| match other.get_mut(x.as_str()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    false
                }
                _ => true,
            })
            .cloned()
            .collect()
    }
    (only(a, count(b)), only(b, count(a)))
}

/// The keys of `trace`'s internal events (what a replay "observed"), with
/// `masks` if given.
fn observed(trace: &Trace, masks: Option<&Masks>) -> Vec<String> {
    trace.records.iter().filter_map(|r| r.internal()).filter_map(|i| sts_trace::masks::key(masks, i)).collect()
}

/// `sts learn DIR --runs K`: replays, learns, saves `DIR/masks.json`.
pub async fn run(engine: &Engine, dir: &Path, runs: u32) -> Result<Learned, RunError> {
    let (exp, mut config, trace) = replay::load(dir, None)?;
    // Learn from what the hand-written masks alone see.
    config.masks = None;
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", dir.display()));
    let mut replays = Vec::new();
    for n in 1..=runs.max(1) {
        engine.progress(Progress::Replay { run: n, of: runs.max(1) });
        let out = dir.join("learn").join(n.to_string());
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).map_err(env)?;
        let r = replay::replay_once(engine, &config, &trace, &out, n).await?;
        let t = Trace::load(&r.trace).map_err(|e| RunError::Environment(e.to_string()))?;
        replays.push(t);
    }
    engine.progress(Progress::Done);
    let (masks, pairs, volatile_pairs) = learn_from(&trace, &replays);
    let runs = replays
        .iter()
        .zip(1..)
        .map(|(t, run)| {
            let before = diverge(&trace, &observed(t, None), None);
            let after = diverge(&trace, &observed(t, Some(&masks)), Some(&masks));
            RunCounts {
                run,
                missing_before: before.missing,
                unexpected_before: before.unexpected,
                missing_after: after.missing,
                unexpected_after: after.unexpected,
            }
        })
        .collect();
    masks.save(&exp.dir).map_err(env)?;
    Ok(Learned { masks, runs, pairs, volatile_pairs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_proxy::wire::Fingerprint;
    use sts_trace::{Direction, Header, MsgType, Record};

    fn trace(fps: &[&str]) -> Trace {
        let records = fps
            .iter()
            .enumerate()
            .map(|(i, fp)| Record {
                seq: i as u64 + 1,
                t_ms: i as u64,
                event: sts_trace::Event::Internal(Internal::Openflow {
                    dpid: 1,
                    controller: 0,
                    dir: Direction::ToSwitch,
                    msg: MsgType::from_name("flow_mod").unwrap(),
                    fp: Fingerprint(fp.to_string()),
                    raw: None,
                    proxy: None,
                }),
                line: 0,
            })
            .collect();
        Trace { header: Header::new(None), records }
    }

    #[test]
    fn a_field_that_varies_alone_is_learned_and_a_different_message_teaches_nothing() {
        let fm = |prio: u32, nonce: u32, port: u32| {
            format!(r#"of4/flow_mod {{"priority":{prio},"hard_timeout":{nonce},"out":{port}}}"#)
        };
        let original = trace(&[&fm(1, 111, 2), &fm(1, 222, 3)]);
        // Run 1: the nonces differ. Run 2: the second message is another one
        // altogether (priority, nonce and port differ: more than a nonce).
        let r1 = trace(&[&fm(1, 333, 2), &fm(1, 444, 3)]);
        let r2 = trace(&[&fm(1, 111, 2), &fm(5, 999, 9)]);
        let (masks, pairs, taught) = learn_from(&original, &[r1.clone(), r2]);
        assert_eq!((pairs, taught), (4, 2));
        assert_eq!(masks.by_type["flow_mod"].iter().collect::<Vec<_>>(), vec!["hard_timeout"]);
        // Reordered messages, and a port seen elsewhere, teach nothing.
        let reordered = trace(&[&fm(1, 222, 3), &fm(1, 111, 2)]);
        assert!(learn_from(&original, &[reordered]).0.is_empty());
        let moved = trace(&[&fm(1, 111, 3), &fm(1, 222, 3)]);
        assert!(learn_from(&original, &[moved]).0.is_empty(), "port 3 is in the original too");
        let before = diverge(&original, &observed(&r1, None), None);
        let after = diverge(&original, &observed(&r1, Some(&masks)), Some(&masks));
        assert_eq!((before.missing, after.missing), (2, 0));
    }
}
