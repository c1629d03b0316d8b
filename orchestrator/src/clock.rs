//! The clock abstraction: the only place the orchestrator reads time.
//!
//! Everything downstream (the mock network's timeouts, trace timestamps) sees
//! milliseconds since the run started, taken from here. Virtual time (brief §7)
//! will plug in behind the same interface.

use std::time::Duration;

use tokio::time::Instant;

/// Milliseconds since the start of a run.
pub type Millis = u64;

/// A run's clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        Clock { start: Instant::now() }
    }

    /// Milliseconds since the clock started.
    pub fn now(&self) -> Millis {
        self.start.elapsed().as_millis() as Millis
    }

    /// The tokio instant `ms` after the clock's zero (for deadlines).
    pub fn instant_at(&self, ms: Millis) -> Instant {
        self.start + Duration::from_millis(ms)
    }
}
