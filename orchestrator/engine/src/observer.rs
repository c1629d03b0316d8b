//! How the engine tells its caller what is going on, without printing.
//!
//! Long work reports [`Progress`]; things a person should know once (a
//! fallback taken, a feature unavailable) are [`Notice`]s. The front end
//! decides how they look: progress bars on a terminal, a line every few
//! seconds in a CI log, JSON events from a server, nothing at all in a test.

/// Where a long-running job is. As JSON (`sts --progress json`, the
/// server's job progress): an object whose `phase` names the variant in
/// snake case, with the variant's fields beside it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Progress {
    /// Switch connections that finished their OpenFlow handshake.
    Handshakes { done: u64, total: u64 },
    /// Host pairs pinged (`sts pingall`).
    Pings { done: u64, total: u64 },
    /// A fuzz step finished.
    Fuzz {
        step: u32,
        steps: u32,
        inputs: usize,
        /// The last input injected, described.
        last: Option<String>,
        /// The run's clock (virtual time when on it), in milliseconds.
        clock_ms: u64,
    },
    /// A replay of `sts replay` is starting.
    Replay { run: u32, of: u32 },
    /// Delta debugging is about to test a batch of candidates.
    Minimize {
        /// Inputs in the smallest reproducing sequence so far.
        inputs_left: usize,
        /// Inputs of the original trace.
        original: usize,
        /// Candidates in this batch.
        trying: usize,
        /// Inputs in the batch's first candidate.
        candidate_inputs: usize,
        /// Candidates tested so far (this run and resumed ones).
        tested: usize,
        replays: u64,
        elapsed_s: f64,
    },
    /// A campaign (`sts campaign`): seeds fuzzed so far, then bugs minimized.
    Campaign {
        fuzzed: u32,
        seeds: u32,
        /// Runs that found a violation so far.
        found: u32,
        /// Distinct bugs among those so far (the campaign's sameness).
        #[serde(default)]
        distinct: u32,
        /// Distinct bugs, once the fuzzing is over.
        bugs: Option<u32>,
        /// Bugs minimized so far.
        minimized: u32,
    },
    /// The minimal sequence is being replayed for its reproduction rate.
    FinalReplays { done: u32, total: u32 },
    /// `sts explore`: variants (one order flipped each) replayed so far, of
    /// how many, and how many ended in a violation.
    Explore { done: u32, total: u32, finds: u32 },
    /// The current phase ended (a bar can go).
    Done,
}

/// What a notice is about; a [`crate::Engine`] says each kind at most once
/// when asked to ([`crate::Engine::notice_once`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// The snapshot shim is not built: controllers start as new processes.
    NoShim,
    /// A controller cannot run on virtual time: the run stays on real time.
    ShimCannotAttach,
    /// Time stopped jumping for a run (a timer the shim cannot move, a wait
    /// it cannot see): the run continues on real time.
    TimeStopped,
    /// A controller process exited during a run when no input asked for it.
    ControllerExited,
    /// PEEK with checkpoints fell back to prefix replay.
    PeekFallback,
    /// A minimization resumed from its saved state.
    Resuming,
    /// A policy change failed (the controller refused the request, or the
    /// command failed): the run goes on without it.
    PolicyFailed,
    /// Anything else worth a line.
    Info,
}

/// One thing a person should know.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Notice {
    pub kind: NoticeKind,
    pub message: String,
}

/// Receives progress and notices. Both default to doing nothing; calls come
/// from whichever thread runs the job, so implementations must be cheap.
pub trait Observer: Send + Sync {
    fn progress(&self, _progress: &Progress) {}
    fn notice(&self, _notice: &Notice) {}
}

/// An observer that ignores everything (tests, embedding).
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Observer for Silent {}

/// An observer that keeps every notice (for tests and servers that report
/// them later).
#[derive(Debug, Default)]
pub struct Collect {
    pub notices: std::sync::Mutex<Vec<Notice>>,
}

impl Observer for Collect {
    fn notice(&self, n: &Notice) {
        self.notices.lock().unwrap_or_else(|e| e.into_inner()).push(n.clone());
    }
}
