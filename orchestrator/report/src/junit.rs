//! Results as JUnit XML (the Jenkins dialect every CI system reads), written
//! with `quick-junit`. A bug sts finds is a failing test case whose message
//! is the violation and whose text is its witness, culprit and, for a
//! minimization, the minimal causal sequence.
//!
//! A CI keeps a test's history by its name, so names never carry what
//! changes between runs of the same thing: not the path as typed, not a
//! replay's number in the experiment's `replays/`, not the order a campaign
//! found its bugs in. A case is named by the config's file name and seed
//! (fuzz), by the bug it is about (replay, minimize, campaign). What does
//! change (when, how long, where, with which sts, controllers and config) is
//! in `timestamp`, `time`, `hostname` and the suite's `properties`.

use std::path::Path;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use sts_engine::fuzz::FuzzOutcome;
use sts_engine::minimize;
use sts_engine::replay::Summary;
use sts_invariants::Violation;

/// What a JUnit file says about the run beside its cases.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// When the command started, in milliseconds since the Unix epoch.
    pub started_ms: i64,
    /// How long it took.
    pub took: Duration,
    /// Properties, in order: `sts.version`, `seed`, `controllers`,
    /// `config.sha256` ... (read from an experiment by [`RunInfo::of_experiment`]).
    pub properties: Vec<(String, String)>,
    /// The suite's `system-out`: where the report and trace are.
    pub out: String,
}

impl RunInfo {
    /// A run started at `started_ms` that took `took`, by this sts.
    pub fn new(started_ms: i64, took: Duration) -> RunInfo {
        let properties = vec![("sts.version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
        RunInfo { started_ms, took, properties, out: String::new() }
    }

    /// Adds what experiment directory `dir` says of itself: its seed and
    /// controllers (`meta.json`), its config's hash, and where its trace,
    /// report and minimal causal sequence are.
    pub fn experiment(mut self, dir: &Path) -> RunInfo {
        let meta: serde_json::Value =
            std::fs::read(dir.join("meta.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        if let Some(seed) = meta.get("seed").and_then(|s| s.as_u64()) {
            self.properties.push(("seed".into(), seed.to_string()));
        }
        if let Some(cs) = meta.get("controllers").and_then(|c| c.as_array()) {
            let names: Vec<&str> = cs.iter().filter_map(|c| c.get("name")?.as_str()).collect();
            self.properties.push(("controllers".into(), names.join(",")));
        }
        if let Ok(config) = std::fs::read(dir.join("config.toml")) {
            self = self.config(&config);
        }
        for (what, rel) in
            [("trace", "trace.jsonl"), ("report", "report/index.html"), ("minimal causal sequence", "mcs/report.md")]
        {
            if dir.join(rel).exists() {
                self.out.push_str(&format!("{what}: {}\n", dir.join(rel).display()));
            }
        }
        self
    }

    /// Adds the hash of the config the run used (`config.sha256`).
    pub fn config(mut self, text: &[u8]) -> RunInfo {
        use sha2::Digest;
        let hash: String = sha2::Sha256::digest(text).iter().map(|b| format!("{b:02x}")).collect();
        self.properties.push(("config.sha256".into(), hash));
        self
    }

    /// Adds a property.
    pub fn property(mut self, name: &str, value: impl ToString) -> RunInfo {
        self.properties.push((name.into(), value.to_string()));
        self
    }

    /// A suite named `name` carrying these facts.
    fn suite(&self, name: impl Into<quick_junit::XmlString>) -> TestSuite {
        let mut suite = TestSuite::new(name);
        if let Some(t) = chrono::DateTime::from_timestamp_millis(self.started_ms) {
            suite.set_timestamp(t.fixed_offset());
        }
        suite.set_time(self.took);
        suite.extra.insert("hostname".into(), sts_trace::dir::hostname().into());
        for (k, v) in &self.properties {
            suite.add_property(Property::new(k.as_str(), v.as_str()));
        }
        if !self.out.is_empty() {
            suite.set_system_out(self.out.as_str());
        }
        suite
    }
}

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

fn report_of(suite: TestSuite) -> Report {
    let mut report = Report::new("sts");
    report.add_test_suite(suite);
    report
}

/// A path's file name (what stays the same wherever it is run from).
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// `sts fuzz`: one test case, failing when a violation was found.
pub fn fuzz(config: &Path, seed: u64, o: &FuzzOutcome, trace: &Path, info: &RunInfo) -> Report {
    let name = format!("{} seed {seed}", file_name(config));
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
    let mut suite = info.suite("sts fuzz");
    suite.add_test_case(case(name, "sts.fuzz", status, Some(info.took)));
    report_of(suite)
}

/// `sts replay`: one test case per replay, named by the bug and the
/// replay's place in this invocation (`(replay 2 of 3)`). Without an
/// expectation (or expecting the bug to vanish) a replay that reproduces it
/// fails; expecting it to reproduce, a replay that does not fails.
pub fn replay(s: &Summary, expect_reproduce: bool, info: &RunInfo) -> Report {
    let mut suite = info.suite("sts replay");
    let bug = s.violation.as_deref().unwrap_or("the recorded run");
    let n = s.runs.len();
    for (i, r) in s.runs.iter().enumerate() {
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
        suite.add_test_case(case(format!("{bug} (replay {} of {n})", i + 1), "sts.replay", status, None));
    }
    report_of(suite)
}

/// `sts replay --on ovs`: one test case per testbed run, named by the bug
/// and the run (`(Open vSwitch run 2 of 3)`), failing as [`replay`]'s do; a
/// run that could not finish is an error case.
pub fn on_ovs(s: &sts_engine::on_ovs::Summary, expect_reproduce: bool, info: &RunInfo) -> Report {
    let mut suite = info.suite("sts replay --on ovs");
    let bug = s.lab.as_ref().map_or("the recorded run", |v| v.summary.as_str());
    let n = s.runs.len();
    for r in &s.runs {
        let status = |kind, text: String| {
            let mut st = TestCaseStatus::non_success(kind);
            if let TestCaseStatus::NonSuccess { message, description, .. } = &mut st {
                *message = Some(text.into());
                *description = Some(crate::ovs_run(r, s.lab.as_ref()).into());
            }
            st
        };
        let st = match (&r.error, r.reproduced, expect_reproduce) {
            (Some(e), _, _) => status(NonSuccessKind::Error, e.clone()),
            (None, true, false) => {
                status(NonSuccessKind::Failure, format!("the bug reproduces on Open vSwitch: {bug}"))
            }
            (None, false, true) => status(NonSuccessKind::Failure, format!("did not reproduce on Open vSwitch: {bug}")),
            _ => TestCaseStatus::success(),
        };
        suite.add_test_case(case(format!("{bug} (Open vSwitch run {} of {n})", r.run), "sts.replay.ovs", st, None));
    }
    report_of(suite)
}

/// `sts minimize`: one failing test case for the bug, its text the minimal
/// causal sequence.
pub fn minimize(r: &minimize::Report, info: &RunInfo) -> Report {
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
    let mut suite = info.suite("sts minimize");
    suite.add_test_case(case(r.violation.clone(), "sts.minimize", status, Some(Duration::from_secs_f64(r.seconds))));
    report_of(suite)
}

/// `sts campaign`: one test case per distinct bug, named by its identity
/// (not by the order it was found in), failing with its violation and its
/// minimal causal sequence, and one passing case for the seeds that found
/// nothing.
pub fn campaign(config: &Path, c: &sts_engine::campaign::Report, info: &RunInfo) -> Report {
    let mut suite = info.suite(format!("sts campaign {}", file_name(config)));
    for bug in &c.bugs {
        let seeds: Vec<String> = bug.seeds.iter().map(u64::to_string).collect();
        let mut extra = format!("found by seed(s) {}; minimized on seed {}\n", seeds.join(", "), bug.minimized);
        if !bug.switches.is_empty() {
            extra.push_str(&format!("seen on {}\n", bug.switches.join(", ")));
        }
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
        suite.add_test_case(case(bug.identity.clone(), "sts.campaign", failure(&bug.violation, &extra), seconds));
    }
    let clean = c.seeds.iter().filter(|s| s.violation.is_none() && s.error.is_none()).count();
    // Named without its counts, which change from run to run.
    let mut ok = TestCase::new("seeds without a violation", TestCaseStatus::success());
    ok.set_system_out(format!("{clean} of {} seeds found no violation\n", c.seeds.len()));
    ok.set_classname("sts.campaign");
    suite.add_test_case(ok);
    for s in c.seeds.iter().filter(|s| s.error.is_some()) {
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
        if let TestCaseStatus::NonSuccess { message, .. } = &mut st {
            *message = s.error.clone().map(Into::into);
        }
        suite.add_test_case(case(format!("seed {} could not run", s.seed), "sts.campaign", st, None));
    }
    report_of(suite)
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
