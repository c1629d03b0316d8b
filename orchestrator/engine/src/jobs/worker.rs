//! `sts worker`: a long-lived sts that runs work handed to it one piece at a
//! time, keeping its controller snapshots (zygotes) warm between pieces.
//!
//! On a cluster, each task of an allocation runs one worker as one job step
//! for the whole minimization or campaign ([`crate::pool`] is the other
//! end). The protocol is JSON lines over the worker's standard input and
//! output, which `srun` relays (0.2–0.3 ms a round trip on one node):
//!
//! ```text
//! -> {"id":1,"do":"warm","experiment":"/x/exp"}
//! <- {"id":1,"warmed":{"zygotes":1},"busy_ms":870.2}
//! -> {"id":2,"do":"candidate","experiment":"/x/exp","same":"culprit","trace":"/x/exp/mcs/candidates/5.jsonl","first_run":5,"replays":1,"peek":"off"}
//! <- {"notice":{"kind":"info","message":"..."}}
//! <- {"id":2,"verdict":{"reproduced":true,"replays":1},"busy_ms":84.0}
//! ```
//!
//! One request at a time; each gets exactly one answer line with its `id`;
//! notices may come between. Files (the experiment, candidate traces, run
//! directories) are named by path, so they must be on storage the nodes
//! share. The worker ends when its input closes, and its zygotes with it.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sts_invariants::{Same, Violation};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::config::Config;
use crate::fuzz::SeedRun;
use crate::minimize::{CandidateRun, PeekMode, Verdict};
use crate::{Engine, Notice, Observer, RunError};

/// One piece of work, as the coordinator sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    #[serde(flatten)]
    pub work: Work,
}

/// What a worker can be asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum Work {
    /// Load the experiment and start its controllers' zygotes, so that the
    /// first real piece of work forks them warm.
    Warm { experiment: PathBuf },
    /// Test one minimization candidate ([`crate::minimize::reproduces`]),
    /// from the worker's warm place unless `warm` is false.
    Candidate {
        experiment: PathBuf,
        same: Same,
        trace: PathBuf,
        first_run: u32,
        replays: u32,
        peek: String,
        #[serde(default = "yes")]
        warm: bool,
    },
    /// Replay a trace once into `out` (a minimization's final replays).
    Replay { experiment: PathBuf, same: Same, trace: PathBuf, out: PathBuf, run: u32 },
    /// Fuzz `text` (the config at `config`, with `seed` in it, as the
    /// coordinator checked it; files it names are found next to `config`)
    /// into `out` (a campaign's seed).
    Fuzz { config: PathBuf, text: String, seed: u64, out: PathBuf },
}

/// A worker's answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Warmed {
        zygotes: usize,
    },
    Verdict {
        reproduced: bool,
        replays: u64,
    },
    Replayed {
        reproduced: bool,
        violation: Option<Violation>,
    },
    Fuzzed(SeedRun),
    /// The work could not be done; `bad_input` as [`RunError::is_bad_input`].
    Failed {
        error: String,
        bad_input: bool,
    },
}

impl Answer {
    fn failed(e: &RunError) -> Answer {
        Answer::Failed { error: e.to_string(), bad_input: e.is_bad_input() }
    }

    /// The error this answer carries, if it is a failure.
    pub fn error(&self) -> Option<RunError> {
        match self {
            Answer::Failed { error, bad_input: true } => Some(RunError::BadInput(error.clone())),
            Answer::Failed { error, bad_input: false } => Some(RunError::Environment(error.clone())),
            _ => None,
        }
    }

    /// The minimization verdict this answer gives (a failure is an error;
    /// any other answer is a protocol error).
    pub fn verdict(self) -> Verdict {
        match self {
            Answer::Verdict { reproduced, replays } => Ok((reproduced, replays)),
            other => Err(other.error().unwrap_or_else(|| unexpected(&other, "a verdict"))),
        }
    }
}

/// The error for an answer of the wrong kind.
pub fn unexpected(answer: &Answer, wanted: &str) -> RunError {
    RunError::Environment(format!("a worker answered {answer:?} where {wanted} was due"))
}

/// A line a worker writes: an answer, or a notice on the way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Line {
    Answer {
        id: u64,
        #[serde(flatten)]
        answer: Answer,
        /// Time spent on the work, in milliseconds (the pool's utilization).
        busy_ms: f64,
    },
    Notice {
        notice: Notice,
    },
}

/// Where a worker's lines go (its standard output), one whole line at a
/// time whoever writes it.
type Output = Arc<Mutex<Box<dyn Write + Send>>>;

fn write_line(out: &Output, line: &Line) {
    let text = serde_json::to_string(line).expect("lines serialize");
    let mut w = out.lock().unwrap_or_else(|e| e.into_inner());
    // A coordinator that went away closes this pipe: nothing to tell it.
    let _ = writeln!(w, "{text}").and_then(|()| w.flush());
}

/// Passes a job's notices on to the coordinator.
struct Relay(Output);

impl Observer for Relay {
    fn notice(&self, notice: &Notice) {
        write_line(&self.0, &Line::Notice { notice: notice.clone() });
    }
}

/// Serves requests read from `input` until it ends, answering on `output`;
/// every job runs on one engine, so zygotes stay warm between them.
pub async fn serve(input: impl AsyncBufRead + Unpin, output: Box<dyn Write + Send>) -> Result<(), RunError> {
    let output: Output = Arc::new(Mutex::new(output));
    let engine = Engine::new(Arc::new(Relay(output.clone())));
    let mut configs: HashMap<PathBuf, Config> = HashMap::new();
    // Per experiment: candidates go on from a checkpoint after the handshakes.
    let mut places: HashMap<PathBuf, crate::warm::Places> = HashMap::new();
    let mut lines = input.lines();
    while let Some(line) =
        lines.next_line().await.map_err(|e| RunError::Environment(format!("the worker's input: {e}")))?
    {
        if line.trim().is_empty() {
            continue;
        }
        let request: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                // Without an id nobody waits for this answer; say it anyway.
                let id = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64))
                    .unwrap_or(0);
                let answer =
                    Answer::Failed { error: format!("a request the worker cannot read: {e}"), bad_input: true };
                write_line(&output, &Line::Answer { id, answer, busy_ms: 0.0 });
                continue;
            }
        };
        let started = std::time::Instant::now();
        let answer = match perform(&engine, &mut configs, &mut places, request.work).await {
            Ok(a) => a,
            Err(e) => Answer::failed(&e),
        };
        let busy_ms = started.elapsed().as_secs_f64() * 1000.0;
        write_line(&output, &Line::Answer { id: request.id, answer, busy_ms });
    }
    Ok(())
}

/// Serde's default for flags that are on unless said otherwise.
fn yes() -> bool {
    true
}

/// The experiment's config, loaded (with its trace checked) once per
/// worker, judging by `same` when given (the coordinator gives it with every
/// run; a warm-up judges nothing).
fn config<'c>(
    configs: &'c mut HashMap<PathBuf, Config>,
    experiment: &Path,
    same: Option<Same>,
) -> Result<&'c Config, RunError> {
    if !configs.contains_key(experiment) {
        let (_, config, _) = crate::replay::load(experiment, None)?;
        configs.insert(experiment.to_path_buf(), config);
    }
    let config = configs.get_mut(experiment).expect("just loaded");
    if let Some(same) = same {
        config.invariants.same = same;
    }
    Ok(config)
}

async fn perform(
    engine: &Engine,
    configs: &mut HashMap<PathBuf, Config>,
    places: &mut HashMap<PathBuf, crate::warm::Places>,
    work: Work,
) -> Result<Answer, RunError> {
    let load_trace = |path: &Path| sts_trace::Trace::load(path).map_err(|e| RunError::BadInput(e.to_string()));
    Ok(match work {
        Work::Warm { experiment } => {
            let config = config(configs, &experiment, None)?;
            Answer::Warmed { zygotes: warm(engine, config, &experiment).await? }
        }
        Work::Candidate { experiment, same, trace, first_run, replays, peek, warm } => {
            let config = config(configs, &experiment, Some(same))?;
            let peek = PeekMode::from_name(&peek).ok_or_else(|| {
                RunError::BadInput(format!("{peek:?} is no PEEK mode (off, on, prefix, checkpoints)"))
            })?;
            let run = CandidateRun {
                trace: load_trace(&trace)?,
                mcs_dir: experiment.join("mcs"),
                first_run,
                replays,
                peek,
                warm,
                in_round: None,
            };
            // One place per worker (it does one thing at a time), its logs
            // beside the other workers' on the shared storage.
            let place = warm.then(|| {
                &*places.entry(experiment.clone()).or_insert_with(|| {
                    let dir = experiment.join("mcs").join("runs").join(format!("worker-{}", std::process::id()));
                    crate::warm::Places::new(dir)
                })
            });
            let (reproduced, replays) = crate::minimize::reproduces_on(engine, config, run, place).await?;
            Answer::Verdict { reproduced, replays }
        }
        Work::Replay { experiment, same, trace, out, run } => {
            let config = config(configs, &experiment, Some(same))?;
            let r = crate::replay::replay_once(engine, config, &load_trace(&trace)?, &out, run).await?;
            Answer::Replayed { reproduced: r.reproduced, violation: r.violation }
        }
        Work::Fuzz { config, text, seed, out } => {
            let parsed = Config::from_toml(&text, &config).map_err(|e| RunError::BadInput(e.to_string()))?;
            Answer::Fuzzed(crate::fuzz::seed_run(engine, seed, &parsed, &text, &out).await)
        }
    })
}

/// Starts the zygotes of `config`'s controllers that runs would fork from
/// (those whose command does not depend on the run's directory); returns
/// how many this engine holds.
async fn warm(engine: &Engine, config: &Config, experiment: &Path) -> Result<usize, RunError> {
    // Files the zygotes keep open; the directory goes when the warm-up ends.
    let scratch = experiment.join("mcs").join("warm").join(std::process::id().to_string());
    crate::own_dir(&scratch)?;
    let _gone = RemoveDirOnDrop(scratch.clone());
    let specs = crate::presets::specs(config, &scratch)
        .map_err(|e| RunError::Environment(format!("cannot write controller files: {e}")))?;
    let here = scratch.display().to_string();
    for (i, spec) in specs.into_iter().enumerate() {
        let c = &config.controllers[i];
        let depends_on_run = spec.command.iter().chain(spec.env.iter().map(|(_, v)| v)).any(|a| a.contains(&here))
            || spec.command.iter().any(|a| a.contains("{relay:"));
        if !c.snapshot() || depends_on_run {
            continue;
        }
        let (eng, log) = (engine.clone(), scratch.join(format!("controller-{i}-{}.log", spec.name)));
        let warmed = tokio::task::spawn_blocking(move || crate::snapshot::warm(&eng, &spec, &log))
            .await
            .map_err(|e| RunError::Environment(e.to_string()))?;
        if let Err(e) = warmed {
            // The first run starts it (or says why it cannot) as it would have.
            tracing::info!("warm-up of controller {i}: {e}");
        }
    }
    Ok(engine.zygotes().len())
}

struct RemoveDirOnDrop(PathBuf);

impl Drop for RemoveDirOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // The parent too, once no other worker warms in it.
        if let Some(parent) = self.0.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_read_back_as_they_were_written() {
        let works = [
            Work::Warm { experiment: "/x".into() },
            Work::Candidate {
                experiment: "/x".into(),
                same: Same::Culprit,
                trace: "/x/mcs/candidates/3.jsonl".into(),
                first_run: 3,
                replays: 2,
                peek: "checkpoints".into(),
                warm: false,
            },
            Work::Replay { experiment: "/x".into(), same: Same::Switch, trace: "/t".into(), out: "/o".into(), run: 1 },
            Work::Fuzz { config: "/c.toml".into(), text: "[fuzz]\nseed = 7\n".into(), seed: 7, out: "/o/7".into() },
        ];
        for (id, work) in works.into_iter().enumerate() {
            let r = Request { id: id as u64, work };
            let text = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r, "{text}");
        }
        let lines = [
            Line::Answer { id: 4, answer: Answer::Verdict { reproduced: true, replays: 2 }, busy_ms: 1.5 },
            Line::Answer { id: 5, answer: Answer::Warmed { zygotes: 1 }, busy_ms: 800.0 },
            Line::Answer { id: 6, answer: Answer::Replayed { reproduced: false, violation: None }, busy_ms: 3.0 },
            Line::Answer { id: 7, answer: Answer::Failed { error: "gone".into(), bad_input: false }, busy_ms: 0.0 },
            Line::Notice { notice: Notice { kind: crate::NoticeKind::Info, message: "hi".into() } },
        ];
        for line in lines {
            let text = serde_json::to_string(&line).unwrap();
            assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), line, "{text}");
        }
    }

    #[test]
    fn a_failure_keeps_whether_the_input_was_bad() {
        for e in [RunError::BadInput("bad".into()), RunError::Environment("gone".into())] {
            let back = Answer::failed(&e).verdict().unwrap_err();
            assert_eq!(format!("{back:?}"), format!("{e:?}"));
        }
        assert!(Answer::Warmed { zygotes: 0 }.verdict().is_err());
    }

    #[tokio::test]
    async fn a_request_it_cannot_read_is_answered_with_its_id_and_the_worker_goes_on() {
        let input = b"{\"id\":9,\"do\":\"dance\"}\n\n{\"id\":10,\"do\":\"warm\",\"experiment\":\"/nonexistent/sts\"}\n";
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().write(b)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        serve(&input[..], Box::new(Shared(out.clone()))).await.unwrap();
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let answers: Vec<Line> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(answers.len(), 2, "{text}");
        assert!(matches!(&answers[0], Line::Answer { id: 9, answer: Answer::Failed { bad_input: true, .. }, .. }));
        match &answers[1] {
            Line::Answer { id: 10, answer: Answer::Failed { error, .. }, .. } => {
                assert!(error.contains("/nonexistent/sts"), "{error}")
            }
            other => panic!("{other:?}"),
        }
    }
}
