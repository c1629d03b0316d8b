//! Each subcommand: read its inputs, run the engine's job on a runtime of
//! our own, print what came of it, and return the exit code.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use sts_engine::config::Config;
use sts_engine::minimize::{self, PeekMode};
use sts_engine::{fuzz, pingall, replay, Engine, RunError};
use sts_invariants::Same;

use crate::args::{Cli, Command, ExecutorKind};
use crate::exit;
use crate::progress::Terminal;

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> u8 {
    let cmd = cli.command;
    let terminal = Arc::new(if cli.progress == "json" { Terminal::json() } else { Terminal::new() });
    let engine = Engine::new(terminal.clone());
    let code = match &cmd {
        Command::Pingall { config, out } => pingall(&engine, config, out.as_deref()),
        Command::Fuzz { config, out, seed, junit, check } => {
            fuzz(&engine, config, out, *seed, junit.as_deref(), *check)
        }
        Command::Replay { dir, repeat, expect, junit, on, .. } if on == "ovs" => {
            replay_on_ovs(&engine, dir, *repeat, expect.as_deref(), junit.as_deref())
        }
        Command::Replay { dir, repeat, expect, same, junit, .. } => {
            replay(&engine, dir, *repeat, expect.as_deref(), *same, junit.as_deref())
        }
        Command::Minimize {
            dir,
            replays,
            jobs,
            budget,
            final_replays,
            peek,
            beyond,
            speculate,
            by_kind,
            warm,
            monotone,
            same,
            junit,
            internal,
            learn,
            executor,
        } => {
            if let Some(runs) = learn {
                match self::learn(&engine, dir, *runs) {
                    exit::OK => {}
                    code => return code,
                }
            }
            let opts = minimize::Options {
                replays: *replays,
                jobs: *jobs,
                peek: *peek,
                budget_s: *budget,
                final_replays: *final_replays,
                same: *same,
                beyond: *beyond,
                speculate: *speculate,
                by_kind: *by_kind,
                warm: *warm,
                monotone: *monotone,
            };
            match minimize(&engine, dir, &opts, junit.as_deref(), executor) {
                exit::OK if *internal => minimize_internal(&engine, dir, &opts),
                code => code,
            }
        }
        Command::Worker => worker(),
        Command::Campaign { config, seeds, out, jobs, same, replays, final_replays, budget, junit, executor } => {
            let minimize = minimize::Options {
                replays: *replays,
                jobs: 1,
                peek: PeekMode::Off,
                budget_s: *budget,
                final_replays: *final_replays,
                same: *same,
                ..minimize::Options::default()
            };
            campaign(&engine, config, seeds, out, *jobs, minimize, junit.as_deref(), executor)
        }
        Command::Pcap { dir, out, dataplane } => pcap(dir, out.as_deref(), dataplane.as_deref()),
        Command::Report { dir, shiviz, out } => report(dir, *shiviz, out.as_deref()),
        Command::Learn { dir, runs } => learn(&engine, dir, *runs),
        Command::Import { recording, config, out, check, wiring } => match (recording, out) {
            _ if *wiring => import_wiring(config),
            (Some(recording), Some(out)) => import(&engine, recording, config, out, *check),
            _ => exit::BAD_INPUT, // clap requires both without --wiring
        },
        Command::Races { dir, all, json, reaction_ms } => races(dir, *all, *json, *reaction_ms),
        Command::Explore {
            dir,
            config,
            seed,
            budget,
            all,
            start,
            reaction_ms,
            list,
            random,
            drops,
            out,
            resume,
            depth,
            json,
        } => {
            let opts = sts_engine::explore::Options {
                budget: *budget,
                all: *all,
                start: *start,
                races: sts_report::races::Options {
                    reaction_ms: *reaction_ms,
                    describe: sts_report::flows::message,
                    ..Default::default()
                },
                list: *list,
                random: *random,
                drops: *drops,
                resume: *resume,
                depth: *depth as usize,
            };
            match (dir, config, out) {
                (_, Some(config), Some(out)) => match fuzz_to_explore(&engine, config, out, *seed, *json) {
                    Ok(()) => explore(&engine, out, &out.join("explore"), &opts, *json),
                    Err(code) => code,
                },
                (Some(dir), _, out) => {
                    let out = out.clone().unwrap_or_else(|| dir.join("explore"));
                    explore(&engine, dir, &out, &opts, *json)
                }
                _ => exit::BAD_INPUT, // clap requires DIR or --config with --out
            }
        }
        Command::Verify { dir, limit, json, times, config } => {
            crate::verify::run(dir, *limit, *json, times.as_deref(), config.as_deref())
        }
        Command::Proxy { listen, controller, record, drop, delay, bandwidth, max_switches } => {
            proxy(listen, controller, record.as_deref(), drop, delay, *bandwidth, *max_switches as usize)
        }
        Command::Console { dir, config, script, json } => crate::console::run(
            &engine,
            crate::console::Options { dir, config: config.as_deref(), script: script.as_deref(), json: *json },
        ),
        Command::Serve { listen, data, workers, token_file, allow_host, allow_origin, executor, partition } => {
            let executor = match executor {
                ExecutorKind::Slurm => sts_server::Executor::Slurm { partition: partition.clone() },
                ExecutorKind::Local => sts_server::Executor::Local,
            };
            let allowed = (allow_host.clone(), allow_origin.clone());
            serve(*listen, data, *workers as usize, token_file.as_deref(), allowed, executor)
        }
    };
    terminal.finish();
    // Zygotes (and their copies) go before the process does.
    engine.shutdown();
    code
}

/// Runs `job` on the single-threaded runtime every command uses (one loop
/// owns the network; controllers are other processes). A failure is printed
/// as `sts NAME: ...` and becomes its exit code.
fn block_on<T>(name: &str, job: impl Future<Output = Result<T, RunError>>) -> Result<T, u8> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        eprintln!("sts {name}: cannot start the runtime: {e}");
        exit::ENVIRONMENT
    })?;
    rt.block_on(job).map_err(|e| {
        eprintln!("sts {name}: {e}");
        exit::of_error(&e)
    })
}

/// Loads a config, or says why not (exit 2).
fn load_config(name: &str, path: &Path) -> Result<(Config, String), u8> {
    let text = sts_engine::config::read_text_file(path).map_err(|e| {
        eprintln!("sts {name}: {}: {e}", path.display());
        exit::BAD_INPUT
    })?;
    let config = Config::from_toml(&text, path).map_err(|e| {
        eprintln!("sts {name}: {e}");
        exit::BAD_INPUT
    })?;
    Ok((config, text))
}

fn pingall(engine: &Engine, config_path: &Path, out: Option<&Path>) -> u8 {
    let config = match load_config("pingall", config_path) {
        Ok((c, _)) => c,
        Err(code) => return code,
    };
    let run_dir = match out {
        Some(dir) => dir.to_path_buf(),
        None => std::env::temp_dir().join(format!("sts-pingall-{}", std::process::id())),
    };
    let run = match block_on("pingall", pingall::run(engine, &config, &run_dir)) {
        Ok(r) => r,
        Err(code) => {
            if out.is_none() && run_dir.exists() {
                eprintln!("controller logs kept: {}", run_dir.display());
            }
            return code;
        }
    };
    out!("{}", sts_report::matrix(&run.matrix));
    for e in run.runner.net.events.iter().take(5) {
        eprintln!("dataplane: {}", sts_report::dataplane_event(e));
    }
    for issue in run.runner.issues.iter().take(5) {
        eprintln!("control channel: switch {} / controller c{}: {}", issue.dpid, issue.controller, issue.what);
    }
    if let Some(line) = run.runner.clock.summary() {
        eprintln!("{line}");
    }
    let all = run.matrix.all_reached();
    let logs = run.run_dir.clone();
    // The controllers stop before their logs go.
    drop(run);
    if out.is_none() && all {
        let _ = std::fs::remove_dir_all(&logs);
    } else {
        eprintln!("controller logs: {}", logs.display());
    }
    exit::found(!all)
}

/// Replays a fuzz find `n` times (into `DIR/check/N`) and says whether it
/// comes back: a find that does not (a race the replay's timing misses) is
/// no less a find, but minimizing it needs to know.
fn check_find(engine: &Engine, config: &Config, exp: &sts_trace::dir::Experiment, n: u32) {
    let trace = match sts_trace::Trace::load(&exp.trace()) {
        Ok(t) => t,
        Err(e) => return eprintln!("sts fuzz: cannot check the find: {e}"),
    };
    let mut reproduced = 0;
    for i in 1..=n {
        let out = exp.dir.join("check").join(i.to_string());
        let _ = std::fs::remove_dir_all(&out);
        match block_on("fuzz", sts_engine::replay::replay_once(engine, config, &trace, &out, i)) {
            Ok(r) if r.reproduced => reproduced += 1,
            Ok(_) => {}
            Err(_) => return,
        }
    }
    if reproduced == n {
        outln!("checked: the find replays ({reproduced}/{n}, {})", exp.dir.join("check").display());
    } else {
        outln!(
            "WARNING: the find replayed {reproduced}/{n} ({}): timing-dependent? `sts replay {} --repeat 10` says how often it comes back; `sts minimize` refuses a trace that never does",
            exp.dir.join("check").display(),
            exp.dir.display()
        );
    }
}

/// The facts every JUnit file carries about a command started at `started_ms`.
fn run_info(started_ms: i64) -> sts_report::junit::RunInfo {
    let took = sts_engine::clock::unix_time_ms().saturating_sub(started_ms).max(0) as u64;
    sts_report::junit::RunInfo::new(started_ms, std::time::Duration::from_millis(took))
}

/// Writes a JUnit report; a failure to is the environment's (exit 3).
fn write_junit(name: &str, path: Option<&Path>, report: impl FnOnce() -> quick_junit::Report) -> Result<(), u8> {
    let Some(path) = path else { return Ok(()) };
    sts_report::junit::write(path, &report()).map_err(|e| {
        eprintln!("sts {name}: cannot write the JUnit report {}: {e}", path.display());
        exit::ENVIRONMENT
    })
}

fn fuzz(engine: &Engine, config_path: &Path, out: &Path, seed: Option<u64>, junit: Option<&Path>, check: u32) -> u8 {
    let started = sts_engine::clock::unix_time_ms();
    let (mut config, mut text) = match load_config("fuzz", config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(seed) = seed {
        // The experiment's config says the seed it ran with.
        match sts_engine::campaign::with_seed(&text, seed) {
            Ok(t) => text = t,
            Err(e) => {
                eprintln!("sts fuzz: {}: {e}", config_path.display());
                return exit::BAD_INPUT;
            }
        }
        config.fuzz.seed = seed;
    }
    let exp = match fuzz::create_experiment(&config, &text, out) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("sts fuzz: {e}");
            return exit::of_error(&e);
        }
    };
    eprintln!(
        "sts fuzz: seed {}, up to {} steps of {} ms; experiment in {}",
        config.fuzz.seed,
        config.fuzz.steps,
        config.fuzz.step_ms,
        out.display()
    );
    let o = match block_on("fuzz", fuzz::run(engine, &config, &exp)) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if let Some(clock) = &o.clock {
        eprintln!("{clock}");
    }
    if let Err(code) = write_junit("fuzz", junit, || {
        let info = run_info(started).experiment(out);
        sts_report::junit::fuzz(config_path, config.fuzz.seed, &o, &exp.trace(), &info)
    }) {
        return code;
    }
    match o.violation {
        Some(v) if o.present_from_start => {
            out!("violation present before the first input (no input caused it): {}", sts_report::violation(&v));
            outln!("trace: {}", exp.trace().display());
            exit::PRESENT_FROM_START
        }
        Some(v) => {
            out!("violation after {} steps ({} inputs): {}", o.steps, o.inputs, sts_report::violation(&v));
            outln!("trace: {}", exp.trace().display());
            if check > 0 {
                check_find(engine, &config, &exp, check);
            }
            match sts_report::html::write_experiment(&exp.dir) {
                Ok(path) => outln!("space-time diagram: {}", path.display()),
                Err(e) => eprintln!("sts fuzz: no HTML report: {e}"),
            }
            exit::VIOLATION
        }
        None => {
            outln!(
                "no persistent violation in {} steps ({} inputs); trace: {}",
                o.steps,
                o.inputs,
                exp.trace().display()
            );
            exit::OK
        }
    }
}

fn replay(
    engine: &Engine,
    dir: &Path,
    repeat: u32,
    expect: Option<&str>,
    same: Option<Same>,
    junit: Option<&Path>,
) -> u8 {
    let started = sts_engine::clock::unix_time_ms();
    // Checked before anything starts, so a broken trace costs nothing.
    let (exp, config, trace) = match replay::load(dir, same) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("sts replay: {e}");
            return exit::of_error(&e);
        }
    };
    let same = config.invariants.same;
    // `replay::load` checked the recorded violation.
    let wanted = sts_engine::records::first_violation(&trace).ok().flatten().map(|v| v.identity(same));
    eprintln!(
        "sts replay: {} external events, looking for {} (same {same}); {repeat} run(s)",
        trace.externals().len(),
        wanted.as_deref().unwrap_or("any persistent violation")
    );
    say_commands("replay", &exp.config(), &config);
    let has_internals = trace.records.iter().any(|r| r.internal().is_some());
    if !has_internals {
        eprintln!("sts replay: the trace records no internal events, so divergence is not reported");
    }
    let summary = match block_on(
        "replay",
        replay::run_loaded(engine, &exp, &config, &trace, repeat, |r| {
            out!("{}", sts_report::replay_run(r, has_internals))
        }),
    ) {
        Ok(s) => s,
        Err(code) => return code,
    };
    outln!(
        "reproduced {}/{} ({})",
        summary.reproduced,
        summary.runs.len(),
        wanted.as_deref().unwrap_or("any violation")
    );
    match sts_report::html::write_experiment_with(dir, &trace) {
        Ok(path) => outln!("space-time diagram, with a diff against the last replay: {}", path.display()),
        Err(e) => eprintln!("sts replay: no HTML report: {e}"),
    }
    let reproduced = summary.reproduced > 0;
    if let Err(code) = write_junit("replay", junit, || {
        let info = run_info(started).experiment(dir);
        sts_report::junit::replay(&summary, expect == Some("reproduce"), &info)
    }) {
        return code;
    }
    expectation(expect, reproduced)
}

/// `sts replay DIR --on ovs`: the trace's inputs on real Open vSwitch bridges.
fn replay_on_ovs(engine: &Engine, dir: &Path, repeat: u32, expect: Option<&str>, junit: Option<&Path>) -> u8 {
    let started = sts_engine::clock::unix_time_ms();
    let (exp, config, trace) = match replay::load(dir, None) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("sts replay: {e}");
            return exit::of_error(&e);
        }
    };
    let wanted = trace.violation().map(|v| format!("{} ({})", v.summary, v.culprit.as_deref().unwrap_or("no culprit")));
    eprintln!(
        "sts replay: {} external events on Open vSwitch, looking for {}; {repeat} run(s) into {}",
        trace.externals().len(),
        wanted.as_deref().unwrap_or("any persistent violation"),
        dir.join("ovs").display()
    );
    say_commands("replay", &exp.config(), &config);
    let opts = sts_engine::on_ovs::Options {
        repeat,
        out: dir.join("ovs"),
        install_tables: |dir, net, version| {
            let installed = sts_report::dump_flows::install_dir(dir, net)?;
            sts_report::dump_flows::judge_as(net, version);
            let read = |i: sts_report::dump_flows::Installed| sts_engine::on_ovs::SwitchTables {
                flows: i.flows,
                packets: i.packets,
            };
            Ok(installed.into_iter().map(|(d, i)| (d, read(i))).collect())
        },
        table_difference: |lab, net| {
            let (_, lab) = sts_report::tables::at_violation(lab)?;
            let ovs = net.switches.iter().map(|(d, s)| (*d, s.clone())).collect();
            sts_report::tables::first_difference(&lab, &ovs, "Open vSwitch")
        },
        describe_message: |raw| {
            let m = sts_proxy::wire::Message::parse(raw.clone()).ok()?;
            sts_report::flows::message(&m).or_else(|| Some(m.type_name().to_string()))
        },
    };
    let plan = sts_engine::on_ovs::plan(&config, &trace);
    if !plan.skipped.is_empty() {
        outln!("inputs an Open vSwitch testbed cannot perform (skipped in every run):");
    }
    for s in &plan.skipped {
        outln!("  input {}: {}: {}", s.index + 1, s.input, s.why);
    }
    let job = sts_engine::on_ovs::run(engine, &exp, &config, &trace, &plan, &opts, |r| {
        out!("{}", sts_report::ovs_run(r, trace.violation()))
    });
    let summary = match block_on("replay", job) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match &summary.lab {
        Some(lab) if lab.culprit.is_none() => outln!(
            "reproduces on Open vSwitch {}/{} (the trace names no culprit to compare); runs in {}",
            summary.reproduced,
            summary.runs.len(),
            dir.join("ovs").display()
        ),
        Some(_) => outln!(
            "reproduces on Open vSwitch {}/{} (the same culprit in {}); runs in {}",
            summary.reproduced,
            summary.runs.len(),
            summary.same_culprit,
            dir.join("ovs").display()
        ),
        None => outln!(
            "a persistent violation on Open vSwitch in {}/{} (the trace records no violation to compare with); \
             runs in {}",
            summary.reproduced,
            summary.runs.len(),
            dir.join("ovs").display()
        ),
    }
    let reproduced = summary.reproduced > 0;
    if let Err(code) = write_junit("replay", junit, || {
        let info = run_info(started).experiment(dir);
        sts_report::junit::on_ovs(&summary, expect == Some("reproduce"), &info)
    }) {
        return code;
    }
    if summary.runs.iter().all(|r| r.error.is_some()) {
        // No run got as far as a verdict: the testbed's environment, not the bug.
        return exit::ENVIRONMENT;
    }
    expectation(expect, reproduced)
}

/// A replay's exit code: with `--expect`, whether it held (said on the
/// terminal); without, whether the bug reproduced.
fn expectation(expect: Option<&str>, reproduced: bool) -> u8 {
    match expect {
        Some(want) => {
            let held = (want == "reproduce") == reproduced;
            outln!("expected it to {want}: {}", if held { "it did" } else { "it did not" });
            if held {
                exit::OK
            } else {
                exit::VIOLATION
            }
        }
        None => exit::found(reproduced),
    }
}

/// An experiment directory's config can name any program as a controller:
/// replaying a directory someone else wrote runs it. Say so, with the
/// command, before it runs (docs/reliability.md, "Trust").
fn say_commands(name: &str, config_path: &Path, config: &Config) {
    for c in config.controllers.iter().filter(|c| c.kind == sts_engine::config::ControllerKind::Command) {
        eprintln!("sts {name}: runs `{}` (a command from {})", c.command.join(" "), config_path.display());
    }
}

fn minimize(
    engine: &Engine,
    dir: &Path,
    opts: &minimize::Options,
    junit: Option<&Path>,
    executor: &crate::args::ExecutorArgs,
) -> u8 {
    let started = sts_engine::clock::unix_time_ms();
    if let Ok(config) = Config::load(&dir.join("config.toml")) {
        say_commands("minimize", &dir.join("config.toml"), &config);
    }
    let run = async {
        if executor.executor != ExecutorKind::Slurm {
            return minimize::run(engine, dir, opts).await;
        }
        let sts = std::env::current_exe().map_err(|e| RunError::Environment(format!("the sts executable: {e}")))?;
        let slurm = sts_engine::slurm::Slurm::allocate(
            &sts,
            executor.partition.as_deref(),
            executor.max_tasks,
            "sts-minimize",
        )?;
        eprintln!(
            "sts minimize: Slurm allocation {} ({} tasks): a warm worker on each, candidates handed to them",
            slurm.job(),
            slurm.tasks()
        );
        slurm.check_shared(dir).await?;
        let workers = slurm.workers(Some(dir)).await?;
        let mut opts = opts.clone();
        opts.jobs = slurm.tasks();
        let report = minimize::run_on(engine, &workers, dir, &opts).await;
        let stats = workers.stats();
        eprintln!("sts minimize: {}", stats.describe());
        let path = dir.join("mcs").join("workers.json");
        if let Err(e) = sts_trace::dir::write_json(&path, &stats) {
            eprintln!("sts minimize: {}: {e}", path.display());
        }
        report
    };
    let report = match block_on("minimize", run) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mcs = dir.join("mcs");
    if let Err(e) = sts_report::write_mcs_markdown(&mcs, &report) {
        eprintln!("sts minimize: {}: {e}", mcs.join("report.md").display());
        return exit::ENVIRONMENT;
    }
    if let Err(code) =
        write_junit("minimize", junit, || sts_report::junit::minimize(&report, &run_info(started).experiment(dir)))
    {
        return code;
    }
    out!("{}", sts_report::mcs_summary(&report));
    outln!("written to {}", mcs.display());
    match sts_report::html::write_experiment(dir) {
        Ok(path) => outln!("space-time diagram: {}", path.display()),
        Err(e) => eprintln!("sts minimize: no HTML report: {e}"),
    }
    exit::OK
}

/// `sts minimize --internal`: the messages that matter, after the inputs.
fn minimize_internal(engine: &Engine, dir: &Path, opts: &minimize::Options) -> u8 {
    let internal = sts_engine::internal::Options {
        replays: opts.replays.max(2),
        final_replays: opts.final_replays,
        same: opts.same,
    };
    let report = match block_on("minimize --internal", sts_engine::internal::run(engine, dir, &internal)) {
        Ok(r) => r,
        Err(code) => return code,
    };
    out!("{}", sts_report::internal_summary(&report));
    let md = dir.join("mcs").join("report.md");
    let appended = std::fs::read_to_string(&md)
        .map(|text| text + "\n" + &sts_report::internal_markdown(&report))
        .and_then(|text| sts_trace::dir::write_atomic(&md, text.as_bytes()));
    if let Err(e) = appended {
        eprintln!("sts minimize: {}: {e}", md.display());
        return exit::ENVIRONMENT;
    }
    outln!("written to {} and {}", dir.join("mcs").join("internal.json").display(), md.display());
    match sts_report::html::write_experiment(dir) {
        Ok(path) => outln!("space-time diagram (the kept messages in orange): {}", path.display()),
        Err(e) => eprintln!("sts minimize: no HTML report: {e}"),
    }
    exit::OK
}

#[allow(clippy::too_many_arguments)]
fn campaign(
    engine: &Engine,
    config_path: &Path,
    seeds: &str,
    out: &Path,
    jobs: u32,
    minimize: minimize::Options,
    junit: Option<&Path>,
    executor: &crate::args::ExecutorArgs,
) -> u8 {
    let started = sts_engine::clock::unix_time_ms();
    let seed_range = seeds.to_string();
    let seeds = match sts_engine::campaign::parse_seeds(seeds) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sts campaign: --seeds {e}");
            return exit::BAD_INPUT;
        }
    };
    let (_, text) = match load_config("campaign", config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    eprintln!(
        "sts campaign: seeds {}..{}, {jobs} at a time; campaign in {}",
        seeds.start(),
        seeds.end(),
        out.display()
    );
    let slurm = match executor.executor {
        ExecutorKind::Slurm => match std::env::current_exe() {
            Ok(sts) => Some(sts_engine::campaign::SlurmOptions {
                sts,
                partition: executor.partition.clone(),
                tasks: executor.max_tasks,
            }),
            Err(e) => {
                eprintln!("sts campaign: the sts executable: {e}");
                return exit::ENVIRONMENT;
            }
        },
        ExecutorKind::Local => None,
    };
    let opts = sts_engine::campaign::Options { seeds, jobs, minimize, slurm };
    let report = match block_on("campaign", sts_engine::campaign::run(engine, &text, config_path, out, &opts)) {
        Ok(r) => r,
        Err(code) => return code,
    };
    for bug in &report.bugs {
        let dir = out.join("seeds").join(bug.minimized.to_string());
        if let Some(r) = &bug.mcs {
            if let Err(e) = sts_report::write_mcs_markdown(&dir.join("mcs"), r) {
                eprintln!("sts campaign: {}: {e}", dir.join("mcs/report.md").display());
            }
        }
        if let Err(e) = sts_report::html::write_experiment(&dir) {
            eprintln!("sts campaign: no HTML report for seed {}: {e}", bug.minimized);
        }
    }
    let summary = sts_report::campaign_markdown(&report);
    if let Err(e) = sts_trace::dir::write_atomic(&out.join("summary.md"), summary.as_bytes()) {
        eprintln!("sts campaign: {}: {e}", out.join("summary.md").display());
        return exit::ENVIRONMENT;
    }
    if let Err(code) = write_junit("campaign", junit, || {
        let mut info = run_info(started).config(text.as_bytes()).property("seeds", &seed_range);
        info.out = format!("summary: {}\n", out.join("summary.md").display());
        sts_report::junit::campaign(config_path, &report, &info)
    }) {
        return code;
    }
    out!("{summary}");
    outln!("\nsummary: {} (and summary.json)", out.join("summary.md").display());
    if report.seeds.iter().all(|s| s.error.is_some()) {
        eprintln!("sts campaign: no seed could run");
        return exit::ENVIRONMENT;
    }
    exit::found(!report.bugs.is_empty())
}

/// `sts worker`: serves work read from standard input until it closes
/// (`sts_engine::worker`; what each task of a Slurm allocation runs).
fn worker() -> u8 {
    let input = tokio::io::BufReader::new(tokio::io::stdin());
    match block_on("worker", sts_engine::worker::serve(input, Box::new(std::io::stdout()))) {
        Ok(()) => exit::OK,
        Err(code) => code,
    }
}

fn report(dir: &Path, shiviz: bool, out: Option<&Path>) -> u8 {
    if !shiviz {
        return match sts_report::html::write_experiment(dir) {
            Ok(path) => {
                outln!("{}", path.display());
                exit::OK
            }
            Err(e) => {
                eprintln!("sts report: {e}");
                exit::BAD_INPUT
            }
        };
    }
    let trace = match sts_trace::Trace::load(&dir.join("trace.jsonl")) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sts report: {e}");
            return exit::BAD_INPUT;
        }
    };
    let out = out.map_or_else(|| dir.join("trace.shiviz"), Path::to_path_buf);
    let written =
        std::fs::File::create(&out).and_then(|f| sts_report::shiviz::write_trace(&trace, std::io::BufWriter::new(f)));
    match written {
        Ok(n) => {
            outln!("{n} events: {}", out.display());
            outln!("open it in ShiViz with the log parsing regular expression: {}", sts_report::shiviz::REGEX);
            exit::OK
        }
        Err(e) => {
            eprintln!("sts report: {}: {e}", out.display());
            exit::ENVIRONMENT
        }
    }
}

fn learn(engine: &Engine, dir: &Path, runs: u32) -> u8 {
    let learned = match block_on("learn", sts_engine::learn::run(engine, dir, runs)) {
        Ok(l) => l,
        Err(code) => return code,
    };
    outln!(
        "learned from {runs} replays ({} message pairs lined up, {} differing in a few fields only):",
        learned.pairs,
        learned.volatile_pairs
    );
    if learned.masks.is_empty() {
        outln!("  nothing varies between equivalent messages: the hand-written masks suffice");
    }
    for (t, paths) in &learned.masks.by_type {
        outln!("  {t}: {}", paths.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    outln!("saved: {} (replay, minimize and the console use it)", sts_trace::masks::path(dir).display());
    outln!("| replay | missed, hand-written masks | extra, hand-written | missed, learned masks | extra, learned |");
    outln!("|---|---|---|---|---|");
    for r in &learned.runs {
        outln!(
            "| {} | {} | {} | {} | {} |",
            r.run,
            r.missing_before,
            r.unexpected_before,
            r.missing_after,
            r.unexpected_after
        );
    }
    exit::OK
}

fn import_wiring(config_path: &Path) -> u8 {
    match load_config("import", config_path) {
        Ok((config, _)) => {
            out!("{}", sts_engine::import::wiring(&config));
            exit::OK
        }
        Err(code) => code,
    }
}

fn import(engine: &Engine, recording: &Path, config_path: &Path, out: &Path, check: u32) -> u8 {
    let (config, text) = match load_config("import", config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let existed = out.exists();
    let exp = match fuzz::create_experiment(&config, &text, out) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("sts import: {e}");
            return exit::of_error(&e);
        }
    };
    let imported = match sts_engine::import::import(recording, &config, &exp.trace()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("sts import: {e}");
            // No half-made experiment: `out` goes back to what it was (absent, or empty).
            if existed {
                for entry in std::fs::read_dir(out).into_iter().flatten().flatten() {
                    let p = entry.path();
                    let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
                }
            } else {
                let _ = std::fs::remove_dir_all(out);
            }
            return exit::of_error(&e);
        }
    };
    let named: Vec<String> = imported.switches.iter().map(|(c, d)| format!("connection {c} = s{d}")).collect();
    outln!(
        "imported {} messages from {} switches ({}), {} inputs",
        imported.messages,
        imported.switches.len(),
        named.join(", "),
        imported.inputs.len()
    );
    for i in &imported.inputs {
        outln!("  {i}");
    }
    for d in &imported.disagreements {
        outln!("  disagreement: {d}");
    }
    let mut report = serde_json::json!({ "import": imported });
    let mut code = exit::OK;
    if check > 0 {
        let original = match sts_trace::Trace::load(&exp.trace()) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("sts import: {e}");
                return exit::ENVIRONMENT;
            }
        };
        let summary = match block_on("import", sts_engine::replay::run(engine, &exp.dir, check, |_| {})) {
            Ok(s) => s,
            Err(code) => return code,
        };
        let (recorded_out, recorded_in) =
            (sts_engine::import::to_switch(&original), sts_engine::import::to_controller(&original));
        let mut same = 0;
        let mut runs = Vec::new();
        for r in &summary.runs {
            let Ok(replayed) = sts_trace::Trace::load(&r.trace) else { continue };
            let out_diff =
                sts_engine::import::differences(&recorded_out, &sts_engine::import::to_switch(&replayed), 100);
            let in_diff =
                sts_engine::import::differences(&recorded_in, &sts_engine::import::to_controller(&replayed), 100);
            same += usize::from(out_diff.is_empty());
            runs.push(serde_json::json!({ "run": r.run, "to_switch": out_diff, "to_controller": in_diff }));
        }
        outln!("replays sending the recorded controller-to-switch messages: {same}/{check} (fingerprints per switch)");
        if let Some(first) = runs.first() {
            // Where the mock network answers differently from the testbed's switches.
            let all = first["to_controller"].as_array().cloned().unwrap_or_default();
            for d in all.iter().take(10) {
                outln!("  switch-to-controller, mock vs testbed: {}", d.as_str().unwrap_or_default());
            }
            if all.len() > 10 {
                outln!("  ... {} more in {}", all.len() - 10, exp.dir.join("import.json").display());
            }
        }
        for r in &runs {
            for d in r["to_switch"].as_array().into_iter().flatten().take(10) {
                outln!("  replay {}: {}", r["run"], d.as_str().unwrap_or_default());
            }
        }
        report["check"] = serde_json::json!({ "replays": check, "same_to_switch": same, "runs": runs });
        if same < check as usize {
            code = exit::VIOLATION;
        }
    }
    if let Err(e) = sts_trace::dir::write_json(&exp.dir.join("import.json"), &report) {
        eprintln!("sts import: cannot write import.json: {e}");
        return exit::ENVIRONMENT;
    }
    outln!("experiment: {} (sts replay, sts minimize and sts console take it)", exp.dir.display());
    code
}

/// The directory whose trace recorded the run: `dir` itself, or, when its
/// trace records inputs only (written by hand), its latest replay.
fn recorded_run(dir: &Path, trace: &sts_trace::Trace) -> Option<std::path::PathBuf> {
    if trace.records_messages() {
        return None;
    }
    ["replays", "final"].iter().find_map(|kind| {
        std::fs::read_dir(dir.join(kind))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|n| dir.join(kind).join(n.to_string()).join("trace.jsonl").is_file())
            .max()
            .map(|n| dir.join(kind).join(n.to_string()))
    })
}

/// A flip in one line: `seq 93 packet_in s1 → c0 (...) for 1390 ms, past
/// seq 129 policy split (at c0: ...)`.
fn flip_line(f: &sts_engine::races::Flip) -> String {
    if f.drop {
        return format!("seq {} {} dropped (at {}: {})", f.message, f.first.what, f.at, f.conflict);
    }
    format!(
        "seq {} {} for {} ms, past seq {} {} (at {}: {})",
        f.message, f.first.what, f.delay_ms, f.past, f.second.what, f.at, f.conflict
    )
}

/// A flip as `sts explore --json` gives it.
fn flip_json(f: &sts_engine::races::Flip) -> serde_json::Value {
    serde_json::json!({
        "held": {"seq": f.message, "what": f.first.what, "switch": f.dpid, "msg_type": f.msg_type.as_str(),
                 "ms": if f.drop { serde_json::Value::Null } else { f.delay_ms.into() }},
        "dropped": f.drop,
        "past": {"seq": f.past, "what": f.second.what},
        "at": f.at,
        "conflict": f.conflict,
    })
}

/// `sts explore --config FILE --out OUT`: the input sequence fuzzed from
/// the config into the experiment directory OUT (as `sts fuzz` writes it),
/// ready to explore; a fuzz run that already violates ends here, said as
/// `sts fuzz` says it (`Err` with the exit code).
fn fuzz_to_explore(
    engine: &Engine,
    config_path: &Path,
    out: &Path,
    seed: Option<u64>,
    as_json: bool,
) -> Result<(), u8> {
    let (mut config, mut text) = load_config("explore", config_path)?;
    if let Some(seed) = seed {
        text = sts_engine::campaign::with_seed(&text, seed).map_err(|e| {
            eprintln!("sts explore: {}: {e}", config_path.display());
            exit::BAD_INPUT
        })?;
        config.fuzz.seed = seed;
    }
    let exp = fuzz::create_experiment(&config, &text, out).map_err(|e| {
        eprintln!("sts explore: {e}");
        exit::of_error(&e)
    })?;
    eprintln!(
        "sts explore: fuzzing an input sequence first (seed {}, up to {} steps of {} ms) into {}",
        config.fuzz.seed,
        config.fuzz.steps,
        config.fuzz.step_ms,
        out.display()
    );
    let o = block_on("explore", fuzz::run(engine, &config, &exp))?;
    match o.violation {
        None => Ok(()),
        Some(v) if as_json => {
            let doc = serde_json::json!({
                "dir": out.display().to_string(),
                "base_violation": v.summary,
                "flips": [], "executions": 0, "finds": [],
            });
            outln!("{doc}");
            Err(exit::VIOLATION)
        }
        Some(v) => {
            outln!("the fuzz run itself violates after {} inputs: {}", o.inputs, sts_report::violation(&v).trim_end());
            outln!("nothing to explore: `sts minimize {}` shrinks it", out.display());
            Err(exit::VIOLATION)
        }
    }
}

/// What `sts explore` says of candidates left out as the same variant as
/// an earlier one.
fn repeated_words(repeated: usize) -> String {
    match repeated {
        0 => String::new(),
        1 => " (and 1 more, the same variant as one before it)".into(),
        n => format!(" (and {n} more, each the same variant as one before it)"),
    }
}

/// `sts explore DIR`.
fn explore(engine: &Engine, dir: &Path, out: &Path, opts: &sts_engine::explore::Options, as_json: bool) -> u8 {
    let (_, config, trace) = match replay::load(dir, None) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("sts explore: {e}");
            return exit::of_error(&e);
        }
    };
    let text = match sts_engine::config::read_text_file(&dir.join("config.toml")) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sts explore: {}: {e}", dir.join("config.toml").display());
            return exit::BAD_INPUT;
        }
    };
    let tried = match (opts.random, opts.drops) {
        (None, false) => "each order timing alone decided, flipped",
        (None, true) => "each FLOW_MOD lost",
        (Some(_), false) => "random messages held",
        (Some(_), true) => "random messages lost",
    };
    if opts.resume {
        eprintln!("sts explore: resuming {}: {tried}, the untried ones next (at most {})", out.display(), opts.budget);
    } else {
        eprintln!(
            "sts explore: replaying {}'s {} inputs, then {tried} (at most {}); into {}",
            dir.display(),
            trace.externals().len(),
            opts.budget,
            out.display()
        );
    }
    let outcome = match block_on("explore", sts_engine::explore::run(engine, &config, &text, &trace, out, opts)) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if as_json {
        let doc = serde_json::json!({
            "dir": dir.display().to_string(),
            "base_violation": outcome.base_violation,
            "flips": outcome.flips.iter().map(flip_json).collect::<Vec<_>>(),
            "executions": outcome.executions,
            "seconds": outcome.seconds,
            "executions_per_second": outcome.per_second(),
            "from": opts.start.name(),
            "warm": outcome.warm,
            "branches": outcome.branches,
            "branches_refused": outcome.branches_refused,
            "out": out.display().to_string(),
            "resumed": outcome.resumed,
            "left": outcome.left,
            "repeated": outcome.repeated,
            "depth": opts.depth,
            "two_faults": outcome.deeper,
            "finds": outcome.finds.iter().map(|f| {
                let mut doc = flip_json(&f.flip);
                if let Some(e) = &f.earlier {
                    doc["earlier"] = flip_json(e);
                }
                doc["dir"] = f.dir.display().to_string().into();
                doc["execution"] = f.execution.into();
                doc["violation"] = f.violation.clone().into();
                doc
            }).collect::<Vec<_>>(),
        });
        outln!("{doc}");
    } else if let Some(v) = &outcome.base_violation {
        outln!("the run itself ends in a violation: {v}");
        outln!("nothing to explore: `sts minimize {}` shrinks it", dir.display());
    } else if opts.list {
        let repeated = repeated_words(outcome.repeated);
        if opts.drops {
            outln!("{} FLOW_MODs to lose (at most --budget){repeated}:", outcome.flips.len());
        } else {
            outln!("{} orders timing alone decided (at most --budget){repeated}:", outcome.flips.len());
        }
        for (k, f) in outcome.flips.iter().enumerate() {
            outln!("{:>4}. {}{}", k + 1, if f.drop { "" } else { "hold " }, flip_line(f));
        }
    } else {
        // The one-fault level's own counts (the two-fault one has its line).
        let (deeper_tried, deeper_left) = outcome.deeper.map_or((0, 0), |d| (d.tried, d.left));
        let executions = outcome.executions - deeper_tried;
        let all = outcome.resumed + executions + outcome.left - deeper_left;
        let offered = match (opts.random, opts.drops) {
            (Some(seed), false) => format!("{all} random holds (seed {seed})"),
            (Some(seed), true) => format!("{all} random losses (seed {seed})"),
            (None, false) => format!("{all} orders timing alone decided"),
            (None, true) => format!("{all} FLOW_MODs to lose"),
        } + &repeated_words(outcome.repeated);
        let before = if outcome.resumed > 0 { format!(", {} before", outcome.resumed) } else { String::new() };
        // The time is the whole sitting's (with two faults, on that line).
        let timing = format!(" in {:.1} s ({:.1} per second)", outcome.seconds, outcome.per_second());
        outln!(
            "{offered}; {executions} tried{}{before}{}",
            if outcome.deeper.is_some() { "" } else { timing.as_str() },
            match (&outcome.branches_refused, &outcome.warm) {
                (_, Some(w)) if w.fresh_because.is_some() =>
                    format!("; every replay fresh: {}", w.fresh_because.as_deref().unwrap_or_default()),
                (Some(why), _) => format!("; replayed whole, not from where each leaves the run: {why}"),
                _ => match &outcome.branches {
                    Some(b) => format!("; from {} checkpoints of the run, {} rewinds", b.marks, b.rewinds),
                    None => String::new(),
                },
            }
        );
        if let Some(d) = &outcome.deeper {
            outln!(
                "two faults at a time: {} variants extending the ones above{}; {} tried (from {} of their runs); \
                 {} variants in all{timing}",
                d.offered,
                if d.same_state > 0 {
                    format!(
                        " ({} more left out: an earlier variant left the same state with the same fault)",
                        d.same_state
                    )
                } else {
                    String::new()
                },
                d.tried,
                d.bases,
                outcome.executions,
            );
        }
        if outcome.deeper.is_none() && opts.depth > 1 && !outcome.finds.is_empty() && !opts.all {
            outln!("two faults at a time: not tried, a one-fault variant found (--all goes on)");
        }
        for f in &outcome.finds {
            outln!("found, variant {}: {}", f.execution, f.violation);
            if let Some(e) = &f.earlier {
                outln!("  first {}: {}", if e.drop { "lost" } else { "held" }, flip_line(e));
            }
            outln!("  {}: {}", if f.flip.drop { "lost" } else { "held" }, flip_line(&f.flip));
            outln!("  written to {} (sts minimize {} shrinks it)", f.dir.display(), f.dir.display());
        }
        if outcome.finds.is_empty() {
            outln!("no violation in any variant");
        }
        if outcome.left > 0 && (opts.all || outcome.finds.is_empty()) {
            let mut again = format!("sts explore {} --resume", dir.display());
            if *out != dir.join("explore") {
                again += &format!(" --out {}", out.display());
            }
            if let Some(seed) = opts.random {
                again += &format!(" --random {seed}");
            }
            if opts.drops {
                again += " --drops";
            }
            if opts.all {
                again += " --all";
            }
            if opts.depth > 1 {
                again += &format!(" --depth {}", opts.depth);
            }
            outln!(
                "{} {} left untried: `{again}` goes on",
                outcome.left,
                if outcome.left == 1 { "candidate" } else { "candidates" },
            );
        }
    }
    exit::found(outcome.base_violation.is_some() || !outcome.finds.is_empty())
}

/// `sts races DIR`.
fn races(dir: &Path, all: bool, as_json: bool, reaction_ms: u64) -> u8 {
    let load = |d: &Path| {
        sts_trace::Trace::load(&d.join("trace.jsonl")).map_err(|e| {
            eprintln!("sts races: {e}");
            exit::BAD_INPUT
        })
    };
    let mut trace = match load(dir) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut read = dir.to_path_buf();
    if let Some((n, run)) = sts_report::html::mcs_recording(dir) {
        // A minimization's trace is what its replays were given, not a run.
        read = dir.join("final").join(n.to_string());
        eprintln!(
            "sts races: {} is a minimization: reading its reproducing final replay {}",
            dir.display(),
            read.display()
        );
        trace = run;
    } else if let Some(run) = recorded_run(dir, &trace) {
        eprintln!("sts races: {} records inputs only: reading its replay {}", dir.display(), run.display());
        trace = match load(&run) {
            Ok(t) => t,
            Err(code) => return code,
        };
        read = run;
    } else if !trace.records_messages() {
        eprintln!(
            "sts races: {} records inputs only (written by hand?) and has no replay: `sts replay {}` records a run",
            dir.display(),
            dir.display()
        );
        return exit::BAD_INPUT;
    }
    // Host names for addresses (a migration's host is known by its address)
    // and the links packets are followed through.
    let places = sts_report::topology::config(&read).map(|c| sts_report::races::places(&c)).unwrap_or_default();
    let opts = sts_report::races::Options { reaction_ms, ..Default::default() };
    let report = sts_report::races::analyze(&trace, &places, &opts);
    if as_json {
        let mut doc = sts_report::races::json(&report);
        doc["dir"] = read.display().to_string().into();
        outln!("{doc}");
    } else {
        out!("{}: {}", read.display(), sts_report::races::text(&report, all));
    }
    let harmful = report.harmful().count();
    exit::found(harmful > 0)
}

fn pcap(dir: &Path, out: Option<&Path>, dataplane: Option<&Path>) -> u8 {
    let path = dir.join("trace.jsonl");
    let trace = match sts_trace::Trace::load(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sts pcap: {e}");
            return exit::BAD_INPUT;
        }
    };
    let out = out.map_or_else(|| dir.join("trace.pcapng"), Path::to_path_buf);
    let written = std::fs::File::create(&out)
        .map(std::io::BufWriter::new)
        .and_then(|w| sts_report::pcap::write_trace(&trace, w))
        .and_then(|(written, mut w)| std::io::Write::flush(&mut w).map(|()| written));
    match written {
        Ok(w) => {
            outln!("{} OpenFlow messages in {} connections: {}", w.messages, w.connections, out.display());
            if !w.legend.is_empty() {
                outln!("  who is who: {} (OpenFlow on port {})", w.legend_line(), sts_report::pcap::CONTROLLER_PORT);
            }
            if w.messages == 0 && !trace.records_messages() {
                // A hand-written trace has inputs only; its replays recorded the run.
                match recorded_run(dir, &trace) {
                    Some(run) => eprintln!(
                        "sts pcap: this trace records inputs only (written by hand?): its replay recorded the messages: sts pcap {}",
                        run.display()
                    ),
                    None => eprintln!(
                        "sts pcap: this trace records inputs only (written by hand?): `sts replay {}` records a run, then `sts pcap {}/replays/1`",
                        dir.display(),
                        dir.display()
                    ),
                }
            }
            if w.dropped + w.queued > 0 {
                outln!(
                    "  the proxy dropped {} and held or delayed {} of them: each says so in its packet comment (frame.comment)",
                    w.dropped, w.queued
                );
            }
            if w.without_bytes > 0 {
                eprintln!(
                    "sts pcap: {} messages left out: the trace recorded them without their bytes (trace version 1)",
                    w.without_bytes
                );
            }
        }
        Err(e) => {
            eprintln!("sts pcap: {}: {e}", out.display());
            return exit::ENVIRONMENT;
        }
    }
    let has_frames = trace.records.iter().any(|r| matches!(r.internal(), Some(sts_trace::Internal::Frame { .. })));
    if !has_frames {
        if dataplane.is_some() {
            eprintln!("sts pcap: the trace recorded no host frames (traces written before sts captured them have none): no dataplane file");
        }
        return exit::OK;
    }
    let frames_out = dataplane.map_or_else(|| dir.join("dataplane.pcapng"), Path::to_path_buf);
    let written = std::fs::File::create(&frames_out)
        .map(std::io::BufWriter::new)
        .and_then(|w| sts_report::pcap::write_frames(&trace, w))
        .and_then(|(written, mut w)| std::io::Write::flush(&mut w).map(|()| written));
    match written {
        Ok(w) => {
            outln!("{} host frames on {} host interfaces: {}", w.frames, w.hosts, frames_out.display());
            exit::OK
        }
        Err(e) => {
            eprintln!("sts pcap: {}: {e}", frames_out.display());
            exit::ENVIRONMENT
        }
    }
}

fn serve(
    listen: SocketAddr,
    data: &Path,
    workers: usize,
    token_file: Option<&Path>,
    (allow_hosts, allow_origins): (Vec<String>, Vec<String>),
    executor: sts_server::Executor,
) -> u8 {
    let token = match token_file.map(sts_server::door::read_token_file).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sts serve: {e}");
            return exit::BAD_INPUT;
        }
    };
    let sts = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sts serve: cannot find the sts executable to run jobs with: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let on_slurm = executor != sts_server::Executor::Local;
    let opts = sts_server::Options {
        listen,
        data: data.to_path_buf(),
        workers,
        token,
        allow_hosts,
        allow_origins,
        sts,
        executor,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts serve: cannot start the runtime: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let served = rt.block_on(sts_server::serve(
        opts,
        |s| {
            if !s.requeued.is_empty() {
                eprintln!("sts serve: running again the jobs the last run left running: {:?}", s.requeued);
            }
            let file = s.token_file.as_deref().or(token_file).unwrap_or(Path::new("?"));
            match &s.new_token {
                Some(t) => eprintln!(
                    "sts serve: a new token is in {} (every request needs `Authorization: Bearer TOKEN`); \
                     a browser opens the index at http://{}/?token={t}",
                    file.display(),
                    s.addr
                ),
                None => eprintln!("sts serve: the token is in {}", file.display()),
            }
            eprintln!(
                "sts serve: listening on http://{} ({} worker(s){}, data in {}); Ctrl-C stops",
                s.addr,
                workers,
                if on_slurm { " handing jobs to Slurm" } else { "" },
                data.display()
            );
        },
        stop_signal(),
    ));
    match served {
        Ok(()) => exit::OK,
        Err(e @ sts_server::ServeError::BadInput(_)) => {
            eprintln!("sts serve: {e}");
            exit::BAD_INPUT
        }
        Err(e) => {
            eprintln!("sts serve: {e}");
            exit::ENVIRONMENT
        }
    }
}

/// Resolves on Ctrl-C, SIGTERM or SIGHUP.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut hup)) = (signal(SignalKind::terminate()), signal(SignalKind::hangup())) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}

fn proxy(
    listen: &str,
    controller: &str,
    record: Option<&Path>,
    drop_types: &[String],
    delay: &[String],
    bandwidth: Option<u64>,
    max_switches: usize,
) -> u8 {
    use sts_proxy::standalone;
    let policy = match standalone::parse_fault_rules(drop_types, delay) {
        Ok(mut p) => {
            if let Some(kb) = bandwidth {
                let action = sts_proxy::interpose::Action::Bandwidth(kb * 1000);
                p.push(sts_proxy::interpose::Rule { action, ..Default::default() });
            }
            p
        }
        Err(e) => {
            eprintln!("sts proxy: {e}");
            return exit::BAD_INPUT;
        }
    };
    let parse =
        |what: &str, s: &str| s.parse::<SocketAddr>().map_err(|e| format!("--{what} {s:?}: {e} (expected IP:PORT)"));
    let (listen, controller) = match (parse("listen", listen), parse("controller", controller)) {
        (Ok(l), Ok(c)) => (l, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("sts proxy: {e}");
            return exit::BAD_INPUT;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts proxy: cannot start the runtime: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let (recording, recorder) = match record.map(standalone::record_to).transpose() {
        Ok(Some((r, h))) => (Some(r), Some(h)),
        Ok(None) => (None, None),
        Err(e) => {
            let shown = record.map(|p| p.display().to_string()).unwrap_or_default();
            return match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    eprintln!("sts proxy: {shown} exists: a recording is never overwritten; choose another --record");
                    exit::BAD_INPUT
                }
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
                    eprintln!("sts proxy: cannot record to {shown}: its directory does not exist");
                    exit::BAD_INPUT
                }
                _ => {
                    eprintln!("sts proxy: cannot record to {shown}: {e}");
                    exit::ENVIRONMENT
                }
            };
        }
    };
    let recording_to = record.map_or(String::new(), |p| format!(", recording to {}", p.display()));
    // Two descriptors per switch, and some to spare for the rest.
    let fd_limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft as usize);
    let max_switches = max_switches.min(fd_limit.saturating_sub(64) / 2).max(1);
    let now = sts_engine::clock::Clock::start().now_fn();
    let result = rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut hup) = match (signal(SignalKind::terminate()), signal(SignalKind::hangup())) {
            (Ok(t), Ok(h)) => (t, h),
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        // The address is said once bound: with port 0 the kernel picks it,
        // and a caller reads it here.
        let (ready, bound) = tokio::sync::oneshot::channel();
        let announce = async move {
            if let Ok(bound) = bound.await {
                eprintln!("sts proxy: switches -> {bound} -> controller {controller}{recording_to}");
            }
            std::future::pending::<()>().await
        };
        // SIGINT, SIGTERM and SIGHUP all end the proxy the same way: the
        // recording is finished (every message relayed so far, whole lines).
        tokio::select! {
            r = standalone::run(listen, controller, recording, policy, max_switches, now, Some(ready)) => r,
            _ = announce => Ok(()),
            _ = tokio::signal::ctrl_c() => Ok(()),
            _ = term.recv() => Ok(()),
            _ = hup.recv() => Ok(()),
        }
    });
    drop(rt); // ends the relay tasks, and with them every handle on the recording
    if let Some(h) = recorder {
        match h.finish() {
            Ok(n) => eprintln!("sts proxy: {n} messages recorded"),
            Err(e) => eprintln!("sts proxy: recording incomplete: {e}"),
        }
    }
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("sts proxy: {e}");
            exit::ENVIRONMENT
        }
    }
}
