//! Sleeps shorter than a millisecond for the idle test of virtual time.
//!
//! tokio's timers round up to whole milliseconds, which made every look of the
//! idle test (`crate::clock`) a millisecond apart, and so every quiet spell
//! before a jump at least two. A `timerfd` polled by tokio's I/O driver wakes
//! the loop after the time asked for, to within the kernel's timer slack,
//! and, like any wait of the runtime, lets the connection tasks read and
//! write what is ready first.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

/// A `timerfd`, for [`AsyncFd`] (which needs `AsRawFd`).
struct Timer(TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A one-shot timer with sub-millisecond resolution, in the current tokio
/// runtime. Falls back to tokio's own timers where a `timerfd` cannot be made.
pub(crate) struct FineSleep {
    timer: Option<AsyncFd<Timer>>,
}

impl FineSleep {
    /// A timer for the current runtime (call it inside one).
    pub(crate) fn new() -> FineSleep {
        let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC)
            .ok()
            // SAFETY: the timerfd is owned by the `Timer` the AsyncFd owns, so
            // it stays open, and `as_raw_fd` names it, for the AsyncFd's life.
            .and_then(|t| unsafe { AsyncFd::register(Timer(t)) }.ok());
        FineSleep { timer }
    }

    /// Waits `d` of real time.
    pub(crate) async fn sleep(&self, d: Duration) {
        let Some(timer) = &self.timer else {
            return tokio::time::sleep(d).await;
        };
        if self.arm(timer, d).is_err() {
            return tokio::time::sleep(d).await;
        }
        loop {
            let Ok(mut ready) = timer.readable().await else {
                return tokio::time::sleep(d).await;
            };
            // Readiness can be left over from an earlier, abandoned sleep: only
            // an expiry read now ends this one (arming cleared older ones).
            match ready.try_io(|t| t.get_ref().0.wait().map_err(io::Error::from)) {
                Ok(_) => return,
                Err(_would_block) => continue,
            }
        }
    }

    fn arm(&self, timer: &AsyncFd<Timer>, d: Duration) -> nix::Result<()> {
        // A zero expiry would disarm the timer instead.
        let d = d.max(Duration::from_micros(1));
        timer.get_ref().0.set(Expiration::OneShot(TimeSpec::from_duration(d)), TimerSetTimeFlags::empty())
    }
}

impl Default for FineSleep {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_less_than_a_millisecond_and_survives_an_abandoned_sleep() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let fine = FineSleep::new();
            assert!(fine.timer.is_some(), "timerfd is available on Linux");
            // An abandoned sleep leaves its expiry behind...
            tokio::select! {
                _ = fine.sleep(Duration::from_micros(50)) => panic!("the other branch is ready first"),
                _ = std::future::ready(()) => {}
            }
            std::thread::sleep(Duration::from_millis(1));
            // ...which must not end the next one early.
            let t = std::time::Instant::now();
            fine.sleep(Duration::from_millis(20)).await;
            assert!(t.elapsed() >= Duration::from_millis(20), "{:?}", t.elapsed());
            // And short sleeps are short (tokio's would take a millisecond or more).
            let mut took = Vec::new();
            for _ in 0..20 {
                let t = std::time::Instant::now();
                fine.sleep(Duration::from_micros(100)).await;
                took.push(t.elapsed());
            }
            took.sort();
            assert!(took[0] >= Duration::from_micros(100));
            assert!(took[0] < Duration::from_micros(900), "shortest {:?}", took[0]);
        });
    }
}
