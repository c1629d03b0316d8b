//! Verifying a stream of rule updates: apply each, re-check with
//! [`Incremental`], note what appeared and how long it took.
//!
//! This is what `sts verify` runs on a real network ([`crate::stanford`]).
//! Per update it measures the time to apply the update to the tables and
//! the time of the re-check, with the monotonic clock: the measurements are
//! the command's output, not an input to any decision.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sts_mocknet::network::Network;

use crate::check::{loop_within_in, Checker, Facts, Incremental, Invariant, Report, Violation};
use crate::header::{s, Ternary};
use crate::stanford::{RouterNet, Rule, Update};
use crate::walk::Model;

/// A violation that an update made appear (absent after the one before).
#[derive(Debug, Clone)]
pub struct Appeared {
    /// The update's index in the stream (0-based).
    pub update: usize,
    pub violation: Violation,
}

/// What a whole stream's verification found and cost.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Per update: (apply, re-check).
    pub times: Vec<(Duration, Duration)>,
    /// Violations as they appeared, in update order.
    pub appeared: Vec<Appeared>,
    /// The first full check (empty tables).
    pub initial: Duration,
    /// The report after the last update.
    pub last: Report,
    /// Updates after which some violation held.
    pub violated_after: usize,
    /// Re-checks that were full checks, by reason.
    pub fallbacks: std::collections::BTreeMap<String, usize>,
    /// The update after which the network held the most rules (0-based),
    /// and that many rules (for [`full_check_at`]).
    pub peak: (usize, usize),
}

/// Times a full check (from scratch, nothing kept) of the network as it
/// stands after the first `upto` updates of a freshly loaded `rn` (its
/// loops confirmed through the filters as [`run`] does); with the report.
pub fn full_check_at(rn: &mut RouterNet, checker: Checker, upto: usize) -> Result<(Duration, Report), String> {
    let updates = std::mem::take(&mut rn.updates);
    let applied: Result<(), String> = updates.iter().take(upto).try_for_each(|u| rn.apply(u).map(|_| ()));
    rn.updates = updates;
    applied?;
    let t = Instant::now();
    let mut inc = Incremental::new(checker);
    // With filters the engine's loops are candidates, confirmed below.
    inc.explain_loops = rn.unfiltered.is_none();
    let mut report = inc.check(rn.unfiltered.as_ref().unwrap_or(&rn.net), &Facts::default());
    if rn.unfiltered.is_some() {
        let mut confirmed = Confirmed::on_routers(rn.routers());
        confirmed.update(&inc, &rn.net, &[], Touch::ANY);
        report.violations = confirmed.loops().to_vec();
    }
    Ok((t.elapsed(), report))
}

/// Summary statistics of a list of durations, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub total_ms: f64,
}

impl Stats {
    /// Statistics of `d` (all zero when empty).
    pub fn of(d: impl IntoIterator<Item = Duration>) -> Stats {
        let mut us: Vec<f64> = d.into_iter().map(|d| d.as_secs_f64() * 1e6).collect();
        if us.is_empty() {
            return Stats { mean: 0.0, p50: 0.0, p95: 0.0, p99: 0.0, max: 0.0, total_ms: 0.0 };
        }
        us.sort_by(f64::total_cmp);
        let total: f64 = us.iter().sum();
        let at = |q: f64| us[((us.len() as f64 * q).ceil() as usize).clamp(1, us.len()) - 1];
        Stats {
            mean: total / us.len() as f64,
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            max: us[us.len() - 1],
            total_ms: total / 1e3,
        }
    }
}

/// Applies `rn`'s updates in order (the first `limit` when given), checking
/// after each; `progress` is called with the number of updates done.
pub fn run(
    rn: &mut RouterNet,
    checker: Checker,
    limit: Option<usize>,
    mut progress: impl FnMut(usize),
) -> Result<Outcome, String> {
    let facts = Facts::default();
    let mut inc = Incremental::new(checker);
    inc.cut_for(rn.values());
    inc.refresh_loop_witnesses = false;
    // With filters, the class engine follows the unfiltered network (its
    // classes are the forwarding rules'); each loop it finds is confirmed
    // on the filtered one (see `Confirmed`).
    let filtered = rn.unfiltered.is_some();
    // Its loops are candidates there, each confirmed with its own witness.
    inc.explain_loops = !filtered;
    let mut confirmed = Confirmed::on_routers(rn.routers());
    let t = Instant::now();
    let first = inc.check(rn.unfiltered.as_ref().unwrap_or(&rn.net), &facts);
    let first_violations: Vec<Violation> = if filtered {
        confirmed.update(&inc, &rn.net, &[], Touch::ANY);
        confirmed.loops().to_vec()
    } else {
        first.violations.clone()
    };
    let initial = t.elapsed();
    // What stands, by identity across checks (invariant, elements), sorted:
    // a violation is new when its key was not there after the update before.
    let mut present: Vec<(Invariant, Vec<String>)> =
        first_violations.iter().map(|v| (v.invariant, v.elements.clone())).collect();
    present.sort_unstable();
    present.dedup();
    let mut appeared: Vec<Appeared> =
        first_violations.iter().map(|v| Appeared { update: 0, violation: v.clone() }).collect();
    let updates = std::mem::take(&mut rn.updates);
    let n = limit.map_or(updates.len(), |l| l.min(updates.len()));
    let mut times = Vec::with_capacity(n);
    let mut violated_after = 0;
    let mut last = first;
    let mut peak = (0, 0);
    // What stood after the last update whose violations were compared.
    let mut last_stands = None;
    let result: Result<(), String> = (|| {
        for (i, u) in updates.iter().take(n).enumerate() {
            let t = Instant::now();
            let changed = rn.apply(u).map_err(|e| format!("update {} (line {}): {e}", i + 1, u.line))?;
            let applied = t.elapsed();
            let t = Instant::now();
            let unfiltered_changed: &[u64] = match u.rule {
                Rule::Acl { .. } if filtered => &[],
                _ => &changed,
            };
            // What the engine keeps is read in place (`standing`), not copied.
            let report = inc.recheck_lean(rn.unfiltered.as_ref().unwrap_or(&rn.net), &facts, unfiltered_changed);
            if filtered {
                confirmed.update(&inc, &rn.net, &changed, Touch::of(u));
            }
            let checked = t.elapsed();
            times.push((applied, checked));
            if report.rules > peak.1 {
                peak = (i, report.rules);
            }
            // Nothing new reported and what stands as it was: the same
            // violations as after the update before.
            let stands = if filtered { Some((0, 0, confirmed.generation)) } else { inc.standing_version() };
            if report.violations.is_empty() && stands.is_some() && stands == last_stands {
                violated_after += !present.is_empty() as usize;
                last = report;
                progress(i + 1);
                continue;
            }
            // (Only valid as long as the report itself adds nothing.)
            last_stands = stands.filter(|_| report.violations.is_empty());
            // Read in place; only what is new is copied.
            let current: Vec<&Violation> = if filtered {
                report.violations.iter().chain(confirmed.loops()).collect()
            } else {
                inc.standing().chain(&report.violations).collect()
            };
            let mut now: Vec<(Invariant, &[String])> = current.iter().map(|v| (v.invariant, &v.elements[..])).collect();
            now.sort_unstable();
            now.dedup();
            let unchanged =
                now.len() == present.len() && now.iter().zip(&present).all(|(a, b)| a.0 == b.0 && a.1 == b.1);
            if !unchanged {
                for v in &current {
                    let known = present.binary_search_by(|k| (k.0, &k.1[..]).cmp(&(v.invariant, &v.elements[..])));
                    if known.is_err() {
                        appeared.push(Appeared { update: i, violation: (*v).clone() });
                    }
                }
                present = now.iter().map(|&(inv, elements)| (inv, elements.to_vec())).collect();
            }
            if !now.is_empty() {
                violated_after += 1;
            }
            last = report;
            progress(i + 1);
        }
        Ok(())
    })();
    rn.updates = updates;
    result?;
    if filtered {
        // The last report with the loops confirmed on the filtered network
        // (after no update, the full check's report holds the unfiltered ones).
        let kept = if n == 0 { Vec::new() } else { std::mem::take(&mut last.violations) };
        last.violations = kept.into_iter().chain(confirmed.loops().iter().cloned()).collect();
    } else if n > 0 {
        // The last report in full, as `recheck` gives it.
        let tail = std::mem::take(&mut last.violations);
        last.violations = inc.standing().cloned().chain(tail).collect();
    }
    Ok(Outcome { times, appeared, initial, last, violated_after, fallbacks: inc.fallbacks, peak })
}

/// Loops of the unfiltered network confirmed (or not) on the filtered one.
///
/// A loop through a set of switches exists on the filtered network iff
/// some header of a class looping through them on the unfiltered one loops
/// among them there too: filters only take edges away, and every router on
/// a loop has a host of its own (its `self`), whose traffic enters the loop
/// there without leaving those switches (so the search stays among them:
/// [`loop_within`]). Whether a class loops among those switches depends
/// only on their tables, so what was found for a class stands until an
/// update on one of the switches may change it ([`Touch`]): a forwarding
/// rule that moved the class (the class engine followed it again), an ACL
/// line whose destinations meet it, and then only in the line's direction
/// (a loop found stays while only more is permitted, a class found clear
/// stays while only less is).
#[derive(Default)]
struct Confirmed {
    by_cycle: BTreeMap<Vec<u64>, Candidate>,
    /// The class engine's [`Incremental::loop_clock`] at the last update.
    clock: Option<(u64, u64)>,
    /// The loops found, each once, sorted by their switches
    /// ([`Confirmed::loops`]), made again when some candidate's loop changed.
    shown: Vec<Violation>,
    /// Ticks whenever `shown` is made again.
    generation: u64,
    /// Routers are dpids 1 to this (see [`On`]; 0: no walk starts past
    /// table 0's first rule).
    routers: u64,
}

/// What is known of one candidate loop on the filtered network.
#[derive(Default)]
struct Candidate {
    /// The class engine's stamp for it when this was brought up to date
    /// ([`Incremental::loop_stamp`]).
    stamp: Option<(u64, u64)>,
    /// The class found looping among the candidate's switches, and the loop.
    found: Option<(usize, Violation)>,
    /// Classes whose headers were followed and found not to loop there.
    clear: BTreeSet<usize>,
    /// No loop found and every class of the cycle in `clear`: a class
    /// forgotten from `clear` is then the only one to follow again.
    complete: bool,
}

impl Candidate {
    /// Brings what is known of the candidate loop through `cycle` up to
    /// date (see [`Confirmed`]); returns whether the loop found changed.
    fn refresh(&mut self, on: &On, cycle: &[u64], changed: &[u64], touch: Touch) -> bool {
        let (inc, routers) = (on.inc, on.routers);
        let was = self.found.as_ref().map(|f| f.0);
        let stamp = inc.loop_stamp(cycle);
        let same_classes = stamp.is_some() && self.stamp == stamp;
        let mut forgot = false;
        // Classes known clear before, forgotten now (in order).
        let mut cleared = Vec::new();
        // Forget what an update on one of the switches may have changed:
        // a loop found if less may pass, a class clear if more may.
        if changed.iter().any(|d| cycle.contains(d)) {
            // A forwarding update changes the classes the engine followed
            // again; an ACL update those its destinations meet.
            let meets = |x: usize| {
                (!touch.forwarding || inc.may_have_changed(x))
                    && touch.dst.is_none_or(|t| inc.class_cube(x).is_none_or(|cube| cube.pos[s::IPV4_DST].meets(t)))
            };
            if touch.denies && self.found.as_ref().is_some_and(|(x, _)| meets(*x)) {
                self.found = None;
                forgot = true;
            }
            if touch.permits {
                self.clear.retain(|&x| {
                    let stays = !meets(x);
                    if !stays {
                        cleared.push(x);
                    }
                    stays
                });
                forgot |= !cleared.is_empty();
            }
        }
        // The same classes and nothing forgotten: what was found stands.
        if same_classes && !forgot {
            return self.found.as_ref().map(|f| f.0) != was;
        }
        // Sorted class numbers, only when they may have changed or must be
        // looked at (most updates touch no candidate).
        let mut classes: Option<Vec<usize>> = None;
        if !same_classes {
            let classes = classes.get_or_insert_with(|| inc.loop_classes_of(cycle));
            if self.found.as_ref().is_some_and(|(x, _)| classes.binary_search(x).is_err()) {
                self.found = None;
            }
            self.clear.retain(|x| classes.binary_search(x).is_ok());
        }
        let mut renewed = false;
        if self.found.is_none() {
            // The same classes, all known clear but those just forgotten:
            // only those are followed again (a default route's cycle has
            // a thousand classes, and a backbone router is on most cycles).
            let only_cleared = same_classes && self.complete;
            let classes: &[usize] =
                if only_cleared { &cleared } else { classes.get_or_insert_with(|| inc.loop_classes_of(cycle)) };
            let mut complete = true;
            for &x in classes {
                if !only_cleared && self.clear.contains(&x) {
                    continue;
                }
                let Some(cube) = inc.class_cube(x) else {
                    complete = false;
                    continue;
                };
                let model = on.model();
                // Table 0 of the routers is the same on both networks: the
                // class engine's first rule for the class there is where
                // the walk's scan begins.
                let starts: Vec<(u64, usize)> = cycle
                    .iter()
                    .filter(|&&d| d <= routers)
                    .filter_map(|&d| {
                        let (at, len) = inc.class_table0_start(x, d)?;
                        (model.table0_len(d) == Some(len)).then_some((d, at))
                    })
                    .collect();
                match loop_within_in(model, cycle, &cube, &starts) {
                    Some(v) => {
                        self.found = Some((x, v));
                        renewed = true;
                        break;
                    }
                    None => {
                        self.clear.insert(x);
                    }
                }
            }
            self.complete = complete && self.found.is_none();
        } else {
            self.complete = false;
        }
        self.stamp = stamp;
        // A loop found again (even by the same class) may have another witness.
        renewed || self.found.as_ref().map(|f| f.0) != was
    }
}

/// New candidates from which [`Confirmed::update`] confirms on threads.
const PARALLEL_CANDIDATES: usize = 8;

/// What a confirmation looks at: the class engine (of the unfiltered
/// network, just checked), a model of the filtered network, and how many
/// routers there are (dpids 1 to this, whose table 0 is the same on both
/// networks: the class engine's first rule for a class there is where a
/// walk of that class begins).
struct On<'a, 'n> {
    inc: &'a Incremental,
    /// Made by the first walk that needs it (most updates walk nothing).
    model: &'a OnceLock<Model<'n>>,
    net: &'n Network,
    routers: u64,
}

impl<'n> On<'_, 'n> {
    /// The model of the filtered network, made the first time it is asked for.
    fn model(&self) -> &Model<'n> {
        self.model.get_or_init(|| Model::new(self.net))
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Refreshes every candidate of `work` ([`Candidate::refresh`]), on
/// `threads` threads taking them in turn; whether some candidate's loop
/// changed.
fn refresh_all(work: Vec<(&Vec<u64>, &mut Candidate)>, on: &On, changed: &[u64], touch: Touch, threads: usize) -> bool {
    if threads <= 1 || work.len() < 2 {
        let mut any = false;
        for (cycle, c) in work {
            any |= c.refresh(on, cycle, changed, touch);
        }
        return any;
    }
    let queue = std::sync::Mutex::new(work.into_iter());
    let next = || queue.lock().unwrap_or_else(|e| e.into_inner()).next();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut any = false;
                    while let Some((cycle, c)) = next() {
                        any |= c.refresh(on, cycle, changed, touch);
                    }
                    any
                })
            })
            .collect();
        workers.into_iter().fold(false, |any, w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)) | any)
    })
}

/// What an update may change on the filtered network, for [`Confirmed`].
#[derive(Clone, Copy)]
struct Touch {
    /// The destinations whose treatment may change (`None`: any).
    dst: Option<Ternary>,
    /// Whether headers may be newly permitted (a forwarding rule, an ACL
    /// permit line added or a deny line removed).
    permits: bool,
    /// Whether headers may be newly denied or sent elsewhere (a forwarding
    /// rule, an ACL deny line added or a permit line removed).
    denies: bool,
    /// A forwarding rule: it changes only the classes the class engine
    /// followed again.
    forwarding: bool,
}

impl Touch {
    /// Anything may change.
    const ANY: Touch = Touch { dst: None, permits: true, denies: true, forwarding: false };

    /// What update `u` may change. A forwarding rule matches only its
    /// prefix; an ACL line only its destinations, and under first-match
    /// semantics adding a permit line (or removing a deny line) only lets
    /// more through, adding a deny line (or removing a permit line) less.
    fn of(u: &Update) -> Touch {
        let ternary = |addr: u32, mask: u32| Some(Ternary::present((addr & mask) as u64, mask as u64));
        match &u.rule {
            Rule::Forward { prefix, len, .. } => {
                let mask = if *len == 0 { 0 } else { u32::MAX << (32 - *len as u32) };
                Touch { dst: ternary(*prefix, mask), forwarding: true, ..Touch::ANY }
            }
            Rule::Acl { line, .. } => {
                let permits = u.insert == line.permit;
                Touch {
                    dst: line.dst.and_then(|w| ternary(w.addr, !w.wildcard)),
                    permits,
                    denies: !permits,
                    forwarding: false,
                }
            }
        }
    }
}

impl Confirmed {
    /// Nothing confirmed yet, on a network whose routers are dpids 1 to `routers`.
    fn on_routers(routers: usize) -> Confirmed {
        Confirmed { routers: routers as u64, ..Confirmed::default() }
    }

    /// Brings the confirmations up to date after a check of the unfiltered
    /// network and a change (`touch`) of `changed` switches.
    fn update(&mut self, inc: &Incremental, net: &Network, changed: &[u64], touch: Touch) {
        // One model for every confirmation walk of this update: the flow
        // entries compiled by one walk serve the next.
        let model = OnceLock::new();
        let on = On { inc, model: &model, net, routers: self.routers };
        let clock = inc.loop_clock();
        // Whether some candidate's loop changed (or went).
        let mut changed_loops = false;
        if clock.is_some() && clock == self.clock {
            // The same cycles taken by the same classes as at the last
            // update: only candidates through a changed switch may change.
            for (cycle, c) in self.by_cycle.iter_mut() {
                if changed.iter().any(|d| cycle.contains(d)) {
                    changed_loops |= c.refresh(&on, cycle, changed, touch);
                }
            }
        } else {
            let cycles = inc.loop_cycles();
            let before = self.by_cycle.len();
            self.by_cycle.retain(|c, _| cycles.binary_search(c).is_ok());
            changed_loops |= self.by_cycle.len() < before;
            let new = cycles.iter().filter(|c| !self.by_cycle.contains_key(*c)).count();
            for cycle in cycles {
                self.by_cycle.entry(cycle).or_default();
            }
            // Candidates seen for the first time (a full check's: all) are
            // confirmed on every core; each one's answer is its own, so the
            // same whatever the threads.
            let threads = if new >= PARALLEL_CANDIDATES { cores() } else { 1 };
            changed_loops |= refresh_all(self.by_cycle.iter_mut().collect(), &on, changed, touch, threads);
        }
        self.clock = clock;
        if changed_loops {
            let mut shown: Vec<&Violation> =
                self.by_cycle.values().filter_map(|c| c.found.as_ref().map(|f| &f.1)).collect();
            shown.sort_by(|a, b| a.elements.cmp(&b.elements));
            shown.dedup_by(|a, b| a.elements == b.elements);
            self.shown = shown.into_iter().cloned().collect();
            self.generation += 1;
        }
    }

    /// The confirmed loops, by their switches, each once.
    fn loops(&self) -> &[Violation] {
        &self.shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The candidate loops of the Stanford backbone (with its ACLs) at its
    /// largest snapshot, confirmed on one thread and on three: the same
    /// loops, with the same witnesses, whatever the threads' timing; and
    /// the same when no walk starts table 0 where the class engine says
    /// the class's first rule is (routers 0).
    #[test]
    fn candidates_confirmed_on_threads_give_what_one_thread_gives() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/stanford-backbone/stanford");
        let mut rn = RouterNet::load(&dir).expect("loads");
        let upto = 4526;
        let updates = std::mem::take(&mut rn.updates);
        updates.iter().take(upto).try_for_each(|u| rn.apply(u).map(|_| ())).expect("applies");
        let checker = Checker { enabled: [Invariant::Loop].into_iter().collect(), ..Checker::default() };
        let mut inc = Incremental::new(checker);
        inc.check(rn.unfiltered.as_ref().expect("ACLs"), &Facts::default());
        let model = OnceLock::new();
        let confirm = |threads: usize, routers: u64| {
            let mut by_cycle: BTreeMap<Vec<u64>, Candidate> =
                inc.loop_cycles().into_iter().map(|c| (c, Candidate::default())).collect();
            assert!(by_cycle.len() >= PARALLEL_CANDIDATES, "{} candidates", by_cycle.len());
            let on = On { inc: &inc, model: &model, net: &rn.net, routers };
            refresh_all(by_cycle.iter_mut().collect(), &on, &[], Touch::ANY, threads);
            let found = by_cycle.values().filter(|c| c.found.is_some()).count();
            let all = by_cycle.into_iter().map(|(cycle, c)| (cycle, c.found, c.clear, c.complete)).collect::<Vec<_>>();
            (found, format!("{all:?}"))
        };
        let routers = rn.routers() as u64;
        let (found, one) = confirm(1, routers);
        assert!(found >= 10, "{found} loops confirmed");
        assert_eq!(confirm(3, routers).1, one);
        assert_eq!(confirm(1, 0).1, one, "walks from table 0's first rule and from the class's differ");
    }
}
