//! PEEK: which internal events follow each input of a
//! candidate sequence, so its replays wait for what *it* causes rather than
//! for what the original run's removed inputs caused.
//!
//! Both methods inject input `i` at the candidate's recorded spacing (the
//! first at its recorded time, or as soon as the network is up), each once
//! the run is quiescent, and record the internal events of the *window*
//! after it: its gap to the next input plus epsilon (for the last input, as
//! long as the original took to show its violation, plus epsilon).
//!
//! - [`by_prefix`] starts a fresh run per input and replays the prefix before
//!   peeking: n runs for n inputs, each as long as its prefix.
//! - [`by_checkpoints`] makes one run: it injects each input and watches its
//!   window; on the way, when the next input is due, it checkpoints the
//!   controllers and the runner (`crate::checkpoint`, `NetRunner::state`),
//!   and after the window it rolls back to that checkpoint to inject the
//!   next input. Each input costs one window, one checkpoint and one
//!   rollback instead of a prefix. Where nothing can happen in the rest of
//!   the window (every controller at rest with its next timer after it, and
//!   no frame, message or flow expiry of sts's due in it:
//!   `NetRunner::nothing_due_before`), time would only jump to the window's
//!   end, so the window is complete when the next input is due: that input
//!   starts there, with no checkpoint and no rollback.
//!   Needs virtual time and controllers forked from snapshots; anything it
//!   cannot checkpoint is refused ([`PeekError::Refused`]) and the caller
//!   falls back to [`by_prefix`].
//!
//! Both return the same shape: a trace of the candidate's inputs, each
//! followed by its window's internal events, after the events seen before the
//! first input ([`crate::minimize`] merges it into the candidate).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use sts_trace::{External, Internal, Record, Trace};

use crate::checkpoint::{self, Checkpoint};
use crate::config::Config;
use crate::controller::Controller;
use crate::inputs;
use crate::monitor::drain;
use crate::session::{self, RunError, Session};
use crate::snapshot::SnapshotError;
use crate::Engine;

/// How long (real time) a run may take to become quiescent before an input.
pub(crate) const QUIESCE_WITHIN: Duration = Duration::from_secs(5);

/// Why PEEK failed.
#[derive(Debug, thiserror::Error)]
pub enum PeekError {
    #[error(transparent)]
    Run(#[from] RunError),
    /// Checkpoints cannot be used for this run (use [`by_prefix`]).
    #[error("checkpoints cannot be used: {0}")]
    Refused(String),
}

/// What PEEK saw, and what it cost.
#[derive(Debug)]
pub struct Peek {
    /// The inputs, each followed by its window's internal events.
    pub observed: Trace,
    /// Runs started (controllers forked, network connected).
    pub runs: u32,
    /// Rollbacks to a checkpoint.
    pub rollbacks: u32,
    /// Checkpoints tried again because a controller still had bytes to read.
    pub busy: u32,
    /// Inputs whose window was known to stay quiet after the next input was
    /// due, which needed no checkpoint and no rollback.
    pub skipped: u32,
}

impl Peek {
    /// The internal events' keys in each window (index 0: before the first
    /// input), sorted: what the two methods must agree on.
    pub fn windows(&self) -> Vec<Vec<String>> {
        let mut out = vec![Vec::new()];
        for r in &self.observed.records {
            if r.external().is_some() {
                out.push(Vec::new());
            } else if let Some(k) = r.internal().and_then(Internal::key) {
                out.last_mut().expect("never empty").push(k);
            }
        }
        out.iter_mut().for_each(|w| w.sort());
        out
    }
}

/// The candidate's inputs with the length of each one's window (epsilon not
/// included).
fn plan(cand: &Trace) -> Vec<(u64, External, u64)> {
    let externals = cand.externals();
    let violation_t = cand.records.iter().find(|r| r.violation().is_some()).map(|r| r.t_ms);
    externals
        .iter()
        .enumerate()
        .map(|(i, (t, e))| {
            let gap = match externals.get(i + 1) {
                Some((next, _)) => next.saturating_sub(*t),
                None => violation_t.map_or(0, |v| v.saturating_sub(*t)),
            };
            (*t, (*e).clone(), gap)
        })
        .collect()
}

/// When to inject each input on a run's clock: the first at its recorded
/// time or now if that has passed, the others at the recorded spacing.
fn targets(plan: &[(u64, External, u64)], now: u64) -> Vec<u64> {
    let t0 = plan.first().map_or(0, |p| p.0);
    let base = now.max(t0);
    plan.iter().map(|(t, _, _)| base + (t - t0)).collect()
}

fn records(events: Vec<(u64, Internal)>) -> impl Iterator<Item = Record> {
    events.into_iter().map(|(t_ms, e)| Record { seq: 0, t_ms, event: sts_trace::Event::Internal(e), line: 0 })
}

/// Starts a run for `cand`, serving its recorded dates as a replay does.
async fn start(engine: &Engine, config: &Config, cand: &Trace, dir: &Path) -> Result<Session, RunError> {
    let mut config = config.clone();
    config.time.wall_epoch_ns = cand.header.wall_epoch_ns;
    session::start(engine, &config, &dir.join("logs")).await
}

/// Runs until `target`, lets the run come to rest, and returns what happened
/// since the last drain.
async fn reach(s: &mut Session, target: u64) -> Vec<(u64, Internal)> {
    s.runner.run_until(target, |_| false).await;
    // On real time there is no telling; inject anyway, as replay does.
    s.runner.quiesce(QUIESCE_WITHIN).await;
    drain(&mut s.runner, &s.controllers).internal
}

/// Injects `e` and returns what its window showed.
async fn inject_and_watch(s: &mut Session, e: &External, window: u64) -> Result<Vec<(u64, Internal)>, RunError> {
    inputs::apply(s, e).await.map_err(RunError::from)?;
    let until = s.runner.clock.now() + window;
    s.runner.run_until(until, |_| false).await;
    Ok(drain(&mut s.runner, &s.controllers).internal)
}

/// PEEK by prefix replay: one fresh run per input (run directories under
/// `out`, removed as they finish).
pub async fn by_prefix(engine: &Engine, config: &Config, cand: &Trace, out: &Path) -> Result<Peek, RunError> {
    let plan = plan(cand);
    let epsilon = config.interpose.epsilon_ms;
    let mut observed = Vec::new();
    let mut runs = 0;
    for i in 0..plan.len() {
        let dir = out.join(format!("prefix-{i}"));
        let mut s = start(engine, config, cand, &dir).await?;
        runs += 1;
        let at = targets(&plan, s.runner.clock.now());
        for (j, (_, e, _)) in plan.iter().enumerate().take(i) {
            reach(&mut s, at[j]).await;
            inputs::apply(&mut s, e).await.map_err(RunError::from)?;
        }
        let before = reach(&mut s, at[i]).await;
        if i == 0 {
            observed.extend(records(before));
        }
        let (t, e, gap) = &plan[i];
        let window = inject_and_watch(&mut s, e, gap + epsilon).await?;
        observed.push(Record { seq: 0, t_ms: *t, event: sts_trace::Event::External(e.clone()), line: 0 });
        observed.extend(records(window));
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(Peek {
        observed: Trace { header: cand.header.clone(), records: observed },
        runs,
        rollbacks: 0,
        busy: 0,
        skipped: 0,
    })
}

/// PEEK with checkpoints: one run, a checkpoint and a rollback per input
/// whose window could still see something after the next input is due (the
/// run directory is `out/checkpoints`, removed when done).
/// Counted in [`Engine::peek_counts`].
pub async fn by_checkpoints(engine: &Engine, config: &Config, cand: &Trace, out: &Path) -> Result<Peek, PeekError> {
    counted(engine, checkpointed(engine, config, cand, out, true).await)
}

/// [`by_checkpoints`] with a checkpoint and a rollback for every input, even
/// where the rest of a window is known to be quiet: the plain method, to hold
/// the shortcut against (tests).
pub async fn by_checkpoints_always(
    engine: &Engine,
    config: &Config,
    cand: &Trace,
    out: &Path,
) -> Result<Peek, PeekError> {
    counted(engine, checkpointed(engine, config, cand, out, false).await)
}

fn counted(engine: &Engine, r: Result<Peek, PeekError>) -> Result<Peek, PeekError> {
    match &r {
        Ok(_) => engine.count_peek(true),
        Err(PeekError::Refused(_)) => engine.count_peek(false),
        Err(_) => {}
    };
    r
}

async fn checkpointed(
    engine: &Engine,
    config: &Config,
    cand: &Trace,
    out: &Path,
    skip_quiet: bool,
) -> Result<Peek, PeekError> {
    if !config.relays.is_empty() {
        return Err(PeekError::Refused("the config has relays, whose connections are not checkpointed".into()));
    }
    let plan = plan(cand);
    let epsilon = config.interpose.epsilon_ms;
    let dir = out.join("checkpoints");
    let mut s = start(engine, config, cand, &dir).await?;
    if s.runner.clock.virtual_time().is_none() {
        return Err(PeekError::Refused("the run is on real time, where sts cannot tell when it is quiescent".into()));
    }
    let at = targets(&plan, s.runner.clock.now());
    let mut observed = Vec::new();
    let (mut rollbacks, mut busy, mut skipped) = (0, 0, 0);
    s.runner.run_until(at[0], |_| false).await;
    if !s.runner.quiesce(QUIESCE_WITHIN).await {
        return Err(PeekError::Refused("the run did not come to rest before its first input".into()));
    }
    observed.extend(records(drain(&mut s.runner, &s.controllers).internal));
    // The checkpoint taken when the next input was due, in the window of the
    // current one: where the next input starts from.
    let mut next: Option<(crate::session::SessionState, Vec<Checkpoint>)> = None;
    for (i, (t, e, gap)) in plan.iter().enumerate() {
        if let Some((state, checkpoints)) = next.take() {
            // Each checkpoint is returned to once: its holders take over.
            roll_back(&mut s, &state, Restart::TakeOver(checkpoints), &format!("peek-{}", i + 1)).await?;
            rollbacks += 1;
        }
        inputs::apply(&mut s, e).await.map_err(RunError::from)?;
        let end = s.runner.clock.now() + gap + epsilon;
        let mut window = Vec::new();
        let mut rest_is_quiet = false;
        if let Some(&due) = at.get(i + 1) {
            // The window of this input covers the next one's start: take the
            // checkpoint there, on the way, and roll back to it afterwards.
            s.runner.run_until(due, |_| false).await;
            // Unless nothing can happen in the rest of the window: every
            // controller at rest with its next timer after the window, and
            // nothing of sts's due in it. Time would jump straight to its end
            // and the window would see nothing more, so the next input can
            // start right here, without a checkpoint or a rollback.
            rest_is_quiet = skip_quiet && s.runner.quiesce(QUIESCE_WITHIN).await && s.runner.nothing_due_before(end);
            if rest_is_quiet {
                skipped += 1;
            } else {
                let before = format!("input {} ({})", i + 2, plan[i + 1].1.describe());
                let checkpoints = checkpoint_all(&mut s, &before, &mut busy).await?;
                window.extend(drain(&mut s.runner, &s.controllers).internal);
                // After the controllers' checkpoints: each copy forked at or
                // before this time, so setting time back to it never makes a
                // clock step back.
                next = Some((s.state(), checkpoints));
            }
        }
        if !rest_is_quiet {
            s.runner.run_until(end, |_| false).await;
        }
        window.extend(drain(&mut s.runner, &s.controllers).internal);
        observed.push(Record { seq: 0, t_ms: *t, event: sts_trace::Event::External(e.clone()), line: 0 });
        observed.extend(records(window));
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Peek { observed: Trace { header: cand.header.clone(), records: observed }, runs: 1, rollbacks, busy, skipped })
}

/// How many times a checkpoint is tried again when a controller still had
/// bytes to read (each after the run came to rest again).
const BUSY_RETRIES: u32 = 20;

/// Checkpoints every controller of the run (at the point `before`
/// describes: "input 3 (ping h1 -> h2)"), which must be at rest.
pub(crate) async fn checkpoint_all(
    s: &mut Session,
    before: &str,
    busy: &mut u32,
) -> Result<Vec<Checkpoint>, PeekError> {
    let mut tries = 0;
    'again: loop {
        if !s.runner.quiesce(QUIESCE_WITHIN).await {
            return Err(PeekError::Refused(format!("the run did not come to rest before {before}")));
        }
        let mut checkpoints: Vec<Checkpoint> = Vec::new();
        for c in s.controllers.iter_mut() {
            if !c.is_alive() {
                return Err(PeekError::Refused(format!("controller {} is not running before {before}", c.name())));
            }
            match checkpoint::checkpoint(c) {
                Ok(cp) => checkpoints.push(cp),
                Err(crate::snapshot::SnapshotError::Busy(why)) if tries < BUSY_RETRIES => {
                    tracing::debug!("checkpoint before {before}: {why}; again");
                    tries += 1;
                    *busy += 1;
                    // Drop the ones taken: all controllers at one point, or none.
                    continue 'again;
                }
                Err(e) if !c.is_alive() => {
                    let _ = e;
                    return Err(PeekError::Refused(format!("controller {} exited before {before}", c.name())));
                }
                Err(e) => return Err(PeekError::Refused(e.to_string())),
            }
        }
        return Ok(checkpoints);
    }
}

/// How [`roll_back`] brings the controllers back from their checkpoints.
pub(crate) enum Restart<'a> {
    /// Fork a new copy from each holder; the checkpoints stay usable.
    Resume(&'a mut [Checkpoint]),
    /// Each holder becomes the copy itself: the checkpoints are used up
    /// (one fork fewer per controller; PEEK returns to each checkpoint once).
    TakeOver(Vec<Checkpoint>),
}

impl Restart<'_> {
    fn connections(&self) -> Vec<&[checkpoint::HeldConnection]> {
        match self {
            Restart::Resume(cps) => cps.iter().map(|c| c.connections.as_slice()).collect(),
            Restart::TakeOver(cps) => cps.iter().map(|c| c.connections.as_slice()).collect(),
        }
    }
}

/// Puts the run back to `state`, with every controller resumed from its
/// checkpoint and each switch connection paired with the controller
/// connection it was at the checkpoint. The resumed copies write their
/// output to `controller-K-LABEL.log`.
pub(crate) async fn roll_back(
    s: &mut Session,
    state: &crate::session::SessionState,
    checkpoints: Restart<'_>,
    label: &str,
) -> Result<(), PeekError> {
    let env = |e: std::io::Error| RunError::Environment(format!("rolling back: {e}"));
    // SIGKILL is final: a killed copy never runs its code again, so nothing
    // needs to wait for it to be gone before time is set back. It is waited
    // for (dropped) off the run's path, below.
    let vt = s.runner.clock.virtual_time().cloned().ok_or_else(|| PeekError::Refused("no virtual time".into()))?;
    for c in s.controllers.iter_mut() {
        c.stop();
        vt.forget(c.pid());
    }
    let held = checkpoints.connections();
    let mut streams = BTreeMap::new();
    let mut sockets: Vec<Vec<(i32, OwnedFd)>> = held.iter().map(|_| Vec::new()).collect();
    let (session_state, state) = (state, &state.run);
    for (dpid, conn, port) in state.open_connections() {
        let held = held
            .iter()
            .enumerate()
            .find_map(|(k, conns)| conns.iter().find(|h| h.peer_port == port).map(|h| (k, h.fd)));
        let Some((k, fd)) = held else {
            return Err(PeekError::Refused(format!(
                "switch {dpid}'s connection {conn} is not held by any controller checkpoint"
            )));
        };
        let (ours, theirs) = socket_pair().map_err(env)?;
        streams.insert((dpid, conn), ours);
        sockets[k].push((fd, theirs));
    }
    // Files back before any copy runs: none may read a later edit.
    s.restore_files(session_state).map_err(env)?;
    // Time goes back before any copy runs: none may read the later time.
    vt.rewind_to(state.time_ns());
    let mut moved = BTreeMap::new();
    let mut gone = Vec::new();
    let log = |k: usize| s.run_dir.join(format!("controller-{k}-{label}.log"));
    // (the checkpointed copy's address, its successor)
    let resumed: Vec<(SocketAddr, Result<Controller, SnapshotError>)> = match checkpoints {
        Restart::Resume(cps) => cps
            .iter_mut()
            .zip(sockets)
            .enumerate()
            .map(|(k, (cp, socks))| (cp.addr(), cp.resume(&log(k), &vt, socks)))
            .collect(),
        Restart::TakeOver(cps) => cps
            .into_iter()
            .zip(sockets)
            .enumerate()
            .map(|(k, (cp, socks))| (cp.addr(), cp.take_over(&log(k), &vt, socks)))
            .collect(),
    };
    for (k, (addr, copy)) in resumed.into_iter().enumerate() {
        let copy = copy.map_err(|e| PeekError::Refused(e.to_string()))?;
        moved.insert(addr, copy.addr());
        gone.push(std::mem::replace(&mut s.controllers[k], copy));
    }
    // Dropping a controller waits until its process is gone: not here.
    std::thread::spawn(move || drop(gone));
    s.crashed.clear();
    s.expect_controllers();
    s.runner.restore(state, streams, &moved).await.map_err(env)?;
    s.restore_state(session_state);
    Ok(())
}

/// A connected pair of loopback sockets: (sts's end, the controller's end).
///
/// Made with blocking calls, which return at once on loopback (the
/// handshake completes inside `connect`): no turn of the runtime's reactor,
/// which another place's replay may be keeping busy, is on a rollback's path.
fn socket_pair() -> std::io::Result<(tokio::net::TcpStream, OwnedFd)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let ours = std::net::TcpStream::connect(listener.local_addr()?)?;
    let (theirs, _) = listener.accept()?;
    ours.set_nonblocking(true)?;
    Ok((tokio::net::TcpStream::from_std(ours)?, OwnedFd::from(theirs)))
}
