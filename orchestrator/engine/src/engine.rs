//! [`Engine`]: the context every job runs in (its observer, its zygotes, its
//! once-only notices and counters).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::observer::{self, Notice, NoticeKind, Observer, Progress};
use crate::snapshot;

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
