//! Virtual time inside the controller (`docs/virtual-time.md`).
//!
//! When the process has a clock page (from `STS_CLOCK`, a path sts gives at
//! start, or a descriptor sent with `fork`), every clock read it makes is
//! shifted by the page's offset, and every timed wait is run as a *virtual*
//! wait: the deadline is computed on the virtual clock and published in the
//! process's slot, and the real wait is cut into chunks of at most
//! [`CHUNK_NS`] so that the process notices within a chunk when sts moves
//! virtual time past its deadline. A wait that returns with events (or an
//! error) returns at once, as before. Without a page every hook calls through.
//!
//! The shim's own time reads go to libc directly (`real!`): its exported
//! `clock_gettime` is the controller's, shifted.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use sts_clockpage::{Page, Slot, NO_DEADLINE};

/// Longest real wait before a waiting process looks at virtual time again:
/// the latency of a jump.
pub const CHUNK_NS: u64 = 1_000_000;

static PAGE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// This thread's slot in the page (`usize::MAX`: none). Each thread has
    /// its own: the idle test asks every thread of the run.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Set once the process started a second thread: it can no longer be forked
/// whole, so it takes no more checkpoint commands (see `wait`).
static THREADS_STARTED: AtomicBool = AtomicBool::new(false);

type ClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> c_int;

/// The run's clock page, if this process runs on virtual time.
pub fn page() -> Option<Page<'static>> {
    let p = PAGE.load(Ordering::Acquire);
    // SAFETY: a non-null PAGE is a live shared mapping of a valid page (attach).
    (!p.is_null()).then(|| unsafe { Page::from_ptr(p) })
}

/// This thread's slot, if the process runs on virtual time and the thread
/// has one.
pub fn slot() -> Option<Slot<'static>> {
    let i = SLOT.with(Cell::get);
    page().filter(|_| i != usize::MAX).map(|p| p.slot(i))
}

/// Makes slot `index` this thread's (a new thread, handed the slot its
/// creator claimed), or none (`usize::MAX`).
pub fn set_slot(index: usize) {
    SLOT.with(|s| s.set(index));
}

/// The calling thread's id.
pub fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

/// True if no thread (or process) `tid` exists any more: its slot may be
/// taken. (`kill` accepts any thread's id; signal 0 sends nothing.)
pub fn thread_gone(tid: u64) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only asks whether `tid` exists.
    unsafe { libc::kill(tid as libc::pid_t, 0) != 0 && *libc::__errno_location() == libc::ESRCH }
}

/// True once a second thread was started (see [`THREADS_STARTED`]).
pub fn threads_started() -> bool {
    THREADS_STARTED.load(Ordering::Acquire)
}

/// Notes that the process is about to start a thread; true the first time.
pub fn note_thread_started() -> bool {
    !THREADS_STARTED.swap(true, Ordering::AcqRel)
}

/// In a child just forked (a `pthread_atfork` handler). The slot is the
/// parent's thread's: a child writing its own waits into it would make the
/// parent look idle while it works (or skip its timers). A child the
/// controller forks takes a slot of its own, so sts waits for it like for
/// any process of the run; a child the shim forks (a zygote's copy, a holder)
/// attaches one itself, or none. The child has one thread.
pub extern "C" fn slot_for_child() {
    set_slot(usize::MAX);
    THREADS_STARTED.store(false, Ordering::Release);
    if crate::forked_by_shim() {
        return;
    }
    if let Some(p) = page() {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        if let Some((index, _)) = p.claim(pid, gettid(), thread_gone) {
            set_slot(index);
        }
    }
}

/// Maps the clock page open on `fd` and takes a slot for this process.
/// Replaces a page attached before (a forked child leaves its zygote's).
pub fn attach_fd(fd: c_int) -> Result<(), &'static str> {
    // SAFETY: a fresh shared mapping of BYTES bytes; the kernel picks where.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            sts_clockpage::BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err("cannot map the clock page");
    }
    // SAFETY: `p` is the mapping just made, BYTES long, and nothing else in
    // this process knows it yet (it is unmapped only on the failures below).
    let unmap = || unsafe { libc::munmap(p, sts_clockpage::BYTES) };
    // SAFETY: `p` maps BYTES bytes, page-aligned: a page's whole layout.
    let page = unsafe { Page::from_ptr(p.cast()) };
    if !page.is_valid() {
        unmap();
        return Err("the clock page is not initialised");
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let tid = gettid();
    // A slot under this thread's id is left from before an exec (which keeps
    // the id): it is this thread's to take again.
    let Some((index, _)) = page.claim(pid, tid, |owner| owner == tid || thread_gone(owner)) else {
        unmap();
        return Err("the clock page has no free slot");
    };
    let old = PAGE.swap(p.cast(), Ordering::AcqRel);
    set_slot(index);
    if !old.is_null() {
        // SAFETY: the previous page, mapped by an earlier attach and no
        // longer published (swapped out above). This process has one thread
        // when it attaches (at load, or in a fresh copy), so no reader holds it.
        unsafe { libc::munmap(old.cast(), sts_clockpage::BYTES) };
    }
    Ok(())
}

/// Attaches the page named by `STS_CLOCK`, if set (at library load).
pub fn attach_from_env() {
    let Some(path) = std::env::var_os("STS_CLOCK") else { return };
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())) else { return };
    // SAFETY: `c` is a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        report("sts-shim: cannot open the clock page named by STS_CLOCK; running on real time\n");
        return;
    }
    if let Err(e) = attach_fd(fd) {
        report("sts-shim: ");
        report(e);
        report("; running on real time\n");
    }
    // SAFETY: the descriptor opened above, ours; the mapping outlives it.
    unsafe { real!("close", unsafe extern "C" fn(c_int) -> c_int)(fd) };
}

fn report(s: &str) {
    // SAFETY: writing a valid buffer to stderr.
    unsafe { libc::write(2, s.as_ptr().cast(), s.len()) };
}

/// True for the clocks that follow virtual time (not CPU-time clocks).
fn is_virtual(clock: libc::clockid_t) -> bool {
    matches!(
        clock,
        libc::CLOCK_REALTIME
            | libc::CLOCK_MONOTONIC
            | libc::CLOCK_MONOTONIC_RAW
            | libc::CLOCK_REALTIME_COARSE
            | libc::CLOCK_MONOTONIC_COARSE
            | libc::CLOCK_BOOTTIME
            | libc::CLOCK_TAI
    )
}

/// True for the wall clocks, which also take the page's wall-clock shift.
fn is_wall(clock: libc::clockid_t) -> bool {
    matches!(clock, libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_COARSE | libc::CLOCK_TAI)
}

/// `real_ns` read on `clock`, as the run sees it.
fn shifted(p: &Page, clock: libc::clockid_t, real_ns: u64) -> u64 {
    if is_wall(clock) {
        p.shift_wall(real_ns)
    } else {
        p.shift(real_ns)
    }
}

/// Nanoseconds of a timespec (negative fields count as zero).
pub fn ns_of(ts: &libc::timespec) -> u64 {
    (ts.tv_sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec.max(0) as u64)
}

pub fn timespec_of(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// Virtual nanoseconds on `clock` (real plus the offset).
fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: libc's clock_gettime writing into our own timespec.
    unsafe { real!("clock_gettime", ClockGettime)(clock, &mut ts) };
    page().map_or(ns_of(&ts), |p| shifted(&p, clock, ns_of(&ts)))
}

#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: libc::clockid_t, ts: *mut libc::timespec) -> c_int {
    // SAFETY: libc's clock_gettime with the caller's arguments.
    let r = unsafe { real!("clock_gettime", ClockGettime)(clock, ts) };
    if r == 0 && !ts.is_null() && is_virtual(clock) {
        if let Some(p) = page() {
            // SAFETY: the caller's timespec, which clock_gettime just filled.
            unsafe { *ts = timespec_of(shifted(&p, clock, ns_of(&*ts))) };
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn gettimeofday(tv: *mut libc::timeval, tz: *mut c_void) -> c_int {
    // SAFETY: libc's gettimeofday with the caller's arguments.
    let r = unsafe { real!("gettimeofday", unsafe extern "C" fn(*mut libc::timeval, *mut c_void) -> c_int)(tv, tz) };
    if r == 0 && !tv.is_null() {
        if let Some(p) = page() {
            // SAFETY: the caller's timeval, which gettimeofday just filled.
            let tv = unsafe { &mut *tv };
            let real_ns =
                (tv.tv_sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(tv.tv_usec.max(0) as u64 * 1000);
            let us = p.shift_wall(real_ns) / 1000;
            tv.tv_sec = (us / 1_000_000) as libc::time_t;
            tv.tv_usec = (us % 1_000_000) as libc::suseconds_t;
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn time(t: *mut libc::time_t) -> libc::time_t {
    let secs = (now_ns(libc::CLOCK_REALTIME) / 1_000_000_000) as libc::time_t;
    if !t.is_null() {
        // SAFETY: the caller's non-null time_t (time's contract).
        unsafe { *t = secs };
    }
    secs
}

/// A timeout in milliseconds as poll and epoll take it (negative: none).
pub fn from_ms(ms: c_int) -> Option<u64> {
    (ms >= 0).then(|| ms as u64 * 1_000_000)
}

/// A chunk as poll and epoll take it: rounded up to whole milliseconds.
pub fn to_ms(chunk: Option<u64>) -> c_int {
    chunk.map_or(-1, |ns| ns.div_ceil(1_000_000).min(c_int::MAX as u64) as c_int)
}

/// A timeout as a timespec pointer gives it (null: none).
///
/// # Safety
///
/// `ts` is null or points to a timespec.
pub unsafe fn from_timespec(ts: *const libc::timespec) -> Option<u64> {
    // SAFETY: non-null, so a timespec (this function's contract).
    (!ts.is_null()).then(|| ns_of(unsafe { &*ts }))
}

/// A timeout as a timeval pointer gives it (null: none).
///
/// # Safety
///
/// `tv` is null or points to a timeval.
pub unsafe fn from_timeval(tv: *const libc::timeval) -> Option<u64> {
    // SAFETY: non-null, so a timeval (this function's contract).
    (!tv.is_null()).then(|| unsafe { &*tv }).map(|tv| {
        (tv.tv_sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(tv.tv_usec.max(0) as u64 * 1000)
    })
}

/// Marks this thread's `slot` waiting until `deadline` (virtual; or
/// [`NO_DEADLINE`]) and tells sts, if it listens, that a wait was entered:
/// the run may have become idle. Every wait the shim follows starts here.
pub fn enter_wait(slot: &Slot, deadline: u64) {
    slot.set_entered_ns(crate::threads::real_now(libc::CLOCK_MONOTONIC));
    slot.wait_until(deadline);
    let Some(page) = page() else { return };
    if page.announce_wait() {
        type Syscall = unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long;
        // SAFETY: FUTEX_WAKE on a word of the shared clock page (not
        // private: sts sleeps on it from another process).
        unsafe { real!("syscall", Syscall)(libc::SYS_futex, page.waits_futex(), libc::FUTEX_WAKE, c_int::MAX) };
    }
}

/// Runs a timed wait on virtual time. `wait(chunk)` performs one real wait
/// of at most `chunk` nanoseconds (`None`: no timeout) and returns what the
/// call returns; 0 means it timed out. Returns the first non-zero result, or
/// 0 once the virtual deadline has passed. A zero timeout (a poll) and a
/// process without a page wait for real, unchanged. Between chunks a copy
/// sts may command handles its commands ([`crate::checkpoint::poll`]).
pub fn wait(timeout: Option<u64>, mut real_wait: impl FnMut(Option<u64>) -> c_int) -> c_int {
    let Some(mut slot) = slot() else { return real_wait(timeout) };
    if timeout == Some(0) {
        return real_wait(Some(0));
    }
    let deadline = timeout.map_or(NO_DEADLINE, |t| now_ns(libc::CLOCK_MONOTONIC).saturating_add(t));
    enter_wait(&slot, deadline);
    loop {
        // A process sts may command looks at its control socket every chunk,
        // even in a wait without timeout (a threaded one takes no commands).
        let commanded = crate::checkpoint::listening() && !threads_started();
        let chunk = if deadline == NO_DEADLINE {
            commanded.then_some(CHUNK_NS)
        } else {
            let left = deadline.saturating_sub(now_ns(libc::CLOCK_MONOTONIC));
            if left == 0 {
                slot.woke();
                return 0;
            }
            Some(left.min(CHUNK_NS))
        };
        let r = real_wait(chunk);
        if r != 0 || chunk.is_none() {
            slot.woke();
            return r;
        }
        // SAFETY: only a copy sts forked gets a control socket, and a copy
        // that turned multi-threaded is not `commanded`.
        if commanded && unsafe { crate::checkpoint::poll() } {
            // Now a copy resumed from a checkpoint: a process of its own,
            // with a slot of its own, still in the same wait.
            if let Some(s) = self::slot() {
                slot = s;
                enter_wait(&slot, deadline);
            }
        }
    }
}

/// Virtual monotonic nanoseconds now.
pub fn virtual_now() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// Virtual nanoseconds left until `deadline_ns` on the virtual `clock`.
pub fn left_until(clock: libc::clockid_t, deadline_ns: u64) -> u64 {
    deadline_ns.saturating_sub(now_ns(clock))
}

#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    let real = real!("nanosleep", unsafe extern "C" fn(*const libc::timespec, *mut libc::timespec) -> c_int);
    if slot().is_none() || req.is_null() {
        // SAFETY: libc's nanosleep with the caller's arguments.
        return unsafe { real(req, rem) };
    }
    // SAFETY: the caller's non-null request (nanosleep's contract).
    let want = ns_of(unsafe { &*req });
    let end = now_ns(libc::CLOCK_MONOTONIC).saturating_add(want);
    let r = wait(Some(want), |chunk| {
        let ts = timespec_of(chunk.unwrap_or(0));
        // SAFETY: libc's nanosleep with a request of ours.
        unsafe { real(&ts, std::ptr::null_mut()) }
    });
    if r != 0 && !rem.is_null() {
        // SAFETY: the caller's non-null remainder (nanosleep's contract).
        unsafe { *rem = timespec_of(left_until(libc::CLOCK_MONOTONIC, end)) };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    let real = real!(
        "clock_nanosleep",
        unsafe extern "C" fn(libc::clockid_t, c_int, *const libc::timespec, *mut libc::timespec) -> c_int
    );
    if slot().is_none() || req.is_null() || !is_virtual(clock) {
        // SAFETY: libc's clock_nanosleep with the caller's arguments.
        return unsafe { real(clock, flags, req, rem) };
    }
    // SAFETY: the caller's non-null request (clock_nanosleep's contract).
    let req = ns_of(unsafe { &*req });
    let want = if flags & libc::TIMER_ABSTIME != 0 { left_until(clock, req) } else { req };
    let end = now_ns(libc::CLOCK_MONOTONIC).saturating_add(want);
    // Returns 0 or an error number (EINTR), as clock_nanosleep does.
    let r = wait(Some(want), |chunk| {
        let ts = timespec_of(chunk.unwrap_or(0));
        // SAFETY: libc's clock_nanosleep with a request of ours.
        unsafe { real(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) }
    });
    if r != 0 && flags & libc::TIMER_ABSTIME == 0 && !rem.is_null() {
        // SAFETY: the caller's non-null remainder (clock_nanosleep's contract).
        unsafe { *rem = timespec_of(left_until(libc::CLOCK_MONOTONIC, end)) };
    }
    r
}

/// `sleep`: libc's calls its own `nanosleep` inside, which no hook sees, so
/// it is made of the hooked one.
#[no_mangle]
pub unsafe extern "C" fn sleep(seconds: std::ffi::c_uint) -> std::ffi::c_uint {
    let req = libc::timespec { tv_sec: seconds as libc::time_t, tv_nsec: 0 };
    let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: our own request and remainder.
    if unsafe { nanosleep(&req, &mut rem) } == 0 {
        0
    } else {
        // Interrupted: the seconds left, rounded up, as sleep returns them.
        (rem.tv_sec + libc::time_t::from(rem.tv_nsec > 0)) as std::ffi::c_uint
    }
}

/// `usleep`, made of the hooked `nanosleep` (see `sleep`).
#[no_mangle]
pub unsafe extern "C" fn usleep(usec: libc::useconds_t) -> c_int {
    let req = libc::timespec {
        tv_sec: (usec / 1_000_000) as libc::time_t,
        tv_nsec: (usec % 1_000_000) as libc::c_long * 1000,
    };
    // SAFETY: our own request; no remainder wanted.
    unsafe { nanosleep(&req, std::ptr::null_mut()) }
}
