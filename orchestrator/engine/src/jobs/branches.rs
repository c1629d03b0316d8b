//! Stateful exploration: each of [`crate::explore`]'s variants replayed
//! from a checkpoint taken where it leaves the base run, instead of from
//! the start.
//!
//! A variant is the base run's inputs with one fault (a message held or
//! lost) armed just before input *p*, the input that set the message off.
//! Up to that point a variant is the base run again, the same for every
//! variant leaving at *p*. [`Branches`] replays the base once, one input
//! at a time (the *spine*), and when an input some variant leaves at is
//! due, checkpoints the whole run there ([`Replayer::checkpoint`]: every
//! controller forked and parked, the network, the interposer, the trace
//! written so far). A variant rewinds to its mark, arms its fault, gives
//! the rest of the inputs at their recorded spacing without waiting for the
//! base's messages (as its own trace, whose later inputs have no recorded
//! messages, is replayed fresh: [`Replayer::give_inputs_only`]), and waits
//! for a persistent violation as a replay's end does. The spine goes on
//! from its furthest mark when a variant leaves later than any before.
//!
//! This is DS2's stateful exploration on fork checkpoints of the real
//! controllers: a variant costs a rollback and its own suffix, where a
//! fresh replay pays the controllers' start and every input before it, and
//! a warm place ([`crate::warm`]) every input before it.
//!
//! Needs what checkpoints need (virtual time, controllers forked from
//! snapshots, no relays); a refusal ([`PeekError::Refused`]) says why and
//! the caller replays its variants as before.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sts_invariants::Violation;
use sts_trace::{External, Trace};

use crate::config::Config;
use crate::peek::PeekError;
use crate::replay::{Mark, Replayer, Step};
use crate::{Engine, RunError};

/// The most checkpoints kept at once (each holds a parked copy of every
/// controller). Variants leaving at an input past the last one marked
/// step to it from the nearest mark before.
const MAX_MARKS: usize = 48;

/// One live replay of a base run and its checkpoints at the inputs
/// variants leave at.
pub struct Branches<'t> {
    /// Declared before the marks: its controllers, resumed from them, go
    /// first.
    replayer: Replayer<'t>,
    /// By input index: the run checkpointed when that input was due.
    marks: BTreeMap<usize, Mark>,
    /// The inputs some variant leaves at (where marks are taken).
    departures: BTreeSet<usize>,
    /// While the run is the base's: the index of its next input.
    spine: Option<usize>,
    /// The replay's own directory (its trace and the copies' logs).
    dir: PathBuf,
    rewinds: u32,
}

/// What [`Branches`] did, for the exploration's report.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Checkpoints taken on the base run.
    pub marks: u32,
    /// Variants started from a rewind to one.
    pub rewinds: u32,
}

impl Summary {
    /// Both counts of `self` and `other` together (several bases).
    pub fn plus(self, other: Summary) -> Summary {
        Summary { marks: self.marks + other.marks, rewinds: self.rewinds + other.rewinds }
    }
}

impl<'t> Branches<'t> {
    /// Starts the base run `base` (an exploration's recorded base) on fresh
    /// controllers, in `dir`; marks will be taken where `departures` say.
    /// With `files_dir` (the directory of the run that recorded `base`, over
    /// by now), the controllers' files are written there again and the
    /// controllers forked from that run's zygotes: faucet's name their
    /// directory, and a new one costs a whole start.
    pub async fn start(
        engine: &Engine,
        config: &Config,
        base: &'t Trace,
        dir: &Path,
        files_dir: Option<&Path>,
        departures: BTreeSet<usize>,
    ) -> Result<Branches<'t>, RunError> {
        let _ = std::fs::remove_dir_all(dir);
        let replayer = Replayer::start_in(engine, config, base, dir, files_dir, 0).await?;
        Ok(Branches { replayer, marks: BTreeMap::new(), departures, spine: Some(0), dir: dir.to_owned(), rewinds: 0 })
    }

    /// What was done so far.
    pub fn summary(&self) -> Summary {
        Summary { marks: self.marks.len() as u32, rewinds: self.rewinds }
    }

    /// Replays the variant that arms `fault` just before input `p` of the
    /// base and gives the later inputs alone: the persistent violation it
    /// ends in, if any.
    pub async fn variant(&mut self, p: usize, fault: &External) -> Result<Option<Violation>, PeekError> {
        self.reach(p).await?;
        self.spine = None;
        self.replayer.give_inputs_only();
        self.replayer.inject(fault).await?;
        self.replayer.run_until(|_, _| false).await?;
        self.replayer.settle().await?;
        Ok(self.replayer.violation().cloned())
    }

    /// Copies the run of the variant just replayed (the base's records up
    /// to where it left, then its own) to the trace file `to`.
    pub fn keep_trace(&mut self, to: &Path) -> Result<(), RunError> {
        self.replayer.flush()?;
        std::fs::copy(self.replayer.trace_path(), to)
            .map(|_| ())
            .map_err(|e| RunError::Environment(format!("{}: {e}", to.display())))
    }

    /// Writes the variant just replayed as an experiment directory `dir`
    /// (its config from `config_text`, its trace ending in the violation).
    pub fn save(&mut self, dir: &Path, config_text: &str) -> Result<PathBuf, RunError> {
        let _ = std::fs::remove_dir_all(dir);
        self.replayer.save(dir, config_text)
    }

    /// Brings the run to input `p` of the base, due and not yet given:
    /// from the spine when it has not passed `p`, otherwise from the last
    /// mark at or before `p`, stepping the base's inputs (and marking where
    /// variants leave) up to it.
    async fn reach(&mut self, p: usize) -> Result<(), PeekError> {
        let nearest = self.marks.range(..=p).next_back().map(|(k, _)| *k);
        match (self.spine, nearest) {
            (Some(next), Some(m)) if next <= p && next >= m => {}
            (Some(next), None) if next <= p => {}
            (_, Some(m)) => {
                let mark = self.marks.get_mut(&m).expect("a mark just found");
                self.replayer.rewind(mark).await?;
                self.rewinds += 1;
                self.spine = Some(m);
            }
            (_, None) => {
                return Err(PeekError::Refused(format!("no checkpoint of the base run before its input {}", p + 1)))
            }
        }
        loop {
            let next = self.spine.expect("on the spine");
            if self.replayer.wait_for_next().await?.is_some() {
                return Err(PeekError::Run(RunError::BadInput(format!(
                    "the base run has no input {} to leave at",
                    p + 1
                ))));
            }
            if self.departures.contains(&next) && !self.marks.contains_key(&next) && self.marks.len() < MAX_MARKS {
                let mark = self.replayer.checkpoint().await?;
                self.marks.insert(next, mark);
            }
            if next == p {
                return Ok(());
            }
            match self.replayer.step().await? {
                Step::Injected { .. } => self.spine = Some(next + 1),
                other => {
                    return Err(PeekError::Run(RunError::Environment(format!(
                        "the base run stopped before its input {} ({other:?})",
                        p + 1
                    ))))
                }
            }
        }
    }
}

impl Drop for Branches<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
