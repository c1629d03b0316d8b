//! Transient versus persistent violations.
//!
//! A network under churn is briefly wrong all the time (a link fails, the
//! controller needs a moment to route around it). A violation counts only once
//! its fingerprint has been seen continuously, check after check, for at least
//! the threshold; a check without it starts the clock again. Events count at
//! once: a loop the dataplane *saw* (a storm only the mock network's hop limit
//! ended) and a controller's logged error (it happened; it cannot heal).

use std::collections::BTreeMap;

use crate::check::Violation;

/// Tracks how long each violation fingerprint has been present.
#[derive(Debug, Clone)]
pub struct Persistence {
    threshold_ms: u64,
    since: BTreeMap<String, u64>,
}

impl Persistence {
    /// Violations must last `threshold_ms` to count.
    pub fn new(threshold_ms: u64) -> Persistence {
        Persistence { threshold_ms, since: BTreeMap::new() }
    }

    /// Records the violations of a check made at `now` (milliseconds on the
    /// run's clock) and returns those that have persisted long enough, most
    /// fundamental invariant first (a loop before the blackholes it causes).
    /// Violations sharing a fingerprint count as one; the one with a witness
    /// is returned.
    pub fn observe(&mut self, now: u64, violations: &[Violation]) -> Vec<Violation> {
        let mut present: BTreeMap<String, Vec<&Violation>> = BTreeMap::new();
        for v in violations {
            present.entry(v.fingerprint()).or_default().push(v);
        }
        self.since.retain(|fp, _| present.contains_key(fp));
        let mut out = Vec::new();
        for (fp, vs) in present {
            let first = *self.since.entry(fp).or_insert(now);
            let immediate = vs.iter().any(|v| v.is_event());
            if now.saturating_sub(first) >= self.threshold_ms || immediate {
                let best = vs.iter().find(|v| v.witness.is_some()).unwrap_or(&vs[0]);
                out.push((*best).clone());
            }
        }
        out.sort_by_key(|v| v.invariant);
        out
    }

    /// When the violation with this fingerprint was first seen in its current
    /// unbroken run, if it is present.
    pub fn since(&self, fingerprint: &str) -> Option<u64> {
        self.since.get(fingerprint).copied()
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
        }
    }

    #[test]
    fn counts_only_after_the_threshold_and_resets_when_healed() {
        let mut p = Persistence::new(1000);
        assert!(p.observe(0, &[v("h2")]).is_empty());
        assert!(p.observe(500, &[v("h2")]).is_empty());
        assert_eq!(p.observe(1000, &[v("h2")]).len(), 1);
        assert!(p.observe(1100, &[]).is_empty(), "healed");
        assert!(p.observe(1200, &[v("h2")]).is_empty(), "the clock starts again");
        assert_eq!(p.since("blackhole:h2"), Some(1200));
        assert_eq!(p.observe(2200, &[v("h2"), v("h3")]).len(), 1, "h3 is new");
    }

    #[test]
    fn a_storm_the_dataplane_saw_counts_at_once() {
        let storm = Violation { invariant: Invariant::Loop, elements: vec![], summary: String::new(), witness: None };
        assert_eq!(Persistence::new(1000).observe(0, &[storm]).len(), 1);
    }

    #[test]
    fn zero_threshold_reports_at_once() {
        assert_eq!(Persistence::new(0).observe(7, &[v("h2")]).len(), 1);
    }
}
