//! Warm places: a minimization's candidate replays start from a checkpoint
//! taken once the controllers have finished their handshakes, instead of
//! forking new copies and handshaking again every time.
//!
//! A fresh replay spends 10–20 ms bringing its controllers up and letting
//! every switch complete its OpenFlow handshake: a third of a short
//! candidate's replay, the same work each time. A [`Places`] keeps one live
//! run per place (a minimization's `--jobs`): the first replay on a place
//! starts a session as [`Replayer::start`] does, then, before its first
//! input, checkpoints every controller (`crate::checkpoint`) and takes the
//! network's state and what the run saw so far (the handshakes' messages,
//! the controllers' first log lines: the *prologue*). Every later replay on
//! that place rolls the run back to that point ([`crate::peek::roll_back`]:
//! the copies killed, new ones forked from the holders, each switch handed a
//! fresh connection to the same descriptor, time set back) and goes on from
//! there with the prologue recorded first, so its trace reads as a fresh
//! replay's would.
//!
//! What a replay on a warm place cannot see is a different handshake: every
//! candidate of one place starts from the same post-handshake state (a fresh
//! replay forks from the same zygote and, on virtual time, handshakes the
//! same way). The MCS's final replays stay fresh, so its reproduction rate
//! is measured as `sts replay` will see it.
//!
//! Where checkpoints are refused (real time, a controller not forked from a
//! snapshot, a threaded controller), the first place says why in the log
//! and every replay is fresh, as before.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use sts_trace::Trace;

use crate::checkpoint::Checkpoint;
use crate::config::Config;
use crate::monitor::{drain, Drained};
use crate::peek::{checkpoint_all, roll_back, PeekError, Restart};
use crate::replay::{replay_config, replay_unless, run_through, CallOff, ReplayResult, Replayer};
use crate::session::{self, RunError, Session, SessionState};
use crate::Engine;

/// The warm places of one minimization (one experiment, one config).
pub struct Places {
    /// Where the places' controller logs go (one directory per place).
    dir: PathBuf,
    /// Places not replaying now, ready to be rolled back.
    idle: Mutex<Vec<Place>>,
    /// Why checkpoints cannot be used for this experiment, once known: every
    /// replay is then fresh.
    refused: Mutex<Option<String>>,
    /// Places made so far (names their directories).
    made: AtomicU32,
    /// Replays that started from a rollback.
    resumed: AtomicU64,
}

/// What the warm places did, for the minimization's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Live runs kept (one per place a round used at once).
    pub places: u32,
    /// Replays that started from a place's checkpoint instead of fresh
    /// controllers.
    pub resumed: u64,
    /// Why every replay was fresh instead, when checkpoints were refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_because: Option<String>,
}

/// One live run and the point every replay on it starts from.
struct Place {
    session: Session,
    /// Where the run stood at the checkpoint (network, connections, time).
    base: SessionState,
    /// What the run saw before the checkpoint.
    prologue: Drained,
    /// The label of the copies running now, resumed from the checkpoint
    /// (their logs go at the next rollback).
    running: Option<String>,
    /// Dropped after the session: the holders outlive the copies they forked.
    checkpoints: Vec<Checkpoint>,
}

impl Places {
    /// Warm places whose controller logs go under `dir` (removed when the
    /// places are dropped).
    pub fn new(dir: PathBuf) -> Places {
        Places {
            dir,
            idle: Mutex::new(Vec::new()),
            refused: Mutex::new(None),
            made: AtomicU32::new(0),
            resumed: AtomicU64::new(0),
        }
    }

    /// What the places did so far.
    pub fn summary(&self) -> Summary {
        Summary {
            places: self.made.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            fresh_because: self.refused.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// Replays `trace` once into `out` (run number `run`), on a warm place
    /// when one can be had: [`replay_unless`]'s result either way.
    pub async fn replay(
        &self,
        engine: &Engine,
        config: &Config,
        trace: &Trace,
        out: &Path,
        run: u32,
        call_off: Option<CallOff>,
    ) -> Result<Option<ReplayResult>, RunError> {
        if self.refused.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            return replay_unless(engine, config, trace, out, run, call_off).await;
        }
        let config = replay_config(config, trace);
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let place = match idle {
            Some(mut place) => match self.roll_back(&mut place, &format!("run{run}")).await {
                Ok(()) => {
                    self.resumed.fetch_add(1, Ordering::Relaxed);
                    place
                }
                // A place that cannot be rolled back is dropped; this replay is fresh.
                Err(why) => {
                    tracing::info!("a warm place could not be rolled back ({why}); replaying fresh");
                    drop(place);
                    return replay_unless(engine, &config, trace, out, run, call_off).await;
                }
            },
            None => match self.open(engine, &config).await? {
                Ok(place) => place,
                // Refused: this session goes on as a fresh replay's would.
                Err(Some(session)) => {
                    let replayer = Replayer::on_session(config, trace, session, None, out, run)?;
                    return run_through(replayer, call_off).await.map(|(result, _)| result);
                }
                Err(None) => return replay_unless(engine, &config, trace, out, run, call_off).await,
            },
        };
        let Place { session, base, prologue, running, checkpoints } = place;
        let replayer = Replayer::on_session(config, trace, session, Some(prologue.clone()), out, run)?;
        let (result, session) = run_through(replayer, call_off).await?;
        self.put_back(Place { session, base, prologue, running, checkpoints });
        Ok(result)
    }

    /// A new place: a session started as a replay's, checkpointed before
    /// any input. When checkpoints are refused, says why once (in the log)
    /// and gives the session back for a fresh replay.
    async fn open(&self, engine: &Engine, config: &Config) -> Result<Result<Place, Option<Session>>, RunError> {
        let k = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        let mut session = session::start(engine, config, &self.dir.join(format!("warm-{k}"))).await?;
        let checkpointed = if !config.relays.is_empty() {
            Err("the config has relays, whose connections are not checkpointed".to_string())
        } else if session.runner.clock.virtual_time().is_none() {
            Err("the run is on real time, where sts cannot tell when it is at rest".to_string())
        } else {
            self.checkpoint(&mut session).await
        };
        match checkpointed {
            Ok((checkpoints, base, prologue)) => {
                let mut place = Place { session, base, prologue, running: None, checkpoints };
                // Resumed at once: the copies checkpointed share their
                // listening sockets with the holders, so a controller
                // crashed and restarted on their address would find it
                // taken; a resumed copy listens on a port of its own.
                match self.roll_back(&mut place, "start").await {
                    Ok(()) => Ok(Ok(place)),
                    Err(why) => {
                        self.refuse(format!("a checkpoint after the handshakes could not be resumed: {why}"));
                        Ok(Err(None))
                    }
                }
            }
            Err(why) => {
                self.refuse(why);
                Ok(Err(Some(session)))
            }
        }
    }

    /// Checkpoints a session just started, at rest before any input: the
    /// checkpoints, the run's state and what it saw so far.
    async fn checkpoint(&self, session: &mut Session) -> Result<(Vec<Checkpoint>, SessionState, Drained), String> {
        let mut busy = 0;
        let checkpoints = checkpoint_all(session, "the first input", &mut busy).await.map_err(|e| match e {
            PeekError::Refused(why) => why,
            PeekError::Run(e) => e.to_string(),
        })?;
        let prologue = drain(&mut session.runner, &session.controllers);
        Ok((checkpoints, session.state(), prologue))
    }

    /// From now on every replay is fresh, for `why`.
    fn refuse(&self, why: String) {
        tracing::info!("candidates are replayed fresh: {why}");
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// The search is over: the live runs go, their controllers sent SIGKILL
    /// now and waited for on a blocking thread (which the runtime waits for
    /// before sts exits), so the final replays, which are fresh, start at
    /// once. The summary stays.
    pub fn release(&self) {
        let mut places = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for place in &mut places {
            place.session.controllers.iter_mut().for_each(crate::controller::Controller::stop);
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || drop(places))),
            Err(_) => drop(places),
        }
    }

    /// Puts `place`'s run back where its checkpoint was taken.
    async fn roll_back(&self, place: &mut Place, label: &str) -> Result<(), String> {
        roll_back(&mut place.session, &place.base, Restart::Resume(&mut place.checkpoints), label)
            .await
            .map_err(|e| e.to_string())?;
        // The copies that wrote them are gone.
        if let Some(old) = place.running.take() {
            for k in 0..place.session.controllers.len() {
                let _ = std::fs::remove_file(place.session.run_dir.join(format!("controller-{k}-{old}.log")));
            }
        }
        place.running = Some(label.to_string());
        // The next rollback's copies, forked now beside this replay.
        if let Some(vt) = place.session.runner.clock.virtual_time().cloned() {
            for cp in &mut place.checkpoints {
                if let Err(e) = cp.prepare_spare(&vt) {
                    tracing::debug!("no spare copy for the next rollback: {e}");
                }
            }
        }
        Ok(())
    }

    /// Keeps `place` for the next replay, unless its run can no longer be
    /// trusted to behave as a fresh one (its virtual time gave up).
    fn put_back(&self, place: Place) {
        let gave_up = place.session.runner.clock.virtual_time().is_some_and(|vt| vt.refusal().is_some());
        if !gave_up {
            self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(place);
        }
    }
}

impl Drop for Places {
    fn drop(&mut self) {
        // Sessions first (their copies), then the holders, then the logs.
        let places = std::mem::take(self.idle.get_mut().unwrap_or_else(|e| e.into_inner()));
        drop(places);
        for k in 1..=*self.made.get_mut() {
            let _ = std::fs::remove_dir_all(self.dir.join(format!("warm-{k}")));
        }
        // Only if nothing else is in it.
        let _ = std::fs::remove_dir(&self.dir);
    }
}
