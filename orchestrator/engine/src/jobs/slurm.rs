//! Slurm: when one machine is not enough (docs/cluster.md).
//!
//! [`Slurm`] holds one allocation (`salloc --no-shell`, K tasks of one CPU)
//! for a whole minimization or campaign, and runs one warm worker
//! (`sts worker`, [`crate::worker`]) per task as one job step each
//! ([`Slurm::workers`]): a [`Pool`] that candidates, final replays and
//! campaign seeds are handed to, each forking controllers its worker keeps
//! warm. Work and answers travel as JSON lines over the steps' standard
//! input and output, which `srun` relays; files (the experiment, candidate
//! traces, runs) are named by path, so they must be on storage every node
//! sees (checked at start, [`Slurm::check_shared`]).
//!
//! The allocation is given back by `scancel` when the [`Slurm`] is dropped,
//! and otherwise by a guard: a shell waiting for its input, a pipe only sts
//! writes to, to close, which happens when sts dies however it dies (even
//! SIGKILL); it then runs `scancel`. So a killed sts leaves no allocation
//! behind, and its workers' steps end with it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::pool::Pool;
use crate::RunError;

/// How long to wait for an allocation before saying why not.
pub const GRANT_TIMEOUT: Duration = Duration::from_secs(120);

fn env(what: impl Into<String>) -> RunError {
    RunError::Environment(what.into())
}

/// Spawns `cmd` so that it gets `signal` when this process dies.
fn spawn_tied(mut cmd: Command, signal: Signal) -> std::io::Result<Child> {
    crate::controller::dies_with_this_process(&mut cmd, signal);
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
        let mut cmd = step_of(self.job);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        cmd
    }

    /// Fails unless `dir` is visible, as it is here, from inside the
    /// allocation (experiments must be on storage the nodes share).
    pub async fn check_shared(&self, dir: &Path) -> Result<(), RunError> {
        let out = self.step().arg("test").arg("-r").arg(dir).output().await.map_err(|e| env(format!("srun: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        Err(env(format!(
            "{} is not readable from the Slurm allocation {}: experiment directories must be on storage every node shares (NFS, a cluster file system){}",
            dir.display(),
            self.job,
            tail(&out.stderr)
        )))
    }

    /// Starts one warm worker per task of the allocation, each a job step
    /// running `sts worker`, warming up on `warm` (an experiment directory)
    /// before its first piece of work.
    pub async fn workers(&self, warm: Option<&Path>) -> Result<Pool, RunError> {
        let (job, sts) = (self.job, self.sts.clone());
        let launch: crate::pool::Launch = Box::new(move |_| {
            // srun relays the step's standard input and output: the worker's.
            let mut cmd = step_of(job);
            cmd.arg(&sts).arg("worker");
            cmd
        });
        Pool::start(launch, self.tasks as usize, warm).await
    }
}

/// A job step of one task on one CPU in allocation `job`, the command to
/// run still to be added.
fn step_of(job: u64) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("srun");
    cmd.args(["--jobid", &job.to_string(), "--ntasks", "1", "--cpus-per-task", "1", "--exact", "--quiet"]);
    cmd
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
