//! The clock page: one page of shared memory through which sts runs the
//! controllers of a run on *virtual time* (brief §7, `docs/virtual-time.md`).
//!
//! sts creates the page (a memfd) for a run; the shim (`shim/`) maps it in
//! every controller process of that run. The page holds
//!
//! - the **offset**: signed nanoseconds added to every clock read of the run,
//!   sts's own included (virtual = real monotonic or real-time clock + offset).
//!   sts only increases it while a run goes on, so virtual clocks stay
//!   monotonic; it sets it back only when it rolls the run back to a
//!   checkpoint, whose processes never saw the later time;
//! - the **wall-clock shift**: signed nanoseconds added, on top of the
//!   offset, to wall-clock reads only (`CLOCK_REALTIME`, `gettimeofday`,
//!   `time`), so a replay can serve the recorded run's dates back;
//! - one **slot per controller process**: its pid, whether it is busy or
//!   blocked in a wait, the virtual deadline of that wait (its next timer), and
//!   an activity counter bumped on every return from a wait.
//!
//! When every process waits, nothing is in flight and sts itself has nothing
//! to do before some time, sts raises the offset to the earliest deadline:
//! time jumps to the next timer instead of being waited for.
//!
//! Both sides use only atomics on the page; this crate is the layout, shared so
//! the two cannot disagree. It has no dependencies (the shim links it).

#![no_std]

use core::sync::atomic::{AtomicU64, Ordering};

/// A fingerprint of the shim's and this crate's sources, the same in a
/// `libsts_shim.so` and the sts built with it. The shim says it when it greets
/// sts, so a library left from another build (an old copy next to the binary,
/// a stale `STS_SHIM`) is named as such instead of failing a command later.
pub const SHIM_BUILD: &str = env!("STS_SHIM_BUILD");

/// The first word of a valid page ("STSCLK01").
pub const MAGIC: u64 = u64::from_le_bytes(*b"STSCLK01");
/// Size of the page in bytes.
pub const BYTES: usize = 4096;
/// How many processes one page can track.
pub const SLOTS: usize = 64;
/// Words before the first slot: magic, offset, wall-clock shift.
const HEADER_WORDS: usize = 3;
/// Words per slot: pid, state, deadline, activity.
const SLOT_WORDS: usize = 4;
/// Words in the page that are used.
pub const WORDS: usize = HEADER_WORDS + SLOTS * SLOT_WORDS;
const _: () = assert!(WORDS * 8 <= BYTES);

/// A slot's process is running (or between waits).
pub const BUSY: u64 = 1;
/// A slot's process is blocked in a wait, until its deadline or an event.
pub const WAITING: u64 = 2;
/// A slot's process started a second thread: its waits are no longer
/// tracked, and time must not jump (sticky).
pub const THREADED: u64 = 3;
/// The deadline of a wait without timeout.
pub const NO_DEADLINE: u64 = u64::MAX;

/// A view of a mapped clock page.
#[derive(Clone, Copy)]
pub struct Page<'a> {
    words: &'a [AtomicU64; WORDS],
}

/// One process's slot in a [`Page`].
#[derive(Clone, Copy)]
pub struct Slot<'a> {
    words: &'a [AtomicU64],
}

impl<'a> Page<'a> {
    /// A view of the page at `base`.
    ///
    /// # Safety
    /// `base` must point to at least [`BYTES`] bytes, 8-aligned, mapped for
    /// reading and writing for `'a`, and only ever accessed atomically.
    pub unsafe fn from_ptr(base: *mut u8) -> Page<'a> {
        Page { words: &*(base as *const [AtomicU64; WORDS]) }
    }

    /// Writes the magic and a zero offset, freeing every slot (for the creator).
    pub fn init(&self) {
        self.words.iter().for_each(|w| w.store(0, Ordering::Relaxed));
        self.words[0].store(MAGIC, Ordering::Release);
    }

    /// True if the page was initialised by [`Page::init`].
    pub fn is_valid(&self) -> bool {
        self.words[0].load(Ordering::Acquire) == MAGIC
    }

    /// Nanoseconds added to every clock read (two's complement in the page).
    pub fn offset_ns(&self) -> i64 {
        self.words[1].load(Ordering::Acquire) as i64
    }

    /// Moves virtual time forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.words[1].fetch_add(ns, Ordering::AcqRel);
    }

    /// Sets the offset (to roll a run back to a checkpoint).
    pub fn set_offset(&self, ns: i64) {
        self.words[1].store(ns as u64, Ordering::Release);
    }

    /// `real_ns` (a real clock reading) shifted by the offset, never below zero.
    pub fn shift(&self, real_ns: u64) -> u64 {
        (real_ns as i128 + self.offset_ns() as i128).clamp(0, u64::MAX as i128) as u64
    }

    /// Nanoseconds added to wall-clock reads on top of the offset.
    pub fn wall_shift_ns(&self) -> i64 {
        self.words[2].load(Ordering::Acquire) as i64
    }

    /// Sets the wall-clock shift (before any process of the run reads it).
    pub fn set_wall_shift(&self, ns: i64) {
        self.words[2].store(ns as u64, Ordering::Release);
    }

    /// A real wall-clock reading `real_ns` as the run's processes see it.
    pub fn shift_wall(&self, real_ns: u64) -> u64 {
        (real_ns as i128 + self.offset_ns() as i128 + self.wall_shift_ns() as i128).clamp(0, u64::MAX as i128) as u64
    }

    /// Slot `i` (`i < SLOTS`).
    pub fn slot(&self, i: usize) -> Slot<'a> {
        let start = HEADER_WORDS + i * SLOT_WORDS;
        Slot { words: &self.words[start..start + SLOT_WORDS] }
    }

    /// Every slot.
    pub fn slots(&self) -> impl Iterator<Item = Slot<'a>> + 'a {
        let page = *self;
        (0..SLOTS).map(move |i| page.slot(i))
    }

    /// Takes a free slot for process `pid`, marked busy, and returns its
    /// index; `None` if all are taken. `is_dead(pid)` lets a slot of a process
    /// that is gone be reused.
    pub fn claim(&self, pid: u64, is_dead: impl Fn(u64) -> bool) -> Option<(usize, Slot<'a>)> {
        for (i, s) in self.slots().enumerate() {
            let owner = s.pid();
            let free = owner == 0 || owner == pid || is_dead(owner);
            if free && s.words[0].compare_exchange(owner, pid, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                s.words[2].store(NO_DEADLINE, Ordering::Relaxed);
                s.words[1].store(BUSY, Ordering::Release);
                return Some((i, s));
            }
        }
        None
    }
}

impl Slot<'_> {
    /// The owning process (0: free).
    pub fn pid(&self) -> u64 {
        self.words[0].load(Ordering::Acquire)
    }

    /// [`BUSY`] or [`WAITING`] (0 for a free slot).
    pub fn state(&self) -> u64 {
        self.words[1].load(Ordering::Acquire)
    }

    /// Virtual monotonic nanoseconds at which the current wait times out.
    pub fn deadline_ns(&self) -> u64 {
        self.words[2].load(Ordering::Acquire)
    }

    /// Bumped on every return from a wait.
    pub fn activity(&self) -> u64 {
        self.words[3].load(Ordering::Acquire)
    }

    /// The process blocks until `deadline_ns` (virtual) or an event.
    pub fn wait_until(&self, deadline_ns: u64) {
        self.words[2].store(deadline_ns, Ordering::Release);
        self.words[1].store(WAITING, Ordering::Release);
    }

    /// The process returned from its wait.
    pub fn woke(&self) {
        self.words[1].store(BUSY, Ordering::Release);
        self.words[3].fetch_add(1, Ordering::AcqRel);
    }

    /// The process has several threads: no more tracking (see [`THREADED`]).
    pub fn mark_threaded(&self) {
        self.words[1].store(THREADED, Ordering::Release);
    }

    /// Frees the slot if `pid` still owns it.
    pub fn release(&self, pid: u64) {
        if self.words[0].compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.words[1].store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[repr(align(8))]
    struct Buf([u8; BYTES]);

    #[test]
    fn claim_wait_wake_and_reuse_of_dead_slots() {
        let mut buf = Buf([0xAA; BYTES]);
        let page = unsafe { Page::from_ptr(buf.0.as_mut_ptr()) };
        assert!(!page.is_valid());
        page.init();
        assert!(page.is_valid());
        assert_eq!(page.offset_ns(), 0);
        page.advance(5);
        page.advance(7);
        assert_eq!(page.offset_ns(), 12);
        page.set_offset(-20);
        assert_eq!(page.offset_ns(), -20);
        assert_eq!(page.shift(100), 80);
        assert_eq!(page.shift(10), 0, "never below zero");
        page.advance(25);
        assert_eq!(page.offset_ns(), 5, "advancing from a negative offset");
        page.set_wall_shift(-1000);
        assert_eq!(page.shift_wall(5000), 4005, "wall clock: offset and shift");
        assert_eq!(page.shift(5000), 5005, "other clocks: the offset only");
        let (i, a) = page.claim(100, |_| false).unwrap();
        assert_eq!(i, 0);
        assert_eq!((a.pid(), a.state(), a.deadline_ns()), (100, BUSY, NO_DEADLINE));
        a.wait_until(42);
        assert_eq!((a.state(), a.deadline_ns()), (WAITING, 42));
        a.woke();
        assert_eq!((a.state(), a.activity()), (BUSY, 1));
        // Every slot taken: none left, unless a process is dead.
        for pid in 101..(100 + SLOTS as u64) {
            page.claim(pid, |_| false).unwrap();
        }
        assert!(page.claim(999, |_| false).is_none());
        let (i, reused) = page.claim(999, |pid| pid == 150).unwrap();
        assert_eq!(i, 50);
        assert_eq!(reused.pid(), 999);
        assert_eq!(reused.state(), BUSY);
        a.release(1); // not its owner: no effect
        assert_eq!(a.pid(), 100);
        a.release(100);
        assert_eq!((a.pid(), a.state()), (0, 0));
    }
}
