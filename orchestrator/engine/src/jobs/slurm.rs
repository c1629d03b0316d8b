//! Slurm: when one machine is not enough (docs/cluster.md).
//!
//! - [`Slurm`] is a minimization [`Executor`]: it holds one allocation
//!   (`salloc`, K tasks) for the whole minimization and runs each candidate
//!   as a job step inside it (`srun --jobid`), so dispatching a candidate
//!   costs milliseconds, not a scheduling cycle. A step is `sts candidate`,
//!   which replays one candidate and prints its verdict as JSON; the
//!   candidate's trace and runs are under the experiment's `mcs/`, which must
//!   be on storage every node sees (checked at start).
//! - [`fuzz_array`] fuzzes a campaign's seeds as one array job
//!   (`sbatch --array --wait`), one task per seed.
//!
//! The allocation (`salloc --no-shell`) is given back by `scancel` when the
//! executor is dropped, and otherwise by a guard: a shell waiting for its
//! input, a pipe only sts writes to, to close, which happens when sts dies
//! however it dies (even SIGKILL); it then runs `scancel`. So a killed sts
//! leaves no allocation behind. Verdicts come back in
//! the batch's order, and delta debugging takes the first success in that
//! order, as with the local executor: the same MCS either way.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::minimize::{CandidateRun, Executor, Verdict};
use crate::{Engine, RunError};

/// How long to wait for an allocation before saying why not.
pub const GRANT_TIMEOUT: Duration = Duration::from_secs(120);

/// What `sts candidate` prints: one line of JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepVerdict {
    pub reproduced: bool,
    pub replays: u64,
    /// Why the candidate could not be tested, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub bad_input: bool,
}

impl StepVerdict {
    /// The line `sts candidate` prints for `v`.
    pub fn of(v: &Verdict) -> StepVerdict {
        match v {
            Ok((reproduced, replays)) => {
                StepVerdict { reproduced: *reproduced, replays: *replays, error: None, bad_input: false }
            }
            Err(e) => {
                StepVerdict { reproduced: false, replays: 0, error: Some(e.to_string()), bad_input: e.is_bad_input() }
            }
        }
    }

    fn verdict(self) -> Verdict {
        match self.error {
            Some(e) if self.bad_input => Err(RunError::BadInput(e)),
            Some(e) => Err(RunError::Environment(e)),
            None => Ok((self.reproduced, self.replays)),
        }
    }
}

fn env(what: impl Into<String>) -> RunError {
    RunError::Environment(what.into())
}

/// Spawns `cmd` so that it gets `signal` when this process dies.
fn spawn_tied(mut cmd: Command, signal: Signal) -> std::io::Result<Child> {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    crate::controller::spawn_from_long_lived_thread(cmd)
}

/// An allocation of `tasks` tasks on which candidates run as job steps.
pub struct Slurm {
    job: u64,
    /// Cancels the allocation when its input closes: when this is dropped,
    /// or when sts dies however it dies.
    guard: Child,
    sts: PathBuf,
    tasks: u32,
}

impl Slurm {
    /// Asks Slurm for `tasks` tasks (one CPU each) in `partition` (the
    /// default one when `None`), waiting up to [`GRANT_TIMEOUT`]; `sts` is
    /// the executable the steps run.
    pub fn allocate(sts: &Path, partition: Option<&str>, tasks: u32, name: &str) -> Result<Slurm, RunError> {
        let mut cmd = Command::new("salloc");
        cmd.args(["--no-shell", "--job-name", name, "--ntasks", &tasks.max(1).to_string(), "--cpus-per-task", "1"]);
        if let Some(p) = partition {
            cmd.args(["--partition", p]);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        // SIGTERM when sts dies while it waits: salloc withdraws the request.
        let mut salloc = spawn_tied(cmd, Signal::SIGTERM).map_err(|e| {
            env(format!("cannot run salloc: {e} (is Slurm installed? scripts/setup installs it; scripts/slurm-local starts a one-node cluster)"))
        })?;
        let stderr = salloc.stderr.take().ok_or_else(|| env("salloc: no stderr"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + GRANT_TIMEOUT;
        let mut said = Vec::new();
        let job = loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => match line.split("Granted job allocation ").nth(1) {
                    Some(id) => break id.trim().parse::<u64>().map_err(|_| env(format!("salloc: {line}")))?,
                    None => said.push(line),
                },
                Err(_) => {
                    // Timed out, or salloc ended without a grant.
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(salloc.id() as i32), Signal::SIGTERM);
                    let _ = salloc.wait();
                    let why = if said.is_empty() { "no answer".to_string() } else { said.join("; ") };
                    return Err(env(format!(
                        "Slurm did not grant {tasks} task(s){} within {:?}: {why} (is SLURM_CONF set, the cluster up? `sinfo` tells)",
                        partition.map(|p| format!(" in partition {p}")).unwrap_or_default(),
                        GRANT_TIMEOUT
                    )));
                }
            }
        };
        let _ = salloc.wait(); // --no-shell: it returns once the allocation is made
        let mut guard = Command::new("sh");
        guard
            .args(["-c", &format!("read _; exec scancel {job}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let guard = crate::controller::spawn_from_long_lived_thread(guard).map_err(|e| {
            let _ = Command::new("scancel").arg(job.to_string()).status();
            env(format!("cannot start the guard of allocation {job}: {e}"))
        })?;
        Ok(Slurm { job, guard, sts: sts.to_path_buf(), tasks: tasks.max(1) })
    }

    /// The allocation's job id.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// Tasks the allocation holds (candidates run at once).
    pub fn tasks(&self) -> u32 {
        self.tasks
    }

    fn step(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("srun");
        cmd.args(["--jobid", &self.job.to_string(), "--ntasks", "1", "--cpus-per-task", "1", "--exact", "--quiet"]);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        cmd
    }

    /// Fails unless `dir` is visible, as it is here, from inside the
    /// allocation (the experiment must be on storage the nodes share).
    pub async fn check_shared(&self, dir: &Path) -> Result<(), RunError> {
        let marker = dir.join("trace.jsonl");
        let out =
            self.step().arg("test").arg("-r").arg(&marker).output().await.map_err(|e| env(format!("srun: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        Err(env(format!(
            "{} is not readable from the Slurm allocation {}: the experiment directory must be on storage every node shares (NFS, a cluster file system){}",
            dir.display(),
            self.job,
            tail(&out.stderr)
        )))
    }

    /// Tests one candidate as a job step; a step that ends without a
    /// verdict (cancelled, its node lost) runs once more, then is reported.
    async fn candidate(&self, engine: &Engine, config: &Config, c: CandidateRun) -> Verdict {
        let exp = c.mcs_dir.parent().ok_or_else(|| env("a candidate outside an experiment"))?.to_path_buf();
        let dir = c.mcs_dir.join("candidates");
        std::fs::create_dir_all(&dir).map_err(|e| env(format!("{}: {e}", dir.display())))?;
        let trace = dir.join(format!("{}.jsonl", c.first_run));
        // As it is, numbers included: the step replays exactly this trace.
        c.trace.save(&trace).map_err(|e| env(format!("{}: {e}", trace.display())))?;
        let mut verdict = self.step_verdict(config, &exp, &trace, &c).await;
        if let Err(failure) = &verdict {
            engine.notice(crate::NoticeKind::Info, format!("candidate {}: {failure}; running it again", c.first_run));
            verdict = self.step_verdict(config, &exp, &trace, &c).await;
        }
        let _ = std::fs::remove_file(&trace);
        match verdict {
            Ok(v) => v.verdict(),
            Err(failure) => Err(env(failure)),
        }
    }

    /// One job step for a candidate: its verdict, or why it gave none.
    async fn step_verdict(
        &self,
        config: &Config,
        exp: &Path,
        trace: &Path,
        c: &CandidateRun,
    ) -> Result<StepVerdict, String> {
        let out = self
            .step()
            .arg(&self.sts)
            .arg("candidate")
            .arg(exp)
            .arg("--trace")
            .arg(trace)
            .args(["--first-run", &c.first_run.to_string(), "--replays", &c.replays.to_string()])
            .args(["--peek", c.peek.name(), "--same", config.invariants.same.name()])
            .output()
            .await
            .map_err(|e| format!("srun: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<StepVerdict>(l).ok())
            .ok_or_else(|| format!("the Slurm step gave no verdict ({}){}", out.status, tail(&out.stderr)))
    }
}

fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    match lines.len() {
        0 => String::new(),
        n => format!(": {}", lines[n.saturating_sub(3)..].join(" / ")),
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Given back now; the guard, its input closed, says it again and ends.
        let _ = Command::new("scancel").arg(self.job.to_string()).stderr(Stdio::null()).status();
        drop(self.guard.stdin.take());
        let _ = self.guard.wait();
    }
}

impl Executor for Slurm {
    fn test<'a>(
        &'a self,
        engine: &'a Engine,
        config: &'a Config,
        batch: Vec<CandidateRun>,
    ) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(futures::future::join_all(batch.into_iter().map(move |c| self.candidate(engine, config, c))))
    }
}

/// Fuzzes `seeds` of the config at `config` as one array job, each task
/// `sts fuzz --config CONFIG --seed SEED --out OUT/seeds/SEED`, and waits for
/// all of them. At most `tasks` run at once (`%` of `--array`). Returns the
/// job's exit status line when it failed as a whole.
pub async fn fuzz_array(
    sts: &Path,
    config: &Path,
    seeds: std::ops::RangeInclusive<u64>,
    out: &Path,
    partition: Option<&str>,
    tasks: u32,
) -> Result<(), RunError> {
    let seeds_dir = out.join("seeds");
    std::fs::create_dir_all(&seeds_dir).map_err(|e| env(format!("{}: {e}", seeds_dir.display())))?;
    let config = std::path::absolute(config).map_err(|e| env(format!("{}: {e}", config.display())))?;
    let script = format!(
        "#!/bin/sh\nexec {} --progress json fuzz --config {} --seed \"$SLURM_ARRAY_TASK_ID\" --out {}/\"$SLURM_ARRAY_TASK_ID\"\n",
        shell_quote(&sts.display().to_string()),
        shell_quote(&config.display().to_string()),
        shell_quote(&seeds_dir.display().to_string())
    );
    let script_path = out.join("fuzz-array.sh");
    sts_trace::dir::write_atomic(&script_path, script.as_bytes())
        .map_err(|e| env(format!("{}: {e}", script_path.display())))?;
    let mut cmd = tokio::process::Command::new("sbatch");
    cmd.args(["--wait", "--parsable", "--job-name", "sts-campaign", "--ntasks", "1", "--cpus-per-task", "1"])
        .arg(format!("--array={}-{}%{}", seeds.start(), seeds.end(), tasks.max(1)))
        .arg(format!("--output={}/%a.log", seeds_dir.display()))
        .arg(&script_path)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(p) = partition {
        cmd.args(["--partition", p]);
    }
    // sbatch reads the script from the path; --wait returns when every task ended.
    let out = cmd.output().await.map_err(|e| env(format!("cannot run sbatch: {e} (scripts/setup installs Slurm)")))?;
    // A task that found a violation exits 1, and so does `sbatch --wait`:
    // the seeds' own results say what happened; only a job that never ran is an error.
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if job.is_empty() {
        return Err(env(format!("sbatch did not submit the array job{}", tail(&out.stderr))));
    }
    Ok(())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_survive_the_trip_through_a_step() {
        for v in [Ok((true, 3)), Ok((false, 5)), Err(RunError::BadInput("bad".into())), Err(env("gone"))] {
            let line = serde_json::to_string(&StepVerdict::of(&v)).unwrap();
            let back = serde_json::from_str::<StepVerdict>(&line).unwrap().verdict();
            assert_eq!(format!("{back:?}"), format!("{v:?}"));
        }
    }

    #[test]
    fn quoting_keeps_paths_whole() {
        assert_eq!(shell_quote("/a b/it's"), "'/a b/it'\\''s'");
    }
}
