//! Violations between the checker and the trace.
//!
//! The checker's [`Violation`] is an in-memory verdict whose types may
//! change; the trace keeps a [`ViolationRecord`] of names and words, so that
//! `sts-trace` does not depend on the checker and old traces keep loading.
//! These two functions are the only crossing between them.

use sts_invariants::check::Witness;
use sts_invariants::{Invariant, Violation};
use sts_trace::{Trace, ViolationRecord, WitnessRecord};

/// The record a trace keeps of `v`.
pub fn to_record(v: &Violation) -> ViolationRecord {
    ViolationRecord {
        invariant: v.invariant.name().to_string(),
        elements: v.elements.clone(),
        summary: v.summary.clone(),
        witness: v.witness.as_ref().map(|w| WitnessRecord {
            header: w.header.clone(),
            frame: w.frame.clone(),
            from: w.from.clone(),
            path: w.path.clone(),
            end: w.end.clone(),
        }),
        culprit: v.culprit.clone(),
    }
}

/// The checker's violation for a recorded one; an error names an invariant
/// this sts does not know.
pub fn to_violation(r: &ViolationRecord) -> Result<Violation, String> {
    let invariant = Invariant::from_name(&r.invariant).ok_or_else(|| {
        let known: Vec<&str> = Invariant::ALL.iter().map(|i| i.name()).collect();
        format!("unknown invariant `{}` in the recorded violation (known: {})", r.invariant, known.join(", "))
    })?;
    Ok(Violation {
        invariant,
        elements: r.elements.clone(),
        summary: r.summary.clone(),
        witness: r.witness.as_ref().map(|w| {
            std::sync::Arc::new(Witness {
                header: w.header.clone(),
                frame: w.frame.clone(),
                from: w.from.clone(),
                path: w.path.clone(),
                end: w.end.clone(),
            })
        }),
        culprit: r.culprit.clone(),
    })
}

/// The first violation `trace` records, as the checker's; an error names
/// the trace's line.
pub fn first_violation(trace: &Trace) -> Result<Option<Violation>, String> {
    let Some(r) = trace.records.iter().find(|r| r.violation().is_some()) else { return Ok(None) };
    let v = r.violation().map(to_violation).transpose();
    v.map_err(|e| if r.line > 0 { format!("line {}: {e}", r.line) } else { e })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Violation {
        Violation {
            invariant: Invariant::ControllerErrors,
            elements: vec!["c0".into(), "s1".into()],
            summary: "c0 logged an error".into(),
            witness: Some(std::sync::Arc::new(Witness {
                header: "ip 10.0.0.1 > 10.0.0.2".into(),
                frame: "00".into(),
                from: "h1".into(),
                path: vec!["s1 in 1: table 0 #3 (priority 1)".into()],
                end: "dropped".into(),
            })),
            culprit: Some("KeyError at app.py:42".into()),
        }
    }

    #[test]
    fn a_violation_survives_the_record_both_ways() {
        let v = sample();
        assert_eq!(to_violation(&to_record(&v)).unwrap(), v);
    }

    #[test]
    fn the_record_is_written_as_the_checker_wrote_violations_before() {
        // Traces written before the record existed serialized `Violation`
        // itself: the record must read and write exactly the same JSON.
        let v = sample();
        let old = serde_json::to_value(&v).unwrap();
        assert_eq!(serde_json::to_value(to_record(&v)).unwrap(), old);
        let back: ViolationRecord = serde_json::from_value(old).unwrap();
        assert_eq!(to_violation(&back).unwrap(), v);
    }

    #[test]
    fn an_unknown_invariant_is_named() {
        let mut r = to_record(&sample());
        r.invariant = "teleport".into();
        let e = to_violation(&r).unwrap_err();
        assert!(e.contains("`teleport`") && e.contains("blackhole"), "{e}");
    }
}
