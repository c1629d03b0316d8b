//! `sts fuzz`: inject seeded random external events into a running network
//! and check invariants, until a persistent violation or the step budget.
//!
//! Every step the fuzzer draws its inputs ([`crate::inputs::Fuzzer`]), injects
//! them, lets the system run for `step_ms`, and records everything that
//! happened in the trace. Every `check_every_ms` the invariants are checked;
//! a violation that lasts `persist_ms` stops the run (exit 1).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sts_invariants::Violation;
use sts_trace::dir::{self as experiment, ControllerMeta, CreateError, Experiment, Meta};
use sts_trace::{self as trace, Header};

use crate::config::Config;
use crate::inputs::{self, Fuzzer};
use crate::monitor::Monitor;
use crate::session::{self, RunError};
use crate::{Engine, Progress};

/// What a fuzz run found.
#[derive(Debug)]
pub struct FuzzOutcome {
    pub violation: Option<Violation>,
    pub steps: u32,
    pub inputs: usize,
    /// On virtual time: how much of it ran in how much real time.
    pub clock: Option<String>,
    /// The violation persisted before the first input (the network was
    /// never healthy): no input caused it.
    pub present_from_start: bool,
}

/// Creates the experiment directory `out` for a fuzz run of `config` (read
/// from `config_text`): the config as written, and the files it names.
pub fn create_experiment(config: &Config, config_text: &str, out: &Path) -> Result<Experiment, RunError> {
    let (text, files) = config.portable(config_text).map_err(RunError::BadInput)?;
    let exp = Experiment::create(out, &text).map_err(|e| match e {
        e @ (CreateError::Exists(_) | CreateError::NotADirectory(_) | CreateError::NotEmpty(..)) => {
            RunError::BadInput(e.to_string())
        }
        e => RunError::Environment(e.to_string()),
    })?;
    experiment::copy_config_files(files, &exp.dir)
        .map_err(|e| RunError::Environment(format!("{}: {e}", out.display())))?;
    Ok(exp)
}

/// Runs without inputs for as long as a violation takes to count as
/// persistent (plus a check), observing; the first that does.
async fn persisting(
    config: &Config,
    s: &mut session::Session,
    monitor: &mut Monitor,
    writer: &mut trace::Writer,
) -> std::io::Result<Option<Violation>> {
    let every = config.invariants.check_every_ms.min(config.fuzz.step_ms);
    let until = s.runner.clock.now() + config.invariants.persist_ms + config.invariants.check_every_ms;
    while s.runner.clock.now() < until {
        s.runner.run_for(Duration::from_millis(every)).await;
        if let Some(v) = monitor.observe(s, writer)?.into_iter().next() {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Runs a fuzz session into `exp`.
pub async fn run(engine: &Engine, config: &Config, exp: &Experiment) -> Result<FuzzOutcome, RunError> {
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", exp.dir.display()));
    let specs = crate::presets::specs(config, &exp.logs()).map_err(env)?;
    let meta = Meta {
        sts: env!("CARGO_PKG_VERSION").into(),
        seed: config.fuzz.seed,
        controllers: specs
            .iter()
            .map(|s| ControllerMeta { name: s.name.clone(), command: s.command.clone() })
            .collect(),
        host: experiment::hostname(),
    };
    experiment::write_json(&exp.meta(), &meta).map_err(env)?;
    let mut s = session::start(engine, config, &exp.logs()).await?;
    let header = Header { wall_epoch_ns: s.wall_epoch_ns, ..Header::new(Some(config.fuzz.seed)) };
    let mut writer = trace::Writer::create(&exp.trace(), &header).map_err(env)?;
    s.runner.run_for(Duration::from_millis(config.fuzz.warmup_ms)).await;
    let mut monitor = Monitor::new(config, s.runner.clock.now());
    // sts cannot crash a controller it did not start.
    let remote: Vec<usize> =
        (0..config.controllers.len()).filter(|&i| config.controllers[i].remote_address().is_some()).collect();
    let mut fuzzer = Fuzzer::new(config.fuzz.seed, config.fuzz.rates.clone(), config.controllers.len())
        .without_crashing(&remote)
        .with_relays(config.relays.iter().map(|r| r.name.clone()).collect())
        .with_policies(&config.policies);
    let f = &config.fuzz;
    let mut inputs = 0;
    let mut last = None;
    let mut steps = 0;
    // Before any input: a violation that persists now is no input's doing.
    let mut found = persisting(config, &mut s, &mut monitor, &mut writer).await.map_err(env)?;
    let present_from_start = found.is_some();
    for step in 0..f.steps {
        if found.is_some() {
            break;
        }
        steps = step + 1;
        for e in fuzzer.step(&s.runner.net) {
            // What earlier inputs caused goes into the trace before this one.
            monitor.record(&mut s, &mut writer).map_err(env)?;
            writer.external(s.runner.clock.now(), e.clone()).map_err(env)?;
            inputs::apply(&mut s, &e).await.map_err(RunError::from)?;
            last = Some(e.describe());
            inputs += 1;
        }
        s.runner.run_for(Duration::from_millis(f.step_ms)).await;
        if let Some(v) = monitor.observe(&mut s, &mut writer).map_err(env)?.into_iter().next() {
            found = Some(v);
            break;
        }
        engine.progress(Progress::Fuzz {
            step: steps,
            steps: f.steps,
            inputs,
            last: last.clone(),
            clock_ms: s.runner.clock.now(),
        });
    }
    // A violation that appeared near the end gets its chance to persist.
    if found.is_none() {
        found = persisting(config, &mut s, &mut monitor, &mut writer).await.map_err(env)?;
    }
    engine.progress(Progress::Done);
    if let Some(v) = &found {
        writer.violation(s.runner.clock.now(), crate::records::to_record(v)).map_err(env)?;
        experiment::write_json(&exp.violation(), v).map_err(env)?;
    }
    s.clock_notices();
    let clock = s.runner.clock.summary();
    Ok(FuzzOutcome { violation: found, steps, inputs, clock, present_from_start })
}

/// What one seed's fuzz run came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedRun {
    pub seed: u64,
    /// The experiment directory.
    pub dir: PathBuf,
    pub violation: Option<Violation>,
    pub present_from_start: bool,
    pub steps: u32,
    pub inputs: usize,
    /// Why the run could not be done, if it could not.
    pub error: Option<String>,
}

impl SeedRun {
    /// A run of `seed` in `dir` that found nothing (yet).
    pub fn new(seed: u64, dir: &Path) -> SeedRun {
        SeedRun {
            seed,
            dir: dir.to_path_buf(),
            violation: None,
            present_from_start: false,
            steps: 0,
            inputs: 0,
            error: None,
        }
    }
}

/// `text` with `[fuzz] seed` set to `seed` (comments and layout kept).
pub fn with_seed(text: &str, seed: u64) -> Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| e.to_string())?;
    let fuzz = doc.entry("fuzz").or_insert(toml_edit::table());
    let table = fuzz.as_table_mut().ok_or("`fuzz` is not a table")?;
    table["seed"] = toml_edit::value(i64::try_from(seed).map_err(|_| format!("seed {seed} is too large"))?);
    Ok(doc.to_string())
}

/// Fuzzes `config` (its text `text`, with `seed` in it) into `dir`: what
/// the run came to, its failure included.
pub async fn seed_run(engine: &Engine, seed: u64, config: &Config, text: &str, dir: &Path) -> SeedRun {
    let mut found = SeedRun::new(seed, dir);
    let outcome = match create_experiment(config, text, dir) {
        Ok(exp) => run(engine, config, &exp).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(o) => {
            found.violation = o.violation;
            found.present_from_start = o.present_from_start;
            found.steps = o.steps;
            found.inputs = o.inputs;
        }
        Err(e) => found.error = Some(e.to_string()),
    }
    found
}
