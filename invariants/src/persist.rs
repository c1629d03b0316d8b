//! Transient versus persistent violations.
//!
//! A network under churn is briefly wrong all the time (a link fails, the
//! controller needs a moment to route around it). A violation counts only once
//! its bug (its identity at a [`Same`] level) has been seen continuously, check
//! after check, for at least
//! the threshold; a check without it starts the clock again. Events count at
//! once: a loop the dataplane *saw* (a storm only the mock network's hop limit
//! ended) and a controller's logged error (it happened; it cannot heal).

use std::collections::BTreeMap;

use crate::check::Violation;
use crate::identity::Same;

/// Tracks how long each violation identity has been present.
#[derive(Debug, Clone)]
pub struct Persistence {
    threshold_ms: u64,
    level: Same,
    since: BTreeMap<String, u64>,
}

impl Persistence {
    /// Violations must last `threshold_ms` to count; violations that are the
    /// same bug at `level` ([`Violation::identity`]) count as one.
    pub fn new(threshold_ms: u64, level: Same) -> Persistence {
        Persistence { threshold_ms, level, since: BTreeMap::new() }
    }

    /// Records the violations of a check made at `now` (milliseconds on the
    /// run's clock) and returns those whose bug has persisted long enough:
    /// most fundamental invariant first (a loop before the blackholes it
    /// causes), within one bug those with a witness first. Every violation of
    /// a persistent bug is returned (a replay looking for one victim of a
    /// bug with several finds it).
    pub fn observe(&mut self, now: u64, violations: &[Violation]) -> Vec<Violation> {
        let mut present: BTreeMap<String, Vec<&Violation>> = BTreeMap::new();
        for v in violations {
            present.entry(v.identity(self.level)).or_default().push(v);
        }
        self.since.retain(|id, _| present.contains_key(id));
        let mut out = Vec::new();
        for (id, mut vs) in present {
            let first = *self.since.entry(id).or_insert(now);
            let immediate = vs.iter().any(|v| v.is_event());
            if now.saturating_sub(first) >= self.threshold_ms || immediate {
                vs.sort_by_key(|v| v.witness.is_none());
                out.extend(vs.into_iter().cloned());
            }
        }
        out.sort_by_key(|v| v.invariant);
        out
    }

    /// The earliest time after `after` at which a violation present at the
    /// last observation will have lasted the threshold, if one will: until
    /// then, observing the same violations again returns nothing new.
    pub fn next_persistent_at(&self, after: u64) -> Option<u64> {
        self.since.values().map(|&first| first + self.threshold_ms).filter(|&t| t > after).min()
    }

    /// When the bug with this identity (at the level given to
    /// [`Persistence::new`]) was first seen in its current unbroken run, if
    /// it is present.
    pub fn since(&self, identity: &str) -> Option<u64> {
        self.since.get(identity).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Invariant;

    fn v(dst: &str) -> Violation {
        Violation {
            invariant: Invariant::Blackhole,
            elements: vec!["h1".into(), dst.into()],
            summary: String::new(),
            witness: None,
            culprit: None,
        }
    }

    #[test]
    fn counts_only_after_the_threshold_and_resets_when_healed() {
        let mut p = Persistence::new(1000, Same::Victim);
        assert!(p.observe(0, &[v("h2")]).is_empty());
        assert!(p.observe(500, &[v("h2")]).is_empty());
        assert_eq!(p.observe(1000, &[v("h2")]).len(), 1);
        assert!(p.observe(1100, &[]).is_empty(), "healed");
        assert!(p.observe(1200, &[v("h2")]).is_empty(), "the clock starts again");
        assert_eq!(p.since("blackhole:h2"), Some(1200));
        assert_eq!(p.observe(2200, &[v("h2"), v("h3")]).len(), 1, "h3 is new");
        assert_eq!(p.next_persistent_at(2200), Some(3200), "h3 lasts the threshold at 3200");
        assert_eq!(p.next_persistent_at(3200), None, "nothing present persists later than that");
    }

    #[test]
    fn one_culprit_persists_whichever_host_it_starves() {
        let on = |dst: &str| Violation { culprit: Some("s3 table 0: a match-all rule of priority 9".into()), ..v(dst) };
        let mut p = Persistence::new(1000, Same::Culprit);
        assert!(p.observe(0, &[on("h2")]).is_empty());
        // The victim changes, the bug does not: the clock keeps running.
        let both = p.observe(1000, &[on("h3"), on("h4")]);
        assert_eq!(both.len(), 2, "every victim of the persistent bug is returned");
        let mut by_victim = Persistence::new(1000, Same::Victim);
        by_victim.observe(0, &[on("h2")]);
        assert!(by_victim.observe(1000, &[on("h3")]).is_empty(), "by victim, h3 is new");
    }

    #[test]
    fn a_storm_the_dataplane_saw_counts_at_once() {
        let storm = Violation {
            invariant: Invariant::Loop,
            elements: vec![],
            summary: String::new(),
            witness: None,
            culprit: None,
        };
        assert_eq!(Persistence::new(1000, Same::Victim).observe(0, &[storm]).len(), 1);
    }

    #[test]
    fn zero_threshold_reports_at_once() {
        assert_eq!(Persistence::new(0, Same::Victim).observe(7, &[v("h2")]).len(), 1);
    }
}
