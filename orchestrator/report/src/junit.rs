//! Results as JUnit XML (the Jenkins dialect every CI system reads), written
//! with `quick-junit`. A bug sts finds is a failing test case whose message
//! is the violation and whose text is its witness, culprit and, for a
//! minimization, the minimal causal sequence.

use std::path::Path;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use sts_engine::fuzz::FuzzOutcome;
use sts_engine::minimize;
use sts_engine::replay::Summary;
use sts_invariants::Violation;

fn failure(v: &Violation, extra: &str) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    if let TestCaseStatus::NonSuccess { message, ty, description, .. } = &mut status {
        *message = Some(v.summary.clone().into());
        *ty = Some(v.invariant.name().into());
        *description = Some(format!("{}{extra}", crate::violation(v)).into());
    }
    status
}

fn case(name: String, classname: &str, status: TestCaseStatus, time: Option<Duration>) -> TestCase {
    let mut c = TestCase::new(name, status);
    c.set_classname(classname);
    if let Some(t) = time {
        c.set_time(t);
    }
    c
}

/// `sts fuzz`: one test case, failing when a violation was found.
pub fn fuzz(config: &Path, seed: u64, o: &FuzzOutcome, trace: &Path) -> Report {
    let name = format!("{} seed {seed}", config.display());
    let status = match &o.violation {
        Some(v) => failure(
            v,
            &format!(
                "{}after {} steps ({} inputs); trace: {}\n",
                if o.present_from_start { "present before the first input; " } else { "" },
                o.steps,
                o.inputs,
                trace.display()
            ),
        ),
        None => TestCaseStatus::success(),
    };
    let mut suite = TestSuite::new("sts fuzz");
    suite.add_test_case(case(name, "sts.fuzz", status, None));
    let mut report = Report::new("sts");
    report.add_test_suite(suite);
    report
}

/// `sts replay`: one test case per replay. Without an expectation (or
/// expecting the bug to vanish) a replay that reproduces it fails; expecting
/// it to reproduce, a replay that does not fails.
pub fn replay(dir: &Path, s: &Summary, expect_reproduce: bool) -> Report {
    let mut suite = TestSuite::new(format!("sts replay {}", dir.display()));
    for r in &s.runs {
        let status = match (&r.violation, r.reproduced, expect_reproduce) {
            (Some(v), true, false) => failure(v, &format!("the bug reproduces; trace: {}\n", r.trace.display())),
            (_, false, true) => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                if let TestCaseStatus::NonSuccess { message, .. } = &mut st {
                    *message =
                        Some(format!("did not reproduce {}", s.violation.as_deref().unwrap_or("the violation")).into());
                }
                st
            }
            _ => TestCaseStatus::success(),
        };
        suite.add_test_case(case(format!("replay {}", r.run), "sts.replay", status, None));
    }
    let mut report = Report::new("sts");
    report.add_test_suite(suite);
    report
}

/// `sts minimize`: one failing test case for the bug, its text the minimal
/// causal sequence.
pub fn minimize(dir: &Path, r: &minimize::Report) -> Report {
    let mcs = if r.mcs.is_empty() {
        "no input: the violation is present without any\n".to_string()
    } else {
        r.mcs.iter().map(|e| format!("  {e}\n")).collect()
    };
    let extra = format!(
        "minimal causal sequence: {} of {} inputs (same bug by {}), reproduces {}/{}\n{mcs}",
        r.mcs_inputs, r.original_inputs, r.same, r.final_reproduced, r.final_replays
    );
    let status = match &r.observed {
        Some(v) => failure(v, &extra),
        None => {
            let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
            if let TestCaseStatus::NonSuccess { message, description, .. } = &mut st {
                *message = Some(format!("the sequence did not reproduce {} in its final replays", r.violation).into());
                *description = Some(extra.into());
            }
            st
        }
    };
    let mut suite = TestSuite::new(format!("sts minimize {}", dir.display()));
    suite.add_test_case(case(r.violation.clone(), "sts.minimize", status, Some(Duration::from_secs_f64(r.seconds))));
    let mut report = Report::new("sts");
    report.add_test_suite(suite);
    report
}

/// `sts campaign`: one test case per distinct bug, failing with its
/// violation and its minimal causal sequence, and one passing case for the
/// seeds that found nothing.
pub fn campaign(config: &Path, c: &sts_engine::campaign::Report) -> Report {
    let mut suite = TestSuite::new(format!("sts campaign {}", config.display()));
    for (i, bug) in c.bugs.iter().enumerate() {
        let seeds: Vec<String> = bug.seeds.iter().map(u64::to_string).collect();
        let mut extra = format!("found by seed(s) {}; minimized on seed {}\n", seeds.join(", "), bug.minimized);
        match (&bug.mcs, &bug.error) {
            (Some(r), _) => {
                extra.push_str(&format!(
                    "minimal causal sequence: {} of {} inputs (same bug by {}), reproduces {}/{}\n",
                    r.mcs_inputs, r.original_inputs, r.same, r.final_reproduced, r.final_replays
                ));
                extra.extend(r.mcs.iter().map(|e| format!("  {e}\n")));
            }
            (None, Some(e)) => extra.push_str(&format!("the minimization failed: {e}\n")),
            (None, None) => {}
        }
        let seconds = bug.mcs.as_ref().map(|r| Duration::from_secs_f64(r.seconds));
        suite.add_test_case(case(
            format!("bug {}: {}", i + 1, bug.identity),
            "sts.campaign",
            failure(&bug.violation, &extra),
            seconds,
        ));
    }
    let clean = c.seeds.iter().filter(|s| s.violation.is_none() && s.error.is_none()).count();
    let mut ok =
        TestCase::new(format!("{clean} of {} seeds without a violation", c.seeds.len()), TestCaseStatus::success());
    ok.set_classname("sts.campaign");
    suite.add_test_case(ok);
    for s in c.seeds.iter().filter(|s| s.error.is_some()) {
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
        if let TestCaseStatus::NonSuccess { message, .. } = &mut st {
            *message = s.error.clone().map(Into::into);
        }
        suite.add_test_case(case(format!("seed {} could not run", s.seed), "sts.campaign", st, None));
    }
    let mut report = Report::new("sts");
    report.add_test_suite(suite);
    report
}

/// Writes `report` to `path` atomically.
pub fn write(path: &Path, report: &Report) -> std::io::Result<()> {
    sts_trace::dir::write_atomic(path, to_xml(report)?.as_bytes())
}

/// `report` as JUnit XML that validates against the Jenkins xUnit plugin's
/// `junit-10.xsd` (the schema pytest checks its own output against):
/// quick-junit also writes a `disabled` count on each `testsuite`, which
/// that schema does not allow; sts never disables a case, so it goes.
pub fn to_xml(report: &Report) -> std::io::Result<String> {
    let xml = report.to_string().map_err(std::io::Error::other)?;
    Ok(xml
        .lines()
        .map(|l| match l.trim_start().starts_with("<testsuite ") {
            true => l.replacen(" disabled=\"0\"", "", 1),
            false => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n"))
}
