//! Workers: each takes the oldest queued job and runs it as an `sts` child
//! process in the job's directory, with `--progress json`.
//!
//! A child process rather than the engine in this process: a job that
//! hangs, crashes or leaks cannot take the queue with it, a cancel is one
//! signal, and a job's result is by construction what the same command gives
//! when run alone. The child dies with the server (PDEATHSIG, set from a
//! thread that lives as long as the server), and its controllers die with it
//! the same way, so no controller outlives a killed server.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sts_client::{Job, Outcome};
use sts_engine::clock::unix_time_ms;

use crate::jobs;
use crate::store::{Ending, Store};
use crate::Executor;

/// A job whose process is running.
struct Live {
    pid: u32,
    progress: Option<serde_json::Value>,
}

/// What the server's parts share.
pub struct Shared {
    /// The data directory (store, job directories, `experiments/`).
    pub data: PathBuf,
    pub store: Store,
    /// The `sts` executable jobs run.
    pub sts: PathBuf,
    /// Where jobs run.
    pub executor: Executor,
    /// Woken when a job is queued.
    pub wake: tokio::sync::Notify,
    /// Space kept back to record jobs' ends on a full disk.
    pub reserve: crate::reserve::Reserve,
    live: Mutex<HashMap<i64, Live>>,
    stopping: AtomicBool,
    staged: AtomicU64,
}

impl Shared {
    pub fn new(data: PathBuf, store: Store, sts: PathBuf, executor: Executor) -> Shared {
        Shared {
            reserve: crate::reserve::Reserve::new(&data),
            data,
            store,
            sts,
            executor,
            wake: tokio::sync::Notify::new(),
            live: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            staged: AtomicU64::new(0),
        }
    }

    /// A number for a new staging directory (unique in this run; the
    /// directory is emptied at start).
    pub fn next_staging(&self) -> u64 {
        self.staged.fetch_add(1, Ordering::Relaxed)
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Live>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The latest progress of running job `id`.
    pub fn progress(&self, id: i64) -> Option<serde_json::Value> {
        self.live().get(&id).and_then(|l| l.progress.clone())
    }

    /// Kills running job `id`'s process (its controllers die with it); on
    /// Slurm, cancels its Slurm job.
    pub fn kill(&self, id: i64) {
        if self.executor != Executor::Local {
            cancel_slurm_job(id);
        }
        if let Some(l) = self.live().get(&id) {
            let _ = kill(Pid::from_raw(l.pid as i32), Signal::SIGKILL);
        }
    }

    /// Stops the workers: running jobs' processes are killed and their jobs
    /// left `running` in the store, so the next start runs them again.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for l in self.live().values() {
            let _ = kill(Pid::from_raw(l.pid as i32), Signal::SIGKILL);
        }
        self.wake.notify_waiters();
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// One worker: runs queued jobs one at a time until the server stops.
pub async fn work(shared: Arc<Shared>) {
    while !shared.stopping() {
        let job = match shared.store.claim_next(unix_time_ms()) {
            Ok(Some(job)) => job,
            Ok(None) => {
                // Woken by a submission, or a look every second (a missed wake-up costs no more).
                let _ = tokio::time::timeout(Duration::from_secs(1), shared.wake.notified()).await;
                continue;
            }
            Err(e) => {
                tracing::error!("{e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let id = job.id;
        let end = run(&shared, &job).await;
        if shared.stopping() {
            // Killed by the shutdown: it stays `running`, and runs again at the next start.
            break;
        }
        // A store that fails now may not later (a locked or full disk): the
        // end is retried until it is recorded, never lost. On a full disk the
        // reserve makes room for it at once.
        loop {
            match shared.store.finish(id, &end, unix_time_ms()) {
                Ok(true) => tracing::info!("job {id}: {:?}", end.outcome),
                Ok(false) => tracing::warn!("job {id} had already ended"),
                Err(e) if crate::reserve::is_full(&e.to_string()) && shared.reserve.release() => {
                    tracing::warn!(
                        "job {id}: the disk is full; released the reserve to record its end (new jobs are refused \
                         until space is free)"
                    );
                    continue;
                }
                Err(e) if !shared.stopping() => {
                    tracing::error!("job {id}: recording its end: {e}; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => tracing::error!("job {id}: recording its end: {e}; the server stops"),
            }
            break;
        }
        shared.live().remove(&id);
    }
}

/// Runs `job` to its end.
async fn run(shared: &Arc<Shared>, job: &Job) -> Ending {
    let dir = jobs::job_dir(&shared.data, job.id);
    let failed = |error: String| Ending {
        outcome: Outcome::Environment,
        exit_code: None,
        error: Some(error),
        summary: None,
        progress: None,
    };
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("log.txt"));
    let mut log = match log {
        Ok(f) => f,
        Err(e) => return failed(format!("cannot open the job's log: {e}")),
    };
    if job.attempts > 1 {
        let _ = writeln!(log, "--- attempt {}: the server restarted while this job ran ---", job.attempts);
        if let Err(e) = jobs::reset_for_retry(&shared.data, job.id, job.kind) {
            return failed(format!("cannot clear the interrupted attempt: {e}"));
        }
    }
    let args = jobs::command_line(&job.request);
    let _ = writeln!(log, "$ sts {}", args.join(" "));
    let (mut cmd, death) = match &shared.executor {
        Executor::Local => (Command::new(&shared.sts), Signal::SIGKILL),
        Executor::Slurm { partition } => {
            // srun runs the job on a node (in this directory, which the nodes
            // share) and relays its output; on SIGTERM it ends the Slurm job.
            let mut c = Command::new("srun");
            c.args(["--job-name", &slurm_job_name(job.id), "--ntasks", "1", "--cpus-per-task", "2", "--quiet"]);
            if let Some(p) = partition {
                c.args(["--partition", p]);
            }
            c.arg(&shared.sts);
            (c, Signal::SIGTERM)
        }
    };
    cmd.args(&args).current_dir(&dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.process_group(0);
    sts_engine::controller::dies_with_this_process(&mut cmd, death);
    let mut child = match sts_engine::controller::spawn_from_long_lived_thread(cmd) {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot run {}: {e}", shared.sts.display())),
    };
    shared.live().insert(job.id, Live { pid: child.id(), progress: None });
    // A cancel that came between the claim and the spawn.
    if shared.store.cancel_requested(job.id).unwrap_or(false) || shared.stopping() {
        shared.kill(job.id);
    }
    let log = Arc::new(Mutex::new(log));
    let last_line = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    let streams: [Option<Box<dyn std::io::Read + Send>>; 2] = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ];
    for stream in streams.into_iter().flatten() {
        let (log, last_line, shared, id) = (log.clone(), last_line.clone(), shared.clone(), job.id);
        readers.push(std::thread::spawn(move || copy_output(stream, &log, &last_line, &shared, id)));
    }
    let status = tokio::task::spawn_blocking(move || {
        let status = child.wait();
        for r in readers {
            let _ = r.join();
        }
        status
    })
    .await;
    let progress = shared.progress(job.id);
    let last = last_line.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let status = match status {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return failed(format!("waiting for the job's process: {e}")),
        Err(e) => return failed(format!("waiting for the job's process: {e}")),
    };
    let cancelled = shared.store.cancel_requested(job.id).unwrap_or(false);
    match (status.code(), status.signal()) {
        (Some(code), _) => {
            let outcome = Outcome::of_exit_code(code);
            let error = (outcome.state() != sts_client::State::Succeeded).then(|| last.clone());
            let summary = jobs::summarize(&shared.data, job.id, job.kind, outcome);
            Ending { outcome, exit_code: Some(code), error, summary, progress }
        }
        (None, _) if cancelled => Ending {
            outcome: Outcome::Cancelled,
            exit_code: None,
            error: Some("cancelled while it ran".into()),
            summary: None,
            progress,
        },
        (None, signal) => Ending {
            outcome: Outcome::Killed,
            exit_code: None,
            error: Some(format!("the job's process was killed by signal {}", signal.unwrap_or(0))),
            summary: None,
            progress,
        },
    }
}

/// The Slurm job name of job `id` (what a cancel and a restart cancel by).
pub fn slurm_job_name(id: i64) -> String {
    format!("sts-job-{id}")
}

/// Cancels the Slurm job of job `id`, if it has one.
pub fn cancel_slurm_job(id: i64) {
    let _ = Command::new("scancel")
        .arg(format!("--name={}", slurm_job_name(id)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Copies one output stream of a job into its log, line by line, keeping
/// the latest progress and the last line a person would read.
fn copy_output(
    stream: Box<dyn std::io::Read + Send>,
    log: &Mutex<std::fs::File>,
    last_line: &Mutex<String>,
    shared: &Shared,
    id: i64,
) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
        let _ = log.lock().unwrap_or_else(|e| e.into_inner()).write_all(&buf);
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end();
        if line.starts_with("{\"progress\":") {
            if let Ok(mut v) = serde_json::from_str::<serde_json::Value>(line) {
                let p = v["progress"].take();
                if let Some(l) = shared.live().get_mut(&id) {
                    l.progress = Some(p);
                }
            }
        } else if !line.is_empty() && !line.starts_with('{') {
            *last_line.lock().unwrap_or_else(|e| e.into_inner()) = line.chars().take(2000).collect();
        }
        buf.clear();
    }
}
