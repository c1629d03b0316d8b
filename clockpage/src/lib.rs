//! The clock page: one page of shared memory through which sts runs the
//! controllers of a run on *virtual time* (`docs/virtual-time.md`).
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
//! - one **slot per controller thread**: its thread id and process id,
//!   whether it is busy or blocked in a wait, the virtual deadline of that
//!   wait (its next timer), and an activity counter bumped on every return
//!   from a wait;
//! - a **refusal**: set by the shim when a process of the run arms a timer
//!   sts cannot follow (a socket timeout, a timerfd, a POSIX timer): from
//!   then on time must not jump;
//! - the **waits entered**: a counter every thread bumps as it enters a wait,
//!   and a futex word sts sleeps on ([`Page::announce_wait`]), so that sts
//!   learns the moment the run may have become idle instead of looking for
//!   it on a timer; and whether sts listens, so that a wait costs no system
//!   call when it does not.
//!
//! When every thread waits, none is runnable, nothing is in flight and sts
//! itself has nothing to do before some time, sts raises the offset to the
//! earliest deadline: time jumps to the next timer instead of being waited
//! for.
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

/// The first word of a valid page ("STSCLK03": waits announced, entry times).
pub const MAGIC: u64 = u64::from_le_bytes(*b"STSCLK03");
/// Size of the page in bytes (eight memory pages).
pub const BYTES: usize = 32768;
/// How many threads one page can track (all processes of a run together: a
/// threaded Python controller has a dozen, and copies run side by side).
pub const SLOTS: usize = 400;
/// Words before the first slot: magic, offset, wall-clock shift, refusal,
/// waits entered, sts listening, slots ever claimed.
const HEADER_WORDS: usize = 7;
/// Words per slot: thread id, state, deadline, activity, process id, real
/// time of the wait's start.
const SLOT_WORDS: usize = 6;
/// The header word counting waits entered (its low 32 bits are the futex).
const WAITS_ENTERED: usize = 4;
/// The header word saying how many sts threads sleep on [`WAITS_ENTERED`].
const LISTENING: usize = 5;
/// The header word holding one past the highest slot ever claimed: the idle
/// test reads no slot beyond it.
const HIGH_WATER: usize = 6;
/// Words in the page that are used.
pub const WORDS: usize = HEADER_WORDS + SLOTS * SLOT_WORDS;
const _: () = assert!(WORDS * 8 <= BYTES);

/// A slot's thread is running (or between waits).
pub const BUSY: u64 = 1;
/// A slot's thread is blocked in a wait, until its deadline or an event.
pub const WAITING: u64 = 2;
/// The deadline of a wait without timeout.
pub const NO_DEADLINE: u64 = u64::MAX;

/// Why a run's time must stop jumping: a timer the shim cannot move with
/// virtual time (the refusal word holds one of these, and the thread's id
/// above the low byte).
pub mod refusal {
    /// `setsockopt(SO_RCVTIMEO | SO_SNDTIMEO)`: a blocking socket call that
    /// times out on real time.
    pub const SOCKET_TIMEOUT: u64 = 1;
    /// `timerfd_settime`: a descriptor that becomes readable on real time.
    pub const TIMERFD: u64 = 2;
    /// `timer_settime`: a POSIX timer, which signals on real time.
    pub const POSIX_TIMER: u64 = 3;
    /// `setitimer` or `alarm`: a signal on real time.
    pub const ITIMER: u64 = 4;
    /// A thread started when every slot of the page was taken: its waits
    /// cannot be followed.
    pub const NO_SLOT: u64 = 5;

    /// What refusal `code` means, for a person.
    pub fn describe(code: u64) -> &'static str {
        match code {
            SOCKET_TIMEOUT => "a socket timeout (setsockopt SO_RCVTIMEO/SO_SNDTIMEO)",
            TIMERFD => "a timerfd (timerfd_settime)",
            POSIX_TIMER => "a POSIX timer (timer_settime)",
            ITIMER => "an interval timer (setitimer or alarm)",
            NO_SLOT => "more threads than the clock page has slots",
            _ => "a timer the shim cannot follow",
        }
    }
}

/// A view of a mapped clock page.
#[derive(Clone, Copy)]
pub struct Page<'a> {
    words: &'a [AtomicU64; WORDS],
}

/// One thread's slot in a [`Page`].
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
    #[inline]
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
    #[inline]
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

    /// Records that thread `tid` armed a timer sts cannot follow (`code`, one
    /// of [`refusal`]'s); the first refusal stays.
    pub fn refuse(&self, code: u64, tid: u64) {
        let _ = self.words[3].compare_exchange(0, code | tid << 8, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The refusal recorded, if any: its code and the thread's id.
    pub fn refusal(&self) -> Option<(u64, u64)> {
        let w = self.words[3].load(Ordering::Acquire);
        (w != 0).then_some((w & 0xff, w >> 8))
    }

    /// Clears the refusal (sts, when it rolls a run back to before it).
    pub fn clear_refusal(&self) {
        self.words[3].store(0, Ordering::Release);
    }

    /// Called by a thread that has just entered a wait (its slot says
    /// waiting): counts it, and returns true if sts listens, in which case
    /// the caller wakes [`Page::waits_futex`] (`FUTEX_WAKE`, shared).
    ///
    /// With [`Page::listen`] this is a Dekker pair: either the thread sees
    /// sts listening, or sts sees the count move before it sleeps; a wait
    /// entered is never missed.
    pub fn announce_wait(&self) -> bool {
        self.words[WAITS_ENTERED].fetch_add(1, Ordering::SeqCst);
        core::sync::atomic::fence(Ordering::SeqCst);
        self.words[LISTENING].load(Ordering::SeqCst) != 0
    }

    /// The count of waits entered so far (wraps).
    #[inline]
    pub fn waits_entered(&self) -> u64 {
        self.words[WAITS_ENTERED].load(Ordering::SeqCst)
    }

    /// The futex word sts sleeps on: the low 32 bits of the waits-entered
    /// counter (the page is little-endian wherever sts runs). Compare it
    /// with `waits_entered() as u32`.
    pub fn waits_futex(&self) -> *const u32 {
        let word: *const AtomicU64 = &self.words[WAITS_ENTERED];
        const { assert!(cfg!(target_endian = "little"), "the futex is the counter's low half") };
        word.cast()
    }

    /// sts starts (`true`) or stops listening for waits entered: while it
    /// listens, every wait entered wakes the futex. Returns the count seen
    /// after starting, which sts sleeps on only if it has not moved since.
    pub fn listen(&self, on: bool) -> u64 {
        if on {
            self.words[LISTENING].fetch_add(1, Ordering::SeqCst);
        } else {
            self.words[LISTENING].fetch_sub(1, Ordering::SeqCst);
        }
        core::sync::atomic::fence(Ordering::SeqCst);
        self.waits_entered()
    }

    /// Slot `i` (`i < SLOTS`).
    #[inline]
    pub fn slot(&self, i: usize) -> Slot<'a> {
        let start = HEADER_WORDS + i * SLOT_WORDS;
        Slot { words: &self.words[start..start + SLOT_WORDS] }
    }

    /// Every slot that was ever claimed (the others are free).
    #[inline]
    pub fn slots(&self) -> impl Iterator<Item = Slot<'a>> + 'a {
        let page = *self;
        let high = (self.words[HIGH_WATER].load(Ordering::Acquire) as usize).min(SLOTS);
        (0..high).map(move |i| page.slot(i))
    }

    /// Takes a free slot for thread `tid` of process `pid`, marked busy, and
    /// returns its index; `None` if all are taken. `is_dead(tid)` lets a slot
    /// of a thread that is gone be reused. A thread owns at most one slot at a
    /// time, but may claim one for a thread it is about to create ([`Slot::hand_to`]).
    pub fn claim(&self, pid: u64, tid: u64, is_dead: impl Fn(u64) -> bool) -> Option<(usize, Slot<'a>)> {
        for i in 0..SLOTS {
            let s = self.slot(i);
            let owner = s.tid();
            let free = owner == 0 || is_dead(owner);
            if free && s.words[0].compare_exchange(owner, tid, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.words[HIGH_WATER].fetch_max(i as u64 + 1, Ordering::AcqRel);
                s.words[4].store(pid, Ordering::Release);
                s.words[2].store(NO_DEADLINE, Ordering::Relaxed);
                s.words[1].store(BUSY, Ordering::Release);
                return Some((i, s));
            }
        }
        None
    }
}

impl Slot<'_> {
    /// The owning thread (0: free).
    #[inline]
    pub fn tid(&self) -> u64 {
        self.words[0].load(Ordering::Acquire)
    }

    /// The process the owning thread belongs to (0 while being claimed).
    #[inline]
    pub fn pid(&self) -> u64 {
        self.words[4].load(Ordering::Acquire)
    }

    /// [`BUSY`] or [`WAITING`] (0 for a free slot).
    #[inline]
    pub fn state(&self) -> u64 {
        self.words[1].load(Ordering::Acquire)
    }

    /// Virtual monotonic nanoseconds at which the current wait times out.
    #[inline]
    pub fn deadline_ns(&self) -> u64 {
        self.words[2].load(Ordering::Acquire)
    }

    /// Bumped on every return from a wait.
    #[inline]
    pub fn activity(&self) -> u64 {
        self.words[3].load(Ordering::Acquire)
    }

    /// The thread blocks until `deadline_ns` (virtual) or an event.
    pub fn wait_until(&self, deadline_ns: u64) {
        self.words[2].store(deadline_ns, Ordering::Release);
        self.words[1].store(WAITING, Ordering::Release);
    }

    /// Records the real monotonic time at which the thread entered its
    /// current wait (for measuring how soon sts knows the run is idle).
    pub fn set_entered_ns(&self, real_ns: u64) {
        self.words[5].store(real_ns, Ordering::Release);
    }

    /// The real monotonic time at which the thread entered its last wait (0:
    /// never said).
    #[inline]
    pub fn entered_ns(&self) -> u64 {
        self.words[5].load(Ordering::Acquire)
    }

    /// The thread returned from its wait.
    pub fn woke(&self) {
        self.words[1].store(BUSY, Ordering::Release);
        self.words[3].fetch_add(1, Ordering::AcqRel);
    }

    /// The thread left a wait that has not ended for it (a condition
    /// wait's chunk, returned as a spurious wakeup so that the caller looks
    /// at its predicate and waits again): busy, but no activity.
    pub fn between_waits(&self) {
        self.words[1].store(BUSY, Ordering::Release);
    }

    /// Gives a slot claimed by a creating thread (under its own id, so that
    /// it counts as busy from before the new thread exists) to the new thread.
    pub fn hand_to(&self, tid: u64) {
        self.words[0].store(tid, Ordering::Release);
    }

    /// Frees the slot if thread `tid` still owns it.
    pub fn release(&self, tid: u64) {
        if self.words[0].compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.words[1].store(0, Ordering::Release);
            self.words[4].store(0, Ordering::Release);
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
        let (i, a) = page.claim(100, 100, |_| false).unwrap();
        assert_eq!(i, 0);
        assert_eq!((a.tid(), a.pid(), a.state(), a.deadline_ns()), (100, 100, BUSY, NO_DEADLINE));
        a.wait_until(42);
        assert_eq!((a.state(), a.deadline_ns()), (WAITING, 42));
        a.woke();
        assert_eq!((a.state(), a.activity()), (BUSY, 1));
        // Every slot taken: none left, unless a process is dead.
        // A thread claims for the thread it creates, then hands the slot over.
        let (_, b) = page.claim(100, 100, |_| false).unwrap();
        assert_eq!(b.tid(), 100, "counted busy under its creator's id");
        b.hand_to(101);
        assert_eq!((b.tid(), b.pid(), b.state()), (101, 100, BUSY));
        for tid in 102..(100 + SLOTS as u64) {
            page.claim(7, tid, |_| false).unwrap();
        }
        assert!(page.claim(7, 999, |_| false).is_none());
        let (i, reused) = page.claim(7, 999, |tid| tid == 150).unwrap();
        assert_eq!(i, 50);
        assert_eq!((reused.tid(), reused.pid()), (999, 7));
        assert_eq!(reused.state(), BUSY);
        a.release(1); // not its owner: no effect
        assert_eq!(a.tid(), 100);
        a.release(100);
        assert_eq!((a.tid(), a.pid(), a.state()), (0, 0, 0));
        // A refusal: the first one stays.
        assert_eq!(page.refusal(), None);
        page.refuse(refusal::TIMERFD, 4242);
        page.refuse(refusal::ITIMER, 1);
        assert_eq!(page.refusal(), Some((refusal::TIMERFD, 4242)));
        page.clear_refusal();
        assert_eq!(page.refusal(), None);
        // Waits entered: counted always, a wake asked for only while sts listens.
        assert!(!page.announce_wait());
        assert_eq!(page.waits_entered(), 1);
        assert_eq!(page.listen(true), 1);
        assert!(page.announce_wait());
        // SAFETY: the futex word is the counter's low half, inside the page.
        assert_eq!(unsafe { *page.waits_futex() }, 2);
        page.listen(false);
        assert!(!page.announce_wait());
        a.set_entered_ns(77);
        assert_eq!(a.entered_ns(), 77);
    }
}
