//! `sts-engine`: the orchestrator as a library. It runs real controllers
//! against the mock network through the interposition proxy, and drives
//! pingall, fuzzing, replay, PEEK and minimization.
//!
//! It prints nothing, exits nowhere, keeps no process-wide state and starts
//! no runtime: every job takes an [`Engine`] (its observer, its pool of
//! controller snapshots, its once-only notices, its counters) and runs as an
//! `async fn` on the caller's tokio runtime. Front ends (`sts` the command
//! line, and later the console and the server) turn results into output and
//! exit codes.
//!
//! Modules, by job:
//! - [`config`]: experiment configs (TOML);
//! - [`clock`]: the only place time is read; virtual time;
//! - [`controller`], [`presets`]: controller processes (start, readiness,
//!   logs, kill, no orphans) and the specs of the installed controllers;
//! - [`snapshot`], [`checkpoint`]: pristine snapshots (zygotes) and mid-run
//!   checkpoints of controllers, through the shim;
//! - [`netrun`]: the mock network connected to real controllers over TCP;
//! - [`session`]: bringing an experiment up (relays, controllers, network,
//!   handshakes);
//! - [`observe`]: facts for the checker, the trace drain, the invariant monitor;
//! - [`inputs`]: external events: injecting them, and the seeded fuzzer;
//! - [`pingall`], [`fuzz`], [`replay`], [`peek`], [`minimize`], [`campaign`]:
//!   the jobs;
//! - [`slurm`]: the Slurm executor (candidates as job steps) and array jobs;
//! - [`observer`]: progress and notices, for whoever drives a job.
//!
//! See `ARCHITECTURE.md` at the workspace root for how the pieces fit.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub mod campaign;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod controller;
mod finesleep;
pub mod fuzz;
pub mod import;
pub mod inputs;
pub mod internal;
pub mod learn;
pub mod listeners;
pub mod minimize;
pub mod netrun;
pub mod observe;
pub mod observer;
mod output;
pub mod peek;
pub mod pingall;
pub mod policy;
pub mod presets;
pub mod replay;
pub mod session;
pub mod slurm;
pub mod snapshot;

pub use observer::{Notice, NoticeKind, Observer, Progress};
pub use session::RunError;

/// The context every job runs in: where progress and notices go, the
/// controller snapshots (zygotes) its runs fork from, and counters.
///
/// Cheap to clone (clones share everything). Jobs that must not share
/// zygotes or notices take engines of their own; dropping the last clone
/// kills its zygotes and their copies.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    observer: Arc<dyn Observer>,
}

struct Inner {
    zygotes: Mutex<snapshot::ZygotePool>,
    said: Mutex<BTreeSet<NoticeKind>>,
    peek_checkpointed: AtomicU64,
    peek_refused: AtomicU64,
}

impl Engine {
    /// An engine reporting to `observer`.
    pub fn new(observer: Arc<dyn Observer>) -> Engine {
        Engine {
            observer,
            inner: Arc::new(Inner {
                zygotes: Mutex::new(snapshot::ZygotePool::default()),
                said: Mutex::new(BTreeSet::new()),
                peek_checkpointed: AtomicU64::new(0),
                peek_refused: AtomicU64::new(0),
            }),
        }
    }

    /// An engine that reports nothing.
    pub fn silent() -> Engine {
        Engine::new(Arc::new(observer::Silent))
    }

    /// The same engine (zygotes, notices said, counters) reporting to
    /// `observer` instead: for a job that runs others and reports their
    /// progress its own way (a campaign).
    pub fn with_observer(&self, observer: Arc<dyn Observer>) -> Engine {
        Engine { inner: self.inner.clone(), observer }
    }

    /// Where this engine reports.
    pub fn observer(&self) -> &Arc<dyn Observer> {
        &self.observer
    }

    /// Reports progress.
    pub fn progress(&self, p: Progress) {
        self.observer.progress(&p);
    }

    /// Says something.
    pub fn notice(&self, kind: NoticeKind, message: impl Into<String>) {
        self.observer.notice(&Notice { kind, message: message.into() });
    }

    /// Says something the first time this engine meets `kind`, not again.
    pub fn notice_once(&self, kind: NoticeKind, message: impl Into<String>) {
        let first = self.inner.said.lock().unwrap_or_else(|e| e.into_inner()).insert(kind);
        if first {
            self.notice(kind, message);
        }
    }

    /// PEEK runs by checkpoints so far: (done with checkpoints, refused and
    /// done by prefix replay instead).
    pub fn peek_counts(&self) -> (u64, u64) {
        (self.inner.peek_checkpointed.load(Ordering::Relaxed), self.inner.peek_refused.load(Ordering::Relaxed))
    }

    pub(crate) fn count_peek(&self, checkpointed: bool) {
        let c = if checkpointed { &self.inner.peek_checkpointed } else { &self.inner.peek_refused };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn zygotes(&self) -> std::sync::MutexGuard<'_, snapshot::ZygotePool> {
        self.inner.zygotes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kills this engine's zygotes (and so their copies) now, rather than
    /// when the last clone is dropped.
    pub fn shutdown(&self) {
        *self.zygotes() = snapshot::ZygotePool::default();
    }
}
