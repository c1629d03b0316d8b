//! A pool of warm workers ([`crate::worker`]): long-lived `sts worker`
//! processes, started once (on Slurm, one job step per task of the
//! allocation) and handed candidates, final replays and campaign seeds one
//! at a time, so that each piece of work forks warm controllers instead of
//! starting them cold.
//!
//! - Work goes to whichever worker is idle; answers come back to the piece
//!   that asked, so a batch's verdicts keep the batch's order (delta
//!   debugging takes the first success in that order: the MCS is the one the
//!   local executor finds).
//! - A worker that ends without answering (its step cancelled, its process
//!   killed, its node lost) is replaced by a new one, and the piece it held is
//!   given to the next idle worker; a piece lost twice is an error naming
//!   both causes. A worker that cannot be replaced leaves a dead slot that
//!   answers every piece with why, so nothing waits forever.
//! - The pool measures itself ([`PoolStats`]): how much of the workers' time
//!   went into work, and what each piece cost beyond the work.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use serde::Serialize;
use sts_trace::Trace;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::minimize::{CandidateRun, Executor, RemoveOnDrop, Replayed, Verdict};
use crate::worker::{Answer, Line, Request, Work};
use crate::{Engine, RunError};

/// How to start worker number `n`: a command whose standard input and
/// output are the worker's (`sts worker`, or `srun ... sts worker`).
pub type Launch = Box<dyn Fn(usize) -> tokio::process::Command + Send + Sync>;

/// Lines of a worker's standard error kept to explain its loss.
const TAIL_LINES: usize = 5;

struct Worker {
    n: usize,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

/// A place in the pool: a worker, or why there is none any more.
enum Slot {
    Live(Box<Worker>),
    Dead(String),
}

/// What the pool measured of itself.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PoolStats {
    pub workers: usize,
    /// Pieces of work answered.
    pub answered: u64,
    /// Workers lost and replaced.
    pub lost: u64,
    /// Seconds the workers spent on work, all together (warm-ups apart).
    pub busy_s: f64,
    /// Seconds from the first piece handed out to the last answer, less
    /// the warm-up, times the workers: the time they could have worked.
    pub worker_s: f64,
    /// Per piece, milliseconds between handing it out and its answer, less
    /// the worker's own time on it: the median and the largest.
    pub overhead_ms_median: f64,
    pub overhead_ms_max: f64,
    /// The worker's own milliseconds on a piece, the median.
    pub work_ms_median: f64,
    /// The longest warm-up (a worker's zygotes started), in seconds.
    pub warmup_s: f64,
}

impl PoolStats {
    /// The fraction of the workers' time spent working, not waiting for
    /// work, once work began.
    pub fn utilization(&self) -> f64 {
        if self.worker_s > 0.0 {
            self.busy_s / self.worker_s
        } else {
            0.0
        }
    }

    /// One line for a person.
    pub fn describe(&self) -> String {
        format!(
            "{} workers busy {:.0}% of their time ({:.1} of {:.1} worker-seconds), {} pieces of work \
             ({:.1} ms each, median), median overhead {:.1} ms a piece (max {:.1}), warm-up {:.2} s{}",
            self.workers,
            self.utilization() * 100.0,
            self.busy_s,
            self.worker_s,
            self.answered,
            self.work_ms_median,
            self.overhead_ms_median,
            self.overhead_ms_max,
            self.warmup_s,
            match self.lost {
                0 => String::new(),
                1 => ", 1 worker lost and replaced".to_string(),
                n => format!(", {n} workers lost and replaced"),
            }
        )
    }
}

#[derive(Default)]
struct Measured {
    answered: u64,
    lost: u64,
    busy_ms: f64,
    /// When the first piece was handed out, and the last answer came.
    first_asked: Option<Instant>,
    last_answer: Option<Instant>,
    overheads_ms: Vec<f64>,
    work_ms: Vec<f64>,
    warmup_ms: f64,
}

/// Warm workers, handed work one piece at a time each.
pub struct Pool {
    launch: Launch,
    size: usize,
    /// What every new worker warms up on first.
    warm: Option<PathBuf>,
    idle_tx: mpsc::UnboundedSender<Slot>,
    idle_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Slot>>,
    next_id: AtomicU64,
    measured: Mutex<Measured>,
    /// Info notices passed on so far: K workers say the same thing K times.
    said: Mutex<BTreeSet<String>>,
}

impl Pool {
    /// Starts `size` workers with `launch`; each warms up on `warm` (an
    /// experiment directory) before its first piece of work, all at once.
    /// Must be called within a tokio runtime.
    pub async fn start(launch: Launch, size: usize, warm: Option<&Path>) -> Result<Pool, RunError> {
        let (idle_tx, idle_rx) = mpsc::unbounded_channel();
        let pool = Pool {
            launch,
            size: size.max(1),
            warm: warm.map(whole).transpose()?,
            idle_tx,
            idle_rx: tokio::sync::Mutex::new(idle_rx),
            next_id: AtomicU64::new(1),
            measured: Mutex::new(Measured::default()),
            said: Mutex::new(BTreeSet::new()),
        };
        for n in 0..pool.size {
            let w = pool.spawn(n).await?;
            let _ = pool.idle_tx.send(Slot::Live(Box::new(w)));
        }
        Ok(pool)
    }

    /// Workers in the pool.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Starts worker `n` and hands it the warm-up (answered before its
    /// first piece of work; nobody waits for it now).
    async fn spawn(&self, n: usize) -> Result<Worker, RunError> {
        let mut cmd = (self.launch)(n);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| RunError::Environment(format!("cannot start worker {n}: {e}")))?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(RunError::Environment(format!("worker {n}: no pipes")));
        };
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let keep = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!("worker {n}: {line}");
                let mut t = keep.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        if let Some(experiment) = &self.warm {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let line = request_line(id, &Work::Warm { experiment: experiment.clone() });
            // Written before the worker reads: the pipe holds it.
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            if let Err(e) = stdin.write_all(&bytes).await {
                return Err(RunError::Environment(format!("worker {n}: {e}")));
            }
        }
        Ok(Worker { n, child, stdin, lines: BufReader::new(stdout).lines(), tail })
    }

    /// Has `work` done by the next idle worker; a worker lost on the way is
    /// replaced and the work handed on once.
    pub async fn ask(&self, engine: &Engine, work: Work) -> Result<Answer, RunError> {
        let mut lost = Vec::new();
        while lost.len() < 2 {
            let slot = self.idle_rx.lock().await.recv().await;
            let mut w = match slot {
                Some(Slot::Live(w)) => w,
                Some(Slot::Dead(why)) => {
                    let _ = self.idle_tx.send(Slot::Dead(why.clone()));
                    return Err(RunError::Environment(why));
                }
                None => return Err(RunError::Environment("the worker pool is closed".into())),
            };
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let asked = Instant::now();
            self.measured.lock().unwrap_or_else(|e| e.into_inner()).first_asked.get_or_insert(asked);
            match self.exchange(engine, &mut w, id, &work).await {
                Ok((answer, busy_ms, before_ms)) => {
                    let mut m = self.measured.lock().unwrap_or_else(|e| e.into_inner());
                    m.answered += 1;
                    m.busy_ms += busy_ms;
                    m.last_answer = Some(Instant::now());
                    m.overheads_ms.push((asked.elapsed().as_secs_f64() * 1000.0 - busy_ms - before_ms).max(0.0));
                    m.work_ms.push(busy_ms);
                    m.warmup_ms = m.warmup_ms.max(before_ms);
                    drop(m);
                    let _ = self.idle_tx.send(Slot::Live(w));
                    return Ok(answer);
                }
                Err(why) => {
                    let said = w.tail.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect::<Vec<_>>();
                    let why = format!(
                        "worker {} {why}{}",
                        w.n,
                        if said.is_empty() { String::new() } else { format!(" (it said: {})", said.join(" / ")) }
                    );
                    engine.notice(crate::NoticeKind::Info, format!("{why}; starting another, the work goes on"));
                    self.measured.lock().unwrap_or_else(|e| e.into_inner()).lost += 1;
                    let n = w.n;
                    let _ = w.child.start_kill();
                    let _ = w.child.wait().await;
                    let slot = match self.spawn(n).await {
                        Ok(fresh) => Slot::Live(Box::new(fresh)),
                        Err(e) => Slot::Dead(format!("{why}, and no other could start: {e}")),
                    };
                    let _ = self.idle_tx.send(slot);
                    lost.push(why);
                }
            }
        }
        Err(RunError::Environment(format!("the work was lost twice: {}", lost.join("; then "))))
    }

    /// Sends one request and reads up to its answer: (answer, the
    /// worker's milliseconds on it, its milliseconds on the work it
    /// finished before: the warm-up), or how the worker was lost.
    async fn exchange(
        &self,
        engine: &Engine,
        w: &mut Worker,
        id: u64,
        work: &Work,
    ) -> Result<(Answer, f64, f64), String> {
        let mut bytes = request_line(id, work).into_bytes();
        bytes.push(b'\n');
        w.stdin.write_all(&bytes).await.map_err(|e| format!("did not take the work ({e})"))?;
        w.stdin.flush().await.map_err(|e| format!("did not take the work ({e})"))?;
        let mut before_ms = 0.0;
        loop {
            let line = match w.lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => {
                    let status = w.child.wait().await.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                    return Err(format!("ended without an answer ({status})"));
                }
                Err(e) => return Err(format!("could not be read ({e})")),
            };
            match serde_json::from_str::<Line>(&line) {
                Ok(Line::Answer { id: got, answer, busy_ms }) if got == id => return Ok((answer, busy_ms, before_ms)),
                // The warm-up's answer: work done too, nobody waited on it.
                Ok(Line::Answer { busy_ms, .. }) => before_ms += busy_ms,
                // Every kind but Info is said once per engine: once for the pool too.
                Ok(Line::Notice { notice }) if notice.kind != crate::NoticeKind::Info => {
                    engine.notice_once(notice.kind, notice.message)
                }
                Ok(Line::Notice { notice }) => {
                    let first = self.said.lock().unwrap_or_else(|e| e.into_inner()).insert(notice.message.clone());
                    if first {
                        engine.notice(notice.kind, notice.message);
                    }
                }
                // Not the protocol (a library printing on stdout): not ours to read.
                Err(_) => tracing::debug!("worker {}: {line}", w.n),
            }
        }
    }

    /// What the pool measured so far.
    pub fn stats(&self) -> PoolStats {
        let m = self.measured.lock().unwrap_or_else(|e| e.into_inner());
        let sorted = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v
        };
        let (o, work) = (sorted(&m.overheads_ms), sorted(&m.work_ms));
        PoolStats {
            workers: self.size,
            answered: m.answered,
            lost: m.lost,
            busy_s: m.busy_ms / 1000.0,
            // The warm-ups (all at once, at the start) are not time to work.
            worker_s: match (m.first_asked, m.last_answer) {
                (Some(a), Some(b)) => {
                    (b.saturating_duration_since(a).as_secs_f64() - m.warmup_ms / 1000.0).max(0.0) * self.size as f64
                }
                _ => 0.0,
            },
            overhead_ms_median: o.get(o.len() / 2).copied().unwrap_or(0.0),
            overhead_ms_max: o.last().copied().unwrap_or(0.0),
            work_ms_median: work.get(work.len() / 2).copied().unwrap_or(0.0),
            warmup_s: m.warmup_ms / 1000.0,
        }
    }

    /// Tests one candidate on a worker.
    async fn candidate(&self, engine: &Engine, config: &Config, c: CandidateRun) -> Verdict {
        let experiment = experiment_of(&c.mcs_dir)?;
        let trace = saved(&c.mcs_dir, &c.trace, &c.first_run.to_string())?;
        let work = Work::Candidate {
            experiment,
            same: config.invariants.same,
            trace: trace.0.clone(),
            first_run: c.first_run,
            replays: c.replays,
            peek: c.peek.name().to_string(),
            warm: c.warm,
        };
        self.ask(engine, work).await?.verdict()
    }

    /// Fuzzes `text` (the config at `config` with `seed` in it) into `out`
    /// on a worker.
    pub async fn fuzz(
        &self,
        engine: &Engine,
        config: &Path,
        text: &str,
        seed: u64,
        out: &Path,
    ) -> Result<crate::fuzz::SeedRun, RunError> {
        let work = Work::Fuzz { config: whole(config)?, text: text.to_string(), seed, out: whole(out)? };
        match self.ask(engine, work).await? {
            Answer::Fuzzed(run) => Ok(run),
            other => Err(other.error().unwrap_or_else(|| crate::worker::unexpected(&other, "a fuzz run"))),
        }
    }
}

/// A request as the line a worker reads.
fn request_line(id: u64, work: &Work) -> String {
    serde_json::to_string(&Request { id, work: work.clone() }).expect("requests serialize")
}

/// The experiment directory of a minimization's `mcs/`, whole (a worker
/// may start elsewhere).
fn experiment_of(mcs_dir: &Path) -> Result<PathBuf, RunError> {
    let dir = mcs_dir
        .parent()
        .ok_or_else(|| RunError::Environment(format!("{}: a minimization outside an experiment", mcs_dir.display())))?;
    whole(dir)
}

/// `path` from the root.
fn whole(path: &Path) -> Result<PathBuf, RunError> {
    std::path::absolute(path).map_err(|e| RunError::Environment(format!("{}: {e}", path.display())))
}

/// `trace` saved as `mcs/candidates/NAME.jsonl` for a worker to read,
/// removed when the guard is dropped.
fn saved(mcs_dir: &Path, trace: &Trace, name: &str) -> Result<RemoveOnDrop, RunError> {
    let dir = mcs_dir.join("candidates");
    std::fs::create_dir_all(&dir).map_err(|e| RunError::Environment(format!("{}: {e}", dir.display())))?;
    let path = whole(&dir.join(format!("{name}.jsonl")))?;
    // As it is, numbers included: the worker replays exactly this trace.
    trace.save(&path).map_err(|e| RunError::Environment(format!("{}: {e}", path.display())))?;
    Ok(RemoveOnDrop(path))
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing a worker's input ends it (and its zygotes); a worker still
        // busy is killed with its launcher (kill_on_drop).
        let Ok(mut idle) = self.idle_rx.try_lock() else { return };
        idle.close();
        let mut children = Vec::new();
        while let Ok(slot) = idle.try_recv() {
            if let Slot::Live(w) = slot {
                drop(w.stdin);
                children.push(w.child);
            }
        }
        // A moment for them to stop their controllers themselves.
        let deadline = Instant::now() + std::time::Duration::from_secs(2);
        while Instant::now() < deadline && children.iter_mut().any(|c| matches!(c.try_wait(), Ok(None))) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

impl Executor for Pool {
    fn test<'a>(
        &'a self,
        engine: &'a Engine,
        config: &'a Config,
        batch: Vec<CandidateRun>,
    ) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(futures::future::join_all(batch.into_iter().map(move |c| self.candidate(engine, config, c))))
    }

    fn replay<'a>(
        &'a self,
        engine: &'a Engine,
        config: &'a Config,
        trace: &'a Trace,
        out: PathBuf,
        run: u32,
    ) -> BoxFuture<'a, Result<Replayed, RunError>> {
        Box::pin(async move {
            let mcs_dir = out.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
            let experiment = experiment_of(&mcs_dir)?;
            let file = saved(&mcs_dir, trace, &format!("final-{run}"))?;
            let out = whole(&out)?;
            let work = Work::Replay { experiment, same: config.invariants.same, trace: file.0.clone(), out, run };
            match self.ask(engine, work).await? {
                Answer::Replayed { reproduced, violation } => Ok(Replayed { reproduced, violation }),
                other => Err(other.error().unwrap_or_else(|| crate::worker::unexpected(&other, "a replay"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A worker in sh that answers every request with a verdict carrying
    /// its own id (enough of the protocol for the pool).
    const ANSWERS: &str = r#"while read -r l; do id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/'); printf '{"id":%s,"verdict":{"reproduced":true,"replays":1},"busy_ms":1.0}\n' "$id"; done"#;

    fn sh(script: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    fn work() -> Work {
        Work::Fuzz { config: "/c.toml".into(), text: String::new(), seed: 1, out: "/o".into() }
    }

    #[tokio::test]
    async fn a_lost_worker_is_replaced_and_its_work_handed_on() {
        let started = Arc::new(AtomicUsize::new(0));
        let count = started.clone();
        // The first worker dies on its first piece; the ones after answer.
        let launch: Launch = Box::new(move |_| match count.fetch_add(1, Ordering::SeqCst) {
            0 => sh("echo 'out of memory' >&2; read -r l; exit 3"),
            _ => sh(ANSWERS),
        });
        let pool = Pool::start(launch, 1, None).await.unwrap();
        let engine = Engine::new(Arc::new(crate::observer::Collect::default()));
        let answer = pool.ask(&engine, work()).await.unwrap();
        assert_eq!(answer, Answer::Verdict { reproduced: true, replays: 1 });
        assert_eq!(started.load(Ordering::SeqCst), 2, "one worker in place of the lost one");
        let stats = pool.stats();
        assert_eq!((stats.answered, stats.lost), (1, 1));
        // And it keeps answering.
        assert!(pool.ask(&engine, work()).await.is_ok());
    }

    #[tokio::test]
    async fn work_lost_twice_or_with_no_worker_left_is_an_error_not_a_wait() {
        // Every worker dies: the piece is lost twice and says both times why.
        let launch: Launch = Box::new(|_| sh("echo 'cannot map the clock' >&2; read -r l; exit 3"));
        let pool = Pool::start(launch, 2, None).await.unwrap();
        let engine = Engine::silent();
        let e = pool.ask(&engine, work()).await.unwrap_err().to_string();
        assert!(e.contains("lost twice") && e.contains("cannot map the clock"), "{e}");
        // No worker can start again: every piece, at once or later, is answered with why.
        let tries = Arc::new(AtomicUsize::new(0));
        let count = tries.clone();
        let launch: Launch = Box::new(move |_| match count.fetch_add(1, Ordering::SeqCst) {
            0 => sh("read -r l; exit 3"),
            _ => tokio::process::Command::new("/nonexistent/sts-worker"),
        });
        let pool = Pool::start(launch, 1, None).await.unwrap();
        let both = futures::future::join(pool.ask(&engine, work()), pool.ask(&engine, work())).await;
        for r in [both.0, both.1] {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("no other could start"), "{e}");
        }
    }
}
