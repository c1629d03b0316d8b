//! Campaigns: fuzz one config under many seeds, group what they find into
//! distinct bugs (by bug identity, [`Violation::same_bug`]), and minimize
//! one run of each bug.
//!
//! ```text
//! OUT/seeds/SEED/   one fuzz experiment per seed (the config with that seed)
//! OUT/summary.json  the seeds, the bugs and their minimal causal sequences
//! ```
//!
//! The run minimized for a bug is the one that found it with the fewest
//! inputs (the cheapest to shrink); its MCS lands in `OUT/seeds/SEED/mcs/`.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;
use sts_invariants::{Same, Violation};

use crate::config::Config;
use crate::fuzz::seed_run;
pub use crate::fuzz::{with_seed, SeedRun};
use crate::{minimize, Engine, Observer, Progress, RunError};

/// Most seeds one campaign may fuzz.
pub const MAX_SEEDS: u64 = 100_000;

/// How to run a campaign.
#[derive(Debug, Clone)]
pub struct Options {
    pub seeds: RangeInclusive<u64>,
    /// Fuzz runs at once (each with its own controllers).
    pub jobs: u32,
    /// How each bug is minimized (its `same` also groups the bugs).
    pub minimize: minimize::Options,
    /// Run on Slurm instead of this machine: one allocation whose tasks each
    /// run a warm worker, fuzzing seeds and then minimizing the bugs.
    pub slurm: Option<SlurmOptions>,
}

/// Where a campaign runs on Slurm.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// The `sts` executable the tasks run (on shared storage).
    pub sts: PathBuf,
    pub partition: Option<String>,
    /// Tasks (warm workers) in the allocation.
    pub tasks: u32,
}

/// One distinct bug and the seeds that found it.
#[derive(Debug, Serialize)]
pub struct Bug {
    /// The bug's identity at the campaign's level of sameness.
    pub identity: String,
    /// The violation of the run that was minimized.
    pub violation: Violation,
    /// Every seed whose run found this bug, in order.
    pub seeds: Vec<u64>,
    /// The switches its culprit showed on across those runs, in order
    /// (one bug on three switches is one bug, seen on three).
    pub switches: Vec<String>,
    /// The seed whose run was minimized.
    pub minimized: u64,
    /// The minimization's report, unless it failed.
    pub mcs: Option<minimize::Report>,
    pub error: Option<String>,
}

/// A campaign's result (`OUT/summary.json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub same: Same,
    pub seeds: Vec<SeedRun>,
    pub bugs: Vec<Bug>,
    /// On Slurm: what its warm workers measured of themselves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<crate::pool::PoolStats>,
}

/// Parses `A..B` (inclusive) or a single seed `A`.
pub fn parse_seeds(s: &str) -> Result<RangeInclusive<u64>, String> {
    let bad = || format!("{s:?}: seeds are A..B (inclusive, A <= B) or one seed A");
    let (a, b) = match s.split_once("..") {
        Some((a, b)) => (a.trim().parse::<u64>().map_err(|_| bad())?, b.trim().parse::<u64>().map_err(|_| bad())?),
        None => {
            let a = s.trim().parse::<u64>().map_err(|_| bad())?;
            (a, a)
        }
    };
    if a > b {
        return Err(bad());
    }
    if b - a >= MAX_SEEDS {
        return Err(format!("{s:?}: at most {MAX_SEEDS} seeds in one campaign"));
    }
    Ok(a..=b)
}

/// Runs a campaign of the config at `config_path` (its text `text`) into
/// `out`, which must not hold a campaign yet.
pub async fn run(
    engine: &Engine,
    text: &str,
    config_path: &Path,
    out: &Path,
    opts: &Options,
) -> Result<Report, RunError> {
    let base = Config::from_toml(text, config_path).map_err(|e| RunError::BadInput(e.to_string()))?;
    let same = opts.minimize.same.unwrap_or(base.invariants.same);
    if out.join("seeds").exists() {
        return Err(RunError::BadInput(format!(
            "{}: already holds a campaign (seeds/); choose another --out or remove it",
            out.display()
        )));
    }
    // Every seed's config is checked (and its directory made) before any runs.
    let mut planned = Vec::new();
    for seed in opts.seeds.clone() {
        let text = with_seed(text, seed).map_err(|e| RunError::BadInput(format!("{}: {e}", config_path.display())))?;
        let config = Config::from_toml(&text, config_path).map_err(|e| RunError::BadInput(e.to_string()))?;
        planned.push((seed, config, text));
    }
    // The runs' own progress would fight over one line: the campaign reports
    // its own, and passes on notices and the minimizations' progress.
    let inner = engine.with_observer(Arc::new(Quiet(engine.observer().clone())));
    let total = planned.len() as u32;
    let (done, found) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let seeds_dir = out.join("seeds");
    // On Slurm: one allocation for the whole campaign, one warm worker per
    // task, fuzzing seeds and then minimizing each bug.
    let slurm = match &opts.slurm {
        Some(o) => Some(crate::slurm::Slurm::allocate(&o.sts, o.partition.as_deref(), o.tasks, "sts-campaign")?),
        None => None,
    };
    let pool = match &slurm {
        Some(s) => {
            std::fs::create_dir_all(&seeds_dir)
                .map_err(|e| RunError::Environment(format!("{}: {e}", seeds_dir.display())))?;
            s.check_shared(&seeds_dir).await?;
            Some(s.workers(None).await?)
        }
        None => None,
    };
    let config_abs = std::path::absolute(config_path)
        .map_err(|e| RunError::Environment(format!("{}: {e}", config_path.display())))?;
    let at_once = pool.as_ref().map_or(opts.jobs.max(1) as usize, crate::pool::Pool::size);
    // The distinct bugs so far, for progress (grouped again, in seed order, after).
    let seen: std::cell::RefCell<Vec<Violation>> = std::cell::RefCell::new(Vec::new());
    let mut runs: Vec<SeedRun> = futures::stream::iter(planned)
        .map(|(seed, config, text)| {
            let dir = seeds_dir.join(seed.to_string());
            let (done, found, seen, inner, pool, config_abs) = (&done, &found, &seen, &inner, &pool, &config_abs);
            async move {
                let run = match pool {
                    Some(pool) => pool.fuzz(inner, config_abs, &text, seed, &dir).await.unwrap_or_else(|e| {
                        let mut run = SeedRun::new(seed, &dir);
                        run.error = Some(e.to_string());
                        run
                    }),
                    None => seed_run(inner, seed, &config, &text, &dir).await,
                };
                done.set(done.get() + 1);
                found.set(found.get() + u32::from(run.violation.is_some()));
                if let Some(v) = &run.violation {
                    let mut seen = seen.borrow_mut();
                    if !seen.iter().any(|s| s.same_bug(v, same)) {
                        seen.push(v.clone());
                    }
                }
                let p = Progress::Campaign {
                    fuzzed: done.get(),
                    seeds: total,
                    found: found.get(),
                    distinct: seen.borrow().len() as u32,
                    bugs: None,
                    minimized: 0,
                };
                engine.progress(p);
                run
            }
        })
        .buffer_unordered(at_once)
        .collect()
        .await;
    found.set(runs.iter().filter(|r| r.violation.is_some()).count() as u32);
    runs.sort_by_key(|r| r.seed);
    let mut bugs = group(&runs, same);
    let bugs_len = bugs.len();
    for (i, bug) in bugs.iter_mut().enumerate() {
        let distinct = Some(bugs_len as u32);
        engine.progress(Progress::Campaign {
            fuzzed: total,
            seeds: total,
            found: found.get(),
            distinct: bugs_len as u32,
            bugs: distinct,
            minimized: i as u32,
        });
        let dir = seeds_dir.join(bug.minimized.to_string());
        let mut mopts = opts.minimize.clone();
        mopts.same = Some(same);
        let result = match &pool {
            Some(pool) => {
                mopts.jobs = pool.size() as u32;
                minimize::run_on(&inner, pool, &dir, &mopts).await
            }
            None => minimize::run(&inner, &dir, &mopts).await,
        };
        match result {
            Ok(report) => bug.mcs = Some(report),
            Err(e) => bug.error = Some(e.to_string()),
        }
    }
    engine.progress(Progress::Done);
    let workers = pool.as_ref().map(crate::pool::Pool::stats);
    // The workers end before their allocation is given back.
    drop(pool);
    drop(slurm);
    let report = Report { same, seeds: runs, bugs, workers };
    sts_trace::dir::write_json(&out.join("summary.json"), &report)
        .map_err(|e| RunError::Environment(format!("{}: {e}", out.join("summary.json").display())))?;
    Ok(report)
}

/// Passes on notices and a minimization's progress, not the fuzz runs'.
struct Quiet(Arc<dyn Observer>);

impl Observer for Quiet {
    fn progress(&self, p: &Progress) {
        if matches!(p, Progress::Minimize { .. } | Progress::FinalReplays { .. }) {
            self.0.progress(p);
        }
    }

    fn notice(&self, n: &crate::Notice) {
        self.0.notice(n);
    }
}

/// The distinct bugs among `runs`, in the order of the first seed that
/// found each; each to be minimized on its run with the fewest inputs.
pub fn group(runs: &[SeedRun], same: Same) -> Vec<Bug> {
    let mut bugs: Vec<(Bug, usize)> = Vec::new();
    for run in runs {
        let Some(v) = &run.violation else { continue };
        let switch = v.culprit.as_deref().and_then(sts_invariants::identity::culprit_switch).map(str::to_string);
        match bugs.iter_mut().find(|(b, _)| b.violation.same_bug(v, same)) {
            Some((bug, fewest)) => {
                bug.seeds.push(run.seed);
                if let Some(sw) = switch {
                    if !bug.switches.contains(&sw) {
                        bug.switches.push(sw);
                        bug.switches.sort_by_key(|s| (s.len(), s.clone()));
                    }
                }
                if run.inputs < *fewest {
                    *fewest = run.inputs;
                    bug.minimized = run.seed;
                    bug.violation = v.clone();
                }
            }
            None => bugs.push((
                Bug {
                    identity: v.identity(same),
                    violation: v.clone(),
                    seeds: vec![run.seed],
                    switches: switch.into_iter().collect(),
                    minimized: run.seed,
                    mcs: None,
                    error: None,
                },
                run.inputs,
            )),
        }
    }
    bugs.into_iter().map(|(b, _)| b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_invariants::Invariant;

    #[test]
    fn seeds_parse_as_inclusive_ranges() {
        assert_eq!(parse_seeds("1..20"), Ok(1..=20));
        assert_eq!(parse_seeds("7"), Ok(7..=7));
        for bad in ["", "3..1", "a..b", "1..", "-1..2", "0..100000"] {
            assert!(parse_seeds(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_seed_is_set_and_the_rest_kept() {
        let text = "# a comment\n[network]\ntopology = \"mesh\"\n\n[fuzz]\nseed = 3 # old\nsteps = 5\n";
        let out = with_seed(text, 42).unwrap();
        assert!(out.contains("# a comment") && out.contains("seed = 42") && out.contains("steps = 5"), "{out}");
        assert!(with_seed("[network]\n", 9).unwrap().contains("[fuzz]\nseed = 9"));
    }

    fn run(seed: u64, inputs: usize, v: Option<Violation>) -> SeedRun {
        SeedRun { seed, dir: PathBuf::new(), violation: v, present_from_start: false, steps: 0, inputs, error: None }
    }

    fn blackhole(victim: &str, culprit: &str) -> Violation {
        Violation {
            invariant: Invariant::Blackhole,
            elements: vec![victim.into()],
            summary: format!("{victim} starves"),
            witness: None,
            culprit: Some(culprit.into()),
        }
    }

    #[test]
    fn bugs_are_grouped_by_identity_and_minimized_on_their_shortest_run() {
        let runs = [
            run(1, 50, Some(blackhole("h2", "s2: rule A"))),
            run(2, 30, None),
            run(3, 20, Some(blackhole("h3", "s2: rule A"))),
            run(4, 10, Some(blackhole("h2", "s3: rule B"))),
        ];
        let by_culprit = group(&runs, Same::Culprit);
        assert_eq!(by_culprit.len(), 2);
        assert_eq!((by_culprit[0].seeds.clone(), by_culprit[0].minimized), (vec![1, 3], 3));
        assert_eq!((by_culprit[1].seeds.clone(), by_culprit[1].minimized), (vec![4], 4));
        let by_victim = group(&runs, Same::Victim);
        assert_eq!(by_victim.iter().map(|b| b.seeds.clone()).collect::<Vec<_>>(), [vec![1, 4], vec![3]]);
        assert_eq!(group(&runs, Same::Kind).len(), 1);
    }
}
