//! `sts fuzz`: inject seeded random external events into a running network
//! and check invariants, until a persistent violation or the step budget.
//!
//! Every step the fuzzer draws its inputs ([`crate::inputs::Fuzzer`]), injects
//! them, lets the system run for `step_ms`, and records everything that
//! happened in the trace. Every `check_every_ms` the invariants are checked;
//! a violation that lasts `persist_ms` stops the run (exit 1).

use std::path::Path;
use std::time::Duration;

use sts_invariants::Violation;

use crate::cli::exit;
use crate::config::Config;
use crate::experiment::{self, ControllerMeta, Experiment, Meta};
use crate::inputs::{self, Fuzzer};
use crate::netrun::Settle;
use crate::observe::Monitor;
use crate::session::{self, progress, RunError};
use crate::trace::{self, Header};

/// What a fuzz run found.
#[derive(Debug)]
pub struct FuzzOutcome {
    pub violation: Option<Violation>,
    pub steps: u32,
    pub inputs: usize,
    /// On virtual time: how much of it ran in how much real time.
    pub clock: Option<String>,
}

/// Runs a fuzz session into `exp`.
pub async fn run(config: &Config, exp: &Experiment) -> Result<FuzzOutcome, RunError> {
    let env = |e: std::io::Error| RunError::Environment(format!("{}: {e}", exp.dir.display()));
    let specs = config.controller_specs(&exp.logs()).map_err(env)?;
    let meta = Meta {
        sts: env!("CARGO_PKG_VERSION").into(),
        seed: config.fuzz.seed,
        controllers: specs.iter().map(|s| ControllerMeta { name: s.name.clone(), command: s.command.clone() }).collect(),
        host: experiment::hostname(),
    };
    experiment::write_json(&exp.meta(), &meta).map_err(env)?;
    let p = &config.pingall;
    let settle = Settle { quiet_ms: p.quiet_ms, min_wait_ms: p.min_wait_ms, max_ms: p.settle_ms };
    let mut s = session::start(config, &exp.logs(), settle).await?;
    let header = Header { wall_epoch_ns: s.wall_epoch_ns, ..Header::new(Some(config.fuzz.seed)) };
    let mut writer = trace::Writer::create(&exp.trace(), &header).map_err(env)?;
    s.runner.run_for(Duration::from_millis(config.fuzz.warmup_ms)).await;
    let mut monitor = Monitor::new(config, s.runner.clock.now());
    let mut fuzzer = Fuzzer::new(config.fuzz.seed, config.fuzz.rates.clone(), config.controllers.len()).with_relays(config.relays.iter().map(|r| r.name.clone()).collect());
    let f = &config.fuzz;
    let pb = progress(f.steps as u64, "fuzzing");
    let mut inputs = 0;
    let mut found = None;
    let mut steps = 0;
    for step in 0..f.steps {
        steps = step + 1;
        for e in fuzzer.step(&s.runner.net) {
            // What earlier inputs caused goes into the trace before this one.
            monitor.record(&mut s, &mut writer).map_err(env)?;
            writer.external(s.runner.clock.now(), e.clone()).map_err(env)?;
            inputs::apply(&mut s, &e).await.map_err(RunError::BadInput)?;
            pb.set_message(format!("fuzzing: {inputs} inputs, last {}", e.describe()));
            inputs += 1;
        }
        s.runner.run_for(Duration::from_millis(f.step_ms)).await;
        if let Some(v) = monitor.observe(&mut s, &mut writer).map_err(env)? {
            found = Some(v);
            break;
        }
        pb.set_position(steps as u64);
    }
    // A violation that appeared near the end gets its chance to persist.
    if found.is_none() {
        let until = s.runner.clock.now() + config.invariants.persist_ms + config.invariants.check_every_ms;
        while s.runner.clock.now() < until && found.is_none() {
            s.runner.run_for(Duration::from_millis(config.invariants.check_every_ms.min(f.step_ms))).await;
            found = monitor.observe(&mut s, &mut writer).map_err(env)?;
        }
    }
    pb.finish_and_clear();
    if let Some(v) = &found {
        writer.violation(s.runner.clock.now(), v.clone()).map_err(env)?;
        experiment::write_json(&exp.violation(), v).map_err(env)?;
    }
    let clock = s.runner.clock.summary();
    Ok(FuzzOutcome { violation: found, steps, inputs, clock })
}

/// The `sts fuzz` command.
pub fn command(config_path: &Path, out: &Path) -> u8 {
    let text = match std::fs::read_to_string(config_path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sts fuzz: {}: cannot read: {e}", config_path.display());
            return exit::BAD_INPUT;
        }
    };
    let config = match Config::from_toml(&text, config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sts fuzz: {e}");
            return exit::BAD_INPUT;
        }
    };
    let exp = match Experiment::create(out, &text).and_then(|x| {
        experiment::copy_config_files(&config, &x.dir).map_err(|e| experiment::CreateError::Io(out.to_owned(), e))?;
        Ok(x)
    }) {
        Ok(x) => x,
        Err(e @ experiment::CreateError::Exists(_)) => {
            eprintln!("sts fuzz: {e}");
            return exit::BAD_INPUT;
        }
        Err(e) => {
            eprintln!("sts fuzz: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let rt = match crate::session::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts fuzz: {e}");
            return e.exit_code();
        }
    };
    eprintln!("sts fuzz: seed {}, up to {} steps of {} ms; experiment in {}", config.fuzz.seed, config.fuzz.steps, config.fuzz.step_ms, out.display());
    let outcome = rt.block_on(run(&config, &exp));
    if let Some(clock) = outcome.as_ref().ok().and_then(|o| o.clock.as_ref()) {
        eprintln!("{clock}");
    }
    match outcome {
        Ok(o) => match o.violation {
            Some(v) => {
                println!("violation after {} steps ({} inputs): {}", o.steps, o.inputs, v.summary);
                if let Some(w) = &v.witness {
                    println!("  witness from {}: {}", w.from, w.header);
                    for hop in &w.path {
                        println!("    {hop}");
                    }
                    println!("  then it {}", w.end);
                }
                println!("fingerprint: {}", v.fingerprint());
                println!("trace: {}", exp.trace().display());
                exit::VIOLATION
            }
            None => {
                println!("no persistent violation in {} steps ({} inputs); trace: {}", o.steps, o.inputs, exp.trace().display());
                exit::OK
            }
        },
        Err(e) => {
            eprintln!("sts fuzz: {e}");
            e.exit_code()
        }
    }
}
